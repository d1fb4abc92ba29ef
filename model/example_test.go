package model_test

import (
	"errors"
	"fmt"

	"github.com/muster-io/muster/model"
)

func ExampleParseGroupedName() {
	group, name, _ := model.ParseGroupedName("shop@@orders")
	fmt.Println(group, name)
	group, name, _ = model.ParseGroupedName("orders")
	fmt.Println(group, name)
	// Output:
	// shop orders
	// DEFAULT_GROUP orders
}

func ExampleInstance_Validate() {
	inst := model.NewInstance(model.ServiceKey{Name: "orders"}, "10.0.0.300", 8080)
	err := inst.Validate(model.Limits{})
	var ve *model.ValidationError
	fmt.Println(errors.Is(err, model.ErrInvalid), errors.As(err, &ve) && ve.Field == "instance.ip")
	fmt.Println(err)
	// Output:
	// true true
	// model: invalid instance.ip: must be an IP address or a DNS name (got "10.0.0.300")
}

func ExampleDiff() {
	svc := model.ServiceKey{Name: "orders"}
	a := model.NewInstance(svc, "10.0.0.1", 80)
	b := model.NewInstance(svc, "10.0.0.2", 80)
	b2 := b
	b2.Weight = 3
	from := &model.ServiceView{Instances: []model.Instance{a, b}}
	to := &model.ServiceView{Instances: []model.Instance{b2}}
	d := model.Diff(from, to)
	fmt.Println("removed", d.Removed[0].IP, "updated", d.Updated[0].IP, "weight", d.Updated[0].Weight)
	// Output:
	// removed 10.0.0.1 updated 10.0.0.2 weight 3
}

func ExampleMetadata() {
	md := model.NewMetadata(map[string]string{"zone": "a", "version": "1.2"})
	patched := md.Merge(model.NewMetadata(map[string]string{"zone": "b"}))
	fmt.Println(md, patched, patched.Value("zone"))
	// Output:
	// {version=1.2, zone=a} {version=1.2, zone=b} b
}
