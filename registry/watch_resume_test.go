package registry_test

import (
	"slices"
	"testing"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
)

func deltaIPs(d []model.Instance) []string {
	v := model.ServiceView{Instances: d}
	return ips(&v)
}

// TestWatchFromResumesAcrossReconnect: a client reads two updates, drops
// its watcher (a reconnect), misses an addition and a removal, and resumes
// from its cursor: the first update is the change it missed, not a reset,
// and applying it to what it held gives the current view. Resuming from the
// newest cursor waits for the next change.
func TestWatchFromResumesAcrossReconnect(t *testing.T) {
	r := newReg(t)
	q := model.Query{Service: svcKey("r")}
	mustRegister(t, r, inst("r", 0), inst("r", 1))
	w, err := r.Watch(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	first := next(t, w)
	if !first.Reset || len(first.Delta.Added) != 2 || first.Cursor.Run == 0 || first.Cursor.Revision != first.Revision {
		t.Fatalf("first update of Watch: %+v", first)
	}
	held := first.View
	w.Close()

	mustRegister(t, r, inst("r", 2))
	if err := r.Deregister(ctx, inst("r", 0).Key()); err != nil {
		t.Fatal(err)
	}
	w2, err := r.WatchFrom(ctx, q, first.Cursor)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	u := next(t, w2)
	if u.Reset {
		t.Fatalf("resume from a kept revision was a reset: %+v", u)
	}
	if got := deltaIPs(u.Delta.Added); !slices.Equal(got, []string{inst("r", 2).IP}) {
		t.Fatalf("resumed delta added %v", got)
	}
	if got := deltaIPs(u.Delta.Removed); !slices.Equal(got, []string{inst("r", 0).IP}) {
		t.Fatalf("resumed delta removed %v", got)
	}
	if d := model.Diff(held, u.View); !slices.Equal(deltaIPs(d.Added), deltaIPs(u.Delta.Added)) || !slices.Equal(deltaIPs(d.Removed), deltaIPs(u.Delta.Removed)) {
		t.Fatalf("the delta is not the change from the held view: %+v against %+v", u.Delta, d)
	}
	if got := all(t, r, "r"); u.Revision != got.Revision || !slices.Equal(ips(u.View), ips(got)) {
		t.Fatalf("resumed at %d %v, current %d %v", u.Revision, ips(u.View), got.Revision, ips(got))
	}
	w2.Close()

	// Up to date: nothing to deliver until the next change.
	w3, err := r.WatchFrom(ctx, q, u.Cursor)
	if err != nil {
		t.Fatal(err)
	}
	defer w3.Close()
	noUpdate(t, r, w3)
	mustRegister(t, r, inst("r", 3))
	u3 := next(t, w3)
	if u3.Reset || !slices.Equal(deltaIPs(u3.Delta.Added), []string{inst("r", 3).IP}) || len(u3.Delta.Removed) != 0 {
		t.Fatalf("update after an up-to-date resume: %+v", u3)
	}
}

// TestWatchFromTooOld: a cursor whose revision the registry no longer keeps
// (more than WatchHistory revisions were read since), a cursor of another
// registry and the zero cursor each resume with a reset holding the whole
// current view; and a service keeps at most WatchHistory past revisions.
func TestWatchFromTooOld(t *testing.T) {
	cfg := registry.DefaultConfig()
	cfg.HealthChecks, cfg.WatchHistory = nil, 2
	r := registrytest.New(t, registrytest.Options{Config: &cfg})
	q := model.Query{Service: svcKey("old")}
	mustRegister(t, r, inst("old", 0))
	w, err := r.Watch(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	old := next(t, w).Cursor
	w.Close()
	for i := 1; i <= 3; i++ { // three revisions, each read: the first is pushed out
		mustRegister(t, r, inst("old", i))
		all(t, r, "old")
	}
	cur := all(t, r, "old")

	other := registrytest.New(t, registrytest.Options{})
	mustRegister(t, other, inst("old", 0))
	ow, err := other.Watch(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	foreign := next(t, ow).Cursor
	ow.Close()
	if foreign.Run == old.Run {
		t.Fatal("two registries drew the same run")
	}
	foreign.Revision = old.Revision // the same number, another registry's

	for name, c := range map[string]registry.Cursor{"too old": old, "another registry": foreign, "zero": {}} {
		w, err := r.WatchFrom(ctx, q, c)
		if err != nil {
			t.Fatal(err)
		}
		u := next(t, w)
		w.Close()
		if !u.Reset || u.Revision != cur.Revision || !slices.Equal(deltaIPs(u.Delta.Added), ips(cur)) || len(u.Delta.Removed) != 0 {
			t.Fatalf("%s: resume gave %+v, want a reset to %v at %d", name, u, ips(cur), cur.Revision)
		}
	}

	// The second-newest revision read is still kept: a delta.
	mustRegister(t, r, inst("old", 4))
	w, err = r.WatchFrom(ctx, q, registry.Cursor{Run: old.Run, Revision: cur.Revision})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if u := next(t, w); u.Reset || !slices.Equal(deltaIPs(u.Delta.Added), []string{inst("old", 4).IP}) {
		t.Fatalf("resume from a kept revision: %+v", u)
	}
}

// TestWatchFromAnotherNode: a client that reconnects to another node of a
// cluster with its cursor gets a reset, the whole view as that node holds
// it, never a delta computed against a view of the same number there.
func TestWatchFromAnotherNode(t *testing.T) {
	c := registrytest.NewCluster(t, clusterOpts())
	q := model.Query{Service: svcKey("x")}
	mustRegister(t, c.Node(0), inst("x", 0), inst("x", 1))
	c.Eventually(10*time.Second, func() bool { return len(ipsOn(t, c.Node(1), "x")) == 2 }, "node 1 never got both instances")
	w, err := c.Node(0).Watch(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	cur := next(t, w).Cursor
	w.Close()
	w1, err := c.Node(1).WatchFrom(ctx, q, cur)
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Close()
	if u := next(t, w1); !u.Reset || len(u.Delta.Added) != 2 || u.Cursor.Run == cur.Run {
		t.Fatalf("resume on another node: %+v", u)
	}
}

// TestUpdateKinds: each kind of change a watcher can get says so in the
// update, those that leave Delta empty included: a sole instance turning
// unhealthy under protection (issue 29: "added:0 removed:0 updated:0"
// before), protection ending with no served health changed, another
// instance's real health moving while protected, a change of the
// definition, and a change of an instance the query filters out.
func TestUpdateKinds(t *testing.T) {
	r := newReg(t)
	q := model.Query{Service: svcKey("k"), Clusters: []string{model.DefaultCluster}}
	w, err := r.Watch(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if u := next(t, w); !u.Reset || !u.ServiceChanged {
		t.Fatalf("first update: %+v", u)
	}
	a := inst("k", 1)
	mustRegister(t, r, a)
	if u := next(t, w); len(u.Delta.Added) != 1 || u.Reset || u.ProtectionChanged || u.RealHealthChanged {
		t.Fatalf("after a register: %+v", u)
	}

	// The sole instance's lease lapses: served healthy under protection,
	// so Delta is empty, but the update says what moved.
	r.Advance(16 * time.Second)
	u := next(t, w)
	if !u.Delta.Empty() || !u.ProtectionChanged || !u.RealHealthChanged || u.ServiceChanged || !u.View.Protected {
		t.Fatalf("sole instance unhealthy under protection: %+v", u)
	}
	// It beats again: protection ends, and the served health (healthy)
	// is what it was.
	if _, err := r.Heartbeat(ctx, a.Key()); err != nil {
		t.Fatal(err)
	}
	u = next(t, w)
	if !u.Delta.Empty() || !u.ProtectionChanged || !u.RealHealthChanged || u.View.Protected {
		t.Fatalf("protection ends: %+v", u)
	}

	// A definition with a threshold of 0.6.
	def := model.Service{Key: svcKey("k"), Ephemeral: true, ProtectThreshold: 0.6}
	if err := r.UpdateService(ctx, def); err != nil {
		t.Fatal(err)
	}
	u = next(t, w)
	if !u.ServiceChanged || !u.Delta.Empty() || u.View.Service.ProtectThreshold != 0.6 {
		t.Fatalf("definition changed: %+v", u)
	}
	r.Advance(10 * time.Second) // a's beat was 10 s ago
	b := inst("k", 2)
	mustRegister(t, r, b)
	next(t, w)
	r.Advance(6 * time.Second) // a lapses: one of two healthy, at or below 0.6
	u = next(t, w)
	if !u.Delta.Empty() || !u.ProtectionChanged || !u.RealHealthChanged {
		t.Fatalf("a lapses, protection starts: %+v", u)
	}
	r.Advance(10 * time.Second) // b lapses too, still protected
	u = next(t, w)
	if !u.Delta.Empty() || u.ProtectionChanged || !u.RealHealthChanged || u.ServiceChanged || !u.View.Protected {
		t.Fatalf("b lapses under protection: %+v", u)
	}

	// An instance of a cluster the query filters out: a new revision that
	// changes nothing the query shows.
	c := inst("k", 3)
	c.Cluster = "other"
	mustRegister(t, r, c)
	u = next(t, w)
	if !u.Delta.Empty() || u.ServiceChanged || u.ProtectionChanged || u.RealHealthChanged || u.Reset {
		t.Fatalf("a change the query filters out: %+v", u)
	}
}
