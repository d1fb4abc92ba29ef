package registry

import (
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
	past      []*viewCache              // the last revisions read before rev, oldest first, without their views (see remember)
}

// remember keeps the instances of vc, a revision of s that was read, for
// watchers that resume from it (WatchFrom), dropping the oldest beyond n.
// Only what a view is built from is kept (not the views, which may be many
// per revision), so each entry costs one copy of the service's instance
// list at that revision.
func (s *service) remember(vc *viewCache, n int) {
	p := &viewCache{rev: vc.rev, def: vc.def, all: vc.all}
	if len(s.past) < n {
		s.past = append(s.past, p)
		return
	}
	copy(s.past, s.past[1:])
	s.past[len(s.past)-1] = p
}

// viewAt returns the view of q at revision rev of s, or nil when s no
// longer has it. The caller holds mu and has validated q.Clusters.
func (s *service) viewAt(rev uint64, q *model.Query) *model.ServiceView {
	for _, p := range s.past {
		if p.rev == rev {
			return p.build(q)
		}
	}
	return nil
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

// lookupSlot returns the slot of key in s, or nil.
func (s *service) lookupSlot(key model.InstanceKey) *slot {
	if i, ok := s.findSlot(key.Cluster, key.IP, key.Port); ok {
		return s.slots[i]
	}
	return nil
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
