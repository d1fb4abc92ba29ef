package registry_test

import (
	"testing"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
)

// Stats counts each write and its errors by reason, and the namespace table
// follows the index.
func TestStatsCountWrites(t *testing.T) {
	r := newReg(t)
	mustRegister(t, r, inst("a", 1), inst("a", 2), persistent("p", 1))
	bad := inst("a", 3)
	bad.Port = 0
	if err := r.Register(ctx, bad); err == nil {
		t.Fatal("a port of 0 was registered")
	}
	if _, err := r.Heartbeat(ctx, inst("a", 1).Key()); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Heartbeat(ctx, inst("a", 9).Key()); err == nil {
		t.Fatal("a beat of an unknown instance succeeded")
	}
	if err := r.Deregister(ctx, inst("a", 2).Key()); err != nil {
		t.Fatal(err)
	}
	sess, err := r.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other := model.NewInstance(model.ServiceKey{Namespace: "dev", Name: "b"}, "10.1.0.1", 80)
	if err := sess.Register(ctx, other); err != nil {
		t.Fatal(err)
	}
	r.Advance(16 * time.Second) // a's beat instance misses its beats: unhealthy

	st := r.Stats()
	want := map[registry.Op]struct {
		calls uint64
		errs  map[registry.Reason]uint64
	}{
		registry.OpRegister:        {4, map[registry.Reason]uint64{registry.ReasonInvalid: 1}},
		registry.OpHeartbeat:       {2, map[registry.Reason]uint64{registry.ReasonNotFound: 1}},
		registry.OpDeregister:      {1, nil},
		registry.OpSessionOpen:     {1, nil},
		registry.OpSessionRegister: {1, nil},
	}
	for op, w := range want {
		got := st.Ops[op]
		if got.Calls != w.calls {
			t.Errorf("%s: %d calls, want %d", op, got.Calls, w.calls)
		}
		for reason, n := range got.Errors {
			if uint64(n) != w.errs[registry.Reason(reason)] {
				t.Errorf("%s: %d errors of %s, want %d", op, n, registry.Reason(reason), w.errs[registry.Reason(reason)])
			}
		}
	}
	pub, dev := st.Namespaces["public"], st.Namespaces["dev"]
	if pub.Services != 2 || pub.Ephemeral != 1 || pub.Persistent != 1 || pub.Healthy != 1 || pub.Unhealthy != 1 || pub.Sessions != 0 {
		t.Errorf("namespace public: %+v", pub)
	}
	if dev.Services != 1 || dev.Ephemeral != 1 || dev.Healthy != 1 || dev.Sessions != 1 {
		t.Errorf("namespace dev: %+v", dev)
	}
	if st.Instances != 3 || st.Sessions != 1 {
		t.Errorf("counts: %+v", st.Counts)
	}
}

// A beat instance whose beats stop and a session whose keep-alive lapses
// are each counted once, when their lease ends; one that is renewed,
// deregistered or closed is not.
func TestStatsCountExpiries(t *testing.T) {
	r := newReg(t)
	mustRegister(t, r, inst("a", 1), inst("a", 2), inst("a", 3))
	if err := r.Deregister(ctx, inst("a", 3).Key()); err != nil {
		t.Fatal(err)
	}
	lapsing, err := r.OpenSession(ctx, registry.SessionOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	kept, err := r.OpenSession(ctx, registry.SessionOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range []*registry.Session{lapsing, kept} {
		if err := s.Register(ctx, inst("s", i+1)); err != nil {
			t.Fatal(err)
		}
	}
	closed, err := r.OpenSession(ctx, registry.SessionOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	for range 8 { // 40 s: past the beat instances' 30 s delete timeout and the sessions' TTL
		r.Advance(5 * time.Second)
		if _, err := r.Heartbeat(ctx, inst("a", 2).Key()); err != nil {
			t.Fatal(err)
		}
		if err := kept.KeepAlive(ctx); err != nil {
			t.Fatal(err)
		}
	}
	st := r.Stats()
	if st.LeasesExpired != 1 || st.SessionsExpired != 1 {
		t.Fatalf("LeasesExpired %d, SessionsExpired %d; want 1 and 1 (a:1 and the lapsed session)", st.LeasesExpired, st.SessionsExpired)
	}
	if got := st.Instances; got != 2 {
		t.Fatalf("%d instances left, want 2 (a:2 and the kept session's)", got)
	}
}

// Every watcher handed a view counts once in the delivery histogram, with
// the time from the change on the registry's clock.
func TestStatsWatchDelivery(t *testing.T) {
	r := newReg(t)
	var ws []*registry.Watcher
	for range 3 {
		w, err := r.Watch(ctx, model.Query{Service: svcKey("w")})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		next(t, w) // the first, empty view is not a delivery of a change
		ws = append(ws, w)
	}
	before := r.Stats().WatchDelivery.Count
	mustRegister(t, r, inst("w", 1))
	for _, w := range ws {
		nextMatching(t, w, func(u registry.Update) bool { return len(u.Delta.Added) == 1 })
	}
	if err := r.Internals().FlushWatchers(ctx); err != nil {
		t.Fatal(err)
	}
	h := r.Stats().WatchDelivery
	if got := h.Count - before; got != 3 {
		t.Fatalf("%d deliveries counted, want 3 (one per watcher)", got)
	}
	if h.Sum != 0 {
		t.Fatalf("deliveries took %v on a clock that did not move", h.Sum)
	}
}
