package health

import "github.com/muster-io/muster/model"

// SchedulerStats are the counters of a [Scheduler] since it was created, returned by
// [Scheduler.Stats]. Counters (uint64) only grow; the int fields are the state now.
type SchedulerStats struct {
	Targets int // targets held, probed or not (NONE and unknown types are held, never checked)
	Probed  int // of Targets, those checked actively (TCP, HTTP, MySQL)
	Running int // checks in flight now

	// Completed checks by type: the check type in force when the check completed (an empty
	// type counts as TCP). Checks of a target removed while they ran are not counted.
	TCP, HTTP, MySQL CheckCounts

	ToHealthy   uint64 // flips to healthy (each one also went to Config.OnTransition)
	ToUnhealthy uint64 // flips to unhealthy, those that damping forced included
	Dampings    uint64 // holds started by flap damping (see Damping)
	Damped      int    // targets held by damping now
}

// CheckCounts counts the completed checks of one type by result.
type CheckCounts struct {
	Healthy  uint64 // checks that passed
	Failed   uint64 // checks that failed, Definite included
	Definite uint64 // of Failed, the definite failures (refused, SQL error, unexpected status)
}

// ByType returns the counts of check type t (an empty type is TCP), and false for NONE and
// unknown types, which are never checked.
func (s *SchedulerStats) ByType(t model.CheckType) (CheckCounts, bool) {
	switch kindOf(t) {
	case kindTCP:
		return s.TCP, true
	case kindHTTP:
		return s.HTTP, true
	case kindMySQL:
		return s.MySQL, true
	}
	return CheckCounts{}, false
}

// Stats returns the scheduler's counters. It takes the scheduler's lock briefly and copies;
// it is safe for concurrent use, also after Close.
func (s *Scheduler) Stats() SchedulerStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.core
	st := SchedulerStats{
		Targets:     len(c.index),
		Probed:      c.stats.probed,
		Running:     c.running,
		TCP:         c.stats.checks[kindTCP],
		HTTP:        c.stats.checks[kindHTTP],
		MySQL:       c.stats.checks[kindMySQL],
		ToHealthy:   c.stats.toHealthy,
		ToUnhealthy: c.stats.toUnhealthy,
		Dampings:    c.stats.dampings,
		Damped:      c.stats.damped,
	}
	return st
}

// coreStats are the core's counters: plain integers, since the driver serialises every call
// to the core under its lock anyway.
type coreStats struct {
	probed      int
	checks      [numKinds]CheckCounts
	toHealthy   uint64
	toUnhealthy uint64
	dampings    uint64
	damped      int
}

func (s *coreStats) probedChange(was, is bool) {
	switch {
	case was && !is:
		s.probed--
	case !was && is:
		s.probed++
	}
}

func (s *coreStats) checked(kind int, res Result) {
	if kind < 0 || kind >= numKinds {
		return
	}
	c := &s.checks[kind]
	switch {
	case res.Healthy:
		c.Healthy++
	case res.Definite:
		c.Failed++
		c.Definite++
	default:
		c.Failed++
	}
}

func (s *coreStats) flipped(healthy bool) {
	if healthy {
		s.toHealthy++
	} else {
		s.toUnhealthy++
	}
}

// held counts a hold that starts; released one that ends (heldUntil is the entry's before
// the reset: 0 means it was not held).
func (s *coreStats) held() { s.dampings++; s.damped++ }

func (s *coreStats) released(heldUntil int64) {
	if heldUntil != 0 {
		s.damped--
	}
}
