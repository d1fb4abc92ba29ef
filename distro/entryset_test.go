package distro

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/muster-io/muster/internal/testutil"
)

// setModel drives an entrySet and a Go map through the same operations and compares them. frag
// gives each key's fragment: a seeded hash like the table's (seeded by the test, so that a
// failure replays), or degenerate ones that make runs of slots long, fragments collide and runs
// wrap around the end of the slots.
type setModel struct {
	t    testing.TB
	s    entrySet
	m    map[string]*entry
	frag func(string) uint32
	keys []string
}

func newSetModel(t testing.TB, nkeys int, frag func(string) uint32) *setModel {
	sm := &setModel{t: t, m: map[string]*entry{}, frag: frag}
	for i := range nkeys {
		sm.keys = append(sm.keys, fmt.Sprintf("key-%d", i))
	}
	return sm
}

// fragFuncs are the fragments the model tests run with, from a seed.
var fragFuncs = []struct {
	name string
	frag func(seed uint64) func(string) uint32
}{
	{"hashed", func(seed uint64) func(string) uint32 { return func(k string) uint32 { return seededFrag(seed, k) } }},
	// Every key on the same fragment: one run, every probe compares keys.
	{"one", func(uint64) func(string) uint32 { return func(string) uint32 { return 1 } }},
	// Four fragments at the very end of the range: every run wraps around to slot 0.
	{"wrap", func(seed uint64) func(string) uint32 {
		return func(k string) uint32 { return 0xffff_fff9 | seededFrag(seed, k)&6 }
	}},
	// Fragments bunched in 1/16 of the range: long runs of different fragments.
	{"bunched", func(seed uint64) func(string) uint32 {
		return func(k string) uint32 { return 0x7000_0000 | seededFrag(seed, k)>>4 | 1 }
	}},
}

// seededFrag is a fragment like table.frag's, but from a seed the test chooses.
func seededFrag(seed uint64, k string) uint32 { return uint32(mix64(keyHash(k)^seed)>>32) | 1 }

// step applies operation op (0–5) to key k and checks the result against the map.
func (sm *setModel) step(op, k int) {
	t := sm.t
	key := sm.keys[k%len(sm.keys)]
	f := sm.frag(key)
	switch op % 6 {
	case 0, 1: // install: insert or replace, the caller knowing the old entry or not
		e := &entry{key: key}
		old := sm.m[key]
		hint := old
		if op%6 == 1 {
			hint = nil
		}
		if got := sm.s.put(e, f, hint); got != old {
			t.Fatalf("put %q returned %p, want %p", key, got, old)
		}
		sm.m[key] = e
	case 2: // remove
		if got, want := sm.s.remove(key, f), sm.m[key]; got != want {
			t.Fatalf("remove %q returned %p, want %p", key, got, want)
		}
		delete(sm.m, key)
	case 3: // get
		if got, want := sm.s.get(key, f), sm.m[key]; got != want {
			t.Fatalf("get %q returned %p, want %p", key, got, want)
		}
	case 4: // reserve (only an empty set takes it)
		before := sm.s.slots()
		sm.s.reserve(k % 512)
		if sm.s.n > 0 && sm.s.slots() != before {
			t.Fatalf("reserve resized a set holding %d entries", sm.s.n)
		}
	case 5: // iterate, replacing some entries from within (allowed), stopping early at times
		seen := map[string]bool{}
		stop := k%7 == 0 && len(sm.m) > 0
		complete := sm.s.each(func(e *entry) bool {
			if seen[e.key] {
				t.Fatalf("each gave %q twice", e.key)
			}
			seen[e.key] = true
			if sm.m[e.key] != e {
				t.Fatalf("each gave %q at %p, the map holds %p", e.key, e, sm.m[e.key])
			}
			if len(seen)%3 == 0 {
				ne := &entry{key: e.key}
				sm.s.put(ne, sm.frag(e.key), e)
				sm.m[e.key] = ne
			}
			return !stop
		})
		if complete == stop || !stop && len(seen) != len(sm.m) {
			t.Fatalf("each saw %d of %d entries (complete %v, stopping %v)", len(seen), len(sm.m), complete, stop)
		}
	}
	if sm.s.len() != len(sm.m) {
		t.Fatalf("set holds %d entries, the map %d", sm.s.len(), len(sm.m))
	}
}

// check verifies the set's invariants and that it holds exactly the map's entries: each entry
// is in a slot with its fragment, reachable from its home with no empty slot between, in Robin
// Hood order, and the load is within bounds.
func (sm *setModel) check() {
	t, s := sm.t, &sm.s
	c := s.slots()
	if s.n*setLoadDen > c*setLoadNum {
		t.Fatalf("%d entries in %d slots: over the load limit", s.n, c)
	}
	n := 0
	for i := range c {
		g, e := s.frag(i), s.ent(i)
		if (g == 0) != (e == nil) {
			t.Fatalf("slot %d: fragment %x, entry %p", i, g, e)
		}
		if g == 0 {
			continue
		}
		n++
		if g != sm.frag(e.key) {
			t.Fatalf("slot %d: fragment %x, its key's %x", i, g, sm.frag(e.key))
		}
		if sm.m[e.key] != e {
			t.Fatalf("slot %d holds %q at %p, the map %p", i, e.key, e, sm.m[e.key])
		}
		for j := home(g, c); j != i; j = (j + 1) % c {
			if s.frag(j) == 0 {
				t.Fatalf("slot %d (%q): empty slot %d between it and its home %d", i, e.key, j, home(g, c))
			}
		}
		// Robin Hood order: the next entry of the run is at most one slot farther from its
		// home than this one.
		if j := (i + 1) % c; s.frag(j) != 0 && dist(s.frag(j), j, c) > dist(g, i, c)+1 {
			t.Fatalf("slot %d is %d slots from its home, slot %d %d: out of order", i, dist(g, i, c), j, dist(s.frag(j), j, c))
		}
	}
	if n != s.n || n != len(sm.m) {
		t.Fatalf("%d occupied slots, count %d, map %d", n, s.n, len(sm.m))
	}
	for k, e := range sm.m {
		if got := s.get(k, sm.frag(k)); got != e {
			t.Fatalf("get %q: %p, want %p", k, got, e)
		}
	}
}

// TestEntrySetModel runs random operations against a Go map, across growth and shrinking,
// with hashed and degenerate fragments. Seeds 1–2 by default; a failure names its seed, and
// MUSTER_SEED=N MUSTER_SEEDS=1 replays it (internal/testutil).
func TestEntrySetModel(t *testing.T) {
	testutil.Seeds(t, 1, 2, runEntrySetModel)
}

func runEntrySetModel(t *testing.T, seed uint64) {
	for _, ff := range fragFuncs {
		for _, tc := range []struct {
			name    string
			keys    int
			ops     int
			weights [6]int // install (hint), install (no hint), remove, get, reserve, each
		}{
			{"grow", 3000, 12000, [6]int{6, 2, 1, 3, 1, 0}},
			{"churn", 400, 20000, [6]int{3, 1, 4, 4, 1, 1}},
			{"shrink", 2000, 20000, [6]int{1, 1, 8, 2, 1, 0}},
			{"small", 12, 3000, [6]int{2, 2, 2, 2, 1, 1}},
		} {
			t.Run(ff.name+"/"+tc.name, func(t *testing.T) {
				rnd := rand.New(rand.NewPCG(seed, 0))
				sm := newSetModel(t, tc.keys, ff.frag(seed))
				total := 0
				for _, w := range tc.weights {
					total += w
				}
				for i := range tc.ops {
					if tc.name == "shrink" && i < tc.ops/3 {
						sm.step(0, rnd.IntN(tc.keys)) // fill first, then mostly remove
						continue
					}
					x, op := rnd.IntN(total), 0
					for x >= tc.weights[op] {
						x -= tc.weights[op]
						op++
					}
					sm.step(op, rnd.IntN(tc.keys))
					// Every op while the set is small, where a wrong resize (a shrink to too
					// few slots) shows before the next op grows it again; every 500 after.
					if i%500 == 0 || sm.s.len() <= 64 {
						sm.check()
					}
				}
				sm.check()
			})
		}
	}
}

// FuzzEntrySet: an op stream (pairs of bytes: operation, key) against a Go map; the first byte
// picks the fragments (fragFuncs).
func FuzzEntrySet(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 2, 0, 3})
	f.Add([]byte{1, 0, 1, 0, 2, 0, 3, 0, 4, 2, 1, 5, 0, 3, 2})
	f.Add([]byte{2, 0, 9, 0, 10, 0, 11, 0, 12, 5, 0, 2, 9, 2, 10, 3, 11})
	f.Add([]byte{3, 4, 200, 0, 1, 0, 2, 2, 1, 5, 6})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) == 0 {
			return
		}
		sm := newSetModel(t, 256, fragFuncs[int(ops[0])%len(fragFuncs)].frag(uint64(ops[0])))
		ops = ops[1:]
		for i := 0; i+1 < len(ops); i += 2 {
			sm.step(int(ops[i]), int(ops[i+1]))
			if sm.s.len() <= 64 {
				sm.check() // see runEntrySetModel
			}
		}
		sm.check()
	})
}

// Removing or inserting a key of the bucket being iterated would move entries between slots
// (skipping some, repeating others): each refuses loudly rather than miss records silently,
// whether the change shifts entries within the slots (insert, remove) or moves them all to new
// ones (an insert that grows the set: the bucket is filled to its load limit first).
func TestEntrySetEachRefusesChanges(t *testing.T) {
	for _, change := range []string{"remove", "insert", "insert that grows the set"} {
		t.Run(change, func(t *testing.T) {
			tab := newTable(1)
			set := &tab.buckets[0]
			full := func() bool { return (set.len()+1)*setLoadDen > set.slots()*setLoadNum }
			for i := 0; i < 20 || change == "insert that grows the set" && !full(); i++ {
				tab.install(Record{Key: fmt.Sprint("k", i), Kind: KindSession, Owner: "n", Revision: 1}, t0)
			}
			slots := set.slots()
			if change == "insert that grows the set" {
				defer func() {
					if set.slots() == slots {
						t.Errorf("the insert did not grow the set (%d slots)", slots)
					}
				}()
			}
			defer func() {
				if recover() == nil {
					t.Fatalf("each went on after a callback's %s", change)
				}
			}()
			tab.each(0, func(e *entry) bool {
				if change == "remove" {
					tab.remove(e.key)
				} else {
					tab.install(Record{Key: "new", Kind: KindSession, Owner: "n", Revision: 1}, t0)
				}
				return true
			})
		})
	}
}

// slotBytes is what the table's sets hold in slots, in bytes.
func slotBytes(tab *table) int {
	n := 0
	for i := range tab.buckets {
		n += cap(tab.buckets[i].frags)*int(unsafe.Sizeof(uint32(0))) + cap(tab.buckets[i].ents)*int(unsafe.Sizeof((*entry)(nil)))
	}
	return n
}

// TestEntrySetBytesPerRecord pins the cost of the buckets' slots per record (issue 30.2: ≤ 20
// bytes; maps cost 36–56). A real table at 100,000 records; at 1,000,000, the slots a set
// grows to for each size (measured once, on one set, up to the largest bucket) summed over the
// bucket sizes such keys make, without holding a million entries.
func TestEntrySetBytesPerRecord(t *testing.T) {
	const limit = 20.0
	tab, _ := benchTable(100_000)
	if per := float64(slotBytes(tab)) / 100_000; per > limit {
		t.Errorf("100,000 records: %.1f bytes of slots a record, want ≤ %.0f", per, limit)
	} else {
		t.Logf("100,000 records: %.1f bytes of slots a record", per)
	}

	const n = 1_000_000
	nb := DefaultConfig().Buckets
	sizes := make([]int, nb)
	var kb []byte
	for i := range n {
		kb = fmt.Appendf(kb[:0], "10.%d.%d.%d:8080", i>>16, (i>>8)&255, i&255)
		sizes[bucketOf(keyHash(string(kb)), nb)]++
	}
	largest := 0
	for _, s := range sizes {
		largest = max(largest, s)
	}
	var s entrySet
	slots := []int{0} // slots[k]: the set's slots holding k entries, grown one at a time
	for k := range largest {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], uint64(k))
		key := string(b[:])
		s.put(&entry{key: key}, tab.frag(key), nil)
		slots = append(slots, s.slots())
	}
	bytes := 0
	for _, sz := range sizes {
		bytes += slots[sz] * 12
	}
	if per := float64(bytes) / n; per > limit {
		t.Errorf("1,000,000 records: %.1f bytes of slots a record, want ≤ %.0f", per, limit)
	} else {
		t.Logf("1,000,000 records: %.1f bytes of slots a record (buckets of up to %d)", per, largest)
	}

	// Neither a lookup nor the replacement of a held key allocates.
	key := "10.0.1.2:8080"
	e := tab.get(key)
	f := tab.frag(key)
	set := &tab.buckets[bucketOf(keyHash(key), nb)]
	if a := testing.AllocsPerRun(100, func() {
		if tab.get(key) == nil || set.put(e, f, e) != e {
			t.Fatal("lost the key")
		}
	}); a != 0 {
		t.Errorf("get and replace: %v allocations, want 0", a)
	}
}

// A key's place within its bucket comes from a hash seeded per table, not from keyHash (public,
// the same everywhere): keys a peer chose to share a keyHash, or its low bits, do not share a
// place. Two tables place the same keys differently; keyHash, which digests use, is unchanged
// (its value for "key-1" at e59fe43, before the sets).
func TestFragSeededPerTable(t *testing.T) {
	a, b := newTable(1), newTable(1)
	same := 0
	for i := range 64 {
		k := fmt.Sprint("key-", i)
		if a.frag(k) == b.frag(k) {
			same++
		}
		if a.frag(k)&1 == 0 {
			t.Fatalf("fragment of %q has its low bit clear (0 marks an empty slot)", k)
		}
	}
	if same > 1 {
		t.Fatalf("%d of 64 keys have the same fragment in two tables", same)
	}
	if keyHash("key-1") != 0x3803edeb4f445d66 {
		t.Fatalf("keyHash changed: %#x (digests compare it across nodes)", keyHash("key-1"))
	}
}
