package distro

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/muster-io/muster/transport"
)

// waitSnapshotReqs waits until a snapshot request from → each of peers is queued (manual mode)
// and returns them by peer.
func waitSnapshotReqs(t *testing.T, c *cluster, ctx context.Context, from string, peers ...string) map[string]transport.Envelope {
	t.Helper()
	for n := 1; ; n++ {
		envs, err := c.net.WaitPending(ctx, n)
		if err != nil {
			t.Fatalf("snapshot requests %s→%v not all queued: %v", from, peers, err)
		}
		got := map[string]transport.Envelope{}
		for _, e := range envs {
			if e.From == from && e.Kind == kindSnapshot {
				got[e.To] = e
			}
		}
		if len(got) == len(peers) {
			return got
		}
	}
}

// issue112Cluster builds the scenario of issue 11.2: K is n2's by HRW among n1, n2, n3; n1, not
// seeing n2, adopted K and deleted it (n1#3, a tombstone n3 holds); n2 still holds its live
// n2#1. Then n1 restarts, in manual delivery mode; the snapshot requests of its load are
// returned by peer.
func issue112Cluster(t *testing.T, ctx context.Context) (c *cluster, k string, del Record, reqs map[string]transport.Envelope) {
	all := []string{"n1", "n2", "n3"}
	c = newCluster(t, func(cfg *Config) { cfg.SyncDelay = NoSyncDelay }, all...)
	c.mod = func(cfg *Config) { cfg.SyncDelay = NoSyncDelay; cfg.LoadTimeout = time.Minute } // for the restarted node
	for i := 0; ; i++ {
		k = fmt.Sprintf("10.7.0.%d:80", i)
		if hrwOwner(all, k) == "n2" && hrwOwner([]string{"n1", "n3"}, k) == "n1" {
			break
		}
	}
	if _, err := c.nodes["n2"].r.Put(KindBeat, k, []byte("v1")); err != nil {
		t.Fatal(err)
	}
	c.eventually(time.Second, "n2's record everywhere", c.converged)
	c.nodes["n1"].mem.Set(Member{ID: "n1"}, Member{ID: "n3"})
	c.eventually(0, "n1 adopted K", func() bool { r, _ := c.nodes["n1"].r.Get(k); return r.Owner == "n1" })
	del, err := c.nodes["n1"].r.Delete(k)
	if err != nil {
		t.Fatal(err)
	}
	c.eventually(0, "n3 holds n1's tombstone", func() bool { r, _ := c.nodes["n3"].r.Get(k); return r.sameVersion(del) })
	if r, _ := c.nodes["n2"].r.Get(k); r.Owner != "n2" || r.Deleted {
		t.Fatalf("n2 holds %v, want its live record", r)
	}
	c.stop("n1")
	c.add("n1")
	c.setMembers(all...)
	c.net.SetManual(true)
	c.startNode("n1")
	return c, k, del, waitSnapshotReqs(t, c, ctx, "n1", "n2", "n3")
}

// checkIssue112 checks n1 after its load: it holds its previous incarnation's tombstone and its
// Store serves nothing for K; then the cluster converges.
func checkIssue112(t *testing.T, c *cluster, k string, del Record) {
	t.Helper()
	n1 := c.nodes["n1"]
	c.eventually(0, "n1 ready", n1.r.Ready)
	c.settle()
	if r, _ := n1.r.Get(k); !r.sameVersion(del) || !r.Deleted {
		t.Fatalf("n1 holds %v, want its previous incarnation's tombstone %v", r, del)
	}
	if r, ok := n1.store.get(k); ok {
		t.Fatalf("n1's store still serves %v, replaced by the tombstone %v", r, del)
	}
	if m := c.storeMismatch(n1); m != "" {
		t.Fatal(m)
	}
	c.net.SetManual(false)
	c.net.DeliverAll()
	c.eventually(3*time.Second, "converged", c.converged)
	c.checkInvariants()
}

// Issue 11.2: a restarting node loads a peer's live record of a key from one snapshot, then,
// from another, its own previous incarnation's newer tombstone of that key. Before the fix the
// Store was handed the live record and never told of the tombstone ("store has K@n2#1,
// replicator nothing"): it served the instance for ever. Now the Store gets the merged result
// of the load only: it never sees the intermediate live record.
func TestRestartLoadsOwnTombstoneOverForeignRecord(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, k, del, reqs := issue112Cluster(t, ctx)
	n1 := c.nodes["n1"]
	if err := c.net.Deliver(reqs["n2"].ID); err != nil {
		t.Fatal(err)
	}
	c.eventually(0, "n2's live record loaded on n1", func() bool { r, _ := n1.r.Get(k); return r.Owner == "n2" })
	if err := c.net.Deliver(reqs["n3"].ID); err != nil {
		t.Fatal(err)
	}
	checkIssue112(t, c, k, del)
	n1.store.mu.Lock()
	applied := n1.store.applied[k]
	n1.store.mu.Unlock()
	for _, a := range applied {
		if !a.Deleted && !a.Newer(del) { // later versions are n2's bump past the tombstone
			t.Fatalf("n1's store was shown the intermediate %v during the load", a)
		}
	}
}

// The same with the live record arriving in a sync during the load (so the Store is given it at
// once): the loaded tombstone that replaces it removes it from the Store.
func TestRestartLoadsOwnTombstoneOverSyncedRecord(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, k, del, reqs := issue112Cluster(t, ctx)
	n1 := c.nodes["n1"]
	rec, err := c.nodes["n2"].r.Put(KindBeat, k, []byte("v2")) // n2#2, still older than n1#3
	if err != nil {
		t.Fatal(err)
	}
	if rec.Newer(del) {
		t.Fatalf("%v is newer than the tombstone %v", rec, del)
	}
	sync := waitSync(t, c, ctx, "n2", "n1")
	if err := c.net.Deliver(sync.ID); err != nil {
		t.Fatal(err)
	}
	c.eventually(0, "n2#2 applied on n1 during its load", func() bool { r, ok := n1.store.get(k); return ok && r.sameVersion(rec) })
	if err := c.net.Deliver(reqs["n3"].ID); err != nil {
		t.Fatal(err)
	}
	if err := c.net.Deliver(reqs["n2"].ID); err != nil {
		t.Fatal(err)
	}
	checkIssue112(t, c, k, del)
}

// A Put made before ready (this incarnation's write) is never replaced by a newer version of its
// previous incarnation found while loading: it moves past it (before, the loaded session record
// replaced it and finishLoad then tombstoned it, deleting the early write).
func TestPutBeforeReadyWinsOverPreviousIncarnation(t *testing.T) {
	c := newCluster(t, nil, "a", "b")
	c.mod = func(cfg *Config) { cfg.LoadTimeout = time.Minute } // for the restarted node
	for i := 0; i < 3; i++ {
		c.nodes["b"].r.Put(KindSession, "early", []byte(fmt.Sprint("old", i)))
	}
	old := rev(c.nodes["b"], 3)
	c.eventually(time.Second, "b's third write on a", func() bool { r, _ := c.nodes["a"].r.Get("early"); return r.Revision == old })

	c.stop("b")
	n := c.add("b")
	c.setMembers("a", "b")
	c.net.Isolate("b")
	c.startNode("b")
	if _, err := n.r.Put(KindSession, "early", []byte("new")); err != nil {
		t.Fatal(err)
	}
	c.net.Heal()
	c.eventually(5*time.Second, "b ready", n.r.Ready)
	r, _ := n.r.Get("early")
	if r.Deleted || r.Revision <= old || string(r.Payload) != "new" {
		t.Fatalf("early write after load: %v %q, want live, past revision %d, with the new payload", r, r.Payload, old)
	}
	c.eventually(2*time.Second, "a has the new write", func() bool {
		got, ok := c.nodes["a"].store.get("early")
		return ok && got.Revision == r.Revision && string(got.Payload) == "new"
	})
	c.checkInvariants()
}

// Issue 27.1: a node whose tombstone of its own key expired wrote the key again from revision 1,
// and reached the tombstone's revision while a peer that had loaded the tombstone later (so its
// TTL ran later) still held it: one version, live on the owner, deleted on the peer, and the
// peer refused the live one. After its tombstone expires, a node writes revisions above it.
func TestRevisionNotReusedAfterTombstoneExpiry(t *testing.T) {
	c := newCluster(t, nil, "n1", "n2")
	n1 := c.nodes["n1"]
	if _, err := n1.r.Put(KindSession, "s-1", []byte("a")); err != nil {
		t.Fatal(err)
	}
	del, err := n1.r.Delete("s-1")
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	c.eventually(cfg.TombstoneTTL+2*cfg.VerifyInterval, "n1 forgot its tombstone", func() bool {
		_, ok := n1.r.Get("s-1")
		return !ok
	})
	for range 2 {
		rec, err := n1.r.Put(KindSession, "s-1", []byte("b"))
		if err != nil {
			t.Fatal(err)
		}
		if rec.Revision <= del.Revision {
			t.Fatalf("n1 wrote %v after forgetting its tombstone %v: that version named a deletion", rec, del)
		}
	}
}

// restartWithoutState builds the fault of issue 27.1: a writes s ("old"), which reaches c only,
// then crashes. It restarts, with the same node ID, after down of fake time, while c is cut
// off: its load finds s nowhere (b never got it). clockBack sets the new incarnation's epoch to
// the old one's (its clock was set back by as much as it was down). It returns the restarted a,
// the old record, and a's new write of s ("new").
func restartWithoutState(t *testing.T, down time.Duration, clockBack bool) (c *cluster, a *node, old, cur Record) {
	t.Helper()
	c = newCluster(t, nil, "a", "b", "c")
	c.net.Partition("a", "b")
	old, err := c.nodes["a"].r.Put(KindSession, "s", []byte("old"))
	if err != nil {
		t.Fatal(err)
	}
	c.eventually(time.Second, "c holds a's s", func() bool { r, ok := c.nodes["c"].store.get("s"); return ok && r.sameVersion(old) })
	epoch := c.nodes["a"].r.epoch
	c.stop("a")
	c.setMembers("b", "c")
	c.net.Heal()
	c.net.Isolate("c")
	c.step(down)
	a = c.add("a")
	if clockBack {
		a.r.epoch = epoch
	}
	c.setMembers("a", "b", "c")
	c.startNode("a")
	c.waitReady("a")
	if r, ok := a.r.Get("s"); ok {
		t.Fatalf("the restarted a loaded %v: the fault needs s out of its reach", r)
	}
	cur, err = a.r.Put(KindSession, "s", []byte("new"))
	if err != nil {
		t.Fatal(err)
	}
	c.net.Heal()
	return c, a, old, cur
}

// waitNewPayloadOnC waits until c's store holds a's new payload of s and the cluster converged.
func waitNewPayloadOnC(c *cluster) *node {
	c.t.Helper()
	cn := c.nodes["c"]
	c.eventuallyf(3*testConfig().VerifyInterval, func() string { return "c holds a's new s\n" + c.describe() }, func() bool {
		r, ok := cn.store.get("s")
		return ok && string(r.Payload) == "new" && c.converged()
	})
	return cn
}

// Issue 27.1: a node that restarts has lost the versions it wrote, and a peer it cannot reach
// while it loads keeps one. Its revisions start at its epoch (its start time): its new write of
// the key is newer than the old version, c takes it from the sync as it is (no verify repair,
// which would have moved it on), and every node converges to the new payload.
func TestRestartedNodeNeverReusesAVersion(t *testing.T) {
	c, _, old, cur := restartWithoutState(t, 2*time.Second, false)
	if !cur.Newer(old) {
		t.Fatalf("the restarted a wrote %v, not newer than its previous incarnation's %v", cur, old)
	}
	cn := waitNewPayloadOnC(c)
	if r, _ := cn.r.Get("s"); !r.sameVersion(cur) {
		t.Fatalf("c holds %v, want a's write %v as it was sent", r, cur)
	}
	c.checkInvariants()
}

// The same with the restarted node's clock set back as far as it was down: its epoch is the
// previous incarnation's, its write reuses the version c holds with the old payload. The
// payload checksum in verify's digest finds it, a moves past it, and c converges to "new".
func TestRestartedNodeWithClockSetBackIsRepaired(t *testing.T) {
	c, a, old, cur := restartWithoutState(t, 2*time.Second, true)
	if !cur.sameVersion(old) {
		t.Fatalf("the fault: a's write %v should reuse %v", cur, old)
	}
	cn := waitNewPayloadOnC(c)
	if r, _ := a.r.Get("s"); !r.Newer(old) || string(r.Payload) != "new" {
		t.Fatalf("a holds %v %q, want it moved past %v", r, r.Payload, old)
	}
	if r, _ := cn.r.Get("s"); r.sameVersion(old) {
		t.Fatalf("c still holds the reused version %v", r)
	}
	c.checkInvariants()
}
