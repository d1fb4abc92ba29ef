package health

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

// mustCheck fails the test if an invariant of l is broken.
func mustCheck[K comparable](t *testing.T, l *Leases[K]) {
	t.Helper()
	if err := l.check(); err != nil {
		t.Fatal(err)
	}
}

func TestZeroValue(t *testing.T) {
	var l Leases[*instance]
	id := &instance{}
	if found, _ := l.Touch(id, t0); found {
		t.Fatal("Touch on a zero Leases found a lease")
	}
	if _, ok := l.Get(id); ok {
		t.Fatal("Get on a zero Leases found a lease")
	}
	if l.Remove(id) {
		t.Fatal("Remove on a zero Leases removed a lease")
	}
	if _, ok := l.Next(); ok || l.Len() != 0 {
		t.Fatal("a zero Leases has leases")
	}
	if n := l.Expire(at(time.Hour), nil); n != 0 {
		t.Fatalf("Expire on a zero Leases = %d", n)
	}
	mustCheck(t, &l)
	if err := l.Put(id, t0, Timeouts{Expire: time.Second}); err != nil {
		t.Fatal(err)
	}
	if found, _ := l.Touch(id, t0); !found {
		t.Fatal("Touch after Put did not find the lease")
	}
	mustCheck(t, &l)
}

// TestZeroID uses the zero K as an id. Empty cells hold the zero K too, which a lookup must
// not take for a lease.
func TestZeroID(t *testing.T) {
	for _, hash := range []func(string) uint64{nil, collide} {
		l := Leases[string]{hash: hash}
		if found, _ := l.Touch("", t0); found {
			t.Fatal("Touch(\"\") on an empty Leases found a lease")
		}
		mustPut(t, &l, "a", t0, Timeouts{Expire: time.Minute})
		if found, _ := l.Touch("", t0); found {
			t.Fatal("Touch(\"\") found a lease before it was put")
		}
		mustPut(t, &l, "", t0, Timeouts{Expire: time.Second})
		mustPut(t, &l, "b", t0, Timeouts{Expire: time.Minute})
		if s, ok := l.Get(""); !ok || s.Timeouts.Expire != time.Second {
			t.Fatalf("Get(\"\") = %+v, %v", s, ok)
		}
		mustCheck(t, &l)
		if got := expire(t, &l, at(time.Second)); !slices.Equal(got, []fired{{"", EventExpired}}) {
			t.Fatalf("Expire = %v, want \"\" expired", got)
		}
		if _, ok := l.Get(""); ok || l.Remove("") {
			t.Fatal("the lease of \"\" is still there")
		}
		mustCheck(t, &l)
	}
	var p Leases[*instance]
	if err := p.Put(nil, t0, Timeouts{Expire: time.Second}); err != nil {
		t.Fatal(err)
	}
	if found, _ := p.Touch(nil, t0); !found || !p.Remove(nil) || p.Len() != 0 {
		t.Fatal("the lease of a nil pointer id is not handled like another")
	}
}

// TestGrowthWithLeasesInFlight puts a lease per millisecond while calling Expire every
// millisecond. Half of the leases live for hours, so the table keeps doubling, and half for
// tens of milliseconds, so that leases turn unhealthy and expire all along. Every event of the
// short leases must come exactly at its threshold, with or without a touch in between.
func TestGrowthWithLeasesInFlight(t *testing.T) {
	const n = 20_000
	var l Leases[*instance]
	ids := instanceIDs(n) // ids[i].interval is i
	// timeouts returns lease i's timeouts, and when it turns unhealthy and expires, in ms
	// since t0, if it is a short one. Every third short lease is touched 5 ms after its Put.
	timeouts := func(i int) (to Timeouts, unhealthy, expires int) {
		if i%2 == 1 {
			return Timeouts{Unhealthy: time.Hour, Expire: 2 * time.Hour}, -1, -1
		}
		u := 10 + i%37
		last := i
		if i%3 == 0 {
			last += 5
		}
		return Timeouts{Unhealthy: time.Duration(u) * time.Millisecond, Expire: time.Duration(2*u) * time.Millisecond}, last + u, last + 2*u
	}
	events, grows := 0, 0
	for ms := 0; ms < n+100; ms++ {
		now := at(time.Duration(ms) * time.Millisecond)
		cells := len(l.cells)
		l.Expire(now, func(id *instance, ev Event) {
			events++
			i := int(id.interval)
			_, unhealthy, expires := timeouts(i)
			if want := map[Event]int{EventUnhealthy: unhealthy, EventExpired: expires}[ev]; ms != want {
				t.Fatalf("lease %d: %v at %d ms, want at %d ms", i, ev, ms, want)
			}
		})
		if ms < n {
			to, _, _ := timeouts(ms)
			if err := l.Put(ids[ms], now, to); err != nil {
				t.Fatal(err)
			}
		}
		if i := ms - 5; i >= 0 && i < n && i%2 == 0 && i%3 == 0 {
			if found, revived := l.Touch(ids[i], now); !found || revived {
				t.Fatalf("Touch of lease %d = %v, %v", i, found, revived)
			}
		}
		if len(l.cells) != cells {
			grows++
			mustCheck(t, &l)
		}
	}
	if events != n || l.Len() != n/2 || grows < 10 {
		t.Fatalf("%d events, %d leases left, %d grows; want %d, %d, at least 10", events, l.Len(), grows, n, n/2)
	}
	if got := l.Expire(at(2*time.Hour+n*time.Millisecond), nil); got != n/2 || l.Len() != 0 {
		t.Fatalf("%d long leases expired, %d left; want %d, 0", got, l.Len(), n/2)
	}
	mustCheck(t, &l)
}

// TestBackwardShiftAcrossWrap fills a table of minCells with six leases whose ids all hash to
// its last three cells, so that their run wraps around the end of the table, and removes them
// in every order, checking the table and the leases left after each Remove.
func TestBackwardShiftAcrossWrap(t *testing.T) {
	ids := []string{"a", "b", "c", "d", "e", "f"}
	homes := map[uint64]bool{}
	for _, id := range ids {
		homes[collide(id)] = true
	}
	if len(homes) != 3 {
		t.Fatalf("the ids have %d distinct hashes, want 3", len(homes))
	}
	perms := 0
	var permute func(order, rest []string)
	permute = func(order, rest []string) {
		if len(rest) > 0 {
			for i := range rest {
				next := slices.Concat(rest[:i:i], rest[i+1:])
				permute(append(order[:len(order):len(order)], rest[i]), next)
			}
			return
		}
		perms++
		l := Leases[string]{hash: collide}
		for i, id := range ids {
			mustPut(t, &l, id, t0, Timeouts{Expire: time.Duration(i+1) * time.Second})
		}
		if len(l.cells) != minCells {
			t.Fatalf("%d cells, want %d", len(l.cells), minCells)
		}
		if l.cells[minCells-1].ref == 0 || l.cells[0].ref == 0 {
			t.Fatal("the run of cells does not wrap around")
		}
		left := slices.Clone(ids)
		for _, id := range order {
			if !l.Remove(id) {
				t.Fatalf("order %v: Remove(%s) = false", order, id)
			}
			left = slices.DeleteFunc(left, func(s string) bool { return s == id })
			mustCheck(t, &l)
			for _, other := range left {
				if found, _ := l.Touch(other, t0); !found {
					t.Fatalf("order %v: %s lost after removing %s", order, other, id)
				}
			}
		}
		if l.Len() != 0 || len(l.cells) != minCells {
			t.Fatalf("order %v: %d leases in %d cells left", order, l.Len(), len(l.cells))
		}
	}
	permute(nil, ids)
	if perms != 720 {
		t.Fatalf("%d orders, want 720", perms)
	}

	// Removes interleaved with expiries: the leases left must still fire at their deadlines.
	l := Leases[string]{hash: collide}
	for i, id := range ids {
		mustPut(t, &l, id, t0, Timeouts{Expire: time.Duration(i+1) * time.Second})
	}
	l.Remove("b")
	l.Remove("e")
	var got []fired
	for s := 1; s <= 6; s++ {
		got = append(got, expire(t, &l, at(time.Duration(s)*time.Second))...)
		mustCheck(t, &l)
	}
	want := []fired{{"a", EventExpired}, {"c", EventExpired}, {"d", EventExpired}, {"f", EventExpired}}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// TestPutAfterRemoveReusesCells churns short-lived leases next to a long-lived one: with
// deletion by backward shift no cell is lost to a tombstone, so the table keeps its minimum
// size, and the slots and interned timeouts are reused.
func TestPutAfterRemoveReusesCells(t *testing.T) {
	for _, hash := range []func(string) uint64{nil, collide} {
		l := Leases[string]{hash: hash}
		mustPut(t, &l, "keep", t0, Timeouts{Expire: time.Hour})
		for i := range 100_000 {
			id := fmt.Sprint("tmp", i)
			mustPut(t, &l, id, t0, Timeouts{Expire: time.Duration(1+i%3) * time.Minute})
			if i%2 == 0 {
				mustPut(t, &l, id+"'", t0, Timeouts{Expire: time.Minute})
				l.Remove(id + "'")
			}
			if !l.Remove(id) {
				t.Fatalf("Remove(%s) = false", id)
			}
		}
		mustCheck(t, &l)
		if len(l.cells) != minCells || len(l.slots) != 3 || len(l.tt.entries) > 4 {
			t.Fatalf("after churn: %d cells, %d slots, %d timeouts; want %d, 3, at most 4",
				len(l.cells), len(l.slots), len(l.tt.entries), minCells)
		}
		if got := expire(t, &l, at(time.Hour)); !slices.Equal(got, []fired{{"keep", EventExpired}}) {
			t.Fatalf("got %v, want keep expired", got)
		}
	}
}

// TestShrink grows the table to hold many leases, removes or expires most of them, and checks
// that the table, the slots and the heap shrink, and that the leases left keep their state and
// deadlines.
func TestShrink(t *testing.T) {
	const n = 10_000
	var l Leases[*instance]
	ids := instanceIDs(n)
	for i, id := range ids {
		// Lease i expires at i+1 s, but the ten kept ones turn unhealthy at n+1+i s and
		// expire at 2n+i s.
		to := Timeouts{Expire: time.Duration(i+1) * time.Second}
		if i%1000 == 0 {
			to = Timeouts{Unhealthy: time.Duration(n+1+i) * time.Second, Expire: time.Duration(2*n+i) * time.Second}
		}
		if err := l.Put(id, t0, to); err != nil {
			t.Fatal(err)
		}
	}
	big := len(l.cells)
	for i, id := range ids[:n/2] {
		if i%1000 != 0 {
			l.Remove(id)
		}
	}
	mustCheck(t, &l)
	if got := l.Expire(at(n*time.Second), nil); got != n/2-5 {
		t.Fatalf("Expire = %d events, want %d", got, n/2-5)
	}
	mustCheck(t, &l)
	if l.Len() != 10 || len(l.cells) >= big/64 || len(l.slots) != 10 || len(l.heap) != 10 || cap(l.heap) > 64 {
		t.Fatalf("%d leases in %d cells (was %d), %d slots, heap %d/%d", l.Len(), len(l.cells), big, len(l.slots), len(l.heap), cap(l.heap))
	}
	l.Touch(ids[2000], at(n*time.Second)) // now due last of the ten
	if s, ok := l.Get(ids[2000]); !ok || !s.Healthy || !s.LastTouch.Equal(at(n*time.Second)) {
		t.Fatalf("Get after shrink = %+v, %v", s, ok)
	}
	var got []int
	l.Expire(at(2*n*time.Second-ns), func(id *instance, ev Event) {
		if ev != EventUnhealthy {
			t.Fatalf("lease %d: %v", id.interval, ev)
		}
		got = append(got, int(id.interval))
	})
	if want := []int{0, 1000, 3000, 4000, 5000, 6000, 7000, 8000, 9000}; !slices.Equal(got, want) {
		t.Fatalf("unhealthy in the order %v, want %v", got, want)
	}
	if got := l.Expire(at(4*n*time.Second), nil); got != 10 {
		t.Fatalf("Expire = %d events, want 10 expired", got)
	}
	if l.Len() != 0 || len(l.cells) != minCells {
		t.Fatalf("%d leases in %d cells at the end", l.Len(), len(l.cells))
	}
	mustCheck(t, &l)
}

func TestTimeoutsInterned(t *testing.T) {
	var l Leases[string]
	a := Timeouts{Unhealthy: 15 * time.Second, Expire: 30 * time.Second}
	b := Timeouts{Expire: time.Minute}
	for i := range 100 {
		mustPut(t, &l, fmt.Sprint(i), t0, a)
	}
	if len(l.tt.entries) != 1 || l.tt.entries[0].refs != 100 {
		t.Fatalf("100 leases with the same timeouts: %+v", l.tt.entries)
	}
	mustPut(t, &l, "0", t0, b) // replaces the timeouts of a lease
	mustPut(t, &l, "1", t0, b)
	mustPut(t, &l, "1", t0, b) // the same again
	if s, _ := l.Get("1"); s.Timeouts != b {
		t.Fatalf("Get(1).Timeouts = %+v, want %+v", s.Timeouts, b)
	}
	mustCheck(t, &l)
	for i := range 100 {
		if i > 1 {
			l.Remove(fmt.Sprint(i))
		}
	}
	mustCheck(t, &l)
	if len(l.tt.index) != 1 || len(l.tt.free) != 1 {
		t.Fatalf("with two leases of the same timeouts: %d indexed, %d free", len(l.tt.index), len(l.tt.free))
	}
	mustPut(t, &l, "x", t0, Timeouts{Expire: time.Hour}) // reuses the free entry
	if len(l.tt.entries) != 2 {
		t.Fatalf("%d interned timeouts, want the free one reused (2)", len(l.tt.entries))
	}
	mustCheck(t, &l)
}

// TestRemoveLastWithStaleHeap removes the last lease while the heap holds so many stale
// elements that it is compacted to nothing. That once indexed an empty heap.
func TestRemoveLastWithStaleHeap(t *testing.T) {
	var l Leases[string]
	to := Timeouts{Unhealthy: time.Second, Expire: time.Hour}
	now := t0
	for range minCompact + 1 {
		mustPut(t, &l, "a", now, to) // earlier each time, so each Put leaves a stale element
		now = now.Add(-time.Second)
	}
	if len(l.heap) != minCompact+1 {
		t.Fatalf("heap holds %d elements, want %d", len(l.heap), minCompact+1)
	}
	l.Remove("a")
	if len(l.heap) != 0 {
		t.Fatalf("heap holds %d elements with no lease", len(l.heap))
	}
}

func TestTouchDoesNotAllocatePointerIDs(t *testing.T) {
	checkTouchAllocs(t, instanceIDs(1000))
}

// TestHashWrapsIndex checks that hashes with the top bit set, negative as an int, still
// index the table.
func TestHashWrapsIndex(t *testing.T) {
	l := Leases[string]{hash: func(string) uint64 { return math.MaxUint64 }}
	mustPut(t, &l, "a", t0, Timeouts{Expire: time.Second})
	if l.cells[minCells-1].ref == 0 {
		t.Fatal("a hash of all ones does not map to the last cell")
	}
}
