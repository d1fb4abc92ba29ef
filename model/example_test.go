package model_test

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/muster-io/muster/model"
)

func ExampleParseGroupedName() {
	k, _ := model.ParseGroupedName("shop@@orders")
	fmt.Println(k.Group, k.Name)
	k, _ = model.ParseGroupedName("orders")
	fmt.Println(k.Group, k.Name)
	k.Namespace = "staging" // a key in another namespace
	fmt.Println(k)
	// Output:
	// shop orders
	// DEFAULT_GROUP orders
	// staging@@DEFAULT_GROUP@@orders
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

// Unmarshal refuses a nil where the Go type has none, and input whose
// decoding would allocate far more than its size: 1 KiB of empty maps, which
// msgpack alone would turn into 1024 zero instances (288 KiB).
func ExampleUnmarshal() {
	var insts []model.Instance
	err := model.Unmarshal([]byte{0x92, 0x80, 0xc0}, &insts)
	fmt.Println(errors.Is(err, model.ErrMalformed), err)

	b := append([]byte{0xdc, 0x04, 0x00}, bytes.Repeat([]byte{0x80}, 1024)...)
	err = model.Unmarshal(b, &insts)
	fmt.Println(errors.Is(err, model.ErrTooLarge), err)
	// Output:
	// true model: malformed msgpack: decoding []model.Instance at [1]: nil where model.Instance has none
	// true model: msgpack value too large: decoding []model.Instance: decoding would allocate more than 20528 bytes (16 × the 1027-byte input + 4096)
}

// A struct field caps its length with a maxlen tag; UnmarshalWith caps the
// top-level value.
func ExampleUnmarshalWith() {
	type batch struct {
		Records []string `msgpack:"r" maxlen:"2"`
	}
	b, _ := model.Marshal(batch{Records: []string{"a", "b", "c"}})
	fmt.Println(model.Unmarshal(b, &batch{}))

	b, _ = model.Marshal([]int{1, 2, 3})
	fmt.Println(model.UnmarshalWith(b, &[]int{}, model.DecodeOptions{MaxLen: 2}))
	// Output:
	// model: msgpack value too large: decoding model_test.batch at .r: must hold at most 2 (declares 3)
	// model: msgpack value too large: decoding []int: must hold at most 2 (declares 3)
}

// AppendCommands decodes batch after batch into one buffer, with
// UnmarshalCommands's checks: here a batch, then one over the cap.
func ExampleAppendCommands() {
	key := model.InstanceKey{Service: model.ServiceKey{Name: "orders"}, IP: "10.0.0.1", Port: 8080}
	first, _ := model.Marshal([]model.Command{{Op: model.OpDeleteInstance, Key: key}, {Op: model.OpRemovePatch, Key: key}})
	second, _ := model.Marshal([]model.Command{{Op: model.OpSetHealth, Key: key}})
	opts := model.DecodeOptions{MaxLen: 1}
	var buf []model.Command
	for _, b := range [][]byte{second, first} {
		cmds, err := model.AppendCommands(buf[:0], b, opts)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(len(cmds), cmds[0].Op, cmds[0].Key.Service.Name)
		buf = cmds
	}
	// Output:
	// 1 SetHealth orders
	// model: msgpack value too large: decoding []model.Command: must hold at most 1 (declares 2)
}
