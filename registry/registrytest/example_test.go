package registrytest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry/registrytest"
)

// A test of discovery logic: the instance goes unhealthy 15 s after its last
// beat, with no real time passing.
func TestExample(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.New(t, registrytest.Options{})
	inst := model.NewInstance(model.ServiceKey{Name: "orders"}, "10.0.0.1", 8080)
	if err := reg.Register(ctx, inst); err != nil {
		t.Fatal(err)
	}
	reg.Advance(15*time.Second + time.Millisecond)
	v, _ := reg.Query(ctx, model.Query{Service: inst.Service})
	if v.RealHealthy(0) {
		t.Fatal("healthy 15 s after the last beat")
	}
	fmt.Fprintln(t.Output(), "unhealthy after", reg.Clock.Since(registrytest.Epoch))
}
