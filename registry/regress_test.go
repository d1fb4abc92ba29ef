package registry_test

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
	"go.uber.org/goleak"
)

// Regression tests for defects a review found; each failed before its fix.

func TestListServicesHugePage(t *testing.T) {
	r := newReg(t)
	mustRegister(t, r, inst("a", 1))
	page, err := r.ListServices(ctx, registry.ListOptions{Page: math.MaxInt / 50, PageSize: 100})
	if err != nil || len(page.Services) != 0 || page.Total != 1 {
		t.Fatalf("huge page: %+v, %v", page, err)
	}
}

// doneCtx is done from the start but says so only from its second Err: a
// context cancelled between Watch's check and its hook.
type doneCtx struct {
	context.Context
	calls atomic.Int32
	done  chan struct{}
}

func (c *doneCtx) Done() <-chan struct{} { return c.done }
func (c *doneCtx) Err() error {
	if c.calls.Add(1) == 1 {
		return nil
	}
	return context.Canceled
}

// TestWatchContextEndsDuringWatch: the watcher closes, without a race, and
// its context hook does not outlive it.
func TestWatchContextEndsDuringWatch(t *testing.T) {
	r := newReg(t)
	leaks := goleak.IgnoreCurrent()
	for range 50 {
		c := &doneCtx{Context: context.Background(), done: make(chan struct{})}
		close(c.done)
		w, err := r.Watch(c, model.Query{Service: svcKey("x")})
		if err != nil {
			t.Fatal(err)
		}
		n, cancel := context.WithTimeout(ctx, 5*time.Second)
		if _, err := w.Next(n); err == nil {
			if _, err = w.Next(n); err == nil || err == context.DeadlineExceeded {
				t.Fatalf("watcher of an ended context still open: %v", err)
			}
		}
		cancel()
	}
	if err := goleak.Find(leaks); err != nil {
		t.Fatal(err)
	}
}

// TestDefinitionsAreCopied: neither the caller's value nor the copy
// GetService returns shares memory with the stored definition.
func TestDefinitionsAreCopied(t *testing.T) {
	r := newReg(t)
	def := model.Service{Key: svcKey("p"), Clusters: []model.Cluster{{Name: "DEFAULT",
		HealthCheck: model.HealthCheck{Type: model.CheckNone, ExpectedCodes: []int{200}, Password: "secret"}}}}
	if err := r.CreateService(ctx, def); err != nil {
		t.Fatal(err)
	}
	mustRegister(t, r, persistent("p", 1))
	def.Clusters[0].HealthCheck.ExpectedCodes[0] = 999
	got, _ := r.GetService(ctx, svcKey("p"))
	if got.Clusters[0].HealthCheck.ExpectedCodes[0] != 200 || got.Clusters[0].HealthCheck.Password != "secret" {
		t.Fatalf("stored definition: %+v", got.Clusters[0].HealthCheck)
	}
	got.Clusters[0].HealthCheck.Type = model.CheckTCP
	if err := r.SetHealth(ctx, persistent("p", 1).Key(), false); err != nil {
		t.Fatalf("editing GetService's result changed the registry: %v", err)
	}
	if v := all(t, r, "p"); v.Service.Clusters[0].HealthCheck.Password != "" {
		t.Fatal("views carry the MySQL password")
	}
}

func TestQueryEmptyClusterNameIsDefault(t *testing.T) {
	r := newReg(t)
	mustRegister(t, r, inst("c", 1))
	if v := query(t, r, model.Query{Service: svcKey("c"), Clusters: []string{""}}); len(v.Instances) != 1 {
		t.Fatalf("Clusters [\"\"]: %d instances, want 1", len(v.Instances))
	}
	w, err := r.Watch(ctx, model.Query{Service: svcKey("c"), Clusters: []string{""}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if u := next(t, w); len(u.View.Instances) != 1 {
		t.Fatalf("watch of Clusters [\"\"]: %d instances", len(u.View.Instances))
	}
}

// TestDeleteTimeoutBelowBeatTimeout: Nacos accepts a delete timeout below the
// beat timeout; the instance then goes without turning unhealthy first.
func TestDeleteTimeoutBelowBeatTimeout(t *testing.T) {
	r := newReg(t)
	in := inst("s", 1)
	in.Metadata = model.NewMetadata(map[string]string{model.MetaIPDeleteTimeout: "10000"})
	mustRegister(t, r, in)
	r.Advance(10*time.Second - time.Millisecond)
	if v := all(t, r, "s"); len(v.Instances) != 1 || !v.RealHealthy(0) {
		t.Fatalf("before 10 s: %+v", v.Instances)
	}
	r.Advance(2 * time.Millisecond)
	if v := all(t, r, "s"); len(v.Instances) != 0 {
		t.Fatal("not deleted at 10 s")
	}
}

// TestSharedClockSettles: with a clock shared by two registries, Advance
// returns once this registry has handled what passed.
func TestSharedClockSettles(t *testing.T) {
	clock := clockwork.NewFakeClockAt(registrytest.Epoch)
	a := registrytest.New(t, registrytest.Options{Clock: clock})
	cfg := registry.DefaultConfig()
	cfg.NodeID = "b"
	cfg.SweepInterval = time.Hour
	registrytest.New(t, registrytest.Options{Clock: clock, Config: &cfg})
	for i := range 100 {
		mustRegister(t, a, inst("s", i))
		a.Advance(31 * time.Second)
		if v := all(t, a, "s"); len(v.Instances) != 0 {
			t.Fatalf("round %d: the instance is still there right after Advance(31s)", i)
		}
	}
}

type zeroSource struct{}

func (zeroSource) Uint64() uint64 { return 0 }

// TestSessionIDsUniqueWithARepeatingSource: a random source that repeats
// itself still yields distinct session IDs.
func TestSessionIDsUniqueWithARepeatingSource(t *testing.T) {
	cfg := registry.DefaultConfig()
	cfg.Rand = zeroSource{} // registrytest would replace it: a plain registry
	reg, err := registry.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	var sessions []*registry.Session
	for range 5 {
		s, err := reg.OpenSession(ctx, registry.SessionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ids[s.ID()] = true
		sessions = append(sessions, s)
		_ = s.Register(ctx, inst("z", len(sessions)))
	}
	if len(ids) != 5 {
		t.Fatalf("ids %v", ids)
	}
	if err := reg.CheckConsistency(); err != nil {
		t.Fatal(err)
	}
	reg.Close()
	for _, s := range sessions {
		select {
		case <-s.Done():
		default:
			t.Fatal("a session is still open after Close")
		}
	}
}

// TestAdvanceRightAfterAWatch: a fake clock advanced right after a watcher
// saw the previous change still fires the next deadline (the timer is armed
// again if the clock jumps while it is armed).
func TestAdvanceRightAfterAWatch(t *testing.T) {
	for range 200 {
		clock := clockwork.NewFakeClock()
		cfg := registry.DefaultConfig()
		cfg.Clock = clock
		reg, _ := registry.New(cfg)
		_ = reg.Start(ctx)
		web := model.ServiceKey{Name: "web"}
		_, _ = reg.HeartbeatInstance(ctx, model.NewInstance(web, "10.0.0.7", 80))
		w, _ := reg.Watch(ctx, model.Query{Service: web, IncludeDisabled: true})
		_, _ = w.Next(ctx)
		clock.Advance(16 * time.Second)
		_, _ = w.Next(ctx)
		clock.Advance(15 * time.Second)
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		u, err := w.Next(c)
		cancel()
		w.Close()
		reg.Close()
		if err != nil || len(u.View.Instances) != 0 {
			t.Fatalf("no removal after 31 s of fake time: %v", err)
		}
	}
}
