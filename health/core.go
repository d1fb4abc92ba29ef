package health

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/muster-io/muster/model"
)

// This file is the scheduler's pure core: the targets, their due times, the thresholds, the
// adaptive intervals and the damping. It starts no goroutine and reads no clock: every call
// takes the time, as Unix nanoseconds, from the driver (scheduler.go), which serialises the
// calls.

// Status is a snapshot of one target's checks, returned by [Scheduler.Status] and passed to
// Config.OnTransition.
type Status struct {
	Key    model.InstanceKey `json:"key"`
	Type   model.CheckType   `json:"type"`   // the check type in force (empty Type is reported as TCP)
	Probed bool              `json:"probed"` // false for NONE and unknown types: never checked, health set by Set

	Healthy bool `json:"healthy"` // the current state
	Running bool `json:"running"` // a check is in flight

	Checks    uint64    `json:"checks"`    // checks completed since the target was added
	Last      Result    `json:"last"`      // the last completed check (zero before the first)
	LastCheck time.Time `json:"lastCheck"` // when it completed

	ConsecutiveOK   int `json:"consecutiveOK"`   // healthy results in a row, up to the last check
	ConsecutiveFail int `json:"consecutiveFail"` // failures in a row, up to the last check

	Interval time.Duration `json:"interval"` // the interval after the last check (the drawn first interval before the second check)
	NextDue  time.Time     `json:"nextDue"`  // when the next check is due; zero while one is running or when not probed

	Damped      bool      `json:"damped"`      // held by flap damping (see Damping)
	HeldUntil   time.Time `json:"heldUntil"`   // end of the hold; the hold is released by the first check completing after it
	DampReason  string    `json:"dampReason"`  // why it is held, e.g. "flapping: 5 flips within 1m0s, held unhealthy until ..."
	RecentFlips int       `json:"recentFlips"` // flips remembered for damping
}

// Kinds of probed check types, indexing the per-type tables.
const (
	kindTCP = iota
	kindHTTP
	kindMySQL
	numKinds
	kindNone = -1 // NONE or an unknown type: not probed
)

func kindOf(t model.CheckType) int {
	switch t {
	case "", model.CheckTCP:
		return kindTCP
	case model.CheckHTTP:
		return kindHTTP
	case model.CheckMySQL:
		return kindMySQL
	}
	return kindNone
}

// entry is one target.
type entry struct {
	key    model.InstanceKey
	target *Target // immutable: Set replaces it, so a running check keeps the one it got
	kind   int

	used      bool
	gen       uint32 // bumped when the slot is freed, so that a late completion is ignored
	scheduled bool   // has a live element in core.heap
	sgen      uint32 // bumped on every (un)scheduling: tells the live heap element from stale ones
	running   bool
	due       int64

	healthy  bool
	interval int64 // ns: the next interval; before the second check the drawn one
	checks   uint64
	okRun    int
	failRun  int
	last     Result
	lastAt   int64

	flips      []int64 // ring of the last flip times, len Damping.Flips, made on the first flip
	nflips     int
	fhead      int   // next write position; the oldest flip when the ring is full
	heldUntil  int64 // 0: not held
	heldReason string
}

// job is a check the driver must run.
type job struct {
	slot, gen uint32
	kind      int
	target    *Target
}

// transition is a flip to report.
type transition struct {
	key     model.InstanceKey
	healthy bool
	status  Status
}

// core holds the targets. Not safe for concurrent use.
type core struct {
	healthyAfter, unhealthyAfter int
	firstMin, firstSpan          int64
	bounds                       [numKinds]Interval
	damp                         Damping
	rnd                          *rand.Rand

	index   map[model.InstanceKey]uint32 // key -> slot
	entries []entry
	free    []uint32
	heap    deadlines // due times: one live element (gen == sgen) per scheduled slot, plus stale ones
	stale   int       // stale elements in heap
	running int       // dispatched jobs not yet completed, stale ones included
	stats   coreStats // see SchedulerStats
}

func newCore(cfg *Config, src rand.Source) *core {
	c := &core{
		healthyAfter:   cfg.HealthyAfter,
		unhealthyAfter: cfg.UnhealthyAfter,
		firstMin:       int64(cfg.FirstIntervalMin),
		firstSpan:      int64(cfg.FirstIntervalMax - cfg.FirstIntervalMin),
		damp:           cfg.Damping,
		rnd:            rand.New(src),
		index:          make(map[model.InstanceKey]uint32),
	}
	c.bounds[kindTCP] = cfg.TCPInterval
	c.bounds[kindHTTP] = cfg.HTTPInterval
	c.bounds[kindMySQL] = cfg.MySQLInterval
	return c
}

// set adds or updates the target of key. A new target is due at once (unless it is not
// probed) and starts in the given state. For an existing target the new config applies from
// the next check; if healthy differs from its state, the target adopts it, its counts are
// reset and any hold ends. It reports whether the earliest due time may have moved earlier.
func (c *core) set(key model.InstanceKey, t Target, healthy bool, now int64) bool {
	tp := new(Target)
	*tp = t.clone()
	kind := kindOf(t.Check.EffectiveType())
	slot, ok := c.index[key]
	if !ok {
		slot = c.alloc()
		e := &c.entries[slot]
		e.key, e.target, e.kind, e.healthy = key, tp, kind, healthy
		e.interval = c.firstMin + c.rnd.Int64N(c.firstSpan)
		c.index[key] = slot
		if kind != kindNone {
			c.stats.probed++
			c.schedule(slot, now)
			return true
		}
		return false
	}
	e := &c.entries[slot]
	wasProbed := e.kind != kindNone
	c.stats.probedChange(wasProbed, kind != kindNone)
	e.target, e.kind = tp, kind
	if healthy != e.healthy {
		e.healthy = healthy
		e.okRun, e.failRun = 0, 0
		c.stats.released(e.heldUntil)
		e.heldUntil, e.heldReason, e.nflips, e.fhead = 0, "", 0, 0
	}
	switch {
	case kind == kindNone && e.scheduled:
		c.unschedule(slot)
	case kind != kindNone && !wasProbed && !e.running:
		c.schedule(slot, now) // from NONE to a probed type: check at once
		return true
	}
	return false
}

// remove drops key's target; a check of it still running completes unseen.
func (c *core) remove(key model.InstanceKey) bool {
	slot, ok := c.index[key]
	if !ok {
		return false
	}
	delete(c.index, key)
	if c.entries[slot].scheduled {
		c.unschedule(slot)
	}
	e := &c.entries[slot]
	c.stats.probedChange(e.kind != kindNone, false)
	c.stats.released(e.heldUntil)
	*e = entry{gen: e.gen + 1, sgen: e.sgen}
	c.free = append(c.free, slot)
	return true
}

func (c *core) alloc() uint32 {
	if n := len(c.free); n > 0 {
		slot := c.free[n-1]
		c.free = c.free[:n-1]
		c.entries[slot].used = true
		return slot
	}
	c.entries = append(c.entries, entry{used: true})
	return uint32(len(c.entries) - 1)
}

// dispatch appends to out the jobs due at now, earliest first, while fewer than max checks
// run, and marks them running. It allocates only to grow out.
func (c *core) dispatch(now int64, max int, out []job) []job {
	for c.running < max && c.top() && c.heap[0].at <= now {
		slot := uint32(c.heap[0].slot)
		c.heap.pop()
		e := &c.entries[slot]
		e.scheduled = false
		e.sgen++
		e.running = true
		c.running++
		out = append(out, job{slot: slot, gen: e.gen, kind: e.kind, target: e.target})
	}
	return out
}

// next returns the earliest due time, and false when nothing is scheduled or the
// concurrency bound is reached (then the next completion is what matters).
func (c *core) next(max int) (int64, bool) {
	if c.running >= max || !c.top() {
		return 0, false
	}
	return c.heap[0].at, true
}

// complete records the result of a dispatched job at now, schedules the next check and
// returns the flip it caused, if any.
func (c *core) complete(slot, gen uint32, res Result, now int64) (transition, bool) {
	c.running--
	e := &c.entries[slot]
	if !e.used || e.gen != gen || !e.running {
		return transition{}, false // removed while running
	}
	e.running = false
	if e.kind == kindNone {
		return transition{}, false // switched to NONE while running: health is set by hand now
	}
	e.checks++
	e.last, e.lastAt = res, now
	c.stats.checked(e.kind, res)
	flipped := c.judge(e, res, now)
	next := e.interval
	e.interval = adapt(e.interval, res, &c.bounds[e.kind])
	if e.checks > 1 {
		next = e.interval
	}
	c.schedule(slot, now+next)
	if !flipped {
		return transition{}, false
	}
	c.stats.flipped(e.healthy)
	return transition{key: e.key, healthy: e.healthy, status: c.status(e)}, true
}

// adapt returns the interval after a check: the EWMA of Interval.
func adapt(cur int64, res Result, b *Interval) int64 {
	sample := float64(b.Max)
	if res.Healthy {
		sample = float64(res.Latency)
	}
	v := int64(b.Factor*float64(cur) + (1-b.Factor)*sample)
	return min(max(v, int64(b.Min)), int64(b.Max))
}

// judge counts res and applies the flip rule and the damping; it reports a flip.
func (c *core) judge(e *entry, res Result, now int64) bool {
	if res.Healthy {
		e.okRun++
		e.failRun = 0
	} else {
		e.failRun++
		e.okRun = 0
	}
	if e.heldUntil != 0 && now >= e.heldUntil {
		c.stats.released(e.heldUntil)
		e.heldUntil, e.heldReason, e.nflips, e.fhead = 0, "", 0, 0
	}
	var want bool
	switch {
	case res.Healthy && !e.healthy && e.okRun >= c.healthyAfter:
		want = true
	case !res.Healthy && e.healthy && (res.Definite || e.failRun >= c.unhealthyAfter):
		want = false
	default:
		return false
	}
	if e.heldUntil != 0 {
		// Held, hence unhealthy: only a flip to healthy can be wanted, and it waits.
		return false
	}
	d := &c.damp
	if d.Flips > 0 && e.nflips == d.Flips && e.flips[e.fhead] > now-int64(d.Window) {
		e.heldUntil = now + int64(d.Hold)
		c.stats.held()
		e.heldReason = fmt.Sprintf("flapping: %d flips within %v, held unhealthy until %s",
			d.Flips+1, d.Window, time.Unix(0, e.heldUntil).UTC().Format(time.RFC3339))
		if want {
			return false // stays unhealthy
		}
		e.healthy = false
		return true
	}
	if d.Flips > 0 {
		if e.flips == nil {
			e.flips = make([]int64, d.Flips)
		}
		e.flips[e.fhead] = now
		e.fhead = (e.fhead + 1) % d.Flips
		e.nflips = min(e.nflips+1, d.Flips)
	}
	e.healthy = want
	return true
}

// get returns the snapshot of key's target.
func (c *core) get(key model.InstanceKey) (Status, bool) {
	slot, ok := c.index[key]
	if !ok {
		return Status{}, false
	}
	return c.status(&c.entries[slot]), true
}

func (c *core) status(e *entry) Status {
	st := Status{
		Key:             e.key,
		Type:            e.target.Check.EffectiveType(),
		Probed:          e.kind != kindNone,
		Healthy:         e.healthy,
		Running:         e.running,
		Checks:          e.checks,
		Last:            e.last,
		ConsecutiveOK:   e.okRun,
		ConsecutiveFail: e.failRun,
		Interval:        time.Duration(e.interval),
		RecentFlips:     e.nflips,
	}
	if e.checks > 0 {
		st.LastCheck = time.Unix(0, e.lastAt)
	}
	if e.scheduled {
		st.NextDue = time.Unix(0, e.due)
	}
	if e.heldUntil != 0 {
		st.Damped = true
		st.HeldUntil = time.Unix(0, e.heldUntil)
		st.DampReason = e.heldReason
	}
	return st
}

// The heap of due times (the 4-ary heap of heap.go, shared with Leases), with lazy deletion:
// unscheduling a slot only bumps its sgen, and the stale element is dropped when it reaches
// the top, or when stale elements make up more than half of the heap and it is rebuilt. Only
// Remove and a switch to NONE unschedule; a dispatch pops the live top element, so stale
// elements are rare. The elements carry the due time, so sifts never touch the entries, which
// are large and scattered.

func (c *core) schedule(slot uint32, due int64) {
	e := &c.entries[slot]
	e.due = due
	e.scheduled = true
	e.sgen++
	c.heap.push(deadline{at: due, slot: int32(slot), gen: e.sgen})
}

func (c *core) unschedule(slot uint32) {
	e := &c.entries[slot]
	e.scheduled = false
	e.sgen++
	c.stale++
	if c.stale > 32 && c.stale > len(c.heap)/2 {
		c.compact()
	}
}

func (c *core) live(d deadline) bool {
	e := &c.entries[d.slot]
	return e.scheduled && e.sgen == d.gen
}

// top drops stale elements from the top and reports whether a live one is left there.
func (c *core) top() bool {
	for len(c.heap) > 0 {
		if c.live(c.heap[0]) {
			return true
		}
		c.heap.pop()
		c.stale--
	}
	return false
}

// compact rebuilds the heap from its live elements.
func (c *core) compact() {
	live := c.heap[:0]
	for _, d := range c.heap {
		if c.live(d) {
			live = append(live, d)
		}
	}
	clear(c.heap[len(live):])
	c.heap = live
	c.stale = 0
	c.heap.init()
}
