package health

import (
	"fmt"
	"math"
	"time"
)

// Timeouts of one lease. Unhealthy 0 disables the first threshold.
type Timeouts struct {
	Unhealthy time.Duration // time after the last touch at which the lease turns unhealthy (0: never)
	Expire    time.Duration // time after the last touch at which the lease expires and is removed; must be > 0
}

// Validate reports an error wrapping [ErrInvalidTimeouts] and naming the field and the rule it
// breaks if Expire <= 0, Unhealthy < 0 or Unhealthy > Expire.
func (t Timeouts) Validate() error {
	switch {
	case t.Expire <= 0:
		return fmt.Errorf("%w: Expire must be > 0, got %v", ErrInvalidTimeouts, t.Expire)
	case t.Unhealthy < 0:
		return fmt.Errorf("%w: Unhealthy must be >= 0 (0 disables it), got %v", ErrInvalidTimeouts, t.Unhealthy)
	case t.Unhealthy > t.Expire:
		return fmt.Errorf("%w: Unhealthy (%v) must not exceed Expire (%v)", ErrInvalidTimeouts, t.Unhealthy, t.Expire)
	}
	return nil
}

// Event is a transition of a lease, reported by [Leases.Expire].
type Event uint8

const (
	EventUnhealthy Event = iota + 1 // the lease passed its Unhealthy threshold and is still held
	EventExpired                    // the lease passed its Expire threshold and was removed
)

// String returns "unhealthy" or "expired", or Event(n) for an unknown value.
func (e Event) String() string {
	switch e {
	case EventUnhealthy:
		return "unhealthy"
	case EventExpired:
		return "expired"
	}
	return fmt.Sprintf("Event(%d)", uint8(e))
}

// State is a snapshot of one lease, returned by [Leases.Get].
type State struct {
	LastTouch time.Time // rebuilt from Unix nanoseconds: no monotonic reading, local time zone
	Healthy   bool
	Timeouts  Timeouts
}

// Leases tracks deadlines for ids. Its zero value is ready to use. Not safe for concurrent use:
// the caller serialises every call, including the read-only ones.
//
// See the package documentation for the algorithm.
type Leases[K comparable] struct {
	index   map[K]int32 // id -> slot in beats and entries
	beats   []beat      // slab, hot part; a freed slot is reused by the next new id
	entries []entry[K]  // slab, the rest
	free    []int32     // freed slots
	heap    deadlines   // at most one live element per lease, plus stale ones
}

// beat is the part of a lease that a touch and the heap's staleness check read. It is kept
// apart from the rest, 16 bytes a lease, because with many leases the cost of a touch is the
// cache misses it takes, and a small slab misses less.
type beat struct {
	last    int64  // last touch, Unix nanoseconds
	gen     uint32 // bumped on every (re)scheduling and on release; see [Leases.live]
	healthy bool
}

// entry is the rest of a lease.
type entry[K comparable] struct {
	sched     int64 // at of the lease's live heap element; never later than its true deadline
	unhealthy int64 // Timeouts.Unhealthy in nanoseconds; 0 disables it
	expire    int64 // Timeouts.Expire in nanoseconds
	id        K
}

// next returns the true next threshold of slot's lease: Unhealthy while it is healthy and has
// one, Expire otherwise.
func (l *Leases[K]) next(slot int32) int64 {
	b, e := &l.beats[slot], &l.entries[slot]
	if b.healthy && e.unhealthy > 0 {
		return addSat(b.last, e.unhealthy)
	}
	return addSat(b.last, e.expire)
}

// addSat returns a+b for b >= 0, saturating at math.MaxInt64 instead of wrapping around to a
// deadline in the distant past.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// Put creates the lease for id, or resets an existing one: last touch = now, healthy, timeouts
// replaced. It returns an error only if t is invalid (nothing is changed then).
func (l *Leases[K]) Put(id K, now time.Time, t Timeouts) error {
	if err := t.Validate(); err != nil {
		return err
	}
	slot, ok := l.index[id]
	if !ok {
		slot = l.alloc(id)
	}
	b, e := &l.beats[slot], &l.entries[slot]
	b.last = now.UnixNano()
	b.healthy = true
	e.unhealthy = int64(t.Unhealthy)
	e.expire = int64(t.Expire)
	if !ok {
		l.arm(slot, l.next(slot))
		return nil
	}
	// A reset moves the deadline earlier if the new timeouts are shorter, the lease was
	// unhealthy (its next threshold is Unhealthy again) or now is older than the last touch;
	// later is handled lazily.
	l.rearmIfEarlier(slot)
	return nil
}

// Touch renews id's lease at now. found is false if id has no lease. revived is true if the
// lease was unhealthy and is now healthy again. A touch older than the lease's last touch does
// not move the last touch back (beats may be serialised out of order).
//
// Touch of an existing id is O(1) and does not allocate. Only a revive does more: it pushes
// onto the heap, O(log n) amortised, which may grow it.
func (l *Leases[K]) Touch(id K, now time.Time) (found, revived bool) {
	slot, ok := l.index[id]
	if !ok {
		return false, false
	}
	b := &l.beats[slot]
	if t := now.UnixNano(); t > b.last {
		b.last = t
	}
	// The common case stops here: the deadline moved later, so the lease's heap element is
	// now early, and Expire re-arms it when it pops. That is the lazy deadline.
	if b.healthy {
		return true, false
	}
	// A revive makes Unhealthy the next threshold again, which may be earlier than the Expire
	// deadline the lease is scheduled at.
	b.healthy = true
	l.rearmIfEarlier(slot)
	return true, true
}

// Remove drops id's lease; it reports whether there was one.
func (l *Leases[K]) Remove(id K) bool {
	slot, ok := l.index[id]
	if !ok {
		return false
	}
	l.release(slot)
	l.tidy()
	return true
}

// Get reports the state of id's lease.
func (l *Leases[K]) Get(id K) (s State, ok bool) {
	slot, ok := l.index[id]
	if !ok {
		return State{}, false
	}
	b, e := &l.beats[slot], &l.entries[slot]
	return State{
		LastTouch: time.Unix(0, b.last),
		Healthy:   b.healthy,
		Timeouts:  Timeouts{Unhealthy: time.Duration(e.unhealthy), Expire: time.Duration(e.expire)},
	}, true
}

// Len returns the number of leases.
func (l *Leases[K]) Len() int { return len(l.index) }

// Next returns the earliest time at which Expire may have work to do (it may be earlier than a
// real transition because deadlines are lazy; calling Expire then is cheap). ok is false when
// there are no leases.
func (l *Leases[K]) Next() (at time.Time, ok bool) {
	// Every method leaves a live element on top (see tidy), so the top is the scheduled
	// deadline of some lease, which is never later than any lease's true deadline.
	if len(l.heap) == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, l.heap[0].at), true
}

// Expire processes every lease whose threshold is at or before now and calls fn once per
// transition: EventUnhealthy for a healthy lease past Unhealthy (but not past Expire),
// EventExpired for a lease past Expire (removed before fn is called; a lease that passes both
// thresholds in one call gets only EventExpired). Events come in the order of the thresholds
// that caused them; ties in any order. fn must not call methods of l; it may be nil. Expire
// returns the number of events.
func (l *Leases[K]) Expire(now time.Time, fn func(id K, ev Event)) int {
	t := now.UnixNano()
	n := 0
	for len(l.heap) > 0 {
		top := l.heap[0]
		if !l.live(top) {
			l.heap.pop()
			continue
		}
		if top.at > t {
			break
		}
		if l.step(top, t, fn) {
			n++
		}
	}
	return n
}

// step handles the live element on top of the heap, which is due at t, and reports whether it
// called fn. It fires an event only when the element is at the lease's true threshold, so
// events come in threshold order.
func (l *Leases[K]) step(top deadline, t int64, fn func(K, Event)) bool {
	next := l.next(top.slot)
	if top.at < next {
		// Touched since it was scheduled: re-arm at the true deadline. This happens at most
		// once per timeout period per lease, however often it is touched.
		l.rearmTop(top.slot, next)
		return false
	}
	b, e := &l.beats[top.slot], &l.entries[top.slot]
	if b.healthy && e.unhealthy > 0 {
		b.healthy = false
		expire := addSat(b.last, e.expire)
		l.rearmTop(top.slot, expire)
		if expire <= t {
			// It expires in this same call; report only that.
			return false
		}
		if fn != nil {
			fn(e.id, EventUnhealthy)
		}
		return true
	}
	id := e.id
	l.heap.pop()
	l.release(top.slot)
	if fn != nil {
		fn(id, EventExpired)
	}
	return true
}

// live reports whether d still stands for its slot's lease. A slot's gen changes whenever its
// lease is rescheduled or released, so every lease has exactly one live element and any
// other element for the slot, older or from a previous lease, is stale.
func (l *Leases[K]) live(d deadline) bool {
	return l.beats[d.slot].gen == d.gen
}

// arm gives slot's lease a new heap element at at; its previous element, if any, goes stale.
func (l *Leases[K]) arm(slot int32, at int64) {
	l.beats[slot].gen++
	l.entries[slot].sched = at
	l.heap.push(deadline{at: at, slot: slot, gen: l.beats[slot].gen})
}

// rearmTop is arm for the lease whose live element is on top of the heap: it replaces that
// element instead of leaving it stale.
func (l *Leases[K]) rearmTop(slot int32, at int64) {
	l.beats[slot].gen++
	l.entries[slot].sched = at
	l.heap.replaceTop(deadline{at: at, slot: slot, gen: l.beats[slot].gen})
}

// rearmIfEarlier schedules slot's lease at its true deadline if that is earlier than where it
// is scheduled.
//
// Deadlines are lazy: a touch only moves the true deadline later, so the lease's element is
// then early, never late, and Expire re-arms it when it pops. The exceptions are the calls that
// move the true deadline earlier: a touch that revives an unhealthy lease (scheduled at Expire,
// now due at Unhealthy again) and a Put that shortens the timeouts or resets an unhealthy lease.
// Only then is a new element pushed; the old one goes stale and is dropped when it reaches the
// top, or by compaction.
func (l *Leases[K]) rearmIfEarlier(slot int32) {
	if next := l.next(slot); next < l.entries[slot].sched {
		l.arm(slot, next)
		l.tidy()
	}
}

// alloc takes a slot for a new lease and indexes id to it.
func (l *Leases[K]) alloc(id K) int32 {
	if l.index == nil {
		l.index = make(map[K]int32)
	}
	var slot int32
	if n := len(l.free); n > 0 {
		slot = l.free[n-1]
		l.free = l.free[:n-1]
	} else {
		// Slots are int32 to keep heap elements at 16 bytes; 2^31 leases would need well
		// over 100 GB of slab.
		slot = int32(len(l.entries))
		l.beats = append(l.beats, beat{})
		l.entries = append(l.entries, entry[K]{})
	}
	l.entries[slot].id = id
	l.index[id] = slot
	return slot
}

// release frees slot's lease. Bumping gen makes its heap element stale.
func (l *Leases[K]) release(slot int32) {
	delete(l.index, l.entries[slot].id)
	l.entries[slot] = entry[K]{} // drops the id, so the slab does not keep it alive
	l.beats[slot] = beat{gen: l.beats[slot].gen + 1}
	l.free = append(l.free, slot)
}

// minCompact is how many stale elements the heap may hold beyond one per lease before it is
// compacted, so that a small set of leases does not pay for frequent rebuilds.
const minCompact = 64

// tidy restores two invariants after an operation that may leave stale elements behind: the
// top of the heap is live (so Next is accurate, and reports ok only while there are leases),
// and the heap holds at most 2*Len()+minCompact elements (so a Remove-heavy workload does not
// grow it without bound). A compaction costs O(heap) and happens only once more than half of
// the heap is stale, and a stale element is popped at most once, so both costs are amortised
// over the operations that made elements stale.
func (l *Leases[K]) tidy() {
	if len(l.heap) > 2*len(l.index)+minCompact {
		l.compact()
	}
	for len(l.heap) > 0 && !l.live(l.heap[0]) {
		l.heap.pop()
	}
}

// compact drops every stale element in O(heap) and restores the heap order. It reuses the
// heap's memory.
func (l *Leases[K]) compact() {
	h := l.heap[:0]
	for _, d := range l.heap {
		if l.live(d) {
			h = append(h, d)
		}
	}
	l.heap = h
	h.init()
}
