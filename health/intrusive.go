package health

import "time"

// Lease is the state of one lease of an [Intrusive] set, held by the leased object itself: 16
// bytes, its last touch, its slot in the set and its health and timeouts. Its zero value is no
// lease. The object must not be copied while it holds a lease, and belongs to one set at most.
type Lease struct {
	last int64  // last touch, Unix nanoseconds
	ref  uint32 // the lease's slot + 1; 0: no lease
	meta uint32 // bit 0 (healthyBit): healthy; bits 1-31: index of its Timeouts in the set's table
}

// Holder is a leased object of an [Intrusive] set: a pointer whose Lease method returns the
// Lease it holds. With create false it may return nil, when the object has no room for one yet
// (it then has no lease); with create true it must return its Lease, making room if need be.
type Holder interface {
	comparable
	Lease(create bool) *Lease
}

// Intrusive tracks deadlines as [Leases] does, with the same methods and the same lazy
// deadlines, for ids that hold their lease's state themselves (a [Lease] each) rather than in a
// hash table: a Put, Touch or Remove reads and writes the id's own Lease, which its caller has
// just read (a registration, a beat), and the slot it names, instead of a hashed cell of a
// table that is larger than the caches. There is no hashing, so no probe sequence an id could
// be chosen to lengthen, and no id's memory is ever moved: a Remove frees the lease's slot, in
// O(1). (A shrink gives every lease a new slot number, kept in its holder's Lease.)
//
// A lease takes its holder's 16 bytes, a slot of 16 bytes (the id, so that Expire reaches it,
// and the generation that tells live heap elements from stale ones) and 16 bytes of heap. The
// slots of removed leases are reused; when fewer than an eighth are in use, Expire and Remove
// rebuild the slots and the heap densely, as [Leases] shrinks its table. Not safe for
// concurrent use. Its zero value is ready to use.
type Intrusive[P Holder] struct {
	slots []islot[P]
	free  uint32 // first free slot + 1, 0 if none; the free slots are chained through next
	n     int    // leases
	tt    interner
	heap  deadlines
}

// islot is the part of a lease that lives by slot.
type islot[P Holder] struct {
	id   P      // the lease's id; zero for a free slot (so that the set keeps no removed id alive)
	gen  uint32 // bumped on every (re)scheduling and on release (see Intrusive.live)
	next uint32 // for a free slot, the next free slot + 1 (0: none)
}

// minSlots is the size below which an Intrusive never rebuilds its slots.
const minSlots = 64

// Put creates the lease for id, or resets an existing one: last touch = now, healthy, timeouts
// replaced. It returns an error only if t is invalid (nothing is changed then).
func (l *Intrusive[P]) Put(id P, now time.Time, t Timeouts) error {
	if err := t.Validate(); err != nil {
		return err
	}
	c := id.Lease(true)
	if c.ref == 0 {
		var slot int32
		if l.free != 0 {
			slot = int32(l.free - 1)
			l.free = l.slots[slot].next
		} else {
			slot = int32(len(l.slots)) // int32: see Leases.insert
			l.slots = append(l.slots, islot[P]{})
		}
		s := &l.slots[slot]
		s.id, s.next = id, 0
		*c = Lease{last: now.UnixNano(), ref: uint32(slot) + 1, meta: l.tt.intern(t)<<1 | healthyBit}
		l.n++
		l.arm(slot, l.next(c))
		return nil
	}
	old := l.next(c)
	if ti := c.meta >> 1; l.tt.entries[ti].t != t {
		c.meta = l.tt.intern(t)<<1 | c.meta&healthyBit
		l.tt.unintern(ti)
	}
	c.last = now.UnixNano()
	c.meta |= healthyBit
	l.rearmIfEarlier(c, old) // see Leases.Put
	return nil
}

// Touch renews id's lease at now, as [Leases.Touch] does. It does not allocate but to revive.
func (l *Intrusive[P]) Touch(id P, now time.Time) (found, revived bool) {
	c := id.Lease(false)
	if c == nil || c.ref == 0 {
		return false, false
	}
	t := now.UnixNano()
	if c.meta&healthyBit != 0 {
		if t > c.last {
			c.last = t
		}
		return true, false
	}
	old := l.next(c)
	if t > c.last {
		c.last = t
	}
	c.meta |= healthyBit
	l.rearmIfEarlier(c, old)
	return true, true
}

// Remove drops id's lease; it reports whether there was one.
func (l *Intrusive[P]) Remove(id P) bool {
	c := id.Lease(false)
	if c == nil || c.ref == 0 {
		return false
	}
	l.release(c)
	l.tidy()
	l.maybeShrink()
	return true
}

// Get reports the state of id's lease.
func (l *Intrusive[P]) Get(id P) (s State, ok bool) {
	c := id.Lease(false)
	if c == nil || c.ref == 0 {
		return State{}, false
	}
	return l.tt.state(c.last, c.meta), true
}

// Interval returns the Interval of the Timeouts of the lease in c, 0 for no lease. c is what
// an id of l returns from Lease(false), read by the caller: Interval takes it rather than the
// id so that a hot path (a beat's answer) calls no method of the id through the generic
// dictionary, and inlines. It reads c and the set's table of distinct Timeouts, which is small
// enough to stay in the caches.
func (l *Intrusive[P]) Interval(c *Lease) time.Duration {
	if c == nil || c.ref == 0 {
		return 0
	}
	return l.tt.entries[c.meta>>1].t.Interval
}

// Len returns the number of leases.
func (l *Intrusive[P]) Len() int { return l.n }

// Next is [Leases.Next].
func (l *Intrusive[P]) Next() (at time.Time, ok bool) { return l.heap.next() }

// Expire is [Leases.Expire].
func (l *Intrusive[P]) Expire(now time.Time, fn func(id P, ev Event)) int {
	if fn == nil {
		return l.ExpireAt(now, nil)
	}
	return l.ExpireAt(now, func(id P, ev Event, _ time.Time) { fn(id, ev) })
}

// ExpireAt is [Leases.ExpireAt]: the same events, in the same order, at the same thresholds.
func (l *Intrusive[P]) ExpireAt(now time.Time, fn func(id P, ev Event, at time.Time)) int {
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

// step is [Leases.step].
func (l *Intrusive[P]) step(top deadline, t int64, fn func(P, Event, time.Time)) bool {
	id := l.slots[top.slot].id
	c := id.Lease(false)
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
	l.release(c)
	if fn != nil {
		fn(id, EventExpired, time.Unix(0, event))
	}
	return true
}

// next returns the true next threshold of the lease in c (interner.next).
func (l *Intrusive[P]) next(c *Lease) int64 { return l.tt.next(c.last, c.meta) }

func (l *Intrusive[P]) live(d deadline) bool { return l.slots[d.slot].gen == d.gen }

func (l *Intrusive[P]) arm(slot int32, at int64) { l.heap.arm(&l.slots[slot].gen, slot, at) }

func (l *Intrusive[P]) rearmTop(slot int32, at int64) {
	l.heap.rearmTop(&l.slots[slot].gen, slot, at)
}

// rearmIfEarlier is [Leases.rearmIfEarlier].
func (l *Intrusive[P]) rearmIfEarlier(c *Lease, old int64) {
	if next := l.next(c); next < old {
		l.arm(int32(c.ref-1), next)
		l.tidy()
	}
}

// release frees the lease in c: its Timeouts, its slot (bumping gen makes its heap element
// stale) and c itself.
func (l *Intrusive[P]) release(c *Lease) {
	l.tt.unintern(c.meta >> 1)
	slot := c.ref - 1
	s := &l.slots[slot]
	var zero P
	s.id = zero
	s.gen++
	s.next = l.free
	l.free = slot + 1
	l.n--
	*c = Lease{}
}

// tidy is [Leases.tidy].
func (l *Intrusive[P]) tidy() { l.heap = l.heap.tidy(l.n, l.live) }

// maybeShrink rebuilds the slots and the heap densely once fewer than an eighth of the slots
// are in use: the leases get slots 0..n-1 (their holders' Leases are renumbered), and the heap
// keeps its live elements only, in new memory sized for them. Its O(slots + heap) cost is
// amortised over the removals that freed the slots.
func (l *Intrusive[P]) maybeShrink() {
	if len(l.slots) <= minSlots || l.n*8 >= len(l.slots) {
		return
	}
	old := l.slots
	l.slots = make([]islot[P], 0, 2*l.n)
	l.free = 0
	var zero P
	for i := range old {
		o := &old[i]
		if o.id == zero {
			continue
		}
		slot := uint32(len(l.slots))
		l.slots = append(l.slots, islot[P]{id: o.id, gen: o.gen})
		o.id.Lease(false).ref = slot + 1
		o.next = slot // the old slots are dropped: next now maps old slots to new ones
	}
	l.heap = l.heap.rebuilt(l.n, func(d deadline) (int32, bool) {
		o := &old[d.slot]
		return int32(o.next), o.id != zero && o.gen == d.gen
	})
}

// interner holds the distinct Timeouts in use, so that a lease (a Leases cell, a Lease) refers
// to its Timeouts with a 31-bit index instead of holding 24 bytes of them.
type interner struct {
	entries []interned
	index   map[Timeouts]uint32
	free    []uint32
}

// intern returns the index of t, adding it if no lease has it, and counts one more lease
// with it.
func (n *interner) intern(t Timeouts) uint32 {
	// Leases usually share a few values, among the first entries: a short
	// scan finds them without hashing t. A live entry's value is unique, so
	// it is the one the map would find.
	for i := range min(len(n.entries), 4) {
		if e := &n.entries[i]; e.refs > 0 && e.t == t {
			e.refs++
			return uint32(i)
		}
	}
	if i, ok := n.index[t]; ok {
		n.entries[i].refs++
		return i
	}
	if n.index == nil {
		n.index = make(map[Timeouts]uint32)
	}
	var i uint32
	if k := len(n.free); k > 0 {
		i = n.free[k-1]
		n.free = n.free[:k-1]
	} else {
		i = uint32(len(n.entries))
		n.entries = append(n.entries, interned{})
	}
	n.entries[i] = interned{t: t, refs: 1}
	n.index[t] = i
	return i
}

// unintern counts one lease less with the Timeouts at index i, freeing the entry at none.
func (n *interner) unintern(i uint32) {
	e := &n.entries[i]
	if e.refs--; e.refs == 0 {
		delete(n.index, e.t)
		*e = interned{}
		n.free = append(n.free, i)
	}
}

// state is the State of a lease last touched at last whose meta is meta.
func (n *interner) state(last int64, meta uint32) State {
	return State{LastTouch: time.Unix(0, last), Healthy: meta&healthyBit != 0, Timeouts: n.entries[meta>>1].t}
}

// leaseStep is what Expire does with a lease whose live heap element popped.
type leaseStep uint8

const (
	stepRearm     leaseStep = iota // schedule it again, at the time given; no event
	stepUnhealthy                  // it is unhealthy now: schedule it at its expiry; EventUnhealthy
	stepExpired                    // release it; EventExpired
)

// step decides the transition of a lease last touched at last whose meta is *meta, whose
// live heap element was due at top and popped at t, and marks it unhealthy in *meta if so.
// It returns the time to schedule it at (stepRearm, stepUnhealthy) and the threshold of the event
// (stepUnhealthy, stepExpired). An event is fired only at the lease's true threshold, so events come
// in threshold order; a lease that passes both thresholds at t gets only EventExpired.
func (n *interner) step(last int64, meta *uint32, top, t int64) (s leaseStep, at, event int64) {
	if next := n.next(last, *meta); top < next {
		// Touched since it was scheduled: re-arm at the true deadline. This happens at most
		// once per timeout period per lease, however often it is touched.
		return stepRearm, next, 0
	}
	to := &n.entries[*meta>>1].t
	expire := addSat(last, int64(to.Expire))
	if *meta&healthyBit != 0 && to.Unhealthy > 0 {
		*meta &^= healthyBit
		if expire <= t {
			return stepRearm, expire, 0 // it expires in this same call; report only that
		}
		return stepUnhealthy, expire, addSat(last, int64(to.Unhealthy))
	}
	return stepExpired, 0, expire
}

// next returns the true next threshold of a lease last touched at last whose meta is meta
// (healthyBit, and its Timeouts' index): Unhealthy while it is healthy and has one, Expire
// otherwise.
func (n *interner) next(last int64, meta uint32) int64 {
	t := &n.entries[meta>>1].t
	if meta&healthyBit != 0 && t.Unhealthy > 0 {
		return addSat(last, int64(t.Unhealthy))
	}
	return addSat(last, int64(t.Expire))
}
