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
	busy    sync.Mutex    // held while a batch is written; guards the fields below
	retryAt time.Time     // after a failed write, the next attempt waits until then
	backoff time.Duration // the pause after the next failure
}

// syncTarget makes the scheduler probe sl if this node should, and forget it
// otherwise. The caller holds mu.
func (r *Registry) syncTarget(s *service, sl *slot) {
	if r.checks == nil || s.ephemeral {
		return
	}
	pr := sl.pers()
	if pr == nil {
		return
	}
	key := sl.key()
	def := s.definition()
	hc := def.Cluster(key.Cluster).HealthCheck
	if hc.EffectiveType() == model.CheckNone || !r.probes(key) {
		r.checks.Remove(key)
		return
	}
	r.checks.Set(key, health.Target{IP: key.IP, Port: key.Port, Check: hc}, pr.healthy)
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

// probes reports whether this node runs the checks of key: the owner of its
// ip:port with Distro and Raft; the Raft leader when persistent data is in
// Raft but nothing tells the nodes apart (no Distro); this node when its
// persistent data is its own (no Raft: standalone, or Distro alone, where
// persistent data is not replicated and no other node holds it).
func (r *Registry) probes(key model.InstanceKey) bool {
	switch {
	case !r.sharedCP:
		return true
	case r.cluster:
		return r.ownsRecord(beatRecordKey(key.IP, key.Port))
	default:
		return r.store.Leader()
	}
}

// checksLeaderChanged hands the checks over when the Raft leader changes,
// for a Raft store without Distro (see probes). The housekeeper calls it
// at least every SweepInterval.
func (r *Registry) checksLeaderChanged() {
	if !r.sharedCP || r.cluster || r.checks == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if l := r.store.Leader(); l != r.wasLeader {
		r.wasLeader = l
		r.checksMembersChanged()
	}
}

// checksMembersChanged re-evaluates which instances this node probes. The
// caller holds mu.
func (r *Registry) checksMembersChanged() {
	if r.checks == nil {
		return
	}
	for _, s := range r.core.allServices() {
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
// The scheduler has logged the flip ("health: instance flipped"), once.
func (r *Registry) onTransition(key model.InstanceKey, healthy bool, _ health.Status) {
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
// (no Raft leader) with a backoff from healthRetryMin to healthRetryMax.
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
		if wait, failed := r.writeHealth(r.runCtx); failed {
			retry = r.clock.After(wait)
		}
	}
}

// Bounds of the pause before a failed health write is tried again.
const (
	healthRetryMin = time.Second
	healthRetryMax = 16 * time.Second
)

// writeHealth stores every queued transition once, unless a failure asked
// to wait. It reports whether writes are still queued, and for how long to
// wait before the next attempt.
func (r *Registry) writeHealth(ctx context.Context) (wait time.Duration, queued bool) {
	hw := &r.hw
	hw.busy.Lock()
	defer hw.busy.Unlock()
	if now := r.now(); now.Before(hw.retryAt) {
		hw.mu.Lock()
		queued = len(hw.pending) > 0
		hw.mu.Unlock()
		return hw.retryAt.Sub(now), queued
	}
	hw.mu.Lock()
	batch := hw.pending
	hw.pending = make(map[model.InstanceKey]bool, len(batch))
	hw.mu.Unlock()
	failed := false
	for key, healthy := range batch {
		if st, ok := r.checks.Status(key); !ok || !st.Probed {
			continue // no longer checked here: the node that checks it now decides
		}
		if failed { // the store is down: keep the rest for the retry
			hw.requeue(key, healthy)
			continue
		}
		err := r.store.Apply(ctx, model.Command{Op: model.OpSetHealth, Key: key, Healthy: healthy}, model.Origin{Checker: true})
		switch {
		case err == nil, errors.Is(err, ErrNotFound), errors.Is(err, ErrKindMismatch), errors.Is(err, ErrClosed):
			// Stored, or moot: the instance or the registry is gone.
		default:
			r.log.Warn("storing a health transition failed; will retry", "instance", key.String(), "err", err)
			hw.requeue(key, healthy)
			failed = true
		}
	}
	if !failed {
		hw.backoff = 0
		return 0, false
	}
	hw.backoff = min(max(2*hw.backoff, healthRetryMin), healthRetryMax)
	hw.retryAt = r.now().Add(hw.backoff)
	return hw.backoff, true
}

// requeue puts a failed write back, unless a newer state was queued since.
func (hw *healthWrites) requeue(key model.InstanceKey, healthy bool) {
	hw.mu.Lock()
	defer hw.mu.Unlock()
	if _, newer := hw.pending[key]; !newer {
		hw.pending[key] = healthy
	}
}

// checkStatus is Internals.CheckStatus.
func (r *Registry) checkStatus(key model.InstanceKey) (health.Status, bool) {
	if r.checks == nil {
		return health.Status{}, false
	}
	return r.checks.Status(key.WithDefaults())
}
