package distro

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
	"unsafe"
	"weak"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestNewer(t *testing.T) {
	for _, tc := range []struct {
		a, b Record
		want bool
	}{
		{Record{Revision: 2, Owner: "a"}, Record{Revision: 1, Owner: "b"}, true},
		{Record{Revision: 1, Owner: "b"}, Record{Revision: 2, Owner: "a"}, false},
		{Record{Revision: 3, Owner: "b"}, Record{Revision: 3, Owner: "a"}, true},
		{Record{Revision: 3, Owner: "a"}, Record{Revision: 3, Owner: "b"}, false},
		{Record{Revision: 3, Owner: "a"}, Record{Revision: 3, Owner: "a"}, false},
	} {
		if got := tc.a.Newer(tc.b); got != tc.want {
			t.Errorf("%v.Newer(%v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestTableAccepts(t *testing.T) {
	rec := func(rev uint64, owner string, del bool) Record {
		return Record{Key: "k", Kind: KindSession, Owner: owner, Revision: rev, Deleted: del}
	}
	for _, tc := range []struct {
		name   string
		held   Record
		orphan bool
		offer  Record
		want   bool
	}{
		{"newer revision", rec(1, "a", false), false, rec(2, "a", false), true},
		{"duplicate", rec(2, "a", false), false, rec(2, "a", false), false},
		{"older (reorder, late retry)", rec(3, "a", false), false, rec(2, "a", false), false},
		{"stale update after delete", rec(3, "a", true), false, rec(2, "a", false), false},
		{"same revision, higher owner wins", rec(3, "a", false), false, rec(3, "b", false), true},
		{"same revision, lower owner loses", rec(3, "b", false), false, rec(3, "a", false), false},
		{"owner's same version over an orphan removal", rec(3, "a", false), true, rec(3, "a", false), true},
		{"older than an orphan removal", rec(3, "a", false), true, rec(2, "a", false), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := newTable(8)
			tab.install(tc.held, t0)
			if tc.orphan {
				tab.orphan(tab.get("k"), t0)
			}
			if got := tab.accepts(tc.offer); got != tc.want {
				t.Fatalf("accepts(%v) over %v (orphan %v) = %v, want %v", tc.offer, tc.held, tc.orphan, got, tc.want)
			}
		})
	}
}

// The bucket hashes are maintained incrementally and equal a from-scratch computation, on
// both sides, whatever the order of installs.
func TestDigestIncremental(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	a, b := newTable(16), newTable(16)
	var recs []Record
	for i := 0; i < 500; i++ {
		key := fmt.Sprintf("k%d", rnd.IntN(200))
		e := a.get(key)
		rev := uint64(1)
		if e != nil {
			rev = e.rev + 1
		}
		rec := Record{Key: key, Kind: KindBeat, Owner: "n1", Revision: rev, Deleted: rnd.IntN(4) == 0}
		a.install(rec, t0)
		recs = append(recs, rec)
	}
	// b receives the same records shuffled, with version checks.
	rnd.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
	for _, rec := range recs {
		if b.accepts(rec) {
			b.install(rec, t0)
		}
	}
	da, db := a.digest("n1"), b.digest("n1")
	for i := range da {
		if da[i] != db[i] {
			t.Fatalf("bucket %d differs: %x vs %x", i, da[i], db[i])
		}
	}
	fresh := make([]uint64, 16)
	a.all(func(e *entry) bool {
		kh := keyHash(e.key)
		fresh[bucketOf(kh, 16)] += versionHash(kh, e.rev, e.deleted, payloadSum(e.payload()))
		return true
	})
	for i := range fresh {
		if fresh[i] != da[i] {
			t.Fatalf("bucket %d: incremental %x, from scratch %x", i, da[i], fresh[i])
		}
	}
	// One changed record changes exactly one bucket.
	k := "k7"
	e := a.get(k)
	before := append([]uint64(nil), da...)
	a.install(Record{Key: k, Kind: KindBeat, Owner: "n1", Revision: e.rev + 1}, t0)
	diff := 0
	for i, s := range a.digest("n1") {
		if s != before[i] {
			diff++
		}
	}
	if diff != 1 {
		t.Fatalf("one change altered %d buckets", diff)
	}
}

// An owner whose last record went (expired tombstone, orphan removal) leaves the table's
// owner set: node IDs come and go with hosts, and every digest walks the set.
func TestTableOwnersPruned(t *testing.T) {
	tab := newTable(4)
	tab.install(Record{Key: "a", Kind: KindSession, Owner: "gone", Revision: 1}, t0)
	tab.install(Record{Key: "b", Kind: KindSession, Owner: "stays", Revision: 1}, t0)
	tab.install(Record{Key: "a", Kind: KindSession, Owner: "gone", Revision: 2, Deleted: true}, t0)
	if len(tab.owners) != 2 {
		t.Fatalf("owners = %d, want 2", len(tab.owners))
	}
	if n := tab.expire(t0); n != 1 {
		t.Fatalf("expire removed %d, want 1", n)
	}
	if _, ok := tab.owners["gone"]; ok || len(tab.owners) != 1 {
		t.Fatalf("owners after the last record of gone expired: %v", tab.owners)
	}
	if tab.digest("gone") != nil {
		t.Fatal("a pruned owner still has a digest")
	}
	tab.install(Record{Key: "c", Kind: KindSession, Owner: "gone", Revision: 1}, t0) // it comes back
	if d := tab.digest("gone"); d == nil || tab.owners["gone"].held != 1 {
		t.Fatalf("returning owner: digest %v", d)
	}
	// A new version of an owner's only record keeps the owner's aggregates: only the entry is
	// allocated (the bucket sums are Buckets × 8 bytes).
	big := newTable(1024)
	rev := uint64(0)
	install := func() { rev++; big.install(Record{Key: "a", Kind: KindBeat, Owner: "n2", Revision: rev}, t0) }
	install()
	if n := testing.AllocsPerRun(100, install); n > 1 {
		t.Fatalf("a new version of an owner's only record: %v allocations, want 1", n)
	}
}

func TestTableExpire(t *testing.T) {
	tab := newTable(4)
	tab.install(Record{Key: "a", Kind: KindSession, Owner: "n", Revision: 2, Deleted: true}, t0)
	tab.install(Record{Key: "b", Kind: KindSession, Owner: "n", Revision: 1, Deleted: true}, t0.Add(time.Second))
	tab.install(Record{Key: "b", Kind: KindSession, Owner: "n", Revision: 2}, t0.Add(2*time.Second)) // b revived by its owner
	if n := tab.expire(t0); n != 1 || tab.get("a") != nil {
		t.Fatalf("expire removed %d, a = %v", n, tab.get("a"))
	}
	if n := tab.expire(t0.Add(time.Hour)); n != 0 || tab.get("b") == nil {
		t.Fatalf("expire removed the live b (%d)", n)
	}
}

// Issue 27.2: the expiry of a tombstone matched its key and revision only, so a tombstone of
// owner a at revision 2 expired whatever held that key at revision 2 later: b's tombstone or
// orphan marker of revision 2 (b wins the tie-break: a beat b adopted while views differed), or
// the same version orphaned again. Each went at a's TTL, not its own, and the stale record it
// was there to refuse came back (a deleted instance resurrected, an owner rolled back).
func TestTableExpireMatchesTheQueuedState(t *testing.T) {
	rec := func(owner string, rev uint64, del bool) Record {
		r := Record{Key: "k", Kind: KindBeat, Owner: owner, Revision: rev, Deleted: del}
		if !del {
			r.Payload = []byte(owner)
		}
		return r
	}
	for _, tc := range []struct {
		name  string
		setup func(tab *table) // the queued state at t0, then a later one at t0+5s
		stale Record           // what the later state must still refuse after t0's item expired
	}{
		{"another owner's tombstone of the same revision", func(tab *table) {
			tab.install(rec("a", 2, true), t0)
			tab.install(rec("b", 2, true), t0.Add(5*time.Second))
		}, rec("b", 1, false)},
		{"another owner's orphan marker of the same revision", func(tab *table) {
			tab.install(rec("a", 2, true), t0)
			tab.install(rec("b", 2, false), t0.Add(time.Second))
			tab.orphan(tab.get("k"), t0.Add(5*time.Second))
		}, rec("a", 1, false)},
		{"the same version orphaned again", func(tab *table) {
			tab.install(rec("b", 2, false), t0.Add(-time.Second))
			tab.orphan(tab.get("k"), t0)
			tab.install(rec("b", 2, false), t0.Add(time.Second)) // b re-sent it: it yields
			tab.orphan(tab.get("k"), t0.Add(5*time.Second))
		}, rec("b", 1, false)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := newTable(4)
			tc.setup(tab)
			if tab.accepts(tc.stale) {
				t.Fatalf("before any expiry, %v is accepted", tc.stale)
			}
			if n := tab.expire(t0.Add(time.Second)); n != 0 {
				t.Fatalf("the item of t0 expired %d entries: the state made at t0+5s went early (%v)", n, tab.get("k"))
			}
			if tab.accepts(tc.stale) {
				t.Fatalf("after the item of t0 expired, %v is accepted over what was made at t0+5s", tc.stale)
			}
			if n := tab.expire(t0.Add(5 * time.Second)); n != 1 || tab.get("k") != nil {
				t.Fatalf("at its own time, expire removed %d (left %v), want the entry gone", n, tab.get("k"))
			}
		})
	}
}

func TestHRWMovement(t *testing.T) {
	const keys = 20000
	members := []string{"n1", "n2", "n3", "n4", "n5"}
	owner := make([]string, keys)
	for i := range owner {
		owner[i] = hrwOwner(members, fmt.Sprintf("10.1.%d.%d:8080", i/256, i%256))
	}
	// Join: only keys moving to the new member move, about 1/6 of them.
	joined := append(members[:5:5], "n6")
	moved := 0
	for i := range owner {
		o := hrwOwner(joined, fmt.Sprintf("10.1.%d.%d:8080", i/256, i%256))
		if o != owner[i] {
			moved++
			if o != "n6" {
				t.Fatalf("key %d moved from %s to %s on n6's join", i, owner[i], o)
			}
		}
	}
	if f := float64(moved) / keys; f < 0.14 || f > 0.19 {
		t.Fatalf("join moved %.3f of the keys, want ~1/6", f)
	}
	// Leave: only the leaver's keys move, about 1/5.
	left := []string{"n1", "n2", "n4", "n5"}
	moved = 0
	for i := range owner {
		o := hrwOwner(left, fmt.Sprintf("10.1.%d.%d:8080", i/256, i%256))
		if o != owner[i] {
			moved++
			if owner[i] != "n3" {
				t.Fatalf("key %d of %s moved to %s when n3 left", i, owner[i], o)
			}
		}
	}
	if f := float64(moved) / keys; f < 0.17 || f > 0.23 {
		t.Fatalf("leave moved %.3f of the keys, want ~1/5", f)
	}
	// A modulo hash (Nacos) would have moved most keys; HRW is also independent of member order.
	if hrwOwner([]string{"n2", "n1"}, "x") != hrwOwner([]string{"n1", "n2"}, "x") {
		t.Fatal("owner depends on member order")
	}
}

func TestSyncSchedMergeWindowAnchored(t *testing.T) {
	s := newSyncSched(time.Second, 100*time.Millisecond, time.Second)
	s.add("p", "k", t0)
	s.add("p", "k", t0.Add(900*time.Millisecond)) // merged into the first task
	if got := s.take(t0.Add(999*time.Millisecond), 10); len(got) != 0 {
		t.Fatalf("sent before the window closed: %v", got)
	}
	got := s.take(t0.Add(time.Second), 10)
	if len(got["p"]) != 1 {
		t.Fatalf("take = %v, want one task for k", got)
	}
	if s.pending() != 0 {
		t.Fatalf("pending %d after take", s.pending())
	}
}

func TestSyncSchedBatchAndBusy(t *testing.T) {
	s := newSyncSched(0, 100*time.Millisecond, time.Second)
	for i := 0; i < 5; i++ {
		s.add("p", fmt.Sprint("k", i), t0)
	}
	first := s.take(t0, 3)
	if len(first["p"]) != 3 {
		t.Fatalf("first batch %v, want 3 keys", first)
	}
	s.add("p", "k9", t0)
	if got := s.take(t0, 3); len(got) != 0 {
		t.Fatalf("second batch while the first is in flight: %v", got)
	}
	s.done("p", first["p"], true, t0, rand.New(rand.NewPCG(1, 1)))
	if got := s.take(t0, 10); len(got["p"]) != 3 {
		t.Fatalf("after done: %v, want the 3 remaining keys", got)
	}
}

func TestSyncSchedRetryBackoff(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 1))
	s := newSyncSched(0, 100*time.Millisecond, 800*time.Millisecond)
	s.add("p", "k", t0)
	now := t0
	var prev time.Duration
	for attempt := 1; attempt <= 6; attempt++ {
		b := s.take(now, 10)
		if len(b["p"]) != 1 {
			t.Fatalf("attempt %d: nothing to send at %v", attempt, now)
		}
		d := s.done("p", b["p"], false, now, rnd)
		cap := min(100*time.Millisecond<<(attempt-1), 800*time.Millisecond)
		if d < cap/2 || d >= cap {
			t.Fatalf("attempt %d: backoff %v outside [%v, %v)", attempt, d, cap/2, cap)
		}
		if next, ok := s.next(); !ok || !next.Equal(now.Add(d)) {
			t.Fatalf("next = %v %v, want %v", next, ok, now.Add(d))
		}
		if got := s.take(now.Add(d-1), 10); len(got) != 0 {
			t.Fatalf("retried before its backoff")
		}
		now = now.Add(d)
		prev = d
	}
	_ = prev
	b := s.take(now, 10)
	s.done("p", b["p"], true, now, rnd)
	if s.pending() != 0 || s.peers["p"].attempt != 0 {
		t.Fatal("success did not reset the peer")
	}
	// A peer that leaves loses its tasks.
	s.add("p", "k", now)
	s.dropPeer("p")
	if s.pending() != 0 {
		t.Fatal("tasks of a departed peer kept")
	}
	if _, ok := s.next(); ok {
		t.Fatal("next reports work after dropPeer")
	}
}

// A failed sync's retries keep copies of their keys, not windows on the allocation the keys came
// in (a received record's key and payload, or a record the registry wrote): a task to a peer
// that stays unreachable would keep that version's payload alive for as long as the peer is a
// member. The batch in flight and the keys that were ready for the busy peer are both retried.
func TestSyncSchedRetryCopiesKeys(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 1))
	s := newSyncSched(10*time.Millisecond, 100*time.Millisecond, 800*time.Millisecond)
	buf := make([]byte, 4096) // not a tiny allocation, which others may share and keep alive
	copy(buf, "k1k2k3")
	within := func(k string) bool {
		p, b := uintptr(unsafe.Pointer(unsafe.StringData(k))), uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
		return p >= b && p < b+uintptr(len(buf))
	}
	keys := []string{unsafe.String(&buf[0], 2), unsafe.String(&buf[2], 2), unsafe.String(&buf[4], 2)}
	for _, k := range keys {
		s.add("p", k, t0)
	}
	now := t0.Add(10 * time.Millisecond)
	b := s.take(now, 1) // one in flight, two ready for the busy peer
	if len(b["p"]) != 1 || len(s.peers["p"].ready) != 2 {
		t.Fatalf("took %v, %d ready", b, len(s.peers["p"].ready))
	}
	d := s.done("p", b["p"], false, now, rnd)
	b = nil
	for tk := range s.due {
		if within(tk.key) {
			t.Errorf("a retry's due task keeps a window on the record's allocation: %q", tk.key)
		}
	}
	for _, it := range s.h {
		if within(it.tk.key) {
			t.Errorf("a retry's heap item keeps a window on the record's allocation: %q", it.tk.key)
		}
	}
	if len(s.due) != 3 {
		t.Fatalf("%d tasks due after the failure, want 3", len(s.due))
	}
	s.take(now.Add(d), 1) // the retries: one in flight, two ready
	for k := range s.peers["p"].ready {
		if within(k) {
			t.Errorf("a retry's ready key keeps a window on the record's allocation: %q", k)
		}
	}
	for k := range s.peers["p"].flight {
		if within(k) {
			t.Errorf("a retry in flight keeps a window on the record's allocation: %q", k)
		}
	}
	// And the scheduler alone keeps nothing of the allocation alive.
	wp := weak.Make(&buf[0])
	buf, keys = nil, nil
	runtime.GC()
	if wp.Value() != nil {
		t.Errorf("the record's allocation is still reachable from the scheduler")
	}
	runtime.KeepAlive(s)
}
