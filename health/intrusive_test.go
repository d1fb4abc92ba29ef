package health

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/testutil"
)

// holder is a leased object of an Intrusive set in the tests. Odd ones make
// room for their Lease only when asked to (create), as a holder that keeps
// it out of line does.
type holder struct {
	name  string
	lazy  bool
	lease *Lease
	own   Lease
}

func (h *holder) Lease(create bool) *Lease {
	if !h.lazy {
		return &h.own
	}
	if h.lease == nil && create {
		h.lease = new(Lease)
	}
	return h.lease
}

func newHolders(n int) []*holder {
	hs := make([]*holder, n)
	for i := range hs {
		hs[i] = &holder{name: fmt.Sprint("id", i), lazy: i%2 == 1}
	}
	return hs
}

// checkIntrusiveOps drives an Intrusive set and the naive model as
// checkOps drives a Leases (driveModel), and returns how often the set's
// slots shrank.
func checkIntrusiveOps(t *testing.T, data []byte, ids int) (shrinks int) {
	var l Intrusive[*holder]
	hs := newHolders(ids)
	slots := 0
	driveModel(t, data, ids, leaseSet[*holder](&l), func(n int) *holder { return hs[n] }, func(h *holder) string { return h.name },
		func() error {
			if len(l.slots) < slots {
				shrinks++
			}
			slots = len(l.slots)
			return l.check(hs)
		})
	return shrinks
}

// check returns an error describing the first broken invariant of l, whose
// ids are among hs, or nil.
func (l *Intrusive[P]) check(hs []*holder) error {
	leased := 0
	for _, h := range hs {
		c := h.Lease(false)
		if c == nil || c.ref == 0 {
			continue
		}
		leased++
		if int(c.ref) > len(l.slots) || any(l.slots[c.ref-1].id) != any(h) {
			return fmt.Errorf("%s: lease names slot %d, which is not its", h.name, c.ref-1)
		}
	}
	if leased != l.n {
		return fmt.Errorf("%d ids hold a lease, Len is %d", leased, l.n)
	}
	var zero P
	free := map[uint32]bool{}
	for f := l.free; f != 0; f = l.slots[f-1].next {
		if free[f-1] || l.slots[f-1].id != zero {
			return fmt.Errorf("free list broken at slot %d", f-1)
		}
		free[f-1] = true
	}
	if len(free)+l.n != len(l.slots) {
		return fmt.Errorf("%d slots: %d free, %d leases", len(l.slots), len(free), l.n)
	}
	live := map[int32]int{}
	for i, d := range l.heap {
		if i > 0 && l.heap[(i-1)/arity].at > d.at {
			return fmt.Errorf("heap out of order at %d", i)
		}
		if l.live(d) {
			live[d.slot]++
		}
	}
	for i := range l.slots {
		if l.slots[i].id != zero && live[int32(i)] != 1 {
			return fmt.Errorf("slot %d has %d live heap elements", i, live[int32(i)])
		}
	}
	if len(l.heap) > 0 && !l.live(l.heap[0]) {
		return fmt.Errorf("stale element on top of the heap")
	}
	if len(l.heap) > 2*l.n+minCompact {
		return fmt.Errorf("heap of %d for %d leases", len(l.heap), l.n)
	}
	refs := 0
	for _, e := range l.tt.entries {
		refs += int(e.refs)
	}
	if refs != l.n {
		return fmt.Errorf("interned timeouts count %d leases, Len is %d", refs, l.n)
	}
	return nil
}

// TestIntrusiveAgainstModel: random operations on a few ids and on many
// (whose removals rebuild the slots), checked against the naive model.
func TestIntrusiveAgainstModel(t *testing.T) {
	testutil.Seeds(t, 0, 1, func(t *testing.T, seed uint64) {
		rng := rand.New(rand.NewPCG(seed, 0))
		shrinks := 0
		for round := range 200 {
			data := make([]byte, 2000)
			for i := range data {
				data[i] = byte(rng.UintN(256))
			}
			ids := 6
			if round%2 == 1 {
				// Many ids, leased first, most with short timeouts: the
				// clock steps that follow expire them, which rebuilds the
				// slots with leases left.
				ids = 250
				var lead []byte
				for id := range ids {
					expire := byte(1 + rng.UintN(3))
					if id%10 == 0 {
						expire = 7
					}
					lead = append(lead, 0, byte(id), byte(rng.UintN(2)), expire, 0)
				}
				for range 3 {
					lead = append(lead, 3, 0, 3, 7) // ids > 16 read an id byte: 0 here
				}
				data = append(lead, data...)
			}
			shrinks += checkIntrusiveOps(t, data, ids)
		}
		if shrinks == 0 {
			t.Errorf("no run rebuilt the slots")
		}
	})
}

// TestIntrusiveShrinkKeepsLeases: after most leases go, the slots are
// rebuilt densely and the leases left keep their state and deadlines.
func TestIntrusiveShrinkKeepsLeases(t *testing.T) {
	var l Intrusive[*holder]
	hs := newHolders(1000)
	to := Timeouts{Unhealthy: 10 * time.Second, Expire: 20 * time.Second}
	for i, h := range hs {
		if err := l.Put(h, at(time.Duration(i)*time.Millisecond), to); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range hs[:990] {
		l.Remove(h)
	}
	if len(l.slots) > 2*l.Len() {
		t.Fatalf("%d slots for %d leases", len(l.slots), l.Len())
	}
	if err := l.check(hs); err != nil {
		t.Fatal(err)
	}
	var got []string
	l.Expire(at(time.Hour), func(h *holder, ev Event) {
		if ev != EventExpired {
			t.Errorf("%s: %v", h.name, ev)
		}
		got = append(got, h.name)
	})
	if len(got) != 10 || got[0] != "id990" || got[9] != "id999" {
		t.Fatalf("expired %v", got)
	}
}

// TestIntrusiveTouchDoesNotAllocate: a touch of a healthy lease writes its
// holder's Lease and nothing else.
func TestIntrusiveTouchDoesNotAllocate(t *testing.T) {
	var l Intrusive[*holder]
	hs := newHolders(100)
	for _, h := range hs {
		if err := l.Put(h, t0, Timeouts{Unhealthy: time.Minute, Expire: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	i := 0
	if n := testing.AllocsPerRun(1000, func() { l.Touch(hs[i%100], at(time.Second)); i++ }); n != 0 {
		t.Fatalf("Touch allocates %v times", n)
	}
}

// TestIntrusiveInterval: a lease carries its Timeouts' Interval, which a Put
// replaces (the timeouts are interned again) and which goes with the lease;
// the thresholds ignore it.
func TestIntrusiveInterval(t *testing.T) {
	var l Intrusive[*holder]
	hs := newHolders(3)
	if got := l.Interval(hs[1].Lease(false)); got != 0 {
		t.Fatalf("Interval of a holder with no lease = %v, want 0", got)
	}
	a := Timeouts{Unhealthy: 15 * time.Second, Expire: 30 * time.Second, Interval: 5 * time.Second}
	b := a
	b.Interval = time.Second
	for _, h := range hs {
		if err := l.Put(h, t0, a); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Put(hs[0], t0, b); err != nil {
		t.Fatal(err)
	}
	for i, want := range []time.Duration{time.Second, 5 * time.Second, 5 * time.Second} {
		if got := l.Interval(hs[i].Lease(false)); got != want {
			t.Errorf("Interval(%s) = %v, want %v", hs[i].name, got, want)
		}
		if s, _ := l.Get(hs[i]); s.Timeouts.Interval != l.Interval(hs[i].Lease(false)) {
			t.Errorf("Get(%s).Timeouts = %+v, Interval %v", hs[i].name, s.Timeouts, l.Interval(hs[i].Lease(false)))
		}
	}
	if len(l.tt.index) != 2 {
		t.Fatalf("%d interned timeouts, want 2 (the intervals differ)", len(l.tt.index))
	}
	if err := l.check(hs); err != nil {
		t.Fatal(err)
	}
	l.Remove(hs[2])
	if got := l.Interval(hs[2].Lease(false)); got != 0 {
		t.Fatalf("Interval after Remove = %v, want 0", got)
	}
	var events []string
	l.Expire(at(16*time.Second), func(h *holder, ev Event) { events = append(events, h.name+" "+ev.String()) })
	if len(events) != 2 {
		t.Fatalf("at 16 s: %v, want both left unhealthy (the interval is no threshold)", events)
	}
	if err := l.Put(hs[0], t0, Timeouts{Expire: time.Second, Interval: -1}); err == nil {
		t.Fatal("Put with a negative Interval succeeded")
	}
	if got := l.Interval(hs[0].Lease(false)); got != time.Second {
		t.Fatalf("Interval after a refused Put = %v, want it unchanged (1s)", got)
	}
}

// FuzzIntrusive is TestIntrusiveAgainstModel on the fuzzer's operations.
func FuzzIntrusive(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 0x10, 0x23, 0x33, 0x44})
	f.Fuzz(func(t *testing.T, data []byte) { checkIntrusiveOps(t, data, 6) })
}
