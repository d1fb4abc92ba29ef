package registry

import (
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"

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
	keys      []uint32         // keys[i] is the ipOrder key of slots[i]'s IP (see findSlot)
	cl        string           // the cluster of the first slot placed while the service was empty
	otherCl   int              // slots of another cluster than cl: findSlot searches keys while there are none
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
//
// A slot is paid per instance (in its slotBlock, beatBlock or persBlock),
// and it nearly always has one publication: so it holds the first inline
// (head) and, only while there are two or more, the whole sorted list in
// its slotExtra, out of line: 24 bytes, where the list's two words inline
// (pubList) made it 32 and a session instance's block 152 bytes, in the
// 160-byte size class rather than the 144 one (TestBeatBlockSizeClass).
// head stays the first publication when the list is out of line, so that
// current(), read for every instance of every view built, never reads the
// list. A slot of an ephemeral service has no persistent instance and one
// of a persistent service no publication (checkInvariants), so current()
// tries head first and reads x only for a persistent instance.
type slot struct {
	svc  *service
	head *pubInst   // the first publication in publisher ID order; nil when none
	x    *slotExtra // a persistent instance, a patch, or two publications or more; nil for most ephemeral slots
}

// slotExtra is what an ephemeral slot rarely has: a persistent instance
// (every slot of a persistent service has one, in its persBlock), an
// operator's patch, and the list of publications of a key that two
// publishers or more publish (a client's new session, say, registering its
// instances again before its old session has ended). Out of line, the
// three cost an ephemeral slot one pointer, 8 bytes, where inline they
// took 32. A slot's x, once made, stays until the slot goes but when it
// holds no patch, no persistent instance and no list any more (setPatch,
// removePub).
type slotExtra struct {
	pers  *rec                 // persistent instance (persistent services)
	patch *model.InstancePatch // operator's override, or nil
	many  *[]*pubInst          // the publications, sorted by publisher ID, while there are two or more; nil otherwise
}

// empty reports whether x holds nothing, and the slot may drop it.
func (x *slotExtra) empty() bool { return x.pers == nil && x.patch == nil && x.many == nil }

// pers returns the slot's persistent instance, or nil.
func (sl *slot) pers() *rec {
	if sl.x == nil {
		return nil
	}
	return sl.x.pers
}

// patch returns the operator's override of the slot's instance, or nil.
func (sl *slot) patch() *model.InstancePatch {
	if sl.x == nil {
		return nil
	}
	return sl.x.patch
}

// setPers sets the slot's persistent instance (nil: none).
func (sl *slot) setPers(r *rec) {
	if sl.x == nil {
		if r == nil {
			return
		}
		sl.x = new(slotExtra)
	}
	sl.x.pers = r
}

// setPatch sets the operator's override of the slot's instance (nil: none).
func (sl *slot) setPatch(p *model.InstancePatch) {
	switch {
	case sl.x != nil:
		sl.x.patch = p
		if sl.x.empty() {
			sl.x = nil
		}
	case p != nil:
		sl.x = &slotExtra{patch: p}
	}
}

// pubs returns the slot's publications, sorted by publisher ID. The slice
// may be a window on the slot itself (its head): a caller must not keep it
// across a change of the slot's publications.
func (sl *slot) pubs() []*pubInst {
	if x := sl.x; x != nil && x.many != nil {
		return *x.many
	}
	if sl.head == nil {
		return nil
	}
	return unsafe.Slice(&sl.head, 1)
}

// insertPub inserts pi at index i (0 ≤ i ≤ len) of the slot's
// publications. A second publication takes the list out of line, into the
// slot's extra (made if need be).
func (sl *slot) insertPub(i int, pi *pubInst) {
	if sl.head == nil {
		sl.head = pi // none before, so no list (a list has two or more)
		return
	}
	x := sl.x
	if x == nil {
		x = new(slotExtra)
		sl.x = x
	}
	if x.many == nil {
		many := []*pubInst{sl.head, pi}
		if i == 0 {
			many[0], many[1] = pi, sl.head
		}
		x.many = &many
	} else {
		*x.many = slices.Insert(*x.many, i, pi)
	}
	sl.head = (*x.many)[0]
}

// removePub removes pi, if present, keeping the others' order. The list
// comes back inline once one publication is left, and the extra goes when
// it holds nothing else: a slot that two publishers shared for a while
// costs no more after than a slot never shared, and a slot whose
// publishers come and go pays an allocation each time it has two again.
func (sl *slot) removePub(pi *pubInst) {
	x := sl.x
	if x == nil || x.many == nil {
		if sl.head == pi {
			sl.head = nil
		}
		return
	}
	i := slices.Index(*x.many, pi)
	if i < 0 {
		return
	}
	many := slices.Delete(*x.many, i, i+1)
	sl.head = many[0] // two at least before the delete
	if len(many) > 1 {
		*x.many = many
		return
	}
	x.many = nil
	if x.empty() {
		sl.x = nil
	}
}

// current returns the instance as published, before the patch.
func (sl *slot) current() *rec {
	// It is read for every instance of every view built, inlined: the
	// watch fan-out measured 8 % slower when its cost grew by 5 (reading
	// x through pers(), e59fe43). head first: an ephemeral slot, the
	// common one, answers without reading x, since a slot with a head has
	// no persistent instance (see slot). Inline cost 28, where x first
	// and then the inline list cost 58.
	if pi := sl.head; pi != nil {
		return pi.inst
	}
	if x := sl.x; x != nil {
		return x.pers
	}
	return nil
}

// live reports whether anything still publishes the slot.
func (sl *slot) live() bool { return sl.head != nil || sl.pers() != nil }

// key returns the slot's instance key.
func (sl *slot) key() model.InstanceKey {
	i := sl.current()
	return model.InstanceKey{Service: sl.svc.key, Cluster: i.cluster, IP: i.ip, Port: int(i.port)}
}

// findSlot returns the index of the slot for (cluster, ip, port) in s.slots,
// or where it would go.
//
// It is most of a registration's lookup, so it has a fast path: while
// every slot of s is of one cluster (nearly always), a lookup in it
// binary-searches s.keys, which holds each slot's IP's ipOrder key as one
// integer in contiguous memory (4 bytes a slot), instead of chasing
// pointers to each visited slot's instance and comparing strings. A step
// that lands on a slot of the same IP (another port) or on one whose IP has
// no ipOrder key (IPv6, a host name: key 0) compares the slot as
// compareSlot does. Every other lookup compares as compareSlot does.
func (s *service) findSlot(cluster, ip string, port int) (int, bool) {
	return s.findSlotKey(cluster, ip, ipOrder(ip), port)
}

// findSlotKey is findSlot knowing k, ipOrder(ip).
func (s *service) findSlotKey(cluster, ip string, k uint32, port int) (int, bool) {
	if k != 0 && s.otherCl == 0 && len(s.slots) > 0 && cluster == s.cl {
		return s.findKey(cluster, ip, k, port, nil)
	}
	lo, hi := 0, len(s.slots)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if compareSlot(s.slots[mid].current(), cluster, ip, k, port) < 0 {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, lo < len(s.slots) && compareSlot(s.slots[lo].current(), cluster, ip, k, port) == 0
}

// findKey is findSlot's fast path: every slot of s is of cluster, and ipKey
// (ipOrder(ip)) is not 0. dead, if not nil, is a slot of s that holds
// nothing any more (findSlotOf's), of the key looked up: a step that lands
// on it and must compare does not read it.
func (s *service) findKey(cluster, ip string, ipKey uint32, port int, dead *slot) (int, bool) {
	keys := s.keys
	lo, hi := 0, len(keys)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		less := false
		if k := keys[mid]; k != 0 && k != ipKey {
			less = k < ipKey
		} else if sl := s.slots[mid]; sl != dead {
			less = compareSlot(sl.current(), cluster, ip, ipKey, port) < 0
		}
		if less {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == len(keys) {
		return lo, false
	}
	if k := keys[lo]; k != 0 && k != ipKey {
		return lo, false
	}
	if s.slots[lo] == dead {
		return lo, true
	}
	return lo, compareSlot(s.slots[lo].current(), cluster, ip, ipKey, port) == 0
}

// slotKey returns the key of r's slot in service.keys: its IP's ipOrder
// key, 0 when it has none. Within one cluster, two slots whose keys are
// not 0 and differ compare as their keys.
func slotKey(r *rec) uint32 { return r.ipKey }

// insertSlot puts sl, whose key is r's, at index i of s.slots.
func (s *service) insertSlot(i int, sl *slot, r *rec) {
	if len(s.slots) == 0 {
		s.cl, s.otherCl = ownCluster(r.cluster), 0
	} else if r.cluster != s.cl {
		s.otherCl++
	}
	s.slots = slices.Insert(s.slots, i, sl)
	s.keys = slices.Insert(s.keys, i, slotKey(r))
}

// ownCluster returns cluster in memory of its own: a peer's instance
// shares its strings with the record's payload (decodeInstRecord), which
// the service, outliving that instance, must not keep alive. The default
// cluster is the constant's.
func ownCluster(cluster string) string {
	if cluster == model.DefaultCluster {
		return model.DefaultCluster
	}
	return strings.Clone(cluster)
}

// deleteSlot removes the slot at index i of s.slots, whose key is r's.
func (s *service) deleteSlot(i int, r *rec) {
	s.slots = slices.Delete(s.slots, i, i+1)
	s.keys = slices.Delete(s.keys, i, i+1)
	switch {
	case len(s.slots) == 0:
		s.cl, s.otherCl = "", 0
		return
	case r.cluster != s.cl:
		s.otherCl--
	}
	if s.otherCl == len(s.slots) {
		// No slot of cl is left. While the others are of one cluster
		// (the slots sort by cluster first: the first and the last
		// tell), that one becomes cl and the keyed search serves again;
		// else it would stay off until the service empties (a first
		// instance in a canary cluster that left).
		first, last := s.slots[0].current(), s.slots[len(s.slots)-1].current()
		if first != nil && last != nil && first.cluster == last.cluster {
			s.cl, s.otherCl = ownCluster(first.cluster), 0
		}
	}
}

// compareSlot compares the key of i with (cluster, ip, port); ipKey is
// ipOrder(ip). It is findSlot's step, and most of a registration's lookup:
// two plain IPv4 addresses compare by their ipOrder keys, held in the rec,
// which spares the step a read of the IP's bytes (an object of their own,
// a cache miss) and a call.
func compareSlot(i *rec, cluster, ip string, ipKey uint32, port int) int {
	if c := strings.Compare(i.cluster, cluster); c != 0 {
		return c
	}
	if i.ipKey != 0 && ipKey != 0 {
		if i.ipKey != ipKey {
			if i.ipKey < ipKey {
				return -1
			}
			return 1
		}
	} else if c := strings.Compare(i.ip, ip); c != 0 {
		return c
	}
	return int(i.port) - port
}

// ipOrder returns a key of ip that orders as strings.Compare orders the IPs,
// when ip is a plain IPv4 address in its canonical form (four decimal
// fields of one to three digits, each at most 255, without a leading zero),
// and 0 otherwise (for "0.0.0.0" too). Two IPs with keys compare as their
// keys do, and are equal exactly when their keys are; any other pair
// compares as strings.
//
// The key packs, field by field, each field's rank among the decimal
// strings of 0–255 in byte order ("0" < "1" < "10" < "100" < ... < "99"):
// a canonical dotted quad compares field by field, a field that is a
// prefix of another sorting first (the '.' or the end that follows it is
// below every digit), which is how the ranks order.
func ipOrder(ip string) uint32 {
	n := len(ip)
	if n < len("1.1.1.1") || n > len("255.255.255.255") {
		return 0
	}
	var key uint32
	i := 0
	for f := 0; f < 4; f++ {
		// One field: a digit, then up to two more unless the first is 0.
		if i >= n {
			return 0
		}
		v := uint(ip[i] - '0')
		if v > 9 {
			return 0
		}
		i++
		if i < n && v != 0 {
			if d := uint(ip[i] - '0'); d <= 9 {
				v = v*10 + d
				i++
				if i < n {
					if d := uint(ip[i] - '0'); d <= 9 {
						v = v*10 + d
						i++
						if v > 255 {
							return 0
						}
					}
				}
			}
		}
		key = key<<8 | uint32(octetRank[v])
		if f < 3 {
			if i >= n || ip[i] != '.' {
				return 0
			}
			i++
		}
	}
	if i != n {
		return 0 // more after the fourth field (a digit after a 0, a fourth digit, ...)
	}
	return key
}

// octetRank is, for each of 0–255, the rank of its decimal string among
// those of 0–255 in byte order (see ipOrder). It is never written after
// its initialisation.
var octetRank = func() (r [256]uint8) {
	names := make([]string, 256)
	for v := range names {
		names[v] = strconv.Itoa(v)
	}
	slices.Sort(names)
	for rank, name := range names {
		v, _ := strconv.Atoi(name)
		r[v] = uint8(rank)
	}
	return r
}()

// lookupSlot returns the slot of key in s, or nil.
func (s *service) lookupSlot(key model.InstanceKey) *slot {
	if i, ok := s.findSlot(key.Cluster, key.IP, key.Port); ok {
		return s.slots[i]
	}
	return nil
}

// findSlotOf returns the index of sl, which held last.
func (s *service) findSlotOf(sl *slot, last *rec) (int, bool) {
	if last.ipKey != 0 && s.otherCl == 0 && len(s.slots) > 0 && last.cluster == s.cl {
		// Keys stay while the slot is dead (sl.current() is nil), so
		// sl's is there.
		if i, ok := s.findKey(last.cluster, last.ip, last.ipKey, int(last.port), sl); ok && s.slots[i] == sl {
			return i, true
		}
	}
	lo, hi := 0, len(s.slots)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		cur := s.slots[mid]
		if cur != sl && compareSlot(cur.current(), last.cluster, last.ip, last.ipKey, int(last.port)) < 0 {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, lo < len(s.slots) && s.slots[lo] == sl
}
