package registry

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"

	"github.com/muster-io/muster/internal/metric"
	"github.com/muster-io/muster/model"
)

// Op names a write for Stats.
type Op uint8

// The writes counted in Stats.Ops.
const (
	OpRegister          Op = iota // Registry.Register
	OpDeregister                  // Registry.Deregister
	OpHeartbeat                   // Registry.Heartbeat and HeartbeatInstance
	OpSessionOpen                 // Registry.OpenSession
	OpSessionRegister             // Session.Register, ReplaceService, ReplaceInstances
	OpSessionDeregister           // Session.Deregister
	NumOps
)

var opNames = [NumOps]string{"register", "deregister", "heartbeat", "session_open", "session_register", "session_deregister"}

func (o Op) String() string {
	if o < NumOps {
		return opNames[o]
	}
	return "unknown"
}

// Reason classifies a write's error for Stats.
type Reason uint8

// The reasons of OpStats.Errors, each matching the registry's errors of the
// same name (ReasonOther is everything else).
const (
	ReasonInvalid      Reason = iota // model.ErrInvalid
	ReasonNotFound                   // ErrNotFound, ErrSessionInstance
	ReasonKindMismatch               // ErrKindMismatch, ErrHealthChecked
	ReasonLimit                      // ErrLimit
	ReasonNotReady                   // ErrNotReady, ErrNoLeader
	ReasonUnavailable                // ErrUnavailable, ErrNotMember
	ReasonClosed                     // ErrClosed, ErrSessionClosed
	ReasonCanceled                   // the caller's context
	ReasonOther
	NumReasons
)

var reasonNames = [NumReasons]string{"invalid", "not_found", "kind_mismatch", "limit", "not_ready", "unavailable", "closed", "canceled", "other"}

func (r Reason) String() string {
	if r < NumReasons {
		return reasonNames[r]
	}
	return "unknown"
}

// reasonOf classifies err.
func reasonOf(err error) Reason {
	switch {
	case errors.Is(err, model.ErrInvalid):
		return ReasonInvalid
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrSessionInstance):
		return ReasonNotFound
	case errors.Is(err, ErrKindMismatch), errors.Is(err, ErrHealthChecked):
		return ReasonKindMismatch
	case errors.Is(err, ErrLimit):
		return ReasonLimit
	case errors.Is(err, ErrNotReady), errors.Is(err, ErrNoLeader):
		return ReasonNotReady
	case errors.Is(err, ErrUnavailable), errors.Is(err, ErrNotMember):
		return ReasonUnavailable
	case errors.Is(err, ErrClosed), errors.Is(err, ErrSessionClosed):
		return ReasonClosed
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return ReasonCanceled
	}
	return ReasonOther
}

// OpStats counts the calls of one write.
type OpStats struct {
	// Calls counts every call; Errors those that failed, by Reason.
	Calls  uint64             `json:"calls"`
	Errors [NumReasons]uint64 `json:"errors"`
}

// Histogram is a latency histogram's snapshot: Bounds are the buckets'
// upper bounds, Counts the observations per bucket (not cumulative; the
// last one above every bound).
type Histogram = metric.HistogramSnapshot

// Stats is a snapshot of the registry's own counters (the engines it runs
// keep theirs: see Replicator's and the health scheduler's Stats). The
// counters only grow; Counts and Namespaces are the state now.
type Stats struct {
	Counts
	// Namespaces has, per namespace, the instances by kind and served
	// health; computing it walks the index under the read lock.
	Namespaces map[string]NamespaceStats `json:"namespaces"`
	// Ops counts the writes of this node's callers, indexed by Op, and
	// their errors. Heartbeats are counted where they are served, which
	// costs nothing on their path: Ops[OpHeartbeat].Calls counts the beats
	// this node served as their owner (its callers' and those forwarded to
	// it), and its Errors those of its own callers.
	Ops [NumOps]OpStats `json:"ops"`
	// Forwarded counts beat writes this node sent to their owner, and
	// ForwardFailures those that failed to reach it or be answered
	// (ErrUnavailable); Served counts the forwarded writes it served as the
	// owner for other nodes.
	Forwarded       uint64 `json:"forwarded"`
	ForwardFailures uint64 `json:"forwardFailures"`
	Served          uint64 `json:"served"`
	// LeasesExpired counts the beat instances this node dropped because no
	// beat came within their delete timeout, and SessionsExpired the
	// sessions it closed because their keep-alive lapsed, each counted on
	// the node that held the lease (the beat's owner, the session's node).
	// While membership views disagree, two nodes may each hold a lease for
	// one beat instance, and each counts its own expiry.
	LeasesExpired   uint64 `json:"leasesExpired"`
	SessionsExpired uint64 `json:"sessionsExpired"`
	// WatchDelivery is the time from a change of a watched service to its
	// watchers being handed the new view, one observation per watcher
	// handed one (on the registry's clock).
	WatchDelivery Histogram `json:"watchDelivery"`
}

// NamespaceStats counts one namespace's instances.
type NamespaceStats struct {
	Services   int `json:"services"`
	Ephemeral  int `json:"ephemeral"`
	Persistent int `json:"persistent"`
	Healthy    int `json:"healthy"`   // served health, before protection
	Unhealthy  int `json:"unhealthy"` // served health, before protection
	Sessions   int `json:"sessions"`  // of this node, with an instance in the namespace
	Watchers   int `json:"watchers"`
}

// stats are the registry's counters, written without its lock.
type stats struct {
	ops                                [NumOps]opCounter
	forwarded, forwardFailures, served atomic.Uint64
	watchDelivery                      *metric.Histogram
}

type opCounter struct {
	calls  atomic.Uint64
	errors [NumReasons]atomic.Uint64
	_      [64]byte // keep the next write's counters off this cache line
}

func newStats() *stats { return &stats{watchDelivery: metric.NewHistogram()} }

// op counts one call of o that returned *err. Use it deferred, with the
// method's named error result.
func (s *stats) op(o Op, err *error) {
	s.ops[o].calls.Add(1)
	if *err != nil {
		s.fail(o, *err)
	}
}

// fail counts an error of o.
func (s *stats) fail(o Op, err error) { s.ops[o].errors[reasonOf(err)].Add(1) }

// Stats returns the registry's counters (see Stats). It is safe for
// concurrent use and works on a closed registry.
func (r *Registry) Stats() Stats {
	st := Stats{
		Forwarded:       r.stats.forwarded.Load(),
		ForwardFailures: r.stats.forwardFailures.Load(),
		Served:          r.stats.served.Load(),
		WatchDelivery:   r.stats.watchDelivery.Snapshot(),
	}
	for i := range st.Ops {
		c := &r.stats.ops[i]
		st.Ops[i].Calls = c.calls.Load()
		for k := range c.errors {
			st.Ops[i].Errors[k] = c.errors[k].Load()
		}
	}
	r.mu.RLock() // one hold: the counts and the namespace table agree
	defer r.mu.RUnlock()
	st.Counts = r.countsLocked()
	st.Ops[OpHeartbeat].Calls = r.beatsServed
	ex := r.core.expiries()
	st.LeasesExpired, st.SessionsExpired = ex.leases, ex.sessions
	st.Namespaces = r.namespaceStatsLocked()
	return st
}

// namespaceStatsLocked walks the index for Stats.Namespaces. The caller
// holds mu.
func (r *Registry) namespaceStatsLocked() map[string]NamespaceStats {
	out := make(map[string]NamespaceStats, r.core.namespaceCount())
	for key, s := range r.core.allServices() {
		ns := out[key.Namespace]
		ns.Services++
		for _, sl := range s.slots {
			if !sl.live() {
				continue
			}
			if s.ephemeral {
				ns.Ephemeral++
			} else {
				ns.Persistent++
			}
			if sl.current().healthy {
				ns.Healthy++
			} else {
				ns.Unhealthy++
			}
		}
		if g := r.watch.groups[key]; g != nil {
			ns.Watchers += len(g.watchers) - g.dead
		}
		out[key.Namespace] = ns
	}
	var seen []string // a session's namespaces: nearly always one
	for p := range r.core.allSessions() {
		seen = seen[:0]
		for _, pi := range p.insts.all() {
			name := pi.slot.svc.key.Namespace
			if !slices.Contains(seen, name) {
				seen = append(seen, name)
				ns := out[name]
				ns.Sessions++
				out[name] = ns
			}
		}
	}
	return out
}
