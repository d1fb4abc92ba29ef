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
