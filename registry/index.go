package registry

import (
	"slices"
	"strings"
	"sync/atomic"

	"github.com/muster-io/muster/model"
)

// The index is what queries read: per service, its slots in view order. It is
// guarded by Registry.mu. Everything it points to that a reader may see
// (recs, views) is immutable once published; a change
// replaces the pointer.

// service is one service in the index.
type service struct {
	key       model.ServiceKey // with defaults; its strings are shared by the service's instances
	ephemeral bool             // the kind, fixed while the service exists
	def       *model.Service   // stored definition, or nil when the service is implicit
	slots     []*slot          // sorted by (cluster, ip, port)
	rev       uint64
	cache     atomic.Pointer[viewCache] // views of rev; nil after a change
}

// definition returns the stored definition, or the implicit one.
func (s *service) definition() model.Service {
	if s.def != nil {
		return *s.def
	}
	return model.Service{Key: s.key, Ephemeral: s.ephemeral}
}

// empty reports whether the service has no instances.
func (s *service) empty() bool { return len(s.slots) == 0 }

// slot is one instance key (cluster, ip, port) of a service. Several
// publishers may publish the same key: the instance stays while any of them
// does, and the view shows the one whose publisher ID sorts first, so every
// node picks the same.
type slot struct {
	svc   *service
	pubs  []*pubInst           // ephemeral publications, sorted by publisher ID
	pers  *rec                 // persistent instance (persistent services)
	patch *model.InstancePatch // operator's override, or nil
}

// current returns the instance as published, before the patch.
func (sl *slot) current() *rec {
	if sl.pers != nil {
		return sl.pers
	}
	if len(sl.pubs) > 0 {
		return sl.pubs[0].inst
	}
	return nil
}

// live reports whether anything still publishes the slot.
func (sl *slot) live() bool { return sl.pers != nil || len(sl.pubs) > 0 }

// key returns the slot's instance key.
func (sl *slot) key() model.InstanceKey {
	i := sl.current()
	return model.InstanceKey{Service: sl.svc.key, Cluster: i.cluster, IP: i.ip, Port: int(i.port)}
}

// findSlot returns the index of the slot for (cluster, ip, port) in s.slots,
// or where it would go.
func (s *service) findSlot(cluster, ip string, port int) (int, bool) {
	lo, hi := 0, len(s.slots)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if compareSlot(s.slots[mid].current(), cluster, ip, port) < 0 {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, lo < len(s.slots) && compareSlot(s.slots[lo].current(), cluster, ip, port) == 0
}

func compareSlot(i *rec, cluster, ip string, port int) int {
	if c := strings.Compare(i.cluster, cluster); c != 0 {
		return c
	}
	if c := strings.Compare(i.ip, ip); c != 0 {
		return c
	}
	return int(i.port) - port
}

// slotFor returns the slot of inst's key, creating it (not yet live) when
// absent. A new slot must be given a publication or a persistent instance
// before the lock is released.
func (r *Registry) slotFor(s *service, inst *rec) *slot {
	i, ok := s.findSlot(inst.cluster, inst.ip, int(inst.port))
	if ok {
		return s.slots[i]
	}
	return r.insertSlot(s, i)
}

// insertSlot inserts a new slot (not yet live) at index i of s.slots, where
// findSlot placed its key, and returns it.
func (r *Registry) insertSlot(s *service, i int) *slot {
	sl := &slot{svc: s}
	r.quota.instances++
	s.slots = append(s.slots, nil)
	copy(s.slots[i+1:], s.slots[i:])
	s.slots[i] = sl
	return sl
}

// lookup returns the service of key and the slot of key in it; either may
// be nil. The caller holds mu.
func (r *Registry) lookup(key model.InstanceKey) (*service, *slot) {
	s := r.services[key.Service]
	if s == nil {
		return nil, nil
	}
	return s, s.lookupSlot(key)
}

// lookupSlot returns the slot of key in s, or nil.
func (s *service) lookupSlot(key model.InstanceKey) *slot {
	if i, ok := s.findSlot(key.Cluster, key.IP, key.Port); ok {
		return s.slots[i]
	}
	return nil
}

// slotBorn is called once a new slot has its first publication: it attaches
// a waiting patch.
func (r *Registry) slotBorn(sl *slot) {
	key := sl.key()
	if p := r.patches[key]; p != nil {
		sl.patch = p
		r.patchGone.Remove(key)
	}
	r.emptySvcs.Remove(sl.svc.key)
}

// dropSlotIfDead removes sl from its service once nothing publishes it, and
// starts the patch's countdown. last is the instance the slot held last,
// which locates it.
func (r *Registry) dropSlotIfDead(sl *slot, last *rec) {
	if sl.live() {
		return
	}
	s := sl.svc
	if i, ok := s.findSlotOf(sl, last); ok {
		s.slots = slices.Delete(s.slots, i, i+1)
		r.quota.instances--
	}
	r.slotDied(sl)
}

// findSlotOf returns the index of sl, which held last.
func (s *service) findSlotOf(sl *slot, last *rec) (int, bool) {
	lo, hi := 0, len(s.slots)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		cur := s.slots[mid]
		if cur != sl && compareSlot(cur.current(), last.cluster, last.ip, int(last.port)) < 0 {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, lo < len(s.slots) && s.slots[lo] == sl
}

// slotDied starts the countdown of a dead slot's patch and of its service
// when the service is now empty.
func (r *Registry) slotDied(sl *slot) {
	if sl.patch != nil {
		r.startPatchCountdown(sl.patch.Key)
	}
	r.maybeEmpty(sl.svc)
}

// maybeEmpty starts the countdown of an empty, implicit service.
func (r *Registry) maybeEmpty(s *service) {
	if s.empty() && s.def == nil {
		putLease(r, &r.emptySvcs, s.key, r.cfg.EmptyServiceTTL)
	}
}

// changed records a change of s: a new revision, the cached views dropped,
// watchers told.
func (r *Registry) changed(s *service) {
	r.rev++
	s.rev = r.rev
	s.cache.Store(nil)
	r.markDirty(s.key)
}

// ensureService returns the service of key, creating an implicit one of the
// given kind, or ErrKindMismatch when it exists with the other kind.
func (r *Registry) ensureService(key model.ServiceKey, ephemeral bool) (*service, error) {
	s := r.services[key]
	if s == nil {
		s = &service{key: key, ephemeral: ephemeral}
		r.addService(s)
		return s, nil
	}
	if s.ephemeral != ephemeral {
		return nil, kindMismatch(s)
	}
	return s, nil
}

// addService puts s in the index. The caller holds mu.
func (r *Registry) addService(s *service) {
	r.services[s.key] = s
	r.quota.nsServices[s.key.Namespace]++
	r.svcGen.Add(1)
	r.catalogChanged(s.key.Namespace)
}

// dropService takes the service of key out of the index. The caller holds
// mu.
func (r *Registry) dropService(key model.ServiceKey) {
	if _, ok := r.services[key]; ok {
		delete(r.services, key)
		if r.quota.nsServices[key.Namespace]--; r.quota.nsServices[key.Namespace] == 0 {
			delete(r.quota.nsServices, key.Namespace)
		}
		r.catalogChanged(key.Namespace)
	}
	r.svcGen.Add(1)
}

// removeService drops s from the index. Watchers see an empty view.
func (r *Registry) removeService(s *service) {
	r.dropService(s.key)
	r.emptySvcs.Remove(s.key)
	r.changed(s)
	r.serviceGone(s)
}
