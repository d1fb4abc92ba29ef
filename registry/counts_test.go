package registry_test

import (
	"maps"
	"testing"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
)

// TestCounts: Counts follows services, instances, sessions and watchers as
// they come and go.
func TestCounts(t *testing.T) {
	r := newReg(t)
	if c := r.Counts(); c.Services != 0 || c.Instances != 0 || c.Sessions != 0 || c.Watchers != 0 || len(c.Namespaces) != 0 {
		t.Fatalf("empty registry: %+v", c)
	}
	s, err := r.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other := inst("b", 0)
	other.Service.Namespace = "other"
	mustRegister(t, s, inst("a", 0), inst("a", 1), other)
	mustRegister(t, r, persistent("p", 0))
	w, err := r.Watch(ctx, model.Query{Service: svcKey("a")})
	if err != nil {
		t.Fatal(err)
	}
	c := r.Counts()
	if c.Services != 3 || c.Instances != 4 || c.Sessions != 1 || c.Watchers != 1 ||
		!maps.Equal(c.Namespaces, map[string]int{model.DefaultNamespace: 2, "other": 1}) {
		t.Fatalf("counts: %+v", c)
	}
	w.Close()
	_ = s.Close()
	c = r.Counts()
	if c.Instances != 1 || c.Sessions != 0 || c.Watchers != 0 {
		t.Fatalf("after the session and the watcher closed: %+v", c)
	}
	c.Namespaces["x"] = 9 // a copy: the registry's counters are not touched
	if _, ok := r.Counts().Namespaces["x"]; ok {
		t.Fatal("Counts shares its map with the registry")
	}
}
