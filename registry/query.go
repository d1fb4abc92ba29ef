package registry

import (
	"context"
	"fmt"

	"github.com/muster-io/muster/model"
)

// serviceSnapshot is a copy of the services index at one generation.
type serviceSnapshot struct {
	gen      uint64
	services map[model.ServiceKey]*service
}

// Query returns the view of q's service. The view is shared and immutable:
// do not modify it. A query of a service the registry does not hold returns
// an empty view with Revision 0. An unchanged service is answered from a
// cache, without allocating and, while no service has been added or
// removed since the last snapshot of the index, without taking a lock.
//
// The protection threshold applies as in Nacos: when the healthy share of
// the instances is at or below the service's ProtectThreshold, every
// instance is served as healthy and the view is Protected. With the default
// threshold of 0, a service whose only instance (or every instance) is
// unhealthy is protected: that instance is served as healthy, also to a
// HealthyOnly query. Read the real health with ServiceView.RealHealthy(i).
//
// It fails with ErrNotReady before the registry serves (not started, or a
// cluster node still loading its data unless ServeBeforeReady): worth a
// retry, or wait with WaitReady; with ErrClosed once it is closed; with an
// error matching model.ErrInvalid for an invalid query; and, for a
// Linearizable query, with ErrNoLeader (worth a retry) when the store has
// no quorum for the read index.
func (r *Registry) Query(ctx context.Context, q model.Query) (*model.ServiceView, error) {
	if q.Linearizable {
		if err := r.barrier(ctx); err != nil {
			return nil, err
		}
		q.Linearizable = false // views do not depend on it
	}
	q.Service = q.Service.WithDefaults()
	if len(q.Clusters) > 0 {
		q = q.WithDefaults()
	}
	fresh := false
	if len(q.Clusters) == 0 && r.serving.Load() {
		if snap := r.snap.Load(); snap != nil && snap.gen == r.svcGen.Load() {
			fresh = true
			if s := snap.services[q.Service]; s != nil {
				if vc := s.cache.Load(); vc != nil {
					if v := vc.plain[shapeIndex(&q)].Load(); v != nil {
						return v, nil
					}
				}
			}
		}
	}
	r.mu.RLock()
	if err := r.checkRead(); err != nil {
		r.mu.RUnlock()
		return nil, err
	}
	if !fresh {
		r.maybeSnapshot()
	}
	s := r.core.service(&q.Service)
	if s != nil && len(q.Clusters) == 0 {
		v := viewOf(s, &q) // the key is valid: it is in the index
		r.mu.RUnlock()
		return v, nil
	}
	r.mu.RUnlock()

	if err := q.Validate(); err != nil {
		return nil, err
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if err := r.checkRead(); err != nil {
		return nil, err
	}
	if s = r.core.service(&q.Service); s == nil {
		return emptyView(q.Service), nil
	}
	return viewOf(s, &q), nil
}

// maybeSnapshot rebuilds the lock-free snapshot of the index once enough
// queries have found it stale to pay for the copy: while services come and
// go in bulk, queries take the lock rather than copy the index each time.
// The caller holds mu for reading, so the index and its generation agree.
func (r *Registry) maybeSnapshot() {
	if r.stale.Add(1) < max(int64(r.core.serviceCount())/4, 64) {
		return
	}
	r.stale.Store(0)
	r.snap.Store(&serviceSnapshot{gen: r.svcGen.Load(), services: r.core.cloneServices()})
}

// SelectOne picks one instance of q's view at random, weighted by Weight,
// among those served as healthy, enabled and with a positive weight (Nacos's
// client rule; under protection every instance is served as healthy). It
// returns ErrNoInstance when there is none, and otherwise fails as Query
// does.
func (r *Registry) SelectOne(ctx context.Context, q model.Query) (model.Instance, error) {
	v, err := r.Query(ctx, q)
	if err != nil {
		return model.Instance{}, err
	}
	total := 0.0
	for i := range v.Instances {
		if inst := &v.Instances[i]; selectable(inst) {
			total += inst.Weight
		}
	}
	if total <= 0 {
		return model.Instance{}, ErrNoInstance
	}
	x := r.randFloat() * total
	last := -1
	for i := range v.Instances {
		inst := &v.Instances[i]
		if !selectable(inst) {
			continue
		}
		last = i
		if x < inst.Weight {
			return *inst, nil
		}
		x -= inst.Weight
	}
	return v.Instances[last], nil // rounding left x just above the sum
}

func selectable(i *model.Instance) bool { return i.Healthy && i.Enabled && i.Weight > 0 }

// GetInstance returns the instance with key as Query serves it in the view
// of Query{Service: key.Service, IncludeDisabled: true}: with its patch
// applied, disabled or not, and with its served health, so that under the
// service's protection threshold it is healthy whatever its real health
// (as every instance of that view is; see Query). It fails with ErrNotFound
// when the registry does not hold the instance, with ErrNotReady before the
// registry serves (as Query does), and with an error matching
// model.ErrInvalid when key is invalid. It costs a map lookup and a binary
// search over the service's instances, on the same cached view as Query.
func (r *Registry) GetInstance(ctx context.Context, key model.InstanceKey) (model.Instance, error) {
	if err := ctx.Err(); err != nil {
		return model.Instance{}, err
	}
	key = key.WithDefaults()
	if err := key.Validate(); err != nil {
		return model.Instance{}, err
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if err := r.checkRead(); err != nil {
		return model.Instance{}, err
	}
	if s := r.core.service(&key.Service); s != nil {
		if i, ok := s.findSlot(key.Cluster, key.IP, key.Port); ok {
			// Without a cluster filter and with disabled instances, the view
			// keeps every instance in slot order: i indexes it.
			v := viewOf(s, &model.Query{Service: key.Service, IncludeDisabled: true})
			if i < len(v.Instances) && v.Instances[i].Key() == key {
				return v.Instances[i], nil
			}
		}
	}
	return model.Instance{}, fmt.Errorf("%w: instance %s", ErrNotFound, key)
}
