package registry

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/muster-io/muster/model"
)

// Views: what a query of a service returns, built from the index as plain
// code (no goroutine, no clock, no I/O). A change of a service drops its
// cache (changed, in index.go); the first query of the new revision builds
// the cache of its instances (cacheOf), and each query shape builds its
// view once (viewOf, build), shared by every reader of that revision.
// Query, in query.go, is the driver: locks, readiness, the lock-free
// snapshot.

// viewCache holds the views of one revision of a service. It is built on
// first use after a change and dropped by the next change, so a query of an
// unchanged service is a map lookup and two atomic loads.
type viewCache struct {
	rev uint64
	def model.Service
	all []model.Instance // every instance, patched, real health, view order

	plain [4]atomic.Pointer[model.ServiceView] // views without a cluster filter, by shapeIndex

	mu       sync.Mutex
	filtered []filteredView // views with a cluster filter, most recent last
}

type filteredView struct {
	q    model.Query
	view *model.ServiceView
}

// maxFilteredViews bounds the cluster-filtered views kept per revision.
const maxFilteredViews = 16

func shapeIndex(q *model.Query) int {
	i := 0
	if q.HealthyOnly {
		i |= 1
	}
	if q.IncludeDisabled {
		i |= 2
	}
	return i
}

// cacheOf returns the view cache of s's current revision. The caller holds
// mu (read or write), so s cannot change meanwhile.
func cacheOf(s *service) *viewCache {
	if vc := s.cache.Load(); vc != nil {
		return vc
	}
	vc := &viewCache{rev: s.rev, def: s.definition().Redacted(), all: make([]model.Instance, 0, len(s.slots))}
	for _, sl := range s.slots {
		inst := sl.current().instance(s)
		if p := sl.patch(); p != nil {
			inst = p.Apply(inst)
		}
		vc.all = append(vc.all, inst)
	}
	if !s.cache.CompareAndSwap(nil, vc) {
		return s.cache.Load() // another reader built it first
	}
	return vc
}

// viewOf returns the view of s for q, built at most once per revision and
// query shape. The caller holds mu (read or write) and has validated
// q.Clusters.
func viewOf(s *service, q *model.Query) *model.ServiceView {
	vc := cacheOf(s)
	if len(q.Clusters) == 0 {
		p := &vc.plain[shapeIndex(q)]
		if v := p.Load(); v != nil {
			return v
		}
		v := vc.build(q)
		if !p.CompareAndSwap(nil, v) {
			return p.Load()
		}
		return v
	}
	vc.mu.Lock()
	defer vc.mu.Unlock()
	for _, f := range vc.filtered {
		if f.q.HealthyOnly == q.HealthyOnly && f.q.IncludeDisabled == q.IncludeDisabled && slices.Equal(f.q.Clusters, q.Clusters) {
			return f.view
		}
	}
	v := vc.build(q)
	if len(vc.filtered) == maxFilteredViews {
		vc.filtered = slices.Delete(vc.filtered, 0, 1)
	}
	fq := *q
	fq.Clusters = slices.Clone(q.Clusters)
	vc.filtered = append(vc.filtered, filteredView{q: fq, view: v})
	return v
}

// build applies q's filters and the protection threshold to the revision's
// instances.
//
// Protection follows Nacos: after the cluster and enabled filters, if the
// healthy share is at or below the threshold, every instance is returned and
// served as healthy, with the real health kept in RealHealth. HealthyOnly is
// applied after that decision (as Nacos 1.x did; 2.x decides after dropping
// the unhealthy ones, so protection never triggers for HealthyOnly queries).
func (vc *viewCache) build(q *model.Query) *model.ServiceView {
	v := &model.ServiceView{Service: vc.def, Revision: vc.rev}
	keep := func(i *model.Instance) bool {
		return (q.IncludeDisabled || i.Enabled) && (len(q.Clusters) == 0 || slices.Contains(q.Clusters, i.Cluster))
	}
	n, healthy := 0, 0
	for i := range vc.all {
		if keep(&vc.all[i]) {
			n++
			if vc.all[i].Healthy {
				healthy++
			}
		}
	}
	protect := n > 0 && float64(healthy)/float64(n) <= vc.def.ProtectThreshold
	if !protect && q.HealthyOnly {
		n = healthy
	}
	if !protect && n == len(vc.all) {
		v.Instances = vc.all // nothing filtered, nothing to serve differently: share
		return v
	}
	v.Instances = make([]model.Instance, 0, n)
	if protect {
		v.Protected = true
		v.RealHealth = make([]bool, 0, n)
	}
	for i := range vc.all {
		inst := &vc.all[i]
		if !keep(inst) || (q.HealthyOnly && !protect && !inst.Healthy) {
			continue
		}
		if protect {
			v.RealHealth = append(v.RealHealth, inst.Healthy)
			served := *inst
			served.Healthy = true
			v.Instances = append(v.Instances, served)
			continue
		}
		v.Instances = append(v.Instances, *inst)
	}
	return v
}

// emptyView is the view of a service the registry does not hold.
func emptyView(key model.ServiceKey) *model.ServiceView {
	return &model.ServiceView{Service: model.Service{Key: key}}
}
