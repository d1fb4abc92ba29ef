// Package health decides when instances are healthy.
//
// For now it holds beat leases ([Leases]): the deadlines of beat publishers and session
// keep-alives. The active checkers (TCP connect, HTTP GET, MySQL) and the scheduler that runs
// them will be added to this package later.
//
// # Leases
//
// A lease belongs to an id and has two thresholds measured from its last touch (see
// [Timeouts]): after Unhealthy it turns unhealthy but is kept, after Expire it is removed.
// [Leases.Put] creates or resets a lease, [Leases.Touch] renews it (and revives an unhealthy
// one), and [Leases.Expire] reports the transitions that are due:
//
//	var l health.Leases[string]
//	_ = l.Put("10.0.0.7:8848", now, health.Timeouts{Unhealthy: 15 * time.Second, Expire: 30 * time.Second})
//	l.Touch("10.0.0.7:8848", now) // on every beat
//	l.Expire(now, func(id string, ev health.Event) { ... }) // when Next says so
//
// Leases is a pure core: it starts no goroutines and never reads a clock. Every call takes the
// current time from the caller, and [Leases.Next] tells the caller's driver when to call Expire
// next. Times are kept as Unix nanoseconds, so times from a fake clock, which carry no monotonic
// reading, work the same as real ones; a step of the wall clock moves every deadline with it.
//
// # Lazy deadlines
//
// Every lease has exactly one live element in a min-heap of (deadline, slot, generation)
// elements, and that element is never later than the lease's true deadline, but may be earlier.
// A touch only writes the lease's last-touch time: O(1), no allocation and no heap operation.
// The lease's element is then earlier than its true deadline. When it pops, Expire recomputes
// the deadline from the last touch and either re-arms the lease at its true deadline or fires
// the transition. A lease that is touched every second with a 15 s threshold thus costs one
// heap re-arm (O(log n)) per 15 s, not one per touch, and Expire never scans all leases: it
// costs O(log n) per popped element: per event, per re-arm and per stale element.
//
// The true deadline moves earlier in two cases only: a touch that revives an unhealthy lease
// (its next threshold is Unhealthy again, not Expire) and a Put that shortens the timeouts or
// resets an unhealthy lease. Then a new element is pushed and the old one goes stale. Stale
// elements, from these and from removed leases, are dropped when they reach the top, and the
// heap is compacted in place when they make up more than half of it, so memory stays
// proportional to the number of leases.
//
// Because of the early elements, [Leases.Next] may return a time at which there is nothing to
// report; calling Expire then is cheap and just re-arms.
//
// # Layout and costs
//
// With many leases, the cost of a touch is the cache misses it takes, so a lease's state is
// split by who reads it:
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
// On the 2-core development VM, with 1,000,000 leases keyed by pointers, a touch costs about
// 60-100 ns depending on the load from other tenants of the machine: no more than a bare
// lookup in a Go map of the same ids, and less than half of what the former layout, a Go map
// from id to slot and the state in slabs by slot, cost. The leases take about 76 bytes each
// (the former layout: 108): 50 for the table (2^21 cells, half full), 8 for the slab, 16 for
// the heap and 2 of slack. The table's share depends on where the number of leases falls between
// two powers of two: from 32 bytes a lease when it is 3/4 full to 64 just after it doubles.
// The load limit of 3/4 rather than 1/2 was measured: it saves a third of the table on average
// and touches were no slower (at 700,000 leases they were faster, since the table was half as
// large). String ids cost more: their bytes are memory of their own, which a probe reads to
// compare ids of the same length and the hash reads unless they are in the caches.
//
// Expire costs O(log n) per popped element as above, plus, when they are not cached, a miss
// for the slot and then one for the cell, which depends on it; freeing a cell rehashes the
// cells that it may shift back.
//
// # Concurrency
//
// A Leases is not safe for concurrent use; the caller serialises all calls, read-only ones
// such as Get, Len and Next included. The callback passed to Expire runs synchronously and must
// not call methods of the same Leases.
package health
