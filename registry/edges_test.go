package registry_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
)

// Done is closed when the registry closes, not before.
func TestDone(t *testing.T) {
	reg, err := registry.New(registry.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reg.Done():
		t.Fatal("Done closed on a running registry")
	default:
	}
	if err := reg.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reg.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after Close")
	}
}

// A light heartbeat with an invalid key fails with ErrInvalid naming the
// field, not ErrNotFound, standalone and in a cluster (where it would
// otherwise be hashed to an owner and forwarded).
func TestHeartbeatInvalidKey(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	c := registrytest.NewCluster(t, clusterOpts())
	for _, tc := range []struct {
		key   model.InstanceKey
		field string
	}{
		{model.InstanceKey{Service: svcKey("a"), IP: "10.0.0.300", Port: 80}, "ip"},
		{model.InstanceKey{Service: svcKey("a"), IP: "10.0.0.1", Port: 0}, "port"},
		{model.InstanceKey{Service: svcKey("a"), IP: "10.0.0.1", Port: 70000}, "port"},
		{model.InstanceKey{Service: model.ServiceKey{}, IP: "10.0.0.1", Port: 80}, "name"},
	} {
		for _, hb := range []struct {
			where string
			reg   *registry.Registry
		}{{"standalone", reg.Registry}, {"cluster", c.Node(0).Registry}} {
			_, err := hb.reg.Heartbeat(ctx, tc.key)
			if !errors.Is(err, model.ErrInvalid) || errors.Is(err, registry.ErrNotFound) {
				t.Errorf("%s: Heartbeat(%v) = %v, want ErrInvalid", hb.where, tc.key, err)
				continue
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("%s: Heartbeat(%v) = %v, does not name %s", hb.where, tc.key, err, tc.field)
			}
		}
	}
	// A valid key of an instance nobody holds is still ErrNotFound.
	if _, err := reg.Heartbeat(ctx, model.InstanceKey{Service: svcKey("a"), IP: "10.0.0.1", Port: 80}); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("Heartbeat of an unknown instance: %v, want ErrNotFound", err)
	}
}

// Registry.Deregister of an instance that only a session publishes fails
// with ErrSessionInstance and leaves it; one that a beat publishes too loses
// the beat's publication and stays through the session.
func TestDeregisterSessionInstance(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	sess, err := reg.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inst := model.NewInstance(svcKey("s"), "10.0.0.1", 80)
	if err := sess.Register(ctx, inst); err != nil {
		t.Fatal(err)
	}
	err = reg.Deregister(ctx, inst.Key())
	if !errors.Is(err, registry.ErrSessionInstance) || !strings.Contains(err.Error(), "session") {
		t.Fatalf("Deregister of a session's instance: %v, want ErrSessionInstance", err)
	}
	if got := ipsOn1(t, reg, "s"); len(got) != 1 {
		t.Fatalf("the session's instance is gone: %v", got)
	}
	// Published by a beat too: Deregister removes the beat's publication.
	if err := reg.Register(ctx, inst); err != nil {
		t.Fatal(err)
	}
	if err := reg.Deregister(ctx, inst.Key()); err != nil {
		t.Fatalf("Deregister of a beat publication: %v", err)
	}
	if got := ipsOn1(t, reg, "s"); len(got) != 1 {
		t.Fatalf("after the beat's deregistration the session's instance is gone: %v", got)
	}
	// Nothing there: not an error.
	if err := reg.Deregister(ctx, model.InstanceKey{Service: svcKey("s"), IP: "10.0.0.9", Port: 80}); err != nil {
		t.Fatalf("Deregister of nothing: %v", err)
	}
}

// In a cluster the answer crosses the forward: a session on one node, the
// Deregister on another (forwarded to the ip:port's owner) says so too.
func TestDeregisterSessionInstanceForwarded(t *testing.T) {
	c := registrytest.NewCluster(t, clusterOpts())
	sess, err := c.Node(0).OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inst := model.NewInstance(svcKey("s"), "10.0.0.1", 80)
	if err := sess.Register(ctx, inst); err != nil {
		t.Fatal(err)
	}
	c.Settle()
	for i, n := range c.Nodes() {
		if err := n.Deregister(ctx, inst.Key()); !errors.Is(err, registry.ErrSessionInstance) {
			t.Fatalf("Deregister on node %d (owner %s): %v, want ErrSessionInstance", i, n.Owner(inst.IP, inst.Port), err)
		}
	}
	c.Settle()
	for _, n := range c.Nodes() {
		if got := ipsOn(t, n, "s"); len(got) != 1 {
			t.Fatalf("%s lost the session's instance: %v", n.ID, got)
		}
	}
}

func ipsOn1(t *testing.T, reg *registrytest.Registry, svc string) []string {
	t.Helper()
	v, err := reg.Query(ctx, model.Query{Service: svcKey(svc)})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, in := range v.Instances {
		out = append(out, in.IP)
	}
	return out
}
