package registry

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/muster-io/muster/health"
	"github.com/muster-io/muster/model"
)

// Active health checks. Persistent instances cannot beat, so the registry
// probes them with a health.Scheduler: each node probes the persistent
// instances whose ip:port it owns (the same rendezvous hash that places beat
// publishers; every one of them in a standalone registry). The index tells
// the scheduler what to probe (syncTarget), and the scheduler reports
// flips, which are written through the store (through Raft in cluster
// mode) by healthWriter: only transitions, retried until they are stored
// or moot, duplicates harmless.
//
// A new owner takes a target over with the stored health as its starting
// state, so a handover neither leaves a gap nor flips the instance again.

// healthWrites holds the health transitions waiting to be stored, newest
// state per instance.
type healthWrites struct {
	mu      sync.Mutex
	pending map[model.InstanceKey]bool
	wake    chan struct{} // capacity 1: there is work
	busy    sync.Mutex    // held while a batch is written
}

// checksEnabled reports whether this registry runs active checks.
func (r *Registry) checksEnabled() bool { return r.checks != nil }

// syncTarget makes the scheduler probe sl if this node should, and forget it
// otherwise. The caller holds mu.
func (r *Registry) syncTarget(s *service, sl *slot) {
	if r.checks == nil || s.ephemeral {
		return
	}
	if sl.pers == nil {
		return
	}
	key := sl.key()
	def := s.definition()
	hc := def.Cluster(key.Cluster).HealthCheck
	if hc.EffectiveType() == model.CheckNone || !r.ownsKey(beatRecordKey(key.IP, key.Port)) {
		r.checks.Remove(key)
		return
	}
	r.checks.Set(key, health.Target{IP: key.IP, Port: key.Port, Check: hc}, sl.pers.healthy)
}

// syncTargets re-evaluates every persistent instance of s. The caller holds
// mu.
func (r *Registry) syncTargets(s *service) {
	if r.checks == nil || s.ephemeral {
		return
	}
	for _, sl := range s.slots {
		r.syncTarget(s, sl)
	}
}

// checksMembersChanged re-evaluates which instances this node probes. The
// caller holds mu.
func (r *Registry) checksMembersChanged() {
	if r.checks == nil {
		return
	}
	for _, s := range r.services {
		r.syncTargets(s)
	}
}

// untarget stops probing key. The caller holds mu.
func (r *Registry) untarget(key model.InstanceKey) {
	if r.checks != nil {
		r.checks.Remove(key)
	}
}

// onTransition queues a flip reported by the scheduler. It does not block.
func (r *Registry) onTransition(key model.InstanceKey, healthy bool, st health.Status) {
	r.log.Info("health check flipped", "instance", key.String(), "healthy", healthy, "reason", st.Last.Reason, "damped", st.Damped)
	hw := &r.hw
	hw.mu.Lock()
	hw.pending[key] = healthy
	hw.mu.Unlock()
	select {
	case hw.wake <- struct{}{}:
	default:
	}
}

// healthWriter stores queued transitions, and retries those that failed
// (no Raft leader) every healthRetry.
func (r *Registry) healthWriter() {
	var retry <-chan time.Time
	for {
		select {
		case <-r.stop:
			return
		case <-r.hw.wake:
		case <-retry:
		}
		retry = nil
		if r.writeHealth(context.Background()) {
			retry = r.clock.After(healthRetry)
		}
	}
}

// healthRetry is the pause before a failed health write is tried again.
const healthRetry = time.Second

// writeHealth stores every queued transition once. It reports whether some
// failed and are queued again.
func (r *Registry) writeHealth(ctx context.Context) (failed bool) {
	hw := &r.hw
	hw.busy.Lock()
	defer hw.busy.Unlock()
	hw.mu.Lock()
	batch := hw.pending
	hw.pending = make(map[model.InstanceKey]bool, len(batch))
	hw.mu.Unlock()
	for key, healthy := range batch {
		err := r.store.Apply(ctx, &command{op: opSetHealth, key: key, healthy: healthy, checked: true})
		switch {
		case err == nil, errors.Is(err, ErrNotFound), errors.Is(err, ErrKindMismatch), errors.Is(err, ErrClosed):
			// Stored, or moot: the instance or the registry is gone.
		default:
			r.log.Warn("storing a health transition failed; will retry", "instance", key.String(), "err", err)
			hw.mu.Lock()
			if _, newer := hw.pending[key]; !newer {
				hw.pending[key] = healthy
			}
			hw.mu.Unlock()
			failed = true
		}
	}
	return failed
}
