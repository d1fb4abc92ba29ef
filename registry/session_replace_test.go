package registry_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
)

// TestSessionReplaceService: ReplaceService swaps a session's instances of
// one service at once (a watcher sees the old set, then the new one, and
// nothing between), leaves its other services and other publishers alone,
// and changes nothing when it fails.
func TestSessionReplaceService(t *testing.T) {
	r := newReg(t)
	s, err := r.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mustRegister(t, s, inst("a", 0), inst("a", 1), inst("b", 0))
	mustRegister(t, r, inst("a", 5)) // a beat instance: not the session's
	w, err := r.Watch(ctx, model.Query{Service: svcKey("a")})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if got := ips(next(t, w).View); len(got) != 3 {
		t.Fatalf("first view: %v", got)
	}

	changed := inst("a", 1)
	changed.Weight = 7
	if err := s.ReplaceService(ctx, svcKey("a"), []model.Instance{changed, inst("a", 2)}); err != nil {
		t.Fatal(err)
	}
	u := next(t, w)
	want := []string{inst("a", 1).IP, inst("a", 2).IP, inst("a", 5).IP}
	if got := ips(u.View); !slices.Equal(got, want) {
		t.Fatalf("after replace: %v, want %v", got, want)
	}
	if len(u.Delta.Added) != 1 || len(u.Delta.Removed) != 1 || len(u.Delta.Updated) != 1 {
		t.Fatalf("one update with the whole change expected, got delta %+v", u.Delta)
	}
	if got := ips(all(t, r, "b")); len(got) != 1 {
		t.Fatalf("service b touched: %v", got)
	}
	var mine []string
	for _, in := range s.Instances() {
		mine = append(mine, in.Service.Name+"/"+in.IP)
	}
	slices.Sort(mine)
	if strings.Join(mine, " ") != "a/"+inst("a", 1).IP+" a/"+inst("a", 2).IP+" b/"+inst("b", 0).IP {
		t.Fatalf("Instances: %v", mine)
	}

	// Refusals change nothing.
	before := all(t, r, "a")
	bad := inst("a", 3)
	bad.Port = 0
	if err := s.ReplaceService(ctx, svcKey("a"), []model.Instance{inst("a", 4), bad}); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("invalid instance: %v", err)
	}
	if err := s.ReplaceService(ctx, svcKey("a"), []model.Instance{inst("b", 4)}); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("instance of another service: %v", err)
	}
	mustRegister(t, r, persistent("p", 0))
	if err := s.ReplaceService(ctx, svcKey("p"), []model.Instance{inst("p", 1)}); !errors.Is(err, registry.ErrKindMismatch) {
		t.Fatalf("persistent service: %v", err)
	}
	if after := all(t, r, "a"); after.Revision != before.Revision {
		t.Fatalf("a refused replace changed the service: %v → %v", ips(before), ips(after))
	}

	// An empty set removes the session's instances of the service.
	if err := s.ReplaceService(ctx, svcKey("a"), nil); err != nil {
		t.Fatal(err)
	}
	if got := ips(all(t, r, "a")); len(got) != 1 || got[0] != inst("a", 5).IP {
		t.Fatalf("after an empty replace: %v", got)
	}
	_ = s.Close()
	if err := s.ReplaceService(ctx, svcKey("a"), nil); !errors.Is(err, registry.ErrSessionClosed) {
		t.Fatalf("on a closed session: %v", err)
	}
}

// TestSessionReplaceServiceLimits: the instances that leave make room for
// those that come, and a replacement past a limit changes nothing.
func TestSessionReplaceServiceLimits(t *testing.T) {
	cfg := registry.DefaultConfig()
	cfg.Limits.MaxInstancesPerSession = 2
	r := registrytest.New(t, registrytest.Options{Config: &cfg})
	s, err := r.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mustRegister(t, s, inst("a", 0), inst("a", 1))
	if err := s.ReplaceService(ctx, svcKey("a"), []model.Instance{inst("a", 2), inst("a", 3)}); err != nil {
		t.Fatalf("a replacement at the limit: %v", err)
	}
	before := all(t, r, "a")
	err = s.ReplaceService(ctx, svcKey("a"), []model.Instance{inst("a", 4), inst("a", 5), inst("a", 6)})
	if !errors.Is(err, registry.ErrLimit) {
		t.Fatalf("a replacement past the limit: %v", err)
	}
	after := all(t, r, "a")
	if !slices.Equal(ips(after), ips(before)) {
		t.Fatalf("a refused replacement changed the service: %v → %v", ips(before), ips(after))
	}
	if len(s.Instances()) != 2 {
		t.Fatalf("the session holds %d instances after a refused replacement", len(s.Instances()))
	}
	if err := r.Internals().CheckConsistency(); err != nil {
		t.Fatal(err)
	}
}

// TestSessionReplaceServiceKeeps: whether the replacing set is scanned (a
// few instances) or indexed (many), the session keeps exactly the
// instances of the new set, in the service replaced, and only there.
func TestSessionReplaceServiceKeeps(t *testing.T) {
	for _, n := range []int{3, 12} { // below and above the scan's bound
		r := newReg(t)
		s, err := r.OpenSession(ctx, registry.SessionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var first, second []model.Instance
		for i := range n {
			first = append(first, inst("a", i))
			second = append(second, inst("a", i+2)) // two leave, two come, n-2 stay
		}
		mustRegister(t, s, inst("b", 0))
		if err := s.ReplaceService(ctx, svcKey("a"), first); err != nil {
			t.Fatal(err)
		}
		if err := s.ReplaceService(ctx, svcKey("a"), second); err != nil {
			t.Fatal(err)
		}
		v, err := r.Query(ctx, model.Query{Service: svcKey("a")})
		if err != nil {
			t.Fatal(err)
		}
		want := ips(&model.ServiceView{Instances: second})
		slices.Sort(want) // a view's order
		if got := ips(v); !slices.Equal(got, want) {
			t.Fatalf("%d instances: the service holds %v, want %v", n, got, want)
		}
		if got := len(s.Instances()); got != n+1 {
			t.Fatalf("%d instances: the session publishes %d, want %d", n, got, n+1)
		}
	}
}
