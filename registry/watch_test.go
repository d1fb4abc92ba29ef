package registry_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
	"go.uber.org/goleak"
)

// TestWatchSlowWatcherSkips: a watcher that does not read while 50 changes
// happen gets the newest view next, with the delta against what it saw.
func TestWatchSlowWatcherSkips(t *testing.T) {
	r := newReg(t)
	mustRegister(t, r, inst("s", 0))
	w, err := r.Watch(ctx, model.Query{Service: svcKey("s")})
	if err != nil {
		t.Fatal(err)
	}
	first := next(t, w)
	if len(first.Delta.Added) != 1 || first.Revision == 0 {
		t.Fatalf("first update: %+v", first)
	}
	for i := 1; i <= 50; i++ {
		mustRegister(t, r, inst("s", i))
	}
	if err := r.Deregister(ctx, inst("s", 0).Key()); err != nil {
		t.Fatal(err)
	}
	final := all(t, r, "s").Revision
	updates := 0
	u := nextMatching(t, w, func(u registry.Update) bool { updates++; return u.Revision == final })
	if len(u.View.Instances) != 50 {
		t.Fatalf("newest view holds %d instances", len(u.View.Instances))
	}
	// The watcher skipped views: 51 changes, far fewer updates, and the
	// deltas together cover them all.
	if updates >= 51 {
		t.Fatalf("%d updates for 51 changes: nothing was skipped", updates)
	}
	if updates == 1 && (len(u.Delta.Added) != 50 || len(u.Delta.Removed) != 1) {
		t.Fatalf("one update, but its delta is %d added, %d removed", len(u.Delta.Added), len(u.Delta.Removed))
	}
	if u.Revision <= first.Revision {
		t.Fatal("revision did not increase")
	}
	if u2 := func() error {
		c, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		_, err := w.Next(c)
		return err
	}(); !errors.Is(u2, context.DeadlineExceeded) {
		t.Fatalf("Next without a change returned %v", u2)
	}
}

// TestWatchDeltasAndRevisions: over a random run, read sometimes after each
// change and sometimes after many: revisions strictly increase, and applying
// each delta to the previous view gives the new one.
func TestWatchDeltasAndRevisions(t *testing.T) {
	r := newReg(t)
	w, err := r.Watch(ctx, model.Query{Service: svcKey("d"), IncludeDisabled: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rng := rand.New(rand.NewPCG(r.Seed, 1))
	s, _ := r.OpenSession(ctx, registry.SessionOptions{})
	var prev *model.ServiceView
	check := func(u registry.Update) {
		t.Helper()
		if prev != nil && u.Revision <= prev.Revision {
			t.Fatalf("revision %d after %d", u.Revision, prev.Revision)
		}
		if !sameInstances(apply(prev, u.Delta), u.View.Instances) {
			t.Fatalf("delta %+v does not turn the previous view into the new one", u.Delta)
		}
		prev = u.View
	}
	updates := 0
	for i := range 300 {
		in := inst("d", rng.IntN(17))
		switch rng.IntN(4) {
		case 0:
			mustRegister(t, s, in)
		case 1:
			in.Weight = float64(rng.IntN(7))
			mustRegister(t, s, in)
		case 2:
			s.Deregister(ctx, in.Key())
		case 3:
			w8 := float64(rng.IntN(5))
			r.PatchInstance(ctx, model.InstancePatch{Key: in.Key(), Weight: &w8}) // may be ErrNotFound
		}
		if rng.IntN(3) == 0 || i == 299 {
			want := all(t, r, "d").Revision
			for prev == nil || prev.Revision < want {
				check(next(t, w))
				updates++
			}
		}
	}
	if updates >= 300 {
		t.Fatalf("%d updates for 300 changes read in batches: views were not skipped", updates)
	}
}

// apply returns the instances of prev changed by d.
func apply(prev *model.ServiceView, d model.Delta) []model.Instance {
	m := map[model.InstanceKey]model.Instance{}
	if prev != nil {
		for _, in := range prev.Instances {
			m[in.Key()] = in
		}
	}
	for _, in := range d.Removed {
		delete(m, in.Key())
	}
	for _, in := range append(d.Added, d.Updated...) {
		m[in.Key()] = in
	}
	out := make([]model.Instance, 0, len(m))
	for _, in := range m {
		out = append(out, in)
	}
	model.SortInstances(out)
	return out
}

func sameInstances(a, b []model.Instance) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

// TestWatchSharedViews: watchers of the same query get the same view object
// for a revision.
func TestWatchSharedViews(t *testing.T) {
	r := newReg(t)
	var ws []*registry.Watcher
	for range 10 {
		w, err := r.Watch(ctx, model.Query{Service: svcKey("v")})
		if err != nil {
			t.Fatal(err)
		}
		next(t, w)
		ws = append(ws, w)
	}
	mustRegister(t, r, inst("v", 1))
	var view *model.ServiceView
	for _, w := range ws {
		u := nextMatching(t, w, func(u registry.Update) bool { return len(u.View.Instances) == 1 })
		if view == nil {
			view = u.View
		} else if u.View != view {
			t.Fatal("two watchers of one query got different view objects for one revision")
		}
		w.Close()
	}
	if q := query(t, r, model.Query{Service: svcKey("v")}); q != view {
		t.Fatal("Query and watchers do not share the view")
	}
}

// TestWatchServiceDeleted: deleting a watched service delivers an empty view
// with a newer revision; re-creating it continues upwards.
func TestWatchServiceDeleted(t *testing.T) {
	r := newReg(t)
	if err := r.CreateService(ctx, model.Service{Key: svcKey("gone"), Ephemeral: true}); err != nil {
		t.Fatal(err)
	}
	w, _ := r.Watch(ctx, model.Query{Service: svcKey("gone")})
	defer w.Close()
	u1 := next(t, w)
	if err := r.DeleteService(ctx, svcKey("gone")); err != nil {
		t.Fatal(err)
	}
	u2 := next(t, w)
	if u2.Revision <= u1.Revision {
		t.Fatalf("deletion revision %d not above %d", u2.Revision, u1.Revision)
	}
	mustRegister(t, r, inst("gone", 1))
	u3 := nextMatching(t, w, func(u registry.Update) bool { return len(u.View.Instances) == 1 })
	if u3.Revision <= u2.Revision {
		t.Fatalf("re-created revision %d not above %d", u3.Revision, u2.Revision)
	}
}

// TestWatchContextCancel: cancelling the Watch context closes the watcher and
// leaves no goroutine behind.
func TestWatchContextCancel(t *testing.T) {
	r := newReg(t)
	leaks := goleak.IgnoreCurrent()
	c, cancel := context.WithCancel(ctx)
	var ws []*registry.Watcher
	for range 20 {
		w, err := r.Watch(c, model.Query{Service: svcKey("c")})
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	readers := make(chan error, len(ws))
	for _, w := range ws {
		go func() {
			for {
				if _, err := w.Next(ctx); err != nil {
					readers <- err
					return
				}
			}
		}()
	}
	cancel()
	for range ws {
		if err := <-readers; !errors.Is(err, context.Canceled) {
			t.Fatalf("Next after cancel: %v", err)
		}
	}
	if err := goleak.Find(leaks); err != nil {
		t.Fatalf("goroutines left after cancel: %v", err)
	}
}

// TestIsolation: namespaces never see each other, and neither do two
// registries in one process.
func TestIsolation(t *testing.T) {
	a := newReg(t)
	cfg := registry.DefaultConfig()
	cfg.NodeID = "b"
	cfg.EmptyServiceTTL = time.Second
	b := registrytest.New(t, registrytest.Options{Config: &cfg})

	dev := model.ServiceKey{Namespace: "dev", Name: "orders"}
	mustRegister(t, a, model.NewInstance(dev, "10.0.0.1", 80), model.NewInstance(svcKey("orders"), "10.0.0.2", 80))
	if got := ips(all(t, a, "orders")); len(got) != 1 || got[0] != "10.0.0.2" {
		t.Fatalf("public namespace sees %v", got)
	}
	v, _ := a.Query(ctx, model.Query{Service: dev})
	if got := ips(v); len(got) != 1 || got[0] != "10.0.0.1" {
		t.Fatalf("dev namespace sees %v", got)
	}
	if got := all(t, b, "orders"); len(got.Instances) != 0 {
		t.Fatalf("registry b sees registry a's instances: %v", ips(got))
	}
	// Different configs stay apart: b's 1 s empty-service TTL is not a's.
	a.Deregister(ctx, model.NewInstance(svcKey("orders"), "10.0.0.2", 80).Key())
	mustRegister(t, b, inst("tmp", 1))
	b.Deregister(ctx, inst("tmp", 1).Key())
	b.Advance(2 * time.Second)
	a.Advance(2 * time.Second)
	if _, err := b.GetService(ctx, svcKey("tmp")); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("b's short TTL did not apply: %v", err)
	}
	if _, err := a.GetService(ctx, svcKey("orders")); err != nil {
		t.Fatalf("a used b's TTL: %v", err)
	}
}

// TestFlushWatchersBeforeStart: before Start there is no watcher and no
// notifier; FlushWatchers returns at once rather than waiting for ever.
func TestFlushWatchersBeforeStart(t *testing.T) {
	reg, err := registry.New(registry.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := reg.Internals().FlushWatchers(ctx); err != nil {
		t.Fatalf("FlushWatchers before Start: %v", err)
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
