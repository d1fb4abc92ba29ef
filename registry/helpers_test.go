package registry_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
)

var ctx = context.Background()

func svcKey(name string) model.ServiceKey { return model.ServiceKey{Name: name} }

func inst(svc string, i int) model.Instance {
	return model.NewInstance(svcKey(svc), fmt.Sprintf("10.0.%d.%d", i/250, i%250+1), 8080)
}

func persistent(svc string, i int) model.Instance {
	in := inst(svc, i)
	in.Ephemeral = false
	return in
}

func newReg(t *testing.T) *registrytest.Registry {
	t.Helper()
	return registrytest.New(t, registrytest.Options{})
}

func mustRegister(t *testing.T, r interface {
	Register(context.Context, model.Instance) error
}, insts ...model.Instance) {
	t.Helper()
	for _, in := range insts {
		if err := r.Register(ctx, in); err != nil {
			t.Fatalf("Register(%s): %v", in.IP, err)
		}
	}
}

func query(t *testing.T, r *registrytest.Registry, q model.Query) *model.ServiceView {
	t.Helper()
	v, err := r.Query(ctx, q)
	if err != nil {
		t.Fatalf("Query: %v", err)
	}
	return v
}

func all(t *testing.T, r *registrytest.Registry, svc string) *model.ServiceView {
	t.Helper()
	return query(t, r, model.Query{Service: svcKey(svc), IncludeDisabled: true})
}

// ips lists the IPs of a view's instances, in view order.
func ips(v *model.ServiceView) []string {
	out := make([]string, len(v.Instances))
	for i := range v.Instances {
		out[i] = v.Instances[i].IP
	}
	return out
}

// next returns the watcher's next update, failing the test after 5 s.
func next(t *testing.T, w *registry.Watcher) registry.Update {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	u, err := w.Next(c)
	if err != nil {
		t.Fatalf("Watcher.Next: %v", err)
	}
	return u
}

// nextMatching returns the first update for which ok holds.
func nextMatching(t *testing.T, w *registry.Watcher, ok func(registry.Update) bool) registry.Update {
	t.Helper()
	for {
		if u := next(t, w); ok(u) {
			return u
		}
	}
}
