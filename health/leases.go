package health

import (
	"fmt"
	"hash/maphash"
	"math"
	"time"
)

// Timeouts of one lease. Unhealthy 0 disables the first threshold.
//
// Interval is not a threshold: it is the interval the lease's holder is asked to touch it at
// (a beat interval), kept with the lease for the caller to read back ([Leases.Get],
// [Intrusive.Interval]) and never used by the set. It is interned with the thresholds, so
// it costs a lease nothing: a caller that keeps it here rather than beside each lease saves
// 8 bytes a lease.
type Timeouts struct {
	Unhealthy time.Duration // time after the last touch at which the lease turns unhealthy (0: never)
	Expire    time.Duration // time after the last touch at which the lease expires and is removed; must be > 0
	Interval  time.Duration // the holder's touch interval, carried for the caller; must be >= 0 (0: none)
}

// Validate reports an error wrapping [ErrInvalidTimeouts] and naming the field and the rule it
// breaks if Expire <= 0, Unhealthy < 0, Unhealthy > Expire or Interval < 0.
func (t Timeouts) Validate() error {
	switch {
	case t.Expire <= 0:
		return fmt.Errorf("%w: Expire must be > 0, got %v", ErrInvalidTimeouts, t.Expire)
	case t.Unhealthy < 0:
		return fmt.Errorf("%w: Unhealthy must be >= 0 (0 disables it), got %v", ErrInvalidTimeouts, t.Unhealthy)
	case t.Unhealthy > t.Expire:
		return fmt.Errorf("%w: Unhealthy (%v) must not exceed Expire (%v)", ErrInvalidTimeouts, t.Unhealthy, t.Expire)
	case t.Interval < 0:
		return fmt.Errorf("%w: Interval must be >= 0 (0: none), got %v", ErrInvalidTimeouts, t.Interval)
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
// the caller serialises every call, including the read-only ones. The package documentation
// describes the lazy deadlines.
//
// Layout. With many leases, the cost of a touch is the cache misses it takes, so a lease's state
// is split by who reads it:
//
//   - The index is an open-addressing hash table (linear probing, a power-of-two number of
//     cells, hashed with [hash/maphash.Comparable] under a seed of its own), whose cells hold
//     the id and all that a touch reads and writes: the last touch, the healthy flag, the
//     lease's slot and the index of its Timeouts. A cell is 24 bytes for a pointer id, 32 for
//     a string. A touch reads and writes one cell, which is one cache miss when the table is
//     larger than the caches (two lines, fetched together, for the quarter of the 24-byte
//     cells that straddle a line). A Remove or an expiry empties its cell by shifting the
//     cells after it back, with no tombstones, so churn does not fill the table. The table
//     doubles before it gets more than 3/4 full and shrinks when it is less than 3/32 full,
//     never below 8 cells.
//   - A slab of 8 bytes a lease, by slot: the position of the lease's cell, which moves when
//     the table is resized or a deletion shifts it, and the generation that tells live heap
//     elements from stale ones. Expire reaches a lease through it: heap element, slot, cell.
//   - The heap, 16 bytes an element.
//   - Timeouts are interned: each distinct value is stored once, with a count of the leases
//     that have it, and a cell holds its index. Leases usually share a few values.
//
// A lease thus takes the table's share (from 32 bytes a lease when the table is 3/4 full to 64
// just after it doubles, for pointer ids), 8 bytes of slab and 16 of heap. The load limit is 3/4
// rather than 1/2: it saves a third of the table on average, and BenchmarkLeaseTouch found
// touches no slower (the README has its figures). String ids cost more: their bytes are memory
// of their own, which a probe reads to compare ids of the same length and the hash reads unless
// they are in the caches.
//
// Expire costs O(log n) per popped element (see the package documentation), plus, when they are
// not cached, a miss for the slot and then one for the cell, which depends on it; freeing a cell
// rehashes the cells that it may shift back.
type Leases[K comparable] struct {
	// The index: an open-addressing hash table with linear probing, whose cells hold each
	// lease's id and the state a touch reads and writes. len(cells) is 0 or a power of two
	// of at least minCells, and the table is never fuller than maxLoadNum/maxLoadDen, so every
	// probe ends at an empty cell.
	cells []cell[K]
	n     int            // used cells: the number of leases
	seed  maphash.Seed   // made with the table, on the first Put
	hash  func(K) uint64 // tests only: replaces maphash, to force collisions; nil otherwise

	// Slots name leases in the heap: a lease keeps its slot for life, while its cell moves
	// when the table grows or shrinks and when a deletion shifts it back.
	slots []slotState
	free  uint32 // first free slot + 1, 0 if none; the free slots are chained through pos

	// The distinct Timeouts in use, so that a cell refers to its lease's Timeouts with a
	// 31-bit index instead of holding 24 bytes of them.
	tt interner

	heap deadlines // exactly one live element per lease, plus stale ones
}

// cell is one entry of the hash table: everything a Touch reads or writes, so that a touch of
// a lease not in the caches costs one cache miss (a 24-byte cell for pointer ids). Expire
// reaches a lease's cell from its slot through [slotState.pos]. An empty cell is all zero, so
// its key is the zero K, which may also be an id: ref, not key, tells whether a cell is used.
type cell[K comparable] struct {
	key  K
	last int64  // last touch, Unix nanoseconds
	ref  uint32 // the lease's slot + 1; 0 marks an empty cell
	meta uint32 // bit 0 (healthyBit): healthy; bits 1-31: index of the lease's Timeouts in Leases.tt
}

const healthyBit = 1

// slotState is the part of a lease that lives by slot: 8 bytes. There is no scheduled time:
// see [Leases.rearmIfEarlier].
type slotState struct {
	pos uint32 // index of the lease's cell; for a free slot, the next free slot + 1 (0: none)
	gen uint32 // bumped on every (re)scheduling and on release; see [Leases.live]
}

// interned is an entry of an interner.
type interned struct {
	t    Timeouts
	refs uint32 // leases with these timeouts; 0 for a free entry
}

const (
	// minCells is the smallest table: a Leases that held leases never shrinks below it.
	minCells = 8
	// The table doubles before it gets fuller than maxLoadNum/maxLoadDen, and shrinks once
	// it is less than an eighth of that full, to the size that makes it at most half as full
	// as the limit. So a resize is followed by as many calls as it moved cells before the
	// next one, and its cost is amortised over them. See the package documentation for how
	// the load was chosen.
	maxLoadNum, maxLoadDen = 3, 4
)

// hashOf returns the hash of id under the table's seed.
func (l *Leases[K]) hashOf(id K) uint64 {
	if l.hash != nil {
		return l.hash(id)
	}
	return maphash.Comparable(l.seed, id)
}

// find returns the index of id's cell and true or, if id has no lease, the index of the empty
// cell where the probe for it ends and false. The table must not be empty.
func (l *Leases[K]) find(id K) (int, bool) {
	cells := l.cells
	mask := len(cells) - 1
	for i := int(l.hashOf(id)) & mask; ; i = (i + 1) & mask {
		c := &cells[i]
		if c.ref == 0 {
			return i, false
		}
		if c.key == id {
			return i, true
		}
	}
}

// next returns the true next threshold of the lease in c (interner.next).
func (l *Leases[K]) next(c *cell[K]) int64 { return l.tt.next(c.last, c.meta) }

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
	if l.cells == nil {
		l.seed = maphash.MakeSeed()
		l.cells = make([]cell[K], minCells)
	}
	i, ok := l.find(id)
	if !ok {
		l.insert(i, id, now.UnixNano(), t)
		return nil
	}
	c := &l.cells[i]
	old := l.next(c)
	if ti := c.meta >> 1; l.tt.entries[ti].t != t {
		c.meta = l.tt.intern(t)<<1 | c.meta&healthyBit
		l.tt.unintern(ti)
	}
	c.last = now.UnixNano()
	c.meta |= healthyBit
	// A reset moves the deadline earlier if the new timeouts are shorter, the lease was
	// unhealthy (its next threshold is Unhealthy again) or now is older than the last touch;
	// later is handled lazily.
	l.rearmIfEarlier(c, old)
	return nil
}

// insert adds the lease for id, which has none, at cell i, the end of the probe for id.
func (l *Leases[K]) insert(i int, id K, last int64, t Timeouts) {
	if (l.n+1)*maxLoadDen > len(l.cells)*maxLoadNum {
		l.grow()
		i, _ = l.find(id)
	}
	var slot int32
	if l.free != 0 {
		slot = int32(l.free - 1)
		l.free = l.slots[slot].pos
	} else {
		// Slots are int32 to keep heap elements at 16 bytes; 2^31 leases would need well
		// over 100 GB.
		slot = int32(len(l.slots))
		l.slots = append(l.slots, slotState{})
	}
	l.slots[slot].pos = uint32(i)
	c := &l.cells[i]
	*c = cell[K]{key: id, last: last, ref: uint32(slot) + 1, meta: l.tt.intern(t)<<1 | healthyBit}
	l.n++
	l.arm(slot, l.next(c))
}

// Touch renews id's lease at now. found is false if id has no lease. revived is true if the
// lease was unhealthy and is now healthy again. A touch older than the lease's last touch does
// not move the last touch back (beats may be serialised out of order).
//
// Touch of an existing id is O(1), reads and writes only the id's cell, and does not allocate.
// Only a revive does more: it pushes onto the heap, O(log n) amortised, which may grow it.
func (l *Leases[K]) Touch(id K, now time.Time) (found, revived bool) {
	if l.n == 0 {
		return false, false
	}
	// find, with hashOf, inlined by hand. Saving the two calls makes a touch of a million
	// leases a few percent faster: the CPU overlaps the cache misses of successive touches,
	// and fewer instructions a touch let it overlap more of them. Keep the two in step.
	var h uint64
	if l.hash != nil {
		h = l.hash(id)
	} else {
		h = maphash.Comparable(l.seed, id)
	}
	cells := l.cells
	mask := len(cells) - 1
	i := int(h) & mask
	for {
		if cells[i].ref == 0 {
			return false, false
		}
		if cells[i].key == id {
			break
		}
		i = (i + 1) & mask
	}
	c := &cells[i]
	t := now.UnixNano()
	// The common case stops here: the deadline moved later, so the lease's heap element is
	// now early, and Expire re-arms it when it pops. That is the lazy deadline.
	if c.meta&healthyBit != 0 {
		if t > c.last {
			c.last = t
		}
		return true, false
	}
	// A revive makes Unhealthy the next threshold again, which may be earlier than the Expire
	// deadline the lease is scheduled at.
	old := l.next(c)
	if t > c.last {
		c.last = t
	}
	c.meta |= healthyBit
	l.rearmIfEarlier(c, old)
	return true, true
}

// Remove drops id's lease; it reports whether there was one.
func (l *Leases[K]) Remove(id K) bool {
	if l.n == 0 {
		return false
	}
	i, ok := l.find(id)
	if !ok {
		return false
	}
	l.release(i)
	l.tidy()
	l.maybeShrink()
	return true
}

// Get reports the state of id's lease.
func (l *Leases[K]) Get(id K) (s State, ok bool) {
	if l.n == 0 {
		return State{}, false
	}
	i, ok := l.find(id)
	if !ok {
		return State{}, false
	}
	c := &l.cells[i]
	return l.tt.state(c.last, c.meta), true
}

// Len returns the number of leases.
func (l *Leases[K]) Len() int { return l.n }

// Next returns the earliest time at which Expire may have work to do (it may be earlier than a
// real transition because deadlines are lazy; calling Expire then is cheap). ok is false when
// there are no leases.
func (l *Leases[K]) Next() (at time.Time, ok bool) { return l.heap.next() }

// Expire processes every lease whose threshold is at or before now and calls fn once per
// transition: EventUnhealthy for a healthy lease past Unhealthy (but not past Expire),
// EventExpired for a lease past Expire (removed before fn is called; a lease that passes both
// thresholds in one call gets only EventExpired). Events come in the order of the thresholds
// that caused them; ties in any order. fn must not call methods of l; it may be nil. Expire
// returns the number of events.
func (l *Leases[K]) Expire(now time.Time, fn func(id K, ev Event)) int {
	if fn == nil {
		return l.ExpireAt(now, nil)
	}
	return l.ExpireAt(now, func(id K, ev Event, _ time.Time) { fn(id, ev) })
}

// ExpireAt is [Leases.Expire] that also tells fn the threshold that caused each event: the
// lease's last touch plus its Unhealthy or Expire timeout, at or before now. A caller that
// derives deadlines from an event (a clean-up due some time after an expiry) counts from at,
// so that processing late (a stall, a clock moved in one big step) does not move them.
func (l *Leases[K]) ExpireAt(now time.Time, fn func(id K, ev Event, at time.Time)) int {
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
	l.maybeShrink()
	return n
}

// step handles the live element on top of the heap, which is due at t, as interner.step
// decides, and reports whether it called fn.
func (l *Leases[K]) step(top deadline, t int64, fn func(K, Event, time.Time)) bool {
	i := int(l.slots[top.slot].pos)
	c := &l.cells[i]
	id := c.key
	tr, at, event := l.tt.step(c.last, &c.meta, top.at, t)
	switch tr {
	case stepRearm:
		l.rearmTop(top.slot, at)
		return false
	case stepUnhealthy:
		l.rearmTop(top.slot, at)
		if fn != nil {
			fn(id, EventUnhealthy, time.Unix(0, event))
		}
		return true
	}
	l.heap.pop()
	l.release(i)
	if fn != nil {
		fn(id, EventExpired, time.Unix(0, event))
	}
	return true
}

// live reports whether d still stands for its slot's lease. A slot's gen changes whenever its
// lease is rescheduled or released, so every lease has exactly one live element and any
// other element for the slot, older or from a previous lease, is stale.
func (l *Leases[K]) live(d deadline) bool {
	return l.slots[d.slot].gen == d.gen
}

// arm gives slot's lease a new heap element at at (deadlines.arm).
func (l *Leases[K]) arm(slot int32, at int64) { l.heap.arm(&l.slots[slot].gen, slot, at) }

// rearmTop is arm for the lease whose live element is on top of the heap (deadlines.rearmTop).
func (l *Leases[K]) rearmTop(slot int32, at int64) {
	l.heap.rearmTop(&l.slots[slot].gen, slot, at)
}

// rearmIfEarlier schedules the lease in c at its true deadline if that is earlier than old, its
// true deadline before the call that changed it.
//
// Deadlines are lazy: a lease's live element is never later than its true deadline, but may be
// earlier, since a touch only moves the true deadline later and leaves the element alone;
// Expire re-arms it when it pops. The exceptions are the calls that move the true deadline
// earlier: a touch that revives an unhealthy lease (scheduled at Expire, now due at Unhealthy
// again) and a Put that shortens the timeouts or resets an unhealthy lease. Only then is a new
// element pushed; the old one goes stale and is dropped when it reaches the top, or by
// compaction. Comparing with old rather than with where the lease is scheduled (which is not
// stored) may push when the element was early enough already; that costs a push, never a late
// event.
func (l *Leases[K]) rearmIfEarlier(c *cell[K], old int64) {
	if next := l.next(c); next < old {
		l.arm(int32(c.ref-1), next)
		l.tidy()
	}
}

// release frees the lease in cell i: its Timeouts, its slot (bumping gen makes its heap
// element stale) and its cell.
func (l *Leases[K]) release(i int) {
	c := &l.cells[i]
	l.tt.unintern(c.meta >> 1)
	slot := c.ref - 1
	s := &l.slots[slot]
	s.gen++
	s.pos = l.free
	l.free = slot + 1
	l.n--
	l.deleteCell(i)
}

// deleteCell empties cell i by backward shift: each following cell of the run up to the next
// empty cell moves back into the hole if its probe passes the hole, and the hole moves on to
// where it was. No tombstones are left, so the table never fills with them and probes stay as
// short as its load allows.
func (l *Leases[K]) deleteCell(i int) {
	cells := l.cells
	mask := len(cells) - 1
	for j := (i + 1) & mask; cells[j].ref != 0; j = (j + 1) & mask {
		// The cell at j may fill the hole at i only if its home cell h is not between i
		// and j: going back from j, the hole must come no later than h.
		h := int(l.hashOf(cells[j].key)) & mask
		if (j-h)&mask >= (j-i)&mask {
			cells[i] = cells[j]
			l.slots[cells[i].ref-1].pos = uint32(i)
			i = j
		}
	}
	cells[i] = cell[K]{} // drops the id, so the table does not keep it alive
}

// emptyCellFor returns the first empty cell on key's probe path in a table
// being rebuilt (which holds no copy of key yet).
func (l *Leases[K]) emptyCellFor(key K, mask int) int {
	i := int(l.hashOf(key)) & mask
	for l.cells[i].ref != 0 {
		i = (i + 1) & mask
	}
	return i
}

// grow doubles the table.
func (l *Leases[K]) grow() {
	old := l.cells
	l.cells = make([]cell[K], 2*len(old))
	mask := len(l.cells) - 1
	for k := range old {
		c := &old[k]
		if c.ref == 0 {
			continue
		}
		i := l.emptyCellFor(c.key, mask)
		l.cells[i] = *c
		l.slots[c.ref-1].pos = uint32(i)
	}
}

// maybeShrink shrinks the table once it is less than an eighth as full as the limit. Then it
// rebuilds the slots and the heap too: the leases get dense slots 0..n-1, which drops the free
// ones, and the heap keeps its live elements only, in new memory sized for them.
func (l *Leases[K]) maybeShrink() {
	size := len(l.cells)
	if size <= minCells || l.n*maxLoadDen*8 >= size*maxLoadNum {
		return
	}
	for size > minCells && l.n*maxLoadDen*2 <= (size/2)*maxLoadNum {
		size /= 2
	}
	old, oldSlots := l.cells, l.slots
	l.cells = make([]cell[K], size)
	l.slots = make([]slotState, l.n)
	l.free = 0
	mask := size - 1
	slot := uint32(0)
	for k := range old {
		c := &old[k]
		if c.ref == 0 {
			continue
		}
		i := l.emptyCellFor(c.key, mask)
		o := &oldSlots[c.ref-1]
		l.slots[slot] = slotState{pos: uint32(i), gen: o.gen}
		o.pos = slot // the old slab is dropped: its pos now maps old slots to new ones
		l.cells[i] = *c
		l.cells[i].ref = slot + 1
		slot++
	}
	l.heap = l.heap.rebuilt(l.n, func(d deadline) (int32, bool) {
		o := &oldSlots[d.slot]
		return int32(o.pos), o.gen == d.gen
	})
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
	l.heap = l.heap.tidy(l.n, l.live)
}

// tidy is Leases.tidy's work on h, for a set of n leases whose live elements live tells: it
// compacts h (dropping every stale element in O(heap), in h's memory, and restoring the heap
// order) once it holds more than 2n+minCompact elements, then pops stale elements off the top.
func (h deadlines) tidy(n int, live func(deadline) bool) deadlines {
	if len(h) > 2*n+minCompact {
		kept := h[:0]
		for _, d := range h {
			if live(d) {
				kept = append(kept, d)
			}
		}
		h = kept
		h.init()
	}
	for len(h) > 0 && !live(h[0]) {
		h.pop()
	}
	return h
}
