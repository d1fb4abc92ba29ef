package health

import "time"

// deadline is one element of the deadline heap: "look at slot's lease at time at". It stands for
// the lease only while gen equals the slot's gen; otherwise it is stale and is dropped when it
// reaches the top (see [Leases.live]).
type deadline struct {
	at   int64 // Unix nanoseconds
	slot int32 // index into Leases.slots
	gen  uint32
}

// deadlines is a 4-ary min-heap ordered by at. It is hand-written rather than built on
// container/heap so that pushes and pops are direct, inlinable code with no interface calls,
// and 4-ary because its shallower tree touches fewer cache lines per sift than a binary heap.
type deadlines []deadline

const arity = 4

// next is the time of the top element: the earliest time at which Expire may have work to
// do. Every method of the sets leaves a live element on top (see tidy), so the top is the
// scheduled deadline of some lease, never later than any lease's true deadline.
func (h deadlines) next() (at time.Time, ok bool) {
	if len(h) == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, h[0].at), true
}

// arm gives the lease of slot, whose slot's generation is *gen, a new element at at; its
// previous element, if any, goes stale.
func (h *deadlines) arm(gen *uint32, slot int32, at int64) {
	*gen++
	h.push(deadline{at: at, slot: slot, gen: *gen})
}

// rearmTop is arm for the lease whose live element is on top: it replaces that element
// instead of leaving it stale.
func (h deadlines) rearmTop(gen *uint32, slot int32, at int64) {
	*gen++
	h.replaceTop(deadline{at: at, slot: slot, gen: *gen})
}

// rebuilt returns a new heap, sized for n leases, of h's live elements moved to their new
// slots: moved tells an element's new slot, and whether it is live.
func (h deadlines) rebuilt(n int, moved func(deadline) (int32, bool)) deadlines {
	out := make(deadlines, 0, n)
	for _, d := range h {
		if slot, live := moved(d); live {
			d.slot = slot
			out = append(out, d)
		}
	}
	out.init()
	return out
}

func (h *deadlines) push(d deadline) {
	*h = append(*h, d)
	h.up(len(*h) - 1)
}

// pop removes the minimum. The heap must not be empty.
func (h *deadlines) pop() {
	s := *h
	last := len(s) - 1
	s[0] = s[last]
	*h = s[:last]
	if last > 0 {
		h.down(0)
	}
}

// replaceTop replaces the minimum with d: one sift instead of a pop and a push.
func (h deadlines) replaceTop(d deadline) {
	h[0] = d
	h.down(0)
}

// init restores the heap order of arbitrary contents in O(n).
func (h deadlines) init() {
	if len(h) < 2 {
		return // (len(h)-2)/arity truncates to 0, and down(0) of an empty heap panics
	}
	for i := (len(h) - 2) / arity; i >= 0; i-- {
		h.down(i)
	}
}

func (h deadlines) up(i int) {
	d := h[i]
	for i > 0 {
		p := (i - 1) / arity
		if h[p].at <= d.at {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = d
}

func (h deadlines) down(i int) {
	d := h[i]
	for {
		first := arity*i + 1
		if first >= len(h) {
			break
		}
		m := h.minChild(first)
		if h[m].at >= d.at {
			break
		}
		h[i] = h[m]
		i = m
	}
	h[i] = d
}

// minChild returns the index of the earliest of the children that start at first. Sifts spend
// most of their time here, so the common case of four children is a tournament of three
// comparisons with a single bounds check, mostly compiled to conditional moves.
func (h deadlines) minChild(first int) int {
	if first+arity > len(h) {
		m := first
		for c := first + 1; c < len(h); c++ {
			if h[c].at < h[m].at {
				m = c
			}
		}
		return m
	}
	k := (*[arity]deadline)(h[first:])
	a, b := 0, 2
	if k[1].at < k[0].at {
		a = 1
	}
	if k[3].at < k[2].at {
		b = 3
	}
	if k[b].at < k[a].at {
		a = b
	}
	return first + a
}
