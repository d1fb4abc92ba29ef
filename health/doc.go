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
// Leases keeps its leases in a slab indexed by a map from id to slot, and a min-heap of
// (deadline, slot, generation) elements with one live element per lease. A touch only writes
// the lease's last-touch time: O(1), one map lookup, no allocation and no heap operation. The
// lease's element is then earlier than its true deadline. When it pops, Expire recomputes the
// deadline from the last touch and either pushes it back at the true deadline or fires the
// transition. A lease that is touched every second with a 15 s threshold thus costs one heap
// re-arm (O(log n)) per 15 s, not one per touch, and Expire never scans all leases: it costs
// O(log n) per popped element: per event, per re-arm and per stale element.
//
// The true deadline moves earlier in two cases only: a touch that revives an unhealthy lease
// (its next threshold is Unhealthy again, not Expire) and a Put that shortens the timeouts or
// resets an unhealthy lease. Then a new element is pushed and the old one goes stale. Stale elements, from these and from removed
// leases, are dropped when they reach the top, and the heap is compacted in place when they
// make up more than half of it, so memory stays proportional to the number of leases.
//
// Because of the early elements, [Leases.Next] may return a time at which there is nothing to
// report; calling Expire then is cheap and just re-arms.
//
// # Concurrency
//
// A Leases is not safe for concurrent use; the caller serialises all calls, read-only ones
// such as Get, Len and Next included. The callback passed to Expire runs synchronously and must
// not call methods of the same Leases.
package health
