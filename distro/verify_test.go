package distro

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// plant installs rec on n directly, as if received earlier, and tells its store.
func plant(n *node, rec Record) {
	n.r.mu.Lock()
	n.r.tab.install(rec, n.r.clk.Now())
	n.r.mu.Unlock()
	n.store.Apply(rec)
}

// Verify drops copies of records their owner no longer holds (a dead incarnation's leftovers).
func TestVerifyDropsRecordsTheOwnerLacks(t *testing.T) {
	c := newCluster(t, nil, "a", "b")
	plant(c.nodes["b"], Record{Key: "ghost", Kind: KindSession, Owner: "a", Revision: 4, Payload: []byte("old")})
	c.nodes["a"].r.Put(KindSession, "real", []byte("x"))
	c.eventually(2*time.Second, "ghost dropped on b\n"+c.describe(), func() bool {
		_, ok := c.nodes["b"].store.get("ghost")
		return !ok && c.converged()
	})
	if _, ok := c.nodes["b"].r.Get("ghost"); ok {
		t.Fatal("b still holds the ghost")
	}
	c.checkInvariants()
}

// An owner that lost its state (restarted with no peer reachable) and writes a key that peers
// hold at a higher revision moves past it when verify shows it, instead of being refused forever.
func TestVerifyBumpsPastNewerCopies(t *testing.T) {
	c := newCluster(t, nil, "a", "b")
	a := c.nodes["a"]
	prev := rev(a, 9) // a previous incarnation's clock was ahead (or this one's was set back)
	plant(c.nodes["b"], Record{Key: "s", Kind: KindSession, Owner: "a", Revision: prev, Payload: []byte("previous life")})
	rec, _ := a.r.Put(KindSession, "s", []byte("new life"))
	if rec.Revision != rev(a, 1) {
		t.Fatalf("revision %d, want the epoch %d", rec.Revision, a.r.epoch)
	}
	c.eventually(2*time.Second, "b holds a's current state\n"+c.describe(), func() bool {
		r, ok := c.nodes["b"].store.get("s")
		return ok && string(r.Payload) == "new life" && c.converged()
	})
	if r, _ := a.r.Get("s"); r.Revision != prev+1 {
		t.Fatalf("a's record at revision %d, want %d", r.Revision, prev+1)
	}
	c.checkInvariants()
}

// Asymmetric partition (Nacos #5020): b and c cannot talk, both can talk to a. Each side's
// writes reach a at once and the other side after the heal.
func TestAsymmetricPartition(t *testing.T) {
	c := newCluster(t, nil, "a", "b", "c")
	c.net.Partition("b", "c")
	for i := 0; i < 10; i++ {
		c.nodes["b"].r.Put(KindSession, fmt.Sprint("b", i), []byte("x"))
		c.nodes["c"].r.Put(KindSession, fmt.Sprint("c", i), []byte("x"))
	}
	c.eventually(time.Second, "a holds both sides' writes", func() bool { return len(held(c.nodes["a"].r)) == 20 })
	if n := len(held(c.nodes["b"].r)); n != 10 {
		t.Fatalf("b holds %d records through the partition: a relayed (echo)", n)
	}
	c.net.Heal()
	c.eventually(2*time.Second, "converged after the heal", c.converged)
	c.checkInvariants()
}

// Two nodes restarting together (Nacos #8436): neither serves its half-loaded state to the
// other; both load the survivor's records.
func TestTwoNodesRestartTogether(t *testing.T) {
	c := newCluster(t, nil, "a", "b", "c")
	c.mod = func(cfg *Config) { cfg.LoadTimeout = time.Minute } // for the nodes added later
	for i := 0; i < 100; i++ {
		c.nodes["a"].r.Put(KindSession, fmt.Sprint("a", i), []byte("x"))
	}
	c.eventually(time.Second, "replicated", c.converged)
	c.stop("b")
	c.stop("c")
	c.add("b")
	c.add("c")
	c.setMembers("a", "b", "c")
	c.net.Isolate("a") // b and c only see each other: neither may become ready empty-handed from the other
	c.startNode("b")
	c.startNode("c")
	c.step(500 * time.Millisecond)
	c.settle()
	if c.nodes["b"].r.Ready() || c.nodes["c"].r.Ready() {
		t.Fatal("ready without the survivor's data")
	}
	c.net.Heal()
	c.waitReady("b", "c")
	c.eventually(2*time.Second, "b and c hold a's records", func() bool {
		return len(held(c.nodes["b"].r)) == 100 && len(held(c.nodes["c"].r)) == 100 && c.converged()
	})
	c.checkInvariants()
}

// Both sides of a partition write the same beat key (each thinks it owns it). After the heal the
// HRW owner ends up owning the newest state everywhere, whichever side wrote the higher revision.
func TestPartitionEraBeatWrites(t *testing.T) {
	c := newCluster(t, nil, "a", "b")
	both := []string{"a", "b"}
	for i, bWins := range []bool{false, true} {
		k := beatKeyOwnedBy(both, "a", 90+i)
		c.nodes["a"].r.Put(KindBeat, k, []byte("v1"))
		c.eventually(time.Second, "replicated", c.converged)
		c.net.Isolate("a")
		c.nodes["a"].mem.Set()
		c.nodes["b"].mem.Set()
		c.eventually(time.Second, "b adopted "+k, func() bool { r, _ := c.nodes["b"].r.Get(k); return r.Owner == "b" })
		writer, other := "a", "b"
		if bWins {
			writer, other = "b", "a"
		}
		for j := 0; j < 3; j++ { // the winning side writes more
			c.nodes[writer].store.noteOwn(c.nodes[writer].r.Put(KindBeat, k, []byte("from "+writer)))
		}
		c.nodes[other].store.noteOwn(c.nodes[other].r.Put(KindBeat, k, []byte("from "+other)))
		c.net.Heal()
		c.setMembers(both...)
		c.eventually(3*time.Second, "converged with a owning "+k+"\n"+c.describe(), func() bool {
			ra, _ := c.nodes["a"].r.Get(k)
			rb, _ := c.nodes["b"].r.Get(k)
			return ra.Owner == "a" && ra.sameVersion(rb) && c.converged()
		})
	}
	c.checkInvariants()
}

// Issue 27.1: two replicas holding one version with different payloads (what an owner that
// restarted without its state writes if it reuses a version) looked the same to verify: the
// digest hashed key, revision and deletion only. The payload's checksum is in the digest now:
// Compare names the key a conflict, and the owner's verify moves past the version, so the
// replica converges to the owner's payload.
func TestVerifyRepairsOneVersionWithTwoPayloads(t *testing.T) {
	c := newCluster(t, nil, "a", "b", "c")
	a, b, cn := c.nodes["a"], c.nodes["b"], c.nodes["c"]
	rec, err := a.r.Put(KindSession, "s", []byte("current"))
	if err != nil {
		t.Fatal(err)
	}
	c.eventually(time.Second, "s on every node", func() bool {
		r, ok := cn.store.get("s")
		return ok && r.sameVersion(rec) && c.converged()
	})
	other := rec
	other.Payload = []byte("a previous incarnation's")
	plant(cn, other) // the same version, another state

	rep := mustCompare(t, b, "c")
	if got := diffsOf(rep); len(got) != 1 || got["s"] != DiffConflict || rep.Conflicts != 1 {
		t.Fatalf("b vs c with one version in two states: %+v, want s a conflict", rep)
	}
	c.eventually(3*testConfig().VerifyInterval, "c holds a's payload\n"+c.describe(), func() bool {
		r, ok := cn.store.get("s")
		return ok && string(r.Payload) == "current" && c.converged()
	})
	now, _ := cn.r.Get("s")
	if !now.Newer(rec) || now.Owner != "a" || string(now.Payload) != "current" {
		t.Fatalf("c holds %v (%q), want a version of a's past %v with its payload", now, now.Payload, rec)
	}
	if rep := mustCompare(t, b, "c"); !rep.Consistent() {
		t.Fatalf("after the repair: %+v", rep)
	}
	if n := a.r.Stats().VersionConflicts; n != 1 {
		t.Fatalf("a counted %d version conflicts, want 1", n)
	}
	c.checkInvariants()
}

// plantOwn installs rec on its owner n as if n had written it and its syncs had been lost.
func plantOwn(n *node, rec Record) {
	n.r.mu.Lock()
	n.r.tab.install(rec, n.r.clk.Now())
	n.r.tab.get(rec.Key).local = true
	n.r.mu.Unlock()
	n.store.noteOwn(rec, nil)
}

// A live copy of b's record on c, which b no longer holds because a's newer version replaced
// it there, is repaired whoever is the key's HRW owner: by b, which drops it (it is the only
// writer of its version), unless what replaced it is a live record its owner still holds.
//
// Seed 7401411 reached the first case: n2 (b) wrote the beat, n1 (a), alone behind a partition,
// adopted and deleted it, and n4 (c) was cut off when n1's verify brought the tombstone to the
// others after the heal, nine seconds later. n1's tombstone then expired on n1 (its TTL ran from
// its write) long before the copies on n2 and n3 (theirs ran from their receipt). n2 left n4's
// live copy to n1's verify ("held, but owned by another node"); n1, holding nothing, saw equal
// digests; and n4's copy, owned by a live member, was never orphaned. It stayed live until n2's
// copy of the tombstone expired too, a TombstoneTTL after the faults stopped.
func TestVerifyRepairsACopyItsWriterNoLongerHolds(t *testing.T) {
	all := []string{"a", "b", "c", "d"}
	for i, tc := range []struct {
		name string
		hrw  string // the key's HRW owner
		// b and d hold a's record of the key at b's version + delta, live or a tombstone; a
		// holds it too, or forgot it (an expired tombstone)
		delta  int
		live   bool // then c ends with a's record, never having seen the key deleted
		aHolds bool
	}{
		{name: "a's tombstone, forgotten by a, b the HRW owner (seed 7401411)", hrw: "b", delta: 1},
		{name: "a's tombstone, forgotten by a, a the HRW owner", hrw: "a", delta: 1},
		{name: "a's tombstone, forgotten by a, d the HRW owner", hrw: "d", delta: 1},
		{name: "a's older tombstone, held by a, d the HRW owner", hrw: "d", delta: -1, aHolds: true},
		{name: "a's newer live record, held by a, a the HRW owner", hrw: "a", delta: 1, live: true, aHolds: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, nil, all...)
			a, b, cn := c.nodes["a"], c.nodes["b"], c.nodes["c"]
			k := beatKeyOwnedBy(all, tc.hrw, 70+i)
			r := rev(b, 6)
			plant(cn, Record{Key: k, Kind: KindBeat, Owner: "b", Revision: r, Payload: []byte("b's")})
			aRec := Record{Key: k, Kind: KindBeat, Owner: "a", Revision: uint64(int64(r) + int64(tc.delta)), Deleted: !tc.live}
			if tc.live {
				aRec.Payload = []byte("a's")
			}
			plant(b, aRec)
			plant(c.nodes["d"], aRec)
			if tc.aHolds {
				plantOwn(a, aRec)
			} else {
				a.r.mu.Lock()
				a.r.tab.forgot = max(a.r.tab.forgot, aRec.Revision) // its tombstone expired here
				a.r.mu.Unlock()
			}

			cfg := testConfig()
			c.eventually(2*cfg.VerifyInterval+cfg.RetryMax+cfg.SyncDelay, "c's copy of b's version repaired\n"+c.describe(), func() bool {
				got, ok := cn.r.Get(k)
				if tc.live {
					return ok && got.sameVersion(aRec) && c.converged()
				}
				return (!ok || got.Deleted) && c.converged()
			})
			if got, _ := b.r.Get(k); !got.sameVersion(aRec) {
				t.Fatalf("b holds %v, want a's %v still: the repair came from its expiry", got, aRec)
			}
			if tc.live {
				// Left to a, which holds its record: c went from b's version to a's, with no
				// deletion in between (a drop would have shown its Store the instance gone).
				cn.store.mu.Lock()
				applied := slices.Clone(cn.store.applied[k])
				cn.store.mu.Unlock()
				for _, rec := range applied {
					if rec.Deleted {
						t.Fatalf("c's Store saw %v deleted on its way to a's record: %v", k, applied)
					}
				}
			}
			c.checkInvariants()
		})
	}
}

// A live beat record its writer still holds as its own, of a key HRW no longer assigns to it, at
// a version older than a deletion the HRW owner holds of another owner's, is deleted everywhere:
// the HRW owner, refusing it, takes the deletion over as its own tombstone.
//
// Seed 7700089 reached it: n2, alone behind a partition, adopted the beat and deleted it
// (n2#e+2); after the heal n1, its HRW owner, moved past that (n1#e+3, which replaced n2's
// tombstone on n2) and left; n3 adopted its older copy (n3#e+1); n1 restarted and loaded n2's
// tombstone from n4, and HRW assigned the key to n1 again. n3 sent its record to n1 at every
// verify round, and n1 refused it every time; nothing showed n3 the tombstone (its verify hears
// only of its own records and of the keys HRW assigns to it), and n2, which no longer held its
// tombstone, never sent it. The record stayed live on n3, and on n4 once n4's copy of the
// tombstone expired, until the tombstone had expired everywhere.
func TestHRWOwnerTakesOverADeletionALiveWriterMissed(t *testing.T) {
	all := []string{"a", "b", "c"}
	c := newCluster(t, nil, all...)
	a, cn := c.nodes["a"], c.nodes["c"]
	k := beatKeyOwnedBy(all, "a", 80)
	r := rev(cn, 3)
	plantOwn(cn, Record{Key: k, Kind: KindBeat, Owner: "c", Revision: r, Payload: []byte("c's")})
	gone := Record{Key: k, Kind: KindBeat, Owner: "b", Revision: r + 1, Deleted: true} // b forgot it
	plant(a, gone)
	cfg := testConfig()
	c.eventually(3*cfg.VerifyInterval, "the key deleted everywhere\n"+c.describe(), func() bool {
		for _, id := range all {
			if got, ok := c.nodes[id].r.Get(k); ok && !got.Deleted {
				return false
			}
		}
		return c.converged()
	})
	got, _ := cn.r.Get(k)
	if got.Owner != "a" || !got.Deleted || !got.Newer(gone) {
		t.Fatalf("c holds %v, want a's tombstone past %v", got, gone)
	}
	c.checkInvariants()
}
