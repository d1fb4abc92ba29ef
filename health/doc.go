// Package health decides when instances are healthy: beat leases ([Leases]), the deadlines of
// beat publishers and session keep-alives; and the active checks of persistent instances, the
// [Checker]s (TCP connect, HTTP GET, MySQL command, None) and the [Scheduler] that runs them and
// reports flips.
//
// # Usage
//
// Leases are a pure core: the caller passes the time and calls Expire when Next says so.
// [Intrusive] is the same set for ids that hold their lease's state themselves (a [Lease]
// each, found through [Holder]), with no table to hash into.
//
//	var l health.Leases[string] // the zero value is ready
//	t := health.Timeouts{Unhealthy: 15 * time.Second, Expire: 30 * time.Second}
//	err := l.Put("10.0.0.7:8848", now, t)
//	l.Touch("10.0.0.7:8848", now) // on every beat
//	next, ok := l.Next()          // when to call Expire
//	l.Expire(now, func(id string, ev health.Event) { ... })
//
// The Scheduler is a driver: it owns a goroutine and the clock, and reports flips.
//
//	cfg := health.DefaultConfig()
//	cfg.OnTransition = func(key model.InstanceKey, healthy bool, st health.Status) { ... }
//	s, err := health.NewScheduler(cfg) // validates, starts nothing
//	err = s.Start(ctx)
//	s.Set(key, health.Target{IP: ip, Port: port, Check: check}, healthy) // checked at once
//	st, ok := s.Status(key)
//	s.Remove(key)
//	err = s.Close() // cancels running checks, waits for every goroutine
//
// Tests on a fake clock move the clock, then call Settle: it runs the checks due at the clock's
// time and returns once they have run and their OnTransition calls have returned.
//
// # Leases
//
// A lease belongs to an id and has two thresholds measured from its last touch (see
// [Timeouts]): after Unhealthy it turns unhealthy but is kept, after Expire it is removed.
// [Leases.Put] creates or resets a lease. [Leases.Touch] renews it, and revives an unhealthy
// one. [Leases.Expire] reports the transitions that are due ([Leases.ExpireAt] also names each
// threshold).
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
// report; calling Expire then is cheap and just re-arms. How a lease's state is laid out in
// memory, and why, is described at the [Leases] type.
//
// # Concurrency
//
// A Leases is not safe for concurrent use; the caller serialises all calls, read-only ones
// such as Get, Len and Next included. The callback passed to Expire runs synchronously and must
// not call methods of the same Leases.
//
// # Checkers
//
// A [Checker] probes one [Target] (an instance's address and its cluster's
// [model.HealthCheck]) and returns a [Result]: healthy or not, whether a failure is
// definite, the latency and a readable reason. Every checker dials Check.Port when it is set,
// else the instance's port (Nacos's MySQL check always uses the instance port; here all types
// behave alike). The built-in checkers time out after 500 ms.
//
//   - [TCPChecker] connects and closes. Refused is definite; a timeout is not.
//   - [HTTPChecker] sends GET path with the configured headers (a "Host" header sets the
//     request's host) through one shared, pooled client, and does not follow redirects. The
//     instance is healthy iff the status is in ExpectedCodes (200 when empty; Nacos ignores
//     the setting and only accepts 200). An unexpected 3xx, 429, 502, 503 or 504 is an
//     ordinary failure, as it may pass; any other unexpected status is definite (Nacos: all
//     but 302 and 503). A refused connection is definite, a timeout not. At most 4 KiB of the
//     body is read, so that the connection can be reused.
//   - mysqlcheck.Checker (package health/mysqlcheck, so that the scheduler links no MySQL driver:
//     put it in Config.Checkers; without one a MYSQL check fails and says so) runs Command (default
//     [model.DefaultMySQLCommand]) as User with Password. With the default command only a writable
//     primary (read_only OFF) is healthy: a replica fails with "read_only=ON", an ordinary failure.
//     With another command the instance is healthy iff the command runs without error. An error the
//     server reports (SQL syntax, access denied) is definite, as is a refused connection; a timeout
//     is not. A *sql.DB with one connection is cached per (address, user, password), at most
//     MaxDBs, least recently used evicted, so that checks reuse their connection.
//   - [NoneChecker] never probes; the scheduler keeps NONE targets (and unknown types, as
//     Nacos does) without checking them, with the state given to Set.
//
// # Scheduler
//
// A [Scheduler] holds targets keyed by [model.InstanceKey]. [Scheduler.Set] adds or updates
// one with its current known state (so a node that takes an instance over starts from that
// state and does not flip it again); [Scheduler.Remove] drops it; [Scheduler.Status] reports
// its [Status]: state, last result, consecutive counts, interval, next due time and damping.
//
// Timing. A new target is checked at once, then after an interval drawn uniformly in
// [2 s, 7 s) from the configured random source, which spreads targets added together. After
// that, the interval adapts to the response time like Nacos's checkRtNormalized: after every
// check, interval = f*interval + (1-f)*sample, clamped to the type's [Interval] bounds, where
// the sample is the latency of a healthy check and the upper bound for a failure. So a fast,
// healthy target is checked every Min (TCP 1 s, HTTP 0.5 s, MySQL 2 s) and a failing one backs
// off toward Max (5 s, 5 s, 3 s). The next check is due an interval after the previous one
// completed, so a check is never started while the previous one of the same target runs, and
// a slow check delays the next rather than piling up.
//
// Thresholds. A healthy target turns unhealthy after UnhealthyAfter (3) failures in a row, or
// at once on a definite failure; an unhealthy one turns healthy after HealthyAfter (3)
// healthy results in a row. Results are counted in both states; [Status] shows the counts.
//
// Flap damping. A target that flips more than Damping.Flips times within Damping.Window
// (default 4 in 60 s) is held for Damping.Hold (60 s). Users of Envoy's outlier detection and
// of route-flap damping expect a flapping endpoint to be taken out of rotation, not kept in
// it, so the hold is always unhealthy: the flip that exceeds the limit is applied if it is to
// unhealthy and suppressed if it is to healthy, and no flip to healthy happens during the
// hold. Checks go on; the first check completing after the hold releases it, forgets the
// flip history and applies the usual rule to the counts, so an instance whose last checks
// passed turns healthy right then. [Status] shows Damped, HeldUntil and DampReason.
//
// Concurrency and cost. At most MaxConcurrent checks run at once, each in its own goroutine.
// Due checks wait their turn, earliest first. The due times are in a 4-ary heap (the one Leases
// uses), so a wake-up costs O(log n) per due target and nothing when none is due: the driver
// sleeps on one timer until the earliest due time. BenchmarkSchedulerTick measures the core,
// BenchmarkSchedulerDriver a whole round trip through the goroutines (the README has the
// figures).
//
// Pure core, thin driver. core.go is plain code over Unix-nanosecond times. scheduler.go owns
// the goroutine, the clock (an injected clockwork.Clock) and the checks' goroutines. Tests
// drive it with a fake clock: advance the clock, then [Scheduler.Settle] returns once every
// check due by then has run and its transition was reported.
//
// Transitions. Config.OnTransition is called from the scheduler's goroutine, one call at a
// time, in order, after the check that caused the flip; it must not block long (results wait
// while it runs) and may call Set, Remove, Status and Len, but not Settle or Close. The
// scheduler does not store health anywhere: the caller writes it (through Raft, in the
// registry) and, if it calls Set with a different state, the scheduler adopts that state,
// resets the counts and ends any hold.
//
// Checkers may run concurrently; the [Checker] interface documents its contract. The
// Scheduler's methods are safe for concurrent use. Close cancels running checks, waits for
// every goroutine and closes the built-in checkers; no OnTransition call happens after it
// returns.
//
// Counters. [Scheduler.Stats] returns the checks completed by type and result, the flips each
// way, the holds damping started and the targets held now, and the targets and checks in
// flight: plain integers the core keeps under the lock it holds anyway. Package
// registry/metrics exports them to Prometheus.
package health
