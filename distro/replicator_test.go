package distro

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/transport"
)

func TestReplicatesPutAndDelete(t *testing.T) {
	c := newCluster(t, nil, "a", "b", "c")
	a := c.nodes["a"]
	rec, err := a.r.Put(KindSession, "s1", []byte("v1"))
	if err != nil || rec.Revision != rev(a, 1) || rec.Owner != "a" {
		t.Fatalf("Put = %v, %v", rec, err)
	}
	c.eventually(time.Second, "s1 on b and c", func() bool {
		_, b := c.nodes["b"].store.get("s1")
		_, cc := c.nodes["c"].store.get("s1")
		return b && cc
	})
	if _, err := a.r.Delete("s1"); err != nil {
		t.Fatal(err)
	}
	c.eventually(time.Second, "s1 gone from b and c", func() bool {
		_, b := c.nodes["b"].store.get("s1")
		_, cc := c.nodes["c"].store.get("s1")
		return !b && !cc
	})
	if got, ok := c.nodes["b"].r.Get("s1"); !ok || !got.Deleted || got.Revision != rev(a, 2) {
		t.Fatalf("b holds %v %v, want the tombstone", got, ok)
	}
	c.checkInvariants()
}

func TestNoSyncDelaySendsAtOnce(t *testing.T) {
	c := newCluster(t, func(cfg *Config) { cfg.SyncDelay = NoSyncDelay }, "a", "b")
	c.nodes["a"].r.Put(KindSession, "s", []byte("x"))
	// No clock advance at all: the sync must go out without waiting for a timer.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if _, ok := c.nodes["b"].store.get("s"); ok {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("SyncDelay 0: not replicated without the clock moving")
}

// Changes within the merge window go out as one message carrying the state at send time.
func TestSyncMergesWithinWindow(t *testing.T) {
	c := newCluster(t, func(cfg *Config) { cfg.SyncDelay = time.Second }, "a", "b")
	a := c.nodes["a"]
	for i := 0; i < 5; i++ {
		a.r.Put(KindSession, "s", []byte(fmt.Sprint(i)))
		c.step(100 * time.Millisecond)
	}
	c.eventually(2*time.Second, "s#5 on b", func() bool {
		r, ok := c.nodes["b"].store.get("s")
		return ok && r.Revision == rev(a, 5)
	})
	b := c.nodes["b"].store
	b.mu.Lock()
	n := len(b.applied["s"])
	b.mu.Unlock()
	if n != 1 {
		t.Fatalf("b saw %d applies of s, want 1 (merged)", n)
	}
}

// Invariant 1: only the owner changes a record.
func TestSingleWriter(t *testing.T) {
	c := newCluster(t, nil, "a", "b", "c")
	members := []string{"a", "b", "c"}
	kb := beatKeyOwnedBy(members, "b", 1)
	if _, err := c.nodes["a"].r.Put(KindBeat, kb, nil); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("Put of b's beat key on a: %v, want ErrNotOwner", err)
	}
	if _, err := c.nodes["b"].r.Put(KindBeat, kb, []byte("x")); err != nil {
		t.Fatal(err)
	}
	c.nodes["a"].r.Put(KindSession, "sa", []byte("x"))
	c.eventually(time.Second, "replicated", c.converged)
	if _, err := c.nodes["b"].r.Delete("sa"); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("Delete of a's session on b: %v, want ErrNotOwner", err)
	}
	if _, err := c.nodes["c"].r.Put(KindSession, "sa", []byte("y")); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("Put of a's session on c: %v, want ErrNotOwner", err)
	}
	// Fault: a node forges a record owned by a and syncs it to b.
	evil := c.nodes["c"].tr
	body, _ := model.Marshal(syncMsg{Records: []wireRecord{toWire(Record{Key: "sa", Kind: KindSession, Owner: "a", Revision: rev(c.nodes["a"], 99), Payload: []byte("forged")})}})
	if _, err := evil.Request(context.Background(), "b", kindSync, body); err != nil {
		t.Fatal(err)
	}
	if r, _ := c.nodes["b"].r.Get("sa"); r.Revision != rev(c.nodes["a"], 1) {
		t.Fatalf("b installed a forged record: %v", r)
	}
	c.nodes["b"].r.mu.Lock()
	refused := c.nodes["b"].r.refused
	c.nodes["b"].r.refused = 0
	c.nodes["b"].r.mu.Unlock()
	if refused != 1 {
		t.Fatalf("refused %d, want 1", refused)
	}
	c.checkInvariants()
}

// Invariant 2: duplicates, reordering and late retries never move state back.
func TestNoRollbackDuplicateAndReorder(t *testing.T) {
	c := newCluster(t, func(cfg *Config) { cfg.SyncDelay = NoSyncDelay }, "a", "b")
	a := c.nodes["a"]
	c.net.SetManual(true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	a.r.Put(KindSession, "s", []byte("v1"))
	env1 := waitSync(t, c, ctx, "a", "b")
	// Deliver a copy of v1 (the original stays queued, to be delivered late).
	if err := c.net.Duplicate(env1.ID); err != nil {
		t.Fatal(err)
	}
	a.r.Put(KindSession, "s", []byte("v2"))
	env2 := waitSync(t, c, ctx, "a", "b", env1.ID)
	if err := c.net.Deliver(env2.ID); err != nil {
		t.Fatal(err)
	}
	c.eventually(0, "v2 on b", func() bool { r, _ := c.nodes["b"].store.get("s"); return r.Revision == rev(a, 2) })
	// The stale v1, late and reordered, then once more.
	c.net.Deliver(env1.ID)
	c.net.SetManual(false)
	tr := c.nodes["a"].tr
	tr.Request(ctx, "b", kindSync, env1.Body)
	if r, _ := c.nodes["b"].r.Get("s"); r.Revision != rev(a, 2) {
		t.Fatalf("b rolled back to %v", r)
	}
	if r, _ := c.nodes["b"].store.get("s"); r.Revision != rev(a, 2) || string(r.Payload) != "v2" {
		t.Fatalf("store rolled back to %v", r)
	}
	c.checkInvariants()
}

// waitSync waits for the next queued sync from → to.
func waitSync(t *testing.T, c *cluster, ctx context.Context, from, to string, after ...uint64) transport.Envelope {
	t.Helper()
	for n := 1; ; n++ {
		envs, err := c.net.WaitPending(ctx, n)
		if err != nil {
			t.Fatalf("no sync %s→%s queued: %v", from, to, err)
		}
	next:
		for _, e := range envs {
			for _, id := range after {
				if e.ID == id {
					continue next
				}
			}
			if e.From == from && e.To == to && e.Kind == kindSync {
				return e
			}
		}
	}
}

// Invariant 2: a retry after a failed sync sends the state at send time, never the old one.
func TestLateRetrySendsCurrentState(t *testing.T) {
	c := newCluster(t, nil, "a", "b")
	a := c.nodes["a"]
	c.net.Partition("a", "b")
	a.r.Put(KindSession, "s", []byte("v1"))
	c.eventually(500*time.Millisecond, "a sync attempt failed", func() bool {
		a.r.mu.Lock()
		defer a.r.mu.Unlock()
		ps := a.r.sched.peers["b"]
		return ps != nil && ps.attempt >= 2
	})
	a.r.Put(KindSession, "s", []byte("v2"))
	a.r.Put(KindSession, "s", []byte("v3"))
	c.net.Heal()
	c.eventually(2*time.Second, "v3 on b", func() bool { r, _ := c.nodes["b"].store.get("s"); return r.Revision == rev(a, 3) })
	b := c.nodes["b"].store
	b.mu.Lock()
	applied := b.applied["s"]
	b.mu.Unlock()
	if len(applied) != 1 || string(applied[0].Payload) != "v3" {
		t.Fatalf("b applied %v, want only v3", applied)
	}
	c.checkInvariants()
}

// Invariant 3: a stale update after a delete never resurrects the record, through sync, verify
// or a new node's load.
func TestNoResurrection(t *testing.T) {
	c := newCluster(t, func(cfg *Config) { cfg.SyncDelay = NoSyncDelay }, "a", "b")
	a := c.nodes["a"]
	c.net.SetManual(true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a.r.Put(KindSession, "s", []byte("v1"))
	env1 := waitSync(t, c, ctx, "a", "b")
	c.net.Duplicate(env1.ID)
	a.r.Delete("s")
	env2 := waitSync(t, c, ctx, "a", "b", env1.ID)
	c.net.Deliver(env2.ID)
	c.eventually(0, "s deleted on b", func() bool { _, ok := c.nodes["b"].store.get("s"); return !ok })
	c.net.Deliver(env1.ID) // the stale update
	c.net.SetManual(false)
	c.nodes["a"].tr.Request(ctx, "b", kindSync, env1.Body) // and again, waiting for it to be handled
	if r, _ := c.nodes["b"].r.Get("s"); !r.Deleted {
		t.Fatalf("resurrected on b: %v", r)
	}
	// Verify rounds and a joining node's load keep it dead.
	c.add("c")
	c.setMembers("a", "b", "c")
	c.startNode("c")
	c.waitReady("c")
	c.eventually(3*time.Second, "converged", c.converged)
	for _, id := range []string{"a", "b", "c"} {
		if _, ok := c.nodes[id].store.get("s"); ok {
			t.Fatalf("resurrected on %s", id)
		}
		if r, ok := c.nodes[id].r.Get("s"); ok && !r.Deleted {
			t.Fatalf("%s holds %v", id, r)
		}
	}
	// The owner's own copy goes within the TTL and a verify interval of its
	// making (a's clock alone decides: no repair brings it back).
	c.eventually(12*time.Second, "a's tombstone expired", func() bool {
		_, ok := c.nodes["a"].r.Get("s")
		return !ok
	})
	// After the TTL the tombstones go, on every node. The budget is three
	// TTLs of fake time: under load the fake clock runs ahead of the
	// nodes' goroutines, and a node that expired its copy first gets it
	// back from the owner's verify (a fresh TTL) until the owner's own copy
	// expires (CI's race step once ran out of a budget of 1.5 TTLs).
	c.eventually(30*time.Second, "tombstones expired", func() bool {
		for _, id := range []string{"a", "b", "c"} {
			if _, ok := c.nodes[id].r.Get("s"); ok {
				return false
			}
		}
		return true
	})
	c.checkInvariants()
}

// Invariant 4: a node only sends records it owns: receiving never triggers a send.
func TestNoEcho(t *testing.T) {
	c := newCluster(t, func(cfg *Config) { cfg.SyncDelay = NoSyncDelay }, "a", "b", "c")
	c.net.SetManual(true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c.nodes["a"].r.Put(KindSession, "s", []byte("x"))
	envs, err := c.net.WaitPending(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range envs {
		if e.From != "a" || e.Kind != kindSync {
			t.Fatalf("unexpected message %+v", e)
		}
	}
	c.net.DeliverAll()
	c.eventually(0, "delivered", func() bool {
		_, b := c.nodes["b"].store.get("s")
		_, cc := c.nodes["c"].store.get("s")
		return b && cc
	})
	c.settle()
	c.step(200 * time.Millisecond) // past any sync delay; before the first verify
	c.settle()
	for _, e := range c.net.Pending() {
		if e.Kind == kindSync {
			t.Fatalf("receiver sent %s→%s a sync after receiving: echo", e.From, e.To)
		}
	}
	c.net.SetManual(false)
	c.net.DeliverAll()
	c.checkInvariants()
}

// Invariant 5: after a partition heals, all nodes converge within two verify periods, even if
// every change sync to the other side was lost.
func TestConvergenceAfterPartition(t *testing.T) {
	c := newCluster(t, nil, "a", "b", "c")
	c.net.Isolate("c")
	for i := 0; i < 20; i++ {
		c.nodes["a"].r.Put(KindSession, fmt.Sprint("a", i), []byte("x"))
		c.nodes["c"].r.Put(KindSession, fmt.Sprint("c", i), []byte("x"))
	}
	c.nodes["a"].r.Delete("a3")
	c.eventually(time.Second, "a and b agree", func() bool { return mapsEqual(held(c.nodes["a"].r), held(c.nodes["b"].r)) })
	// Drop the pending sync tasks (as if retries had given up) so only verify can repair.
	for _, id := range []string{"a", "c"} {
		n := c.nodes[id]
		n.r.mu.Lock()
		n.r.sched = newSyncSched(n.r.cfg.SyncDelay, n.r.cfg.RetryMin, n.r.cfg.RetryMax)
		n.r.mu.Unlock()
	}
	c.net.Heal()
	c.eventually(2*time.Second, "converged within two verify periods\n"+c.describe(), c.converged)
	if len(held(c.nodes["b"].r)) != 39 {
		t.Fatalf("b holds %d records, want 39", len(held(c.nodes["b"].r)))
	}
	c.checkInvariants()
}

// A restarted node is not ready until it has loaded from its peers; its previous incarnation's
// sessions are tombstoned (they died with it), its beats adopted.
func TestRestartLoadsFromPeers(t *testing.T) {
	c := newCluster(t, nil, "a", "b", "c")
	c.mod = func(cfg *Config) { cfg.LoadTimeout = time.Minute } // for the nodes added later
	members := []string{"a", "b", "c"}
	for i := 0; i < 300; i++ {
		c.nodes["a"].r.Put(KindSession, fmt.Sprint("a", i), []byte("payload"))
	}
	c.nodes["c"].r.Put(KindSession, "c-session", []byte("x"))
	kc := beatKeyOwnedBy(members, "c", 2)
	c.nodes["c"].r.Put(KindBeat, kc, []byte("beat"))
	c.eventually(time.Second, "replicated", c.converged)

	c.stop("c")
	n := c.add("c")
	n.store.autoAdopt = false
	c.setMembers("a", "b", "c")
	c.net.Isolate("c") // peers unreachable: c must not become ready before LoadTimeout
	c.startNode("c")
	c.step(500 * time.Millisecond)
	c.settle()
	if n.r.Ready() {
		t.Fatal("ready before loading")
	}
	c.net.Heal()
	c.eventually(5*time.Second, "c ready", n.r.Ready)
	c.eventually(0, "a's records applied on c", func() bool {
		n.store.mu.Lock()
		defer n.store.mu.Unlock()
		return len(n.store.recs) == 300
	})
	if r, _ := n.r.Get("c-session"); !r.Deleted || r.Owner != "c" {
		t.Fatalf("previous incarnation's session: %v, want tombstoned by c", r)
	}
	c.eventually(0, "previous incarnation's beat adopted", func() bool {
		n.store.mu.Lock()
		defer n.store.mu.Unlock()
		_, adopted := n.store.adopted[kc]
		return adopted
	})
	c.eventually(2*time.Second, "session gone everywhere", func() bool {
		_, a := c.nodes["a"].store.get("c-session")
		_, b := c.nodes["b"].store.get("c-session")
		return !a && !b
	})
	c.checkInvariants()
}

func TestFirstNodeReadyAfterLoadTimeout(t *testing.T) {
	c := newCluster(t, nil, "a")
	if !c.nodes["a"].r.Ready() {
		t.Fatal("single node not ready")
	}
	if err := c.nodes["a"].r.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Orphans: when a member leaves, its beat records are adopted right away by their new HRW owner
// (with the last renewal time) and its sessions removed after OrphanTimeout.
func TestOrphansAndAdoption(t *testing.T) {
	c := newCluster(t, nil, "a", "b", "c")
	members := []string{"a", "b", "c"}
	var beats []string
	for i := 0; i < 30; i++ {
		k := beatKeyOwnedBy(members, "a", 10+i)
		beats = append(beats, k)
		if _, err := c.nodes["a"].r.Put(KindBeat, k, []byte("beat")); err != nil {
			t.Fatal(err)
		}
	}
	c.nodes["a"].r.Put(KindSession, "sa", []byte("session"))
	putAt := c.clk.Now()
	c.eventually(time.Second, "replicated", c.converged)
	c.eventually(3*time.Second, "verify renewed b's copies", func() bool {
		c.nodes["b"].r.mu.Lock()
		defer c.nodes["b"].r.mu.Unlock()
		return c.nodes["b"].r.renewedAt["a"].After(putAt.Add(time.Second))
	})
	c.stop("a")
	leftAt := c.clk.Now()
	c.setMembers("b", "c")
	// Adoption is immediate (no clock advance needed).
	c.eventually(0, "all adopted", func() bool {
		n := 0
		for _, id := range []string{"b", "c"} {
			c.nodes[id].store.mu.Lock()
			n += c.nodes[id].store.adoptCount
			c.nodes[id].store.mu.Unlock()
		}
		return n >= len(beats)
	})
	adopted := 0
	for _, id := range []string{"b", "c"} {
		s := c.nodes[id].store
		s.mu.Lock()
		for _, k := range beats {
			if t0, ok := s.adopted[k]; ok {
				adopted++
				if hrwOwner([]string{"b", "c"}, k) != id {
					t.Errorf("%s adopted %s, owned by %s", id, k, hrwOwner([]string{"b", "c"}, k))
				}
				if !t0.After(putAt) || t0.After(leftAt) {
					t.Errorf("lastRenewed %v not within (put %v, left %v]", t0, putAt, leftAt)
				}
			}
		}
		s.mu.Unlock()
	}
	if adopted != len(beats) {
		t.Fatalf("%d of %d beat records adopted", adopted, len(beats))
	}
	c.eventually(time.Second, "adopted beats re-owned everywhere", func() bool {
		for _, k := range beats {
			for _, id := range []string{"b", "c"} {
				if r, _ := c.nodes[id].r.Get(k); r.Owner != hrwOwner([]string{"b", "c"}, k) {
					return false
				}
			}
		}
		return true
	})
	// Sessions stay until OrphanTimeout.
	c.step(4 * time.Second)
	c.settle()
	if _, ok := c.nodes["b"].store.get("sa"); !ok {
		t.Fatal("session removed before OrphanTimeout")
	}
	c.eventually(2*time.Second, "orphaned session removed", func() bool {
		_, b := c.nodes["b"].store.get("sa")
		_, cc := c.nodes["c"].store.get("sa")
		return !b && !cc
	})
	c.checkInvariants()
}

// A member that left is forgotten once nothing of its is held here and its records'
// tombstones have expired (node IDs come and go with hosts: the tables of departed members must
// not grow with every one). A record of it installed later makes it remembered again, and
// that record is orphaned after OrphanTimeout like the others.
func TestLeftOwnerForgotten(t *testing.T) {
	c := newCluster(t, nil, "a", "b")
	c.nodes["a"].r.Put(KindSession, "sa", []byte("x"))
	c.eventually(time.Second, "replicated", c.converged)
	b := c.nodes["b"]
	c.eventually(3*time.Second, "a verified with b", func() bool {
		b.r.mu.Lock()
		defer b.r.mu.Unlock()
		_, ok := b.r.renewedAt["a"]
		return ok
	})
	c.stop("a")
	c.setMembers("b")
	remembered := func() bool {
		b.r.mu.Lock()
		defer b.r.mu.Unlock()
		_, left := b.r.leftAt["a"]
		_, renewed := b.r.renewedAt["a"]
		return left || renewed
	}
	held := func(key string) bool {
		_, ok := b.store.get(key)
		return ok
	}
	c.eventually(10*time.Second, "orphaned session removed", func() bool { return !held("sa") })
	if !remembered() {
		t.Fatal("a forgotten before its tombstones expired")
	}
	c.eventually(20*time.Second, "a forgotten", func() bool { return !remembered() })

	b.r.mu.Lock()
	installed := b.r.offerLocked(Record{Key: "sb", Owner: "a", Revision: 1, Payload: []byte("late"), Kind: KindSession}, c.clk.Now())
	b.r.mu.Unlock()
	if !installed {
		t.Fatal("a late record of a departed member was refused")
	}
	if !remembered() {
		t.Fatal("a late record of a did not make a remembered again")
	}
	b.r.drain()
	c.eventually(0, "late record stored", func() bool { return held("sb") }) // no fake time passes
	c.step(4 * time.Second)
	c.settle()
	if !held("sb") {
		t.Fatal("late record removed before OrphanTimeout")
	}
	c.eventually(3*time.Second, "late record orphaned", func() bool { return !held("sb") })
	c.checkInvariants()
}

// A node that comes back before OrphanTimeout keeps its sessions; one that comes back after
// (partition healed) gets them back through verify: orphan removals yield to the real owner.
func TestOrphanOwnerReturns(t *testing.T) {
	c := newCluster(t, nil, "a", "b")
	c.nodes["a"].r.Put(KindSession, "sa", []byte("x"))
	c.eventually(time.Second, "replicated", c.converged)
	c.net.Isolate("a")
	c.nodes["b"].mem.Set(Member{ID: "b"})
	c.nodes["a"].mem.Set(Member{ID: "a"})
	c.eventually(7*time.Second, "orphan removed on b", func() bool { _, ok := c.nodes["b"].store.get("sa"); return !ok })
	if r, _ := c.nodes["a"].r.Get("sa"); r.Deleted {
		t.Fatal("owner lost its own live record")
	}
	c.net.Heal()
	c.setMembers("a", "b")
	c.eventually(3*time.Second, "owner's record back on b\n"+c.describe(), func() bool {
		_, ok := c.nodes["b"].store.get("sa")
		return ok && c.converged()
	})
	c.checkInvariants()
}

// On join, the keys whose HRW owner is the new node move to it (about 1/N), and only those.
func TestJoinHandsOverBeats(t *testing.T) {
	c := newCluster(t, nil, "a", "b")
	const keys = 300
	for i := 0; i < keys; i++ {
		k := fmt.Sprintf("10.2.%d.%d:80", i/200, i%200)
		o := c.nodes[hrwOwner([]string{"a", "b"}, k)]
		if _, err := o.r.Put(KindBeat, k, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	c.eventually(time.Second, "replicated", c.converged)
	c.add("c")
	c.setMembers("a", "b", "c")
	c.startNode("c")
	c.waitReady("c")
	c.eventually(2*time.Second, "moved keys owned by c everywhere", func() bool {
		n := 0
		for _, rec := range held(c.nodes["a"].r) {
			if rec[:2] == "c#" {
				n++
			}
		}
		return n > 0 && c.converged()
	})
	moved := 0
	c.nodes["a"].r.Range(func(rec Record) bool {
		want := hrwOwner([]string{"a", "b", "c"}, rec.Key)
		if rec.Owner != want {
			t.Errorf("%s owned by %s, HRW says %s", rec.Key, rec.Owner, want)
		}
		if rec.Owner == "c" {
			moved++
		}
		return true
	})
	if moved < keys/5 || moved > keys/2 {
		t.Fatalf("%d of %d keys moved to the new node, want ~1/3", moved, keys)
	}
	c.nodes["c"].store.mu.Lock()
	adopts := c.nodes["c"].store.adoptCount
	c.nodes["c"].store.mu.Unlock()
	if adopts != moved {
		t.Fatalf("c adopted %d keys, %d moved", adopts, moved)
	}
	c.checkInvariants()
}

func TestConfigValidate(t *testing.T) {
	net := &transport.MemNetwork{}
	tr, _ := net.Node("a")
	defer tr.Close()
	base := DefaultConfig()
	base.NodeID, base.Transport, base.Membership, base.Store = "a", tr, NewStatic(Member{ID: "a"}), newTestStore("a")
	if err := base.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*Config){
		"NodeID":       func(c *Config) { c.NodeID = "" },
		"Transport":    func(c *Config) { c.Transport = nil },
		"Membership":   func(c *Config) { c.Membership = nil },
		"Store":        func(c *Config) { c.Store = nil },
		"RetryMin":     func(c *Config) { c.RetryMin = -1 },
		"RetryMax":     func(c *Config) { c.RetryMax = c.RetryMin / 2 },
		"TombstoneTTL": func(c *Config) { c.TombstoneTTL = c.VerifyInterval },
		"Buckets":      func(c *Config) { c.Buckets = 1<<16 + 1 },
	} {
		cfg := base
		mod(&cfg)
		err := cfg.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && indexOf(s, sub) >= 0)
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func TestCloseIdempotentAndRefuses(t *testing.T) {
	c := newCluster(t, nil, "a")
	r := c.nodes["a"].r
	r.Close()
	r.Close()
	if _, err := r.Put(KindSession, "s", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Put after Close: %v", err)
	}
	if err := r.Start(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Close: %v", err)
	}
}

// TestCloseRemovesHandlers: Close takes distro's handlers off the transport; a peer's message
// is then answered by the transport itself (ErrNoHandler).
func TestCloseRemovesHandlers(t *testing.T) {
	c := newCluster(t, nil, "a", "b")
	c.quiesce()
	ctx := t.Context()
	for _, kind := range []transport.Kind{kindSync, kindVerify, kindRepair, kindSnapshot, kindConsistency} {
		if _, err := c.nodes["b"].tr.Request(ctx, "a", kind, nil); errors.Is(err, transport.ErrNoHandler) {
			t.Fatalf("kind %d before Close: %v, want a distro answer", kind, err)
		}
	}
	c.nodes["a"].r.Close()
	for _, kind := range []transport.Kind{kindSync, kindVerify, kindRepair, kindSnapshot, kindConsistency} {
		if _, err := c.nodes["b"].tr.Request(ctx, "a", kind, nil); !errors.Is(err, transport.ErrNoHandler) {
			t.Fatalf("kind %d after Close: %v, want ErrNoHandler", kind, err)
		}
	}
}

// A session opened while the node is still loading belongs to this incarnation: the load must
// not mistake it for a previous incarnation's record and tombstone it.
func TestPutBeforeReadySurvivesLoad(t *testing.T) {
	c := newCluster(t, nil, "a", "b")
	c.mod = func(cfg *Config) { cfg.LoadTimeout = time.Minute } // for the nodes added later
	n := c.add("c")
	c.setMembers("a", "b", "c")
	c.net.Isolate("c")
	c.startNode("c")
	if _, err := n.r.Put(KindSession, "early", []byte("x")); err != nil {
		t.Fatal(err)
	}
	c.net.Heal()
	c.eventually(5*time.Second, "c ready", n.r.Ready)
	if r, _ := n.r.Get("early"); r.Deleted || r.Revision != rev(n, 1) {
		t.Fatalf("early session after load: %v", r)
	}
	c.eventually(2*time.Second, "converged", c.converged)
	c.checkInvariants()
}

// Changes to several keys due together go to a peer in one message.
func TestSyncBatchesKeys(t *testing.T) {
	c := newCluster(t, func(cfg *Config) {
		cfg.SyncDelay = time.Second
		cfg.VerifyInterval, cfg.TombstoneTTL = time.Hour, 2*time.Hour // no verify traffic
	}, "a", "b")
	c.net.ResetStats()
	for i := 0; i < 30; i++ {
		c.nodes["a"].r.Put(KindSession, fmt.Sprint("s", i), []byte("x"))
	}
	c.eventually(2*time.Second, "30 records on b", func() bool {
		c.nodes["b"].store.mu.Lock()
		defer c.nodes["b"].store.mu.Unlock()
		return len(c.nodes["b"].store.recs) == 30
	})
	if st := c.net.Stats("a", "b"); st.Messages != 1 {
		t.Fatalf("a sent b %d messages for 30 changes, want 1 batch", st.Messages)
	}
}

// A beat record nobody took over (the new owner's store did not Put) is removed with the
// sessions after OrphanTimeout, so a dead owner's records never linger.
func TestUnadoptedBeatRemovedAfterOrphanTimeout(t *testing.T) {
	c := newCluster(t, nil, "a", "b")
	k := beatKeyOwnedBy([]string{"a", "b"}, "a", 77)
	c.nodes["a"].r.Put(KindBeat, k, []byte("x"))
	c.eventually(time.Second, "replicated", c.converged)
	c.nodes["b"].store.mu.Lock()
	c.nodes["b"].store.autoAdopt = false
	c.nodes["b"].store.mu.Unlock()
	c.stop("a")
	c.setMembers("b")
	c.eventually(0, "handed to Adopt", func() bool {
		c.nodes["b"].store.mu.Lock()
		defer c.nodes["b"].store.mu.Unlock()
		_, adopted := c.nodes["b"].store.adopted[k]
		return adopted
	})
	c.eventually(7*time.Second, "unadopted beat removed", func() bool { _, ok := c.nodes["b"].store.get(k); return !ok })
	c.checkInvariants()
}

// Flush sends what waits in the merge window at once, without the clock
// moving, and returns once it is sent; to an unreachable peer it returns
// after the first failed attempt.
func TestFlush(t *testing.T) {
	c := newCluster(t, func(cfg *Config) { cfg.SyncDelay = time.Hour }, "a", "b")
	a := c.nodes["a"]
	if _, err := a.r.Put(KindSession, "s", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.r.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if r, ok := c.nodes["b"].store.get("s"); !ok || r.Revision != rev(a, 1) {
		t.Fatalf("after Flush, b holds %v %v", r, ok)
	}
	c.net.Partition("a", "b")
	if _, err := a.r.Put(KindSession, "s", []byte("v2")); err != nil {
		t.Fatal(err)
	}
	if err := a.r.Flush(ctx); err != nil {
		t.Fatalf("Flush to an unreachable peer: %v", err)
	}
	c.net.Heal()
}

// TestConfigValidateEvery: Validate reports every rule a config breaks, in one error.
func TestConfigValidateEvery(t *testing.T) {
	cfg := DefaultConfig() // no NodeID, Transport, Membership or Store
	cfg.RetryMin, cfg.Buckets = -1, -1
	err := cfg.Validate()
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Validate = %v, want ErrInvalidConfig", err)
	}
	for _, field := range []string{"NodeID", "Transport", "Membership", "Store", "RetryMin", "Buckets"} {
		if !contains(err.Error(), field) {
			t.Errorf("Validate = %v, does not name %s", err, field)
		}
	}
}

// TestConfigZeroIsDefault: a Config with only its required fields is valid, and each zero
// field takes its default; a negative SyncDelay turns the merge window off.
func TestConfigZeroIsDefault(t *testing.T) {
	net := &transport.MemNetwork{}
	tr, err := net.Node("a")
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	cfg := Config{NodeID: "a", Transport: tr, Membership: NewStatic(Member{ID: "a"}), Store: newTestStore("a")}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate of the zero config with its required fields: %v", err)
	}
	d := cfg.withDefaults()
	want := DefaultConfig()
	want.NodeID, want.Transport, want.Membership, want.Store = cfg.NodeID, cfg.Transport, cfg.Membership, cfg.Store
	if d != want {
		t.Fatalf("zero fields: got %+v, want the defaults %+v", d, want)
	}
	// Defaults that follow another field keep the rules between them.
	slow := cfg
	slow.VerifyInterval, slow.RetryMin = time.Minute, time.Minute
	if err := slow.Validate(); err != nil {
		t.Fatalf("TombstoneTTL and RetryMax left zero beside a long VerifyInterval and RetryMin: %v", err)
	}
	off := cfg
	off.SyncDelay = NoSyncDelay
	if err := off.Validate(); err != nil {
		t.Fatalf("NoSyncDelay: %v", err)
	}
	if got := off.withDefaults().SyncDelay; got != NoSyncDelay {
		t.Fatalf("NoSyncDelay became %v", got)
	}
}
