package distro

import (
	"context"
	"testing"
	"time"

	"github.com/muster-io/muster/model"
)

// Tests of Store.Apply's contract for deletions: a Deleted record handed to the Store carries
// the payload of the live version it removes from the node's table (the registry finds what
// to remove from it, without an index by key), on every path a deletion reaches the Store; the
// table and the wire keep tombstones without a payload.

// lastApplied returns the last record the store was handed for key by Apply.
func (s *testStore) lastApplied(key string) (Record, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	recs := s.applied[key]
	if len(recs) == 0 {
		return Record{}, 0
	}
	return recs[len(recs)-1], len(recs)
}

// wantRemoval fails unless the last Apply of key on n was a deletion carrying payload (nil:
// a nil one).
func wantRemoval(t *testing.T, n *node, key string, payload []byte) {
	t.Helper()
	rec, _ := n.store.lastApplied(key)
	if !rec.Deleted || string(rec.Payload) != string(payload) || (rec.Payload == nil) != (payload == nil) {
		t.Fatalf("%s: last Apply of %s is %v with payload %q (nil %v), want a deletion carrying %q (nil %v)",
			n.id, key, rec, rec.Payload, rec.Payload == nil, payload, payload == nil)
	}
	if held, ok := n.r.Get(key); ok && held.Payload != nil {
		t.Fatalf("%s: the table holds %v with payload %q: tombstones and orphan markers carry none", n.id, held, held.Payload)
	}
}

// A tombstone received in a sync: the owner deleted the record.
func TestRemovalCarriesPayloadSync(t *testing.T) {
	c := newCluster(t, nil, "a", "b")
	a, b := c.nodes["a"], c.nodes["b"]
	a.r.Put(KindSession, "s1", []byte("v1"))
	a.r.Put(KindSession, "s2", nil) // a live record with a nil payload
	c.eventually(time.Second, "s1 and s2 on b", func() bool {
		_, ok1 := b.store.get("s1")
		_, ok2 := b.store.get("s2")
		return ok1 && ok2
	})
	a.r.Put(KindSession, "s1", []byte("v2"))
	c.eventually(time.Second, "s1#2 on b", func() bool {
		r, _ := b.store.get("s1")
		return string(r.Payload) == "v2"
	})
	a.r.Delete("s1")
	a.r.Delete("s2")
	c.eventually(time.Second, "s1 and s2 gone from b", func() bool {
		_, ok1 := b.store.get("s1")
		_, ok2 := b.store.get("s2")
		return !ok1 && !ok2
	})
	wantRemoval(t, b, "s1", []byte("v2")) // the version it removes, not the first
	wantRemoval(t, b, "s2", nil)          // that version's payload was nil
	if got, _ := b.r.Get("s1"); !got.Deleted || got.Payload != nil {
		t.Fatalf("b holds %v (payload %q), want the tombstone as it came, without a payload", got, got.Payload)
	}
	c.checkInvariants()
}

// offerLocked hands the Store a deletion only over a live version, and then with its payload;
// over nothing, a tombstone or an orphan marker the Store is told nothing.
func TestRemovalCarriesPayloadOffer(t *testing.T) {
	c := newCluster(t, nil)
	n := c.add("b")
	r := n.r
	now := c.clk.Now()
	offer := func(rec Record) {
		t.Helper()
		r.mu.Lock()
		ok := r.offerLocked(rec, now)
		r.mu.Unlock()
		r.drain()
		if !ok {
			t.Fatalf("%v refused", rec)
		}
	}
	live := func(rev uint64, payload string) Record {
		return Record{Key: "k", Kind: KindSession, Owner: "a", Revision: rev, Payload: []byte(payload)}
	}
	tomb := func(rev uint64) Record {
		return Record{Key: "k", Kind: KindSession, Owner: "a", Revision: rev, Deleted: true}
	}

	offer(tomb(1)) // over nothing
	offer(tomb(2)) // over a tombstone
	if _, n := n.store.lastApplied("k"); n != 0 {
		t.Fatalf("%d Applies of tombstones over no live version, want none", n)
	}
	offer(live(3, "p3"))
	offer(tomb(4))
	wantRemoval(t, n, "k", []byte("p3"))

	// Over an orphan marker: the Store was told of the removal when it was made (with the
	// orphaned payload, see TestRemovalCarriesPayloadDrop), and is told nothing more.
	offer(live(5, "p5"))
	r.mu.Lock()
	r.emitLocked(storeEvent{op: evApply, rec: r.tab.orphan(r.tab.get("k"), now)})
	r.mu.Unlock()
	r.drain()
	wantRemoval(t, n, "k", []byte("p5"))
	_, before := n.store.lastApplied("k")
	offer(tomb(6))
	if _, after := n.store.lastApplied("k"); after != before {
		t.Fatalf("a tombstone over an orphan marker was handed to the Store")
	}
}

// A deletion queued for the Store and overtaken, before its delivery, by a newer deletion of the
// same key (a second message handled before the first one's drain) is still delivered: the
// newer one is not queued (it replaced no live version), and, dropped as stale, the first left
// the Store holding the live version for good. The first may be the owner's tombstone or an
// orphan removal.
func TestRemovalOvertakenByRemoval(t *testing.T) {
	for _, first := range []string{"tombstone", "orphan removal"} {
		t.Run(first, func(t *testing.T) {
			c := newCluster(t, nil)
			n := c.add("b")
			r := n.r
			now := c.clk.Now()
			r.mu.Lock()
			r.offerLocked(Record{Key: "k", Kind: KindSession, Owner: "a", Revision: 1, Payload: []byte("p1")}, now)
			r.mu.Unlock()
			r.drain()
			if _, ok := n.store.get("k"); !ok {
				t.Fatal("k not applied")
			}
			r.mu.Lock()
			if first == "tombstone" {
				r.offerLocked(Record{Key: "k", Kind: KindSession, Owner: "a", Revision: 2, Deleted: true}, now)
			} else {
				r.emitLocked(storeEvent{op: evApply, rec: r.tab.orphan(r.tab.get("k"), now)})
			}
			r.offerLocked(Record{Key: "k", Kind: KindSession, Owner: "a", Revision: 3, Deleted: true}, now)
			r.mu.Unlock()
			r.drain()
			if got, ok := n.store.get("k"); ok {
				t.Fatalf("the Store still holds %v after the key was deleted (table: %v)", got, r.tab.get("k").record())
			}
			wantRemoval(t, n, "k", []byte("p1"))
			if _, applies := n.store.lastApplied("k"); applies != 2 {
				t.Fatalf("%d Applies of k, want 2 (the record, and the first deletion)", applies)
			}
		})
	}
}

// The owner says in a repair that it no longer holds a record (verify): the live copy is
// dropped, and the Store is handed the dropped version's payload. A drop of a version held as a
// tombstone tells the Store nothing.
func TestRemovalCarriesPayloadDrop(t *testing.T) {
	c := newCluster(t, nil, "a", "b")
	a, b := c.nodes["a"], c.nodes["b"]
	live, _ := a.r.Put(KindSession, "s", []byte("gone"))
	a.r.Put(KindSession, "t", []byte("x"))
	c.eventually(time.Second, "s and t on b", func() bool {
		_, ok1 := b.store.get("s")
		_, ok2 := b.store.get("t")
		return ok1 && ok2
	})
	del, _ := a.r.Delete("t")
	c.eventually(time.Second, "t gone from b", func() bool { _, ok := b.store.get("t"); return !ok })
	_, applies := b.store.lastApplied("t")
	body, err := model.Marshal(repairMsg{Drop: versionList{{Key: "s", Rev: live.Revision}, {Key: "t", Rev: del.Revision}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.r.handleRepair(context.Background(), "a", body); err != nil {
		t.Fatal(err)
	}
	wantRemoval(t, b, "s", []byte("gone"))
	if _, n := b.store.lastApplied("t"); n != applies {
		t.Fatal("a drop of a tombstone was handed to the Store")
	}
}

// The owner left: after OrphanTimeout its records are removed, each handed to the Store with
// its payload.
func TestRemovalCarriesPayloadOrphan(t *testing.T) {
	c := newCluster(t, nil, "a", "b", "c")
	c.nodes["c"].r.Put(KindSession, "cs", []byte("orphaned"))
	c.eventually(time.Second, "replicated", c.converged)
	c.stop("c")
	c.setMembers("a", "b")
	b := c.nodes["b"]
	c.eventually(3*testConfig().OrphanTimeout, "orphan removed on b", func() bool {
		_, ok := b.store.get("cs")
		return !ok
	})
	wantRemoval(t, b, "cs", []byte("orphaned"))
}

// During the startup load, a record the Store was given (a sync received while loading) that a
// loaded tombstone replaces is removed from it (evRemove), with its payload.
func TestRemovalCarriesPayloadLoad(t *testing.T) {
	c := newCluster(t, nil)
	n := c.add("b")
	r := n.r
	now := c.clk.Now()
	synced := Record{Key: "s/k", Kind: KindSession, Owner: "a", Revision: 1, Payload: []byte("synced")}
	loaded := Record{Key: "s/k", Kind: KindSession, Owner: "a", Revision: 2, Deleted: true}
	r.mu.Lock()
	r.offerLocked(synced, now)
	r.mu.Unlock()
	r.drain()
	r.mu.Lock()
	r.offerLoadedLocked(loaded, keyHash(loaded.Key), now)
	r.mu.Unlock()
	r.drain()
	wantRemoval(t, n, "s/k", []byte("synced"))
}
