package registry

import (
	"slices"
	"strings"
	"time"

	"github.com/muster-io/muster/health"
	"github.com/muster-io/muster/model"
)

// The index core: the services, their slots, the patches and the
// countdowns of emptied services and orphaned patches, as plain code. It
// has no goroutines, no clock and no I/O: a method that starts a
// countdown takes its start (now), and what the change means outside the
// index (views to deliver, health checks to re-target, the next deadline,
// a conflict to log) is recorded in its effects, which the driver (the
// Registry, drive.go) carries out under the same lock, with carryOut.
//
// The Registry holds its index as the named field core, guarded by
// Registry.mu, and reaches it only through its methods (core_driver.go
// lists the reads and the driver's changes; boundary_test.go checks that
// no other code reads its fields). The effects leave the core as a value
// (ready) and come back once carried out (advance).
//
// Unlike etcd's Ready, whose contents the application may still be
// processing after the state machine has moved on, the effects name index
// objects by pointer (a service that left, a publication to replicate, a
// session that ended). That is deliberate: they are carried out under the
// same lock, before the next change, so no pointer can go stale, and
// copying a publication's records on every write would cost Register and
// Heartbeat an allocation each. The boundary the compiler keeps is the
// index's own fields; of the objects it hands out, the driver changes only
// a publisher's replication state (delta.go's repl), under the same lock.

// index is the registry's core. Its zero value is not usable: see
// newIndex.
type index struct {
	services map[model.ServiceKey]*service
	patches  map[model.InstanceKey]*model.InstancePatch
	rev      uint64 // last revision handed out; revisions are unique across services
	history  int    // past revisions kept per service for WatchFrom (Config.WatchHistory, with its default; 0 keeps none)
	lim      Limits // the registry's limits, with their defaults
	noting   bool   // the journal is on: changes record its events (effects.events)
	solo     bool   // standalone: no replicator, so changes record no replication effects (notes, replicate)
	quota    quotas // what the limits count (see limits.go)
	expired  expiries

	beats    map[string]*publisher // beat publishers by IP, then chained by port (see beatPub)
	beatsGen uint64                // counts additions to and removals from beats (see beatLoc)
	sessions map[string]*publisher // session publishers by ID
	remote   map[string]*publisher // replicas of other nodes' publishers, by record key (core_replica.go)

	beatLeases         health.Intrusive[*pubInst] // beat publications: unhealthy, then dropped (the lease in pubInst.lease, the interval in its Timeouts)
	sessionLeases      health.Leases[*publisher]  // sessions' keep-alives: closed at expiry
	emptyTTL, patchTTL time.Duration
	emptySvcs          health.Leases[model.ServiceKey]  // emptied implicit services, dropped at expiry
	patchGone          health.Leases[model.InstanceKey] // patches whose instance is gone
	beatDeregs         health.Leases[model.InstanceKey] // beat instances deregistered here lately (see noteDeregistered)

	fx effects // what the changes so far mean outside the index
}

// expiries count what this node's leases ended (Stats.LeasesExpired,
// SessionsExpired).
type expiries struct{ leases, sessions uint64 }

// newIndex returns an empty index with the limits lim (with their
// defaults), whose emptied implicit services go after emptyTTL and
// orphaned patches after patchTTL (both positive).
func newIndex(lim Limits, emptyTTL, patchTTL time.Duration) index {
	return index{
		lim:      lim,
		services: make(map[model.ServiceKey]*service),
		patches:  make(map[model.InstanceKey]*model.InstancePatch),
		beats:    make(map[string]*publisher),
		sessions: make(map[string]*publisher),
		remote:   make(map[string]*publisher),
		quota:    quotas{nsServices: make(map[string]int)},
		emptyTTL: emptyTTL,
		patchTTL: patchTTL,
	}
}

// effects is what changes of the index mean outside it, in the order they
// happened; the core hands them out (ready), the driver carries them out
// (carryOut) and hands them back (advance), which clears them. The
// slices keep their storage from one change to the next.
type effects struct {
	// dirty: services whose views changed (a new revision): their watchers
	// are due a delivery.
	dirty []model.ServiceKey
	// gone: services that left the index: their watchers get an empty
	// view at the service's last revision.
	gone []*service
	// catalogs: namespaces whose list of services changed.
	catalogs []string
	// services: services were added or removed (the lock-free query
	// snapshot is stale).
	services bool
	// targets: health-check targets to re-evaluate, in order.
	targets []target
	// wake: the earliest deadline of a countdown started; zero if none.
	wake time.Time
	// conflicts: data the index refused or left out (logged): stored
	// data that this node's ephemeral data refused, a peer's instances
	// that do not fit.
	conflicts []conflict
	// notes: publications added or changed (published) and removed, for
	// the per-instance replication of sessions (delta.go), in order.
	// replicate: publishers that changed (pubChanged): their records are
	// due to the replicator. A standalone index (index.solo) records neither.
	notes     []note
	replicate []*publisher
	// ended: sessions closed (their Done channel to close); lapsed: the
	// IDs of those whose keep-alive lapsed (logged).
	ended  []*Session
	lapsed []string
	// events: instance events for the journal (Explain), when it is on.
	events []jnote
	// released: session publications removed from a slot that stays (another
	// publisher still publishes its key). Such a publication may be its
	// slot's block's own (slotBlock), which lives as long as the slot: once
	// the change is carried out (notes read it), it lets go of its instance,
	// whose strings may be windows on a whole record (shareIn,
	// decodeInstRecord), and of its publisher (pubInst.release).
	released []*pubInst
}

// jnote is one instance event for the journal: the driver stamps it with
// the time and the node (Registry.noteBy).
type jnote struct {
	instKey model.InstanceKey
	kind    EventKind
	pub     *publisher // nil for the persistent store's and this node's own
	remote  bool       // pub was a replica when the event happened (its node is its owner)
	why     string
}

// note is one publication added or changed (published), or removed.
type note struct {
	pi        *pubInst
	published bool
}

// target is one re-evaluation of health-check targets: the slot sl of svc,
// every slot of svc (sl nil), or no probing of instKey (svc nil).
type target struct {
	svc     *service
	sl      *slot
	instKey model.InstanceKey
}

// conflict is data that the index kept out.
type conflict struct {
	what      conflictKind
	name      string // the service, instance or record
	ephemeral bool   // conflictDefinition: the kind the service keeps
	n         int    // conflictMergeCap: the instances left out
	err       error  // the refusal (but for conflictDefinition)
}

// conflictKind says what a conflict kept out.
type conflictKind uint8

const (
	// conflictDefinition, conflictInstance: a stored definition or
	// instance, because this node's instances of the service are of the
	// other kind.
	conflictDefinition conflictKind = iota + 1
	conflictInstance
	// conflictReplicated: an instance of a peer's record, refused by the
	// index (a service of the other kind).
	conflictReplicated
	// conflictMergeCap: a peer's instances of an ip:port this node owns,
	// past the endpoint's cap (mergeIntoLocal).
	conflictMergeCap
	// conflictHanded: a handed-over instance, refused by the index.
	conflictHanded
)

// empty reports whether there is nothing to carry out.
func (fx *effects) empty() bool {
	return len(fx.dirty) == 0 && len(fx.gone) == 0 && len(fx.catalogs) == 0 && !fx.services &&
		len(fx.targets) == 0 && fx.wake.IsZero() && len(fx.conflicts) == 0 && len(fx.notes) == 0 &&
		len(fx.replicate) == 0 && len(fx.ended) == 0 && len(fx.lapsed) == 0 && len(fx.events) == 0 &&
		len(fx.released) == 0
}

// reset clears fx, keeping its storage.
func (fx *effects) reset() {
	cut(&fx.dirty)
	fx.wake = time.Time{}
	fx.resetRest()
}

// resetRest clears fx but for dirty and wake (see carryOut).
func (fx *effects) resetRest() {
	cut(&fx.gone)
	cut(&fx.catalogs)
	cut(&fx.targets)
	cut(&fx.conflicts)
	cut(&fx.notes)
	cut(&fx.replicate)
	cut(&fx.ended)
	cut(&fx.lapsed)
	cut(&fx.events)
	cut(&fx.released)
	fx.services = false
}

// cut empties *s, keeping its storage. It touches only a list that holds
// something (a change nearly always records one or two), and cuts it in
// place (s = s[:0] writes no pointer, so it costs no write barrier). A
// list of one, the common case, is cleared by an assignment rather than
// clear's call into the runtime (a clear of pointers, with its bulk
// barrier).
func cut[T any](s *[]T) {
	switch len(*s) {
	case 0:
		return
	case 1:
		var zero T
		(*s)[0] = zero
	default:
		clear(*s)
	}
	*s = (*s)[:0]
}

// wakeBy records that a deadline at t was started.
func (fx *effects) wakeBy(t time.Time) {
	if fx.wake.IsZero() || t.Before(fx.wake) {
		fx.wake = t
	}
}

// note records an instance event of instKey for the journal, if it is on.
func (ix *index) note(instKey model.InstanceKey, kind EventKind, pub *publisher, why string) {
	if ix.noting {
		ix.fx.events = append(ix.fx.events, jnote{instKey: instKey, kind: kind, pub: pub, remote: pub != nil && pub.remote, why: why})
	}
}

// noteSlot is note of sl's key, built only when the journal is on.
func (ix *index) noteSlot(sl *slot, kind EventKind, pub *publisher, why string) {
	if ix.noting {
		ix.note(sl.key(), kind, pub, why)
	}
}

// notePublication records that pi was published (new or changed) or, if
// not published, removed, for the per-instance replication of sessions
// (delta.go); standalone, nothing reads it.
func (ix *index) notePublication(pi *pubInst, published bool) {
	if !ix.solo {
		ix.fx.notes = append(ix.fx.notes, note{pi: pi, published: published})
	}
}

// noteChange records pi's instance becoming next: a health flip, or an
// update.
func (ix *index) noteChange(pi *pubInst, next *model.Instance, pub *publisher) {
	switch {
	case !ix.noting:
	case pi.inst.healthy && !next.Healthy:
		ix.note(pi.slot.key(), EventUnhealthy, pub, "on its owner")
	case !pi.inst.healthy && next.Healthy:
		ix.note(pi.slot.key(), EventHealthy, pub, "on its owner")
	default:
		ix.note(pi.slot.key(), EventUpdated, pub, "")
	}
}

// noteHealth records a stored health change of a persistent instance: by
// its active check, or set by hand on a NONE cluster.
func (ix *index) noteHealth(s *service, instKey model.InstanceKey, healthy bool) {
	if !ix.noting {
		return
	}
	why := "manual"
	def := s.definition()
	if t := def.Cluster(instKey.Cluster).HealthCheck.EffectiveType(); t != model.CheckNone {
		why = "check: " + string(t)
	}
	kind := EventUnhealthy
	if healthy {
		kind = EventHealthy
	}
	ix.note(instKey, kind, nil, why)
}

// lookup returns the service of instKey and the slot of instKey in it;
// either may be nil.
func (ix *index) lookup(instKey model.InstanceKey) (*service, *slot) {
	s := ix.services[instKey.Service]
	if s == nil {
		return nil, nil
	}
	return s, s.lookupSlot(instKey)
}

// placeSlot inserts sl, new and not yet live, at index i of s.slots; r
// holds its key.
func (ix *index) placeSlot(s *service, i int, sl *slot, r *rec) *slot {
	ix.quota.instances++
	s.insertSlot(i, sl, r)
	return sl
}

// slotBlock is a new slot born with its first publication: the slot (which
// holds its first publication inline), the publication and its instance in
// one allocation rather than three: 144 bytes, a size class
// (TestBeatBlockSizeClass), paid by every session instance. Registering a new
// instance is a hot path, and the block keeps what a lookup reads of the
// slot's key (the first publication, the rec's key fields) in the slot's
// own cache lines: a step of findSlot's binary search reads one block (and
// the IP's bytes) where it read four objects.
//
// Nothing reuses the block's parts: a publication removed or an instance
// replaced (pubInst.inst points elsewhere) leaves its part unused, and the
// garbage collector keeps the block while anything points into it. So a
// slot that outlives its first publication keeps, besides the block's
// unused rec, that publication's publisher: a closed session's publisher and Session (its list of
// publications is dropped at close), or a gone beat publisher, a few
// hundred bytes, one per slot at most, and only for slots whose first
// publication left while another publisher held the key.
type slotBlock struct {
	sl  slot
	pi  pubInst
	rec rec
}

// init makes b, fresh from new (all zero), a new slot of s (not yet
// placed) with pub's publication of inst, which is valid and has its
// defaults (ipKey is ipOrder(inst.IP)), and returns them. It writes only the fields that are not zero.
func (b *slotBlock) init(s *service, pub *publisher, inst *model.Instance, ipKey uint32) (*slot, *pubInst) {
	b.sl.svc = s
	b.rec = recOfKey(inst, ipKey)
	b.pi.pub, b.pi.slot, b.pi.inst = pub, &b.sl, &b.rec
	b.sl.head = &b.pi
	return &b.sl, &b.pi
}

// persBlock is a new slot of a persistent service with its instance: one
// allocation where there were two, and what findSlot reads of the slot's
// key (sl.x.pers, the rec's key fields) in the slot's own cache lines. An
// update replaces sl.x.pers and leaves the block's rec unused while the
// slot lives. The slot's extra (slotExtra) is in the block too: 128 bytes,
// a size class (the slot and rec alone are 104).
type persBlock struct {
	sl  slot
	x   slotExtra
	rec rec
}

// beatBlock is a new beat publisher allocated with the slot of its first
// instance (standalone, the common case: a new ip:port registers a new
// instance), with room for its first publication in its list: one
// allocation where there were four. The publication's lease is in the
// block's pubInst, and its interval in the lease's interned Timeouts (see
// index.beatInterval). Standalone, every beat instance has a block, so its
// size counts per instance: 200 bytes, in the 208-byte size class
// (TestBeatBlockSizeClass; 192 would take 8 bytes off the publisher). When the instance's slot exists already, the
// slot part goes unused (the block is freed with the publisher). A live
// publisher keeps its block's slot, and that slot's service, after the
// slot or the service has left the index (an ip:port that moved to another
// service): one service object at most per beat publisher, until the
// publisher goes.
type beatBlock struct {
	pub  publisher
	slot slotBlock
}

// newBeatPub returns a new beat publisher of port and, for its first
// instance, the block to make its slot in.
func newBeatPub(port int) (*publisher, *slotBlock) {
	b := &beatBlock{pub: publisher{kind: pubBeat, port: uint16(port)}}
	return &b.pub, &b.slot
}

// slotBorn is called once a new slot has its first publication: it attaches
// a waiting patch.
func (ix *index) slotBorn(sl *slot) { ix.slotBornIn(sl, true) }

// slotBornIn is slotBorn knowing whether sl's service had no live slot
// before (only then may its empty countdown run).
func (ix *index) slotBornIn(sl *slot, wasEmpty bool) {
	if len(ix.patches) > 0 {
		instKey := sl.key()
		if p := ix.patches[instKey]; p != nil {
			sl.setPatch(p)
			ix.patchGone.Remove(instKey)
		}
	}
	if wasEmpty {
		ix.emptySvcs.Remove(sl.svc.key)
	}
}

// dropSlotIfDead removes sl from its service once nothing publishes it, and
// starts, from now, the countdowns of its patch and of its service when it
// is now empty. last is the instance the slot held last, which locates it.
func (ix *index) dropSlotIfDead(sl *slot, last *rec, now time.Time) {
	if sl.live() {
		return
	}
	s := sl.svc
	if i, ok := s.findSlotOf(sl, last); ok {
		s.deleteSlot(i, last)
		ix.quota.instances--
	}
	if p := sl.patch(); p != nil {
		ix.startPatchCountdown(p.Key, now)
	}
	ix.maybeEmpty(s, now)
}

// maybeEmpty starts, from now, the countdown of an empty, implicit
// service.
func (ix *index) maybeEmpty(s *service, now time.Time) {
	if s.empty() && s.def == nil {
		_ = ix.emptySvcs.Put(s.key, now, health.Timeouts{Expire: ix.emptyTTL}) // positive: Config.Validate
		ix.fx.wakeBy(now.Add(ix.emptyTTL))
	}
}

// startPatchCountdown starts, from now, the PatchTTL countdown of the
// patch of instKey, whose instance is gone.
func (ix *index) startPatchCountdown(instKey model.InstanceKey, now time.Time) {
	_ = ix.patchGone.Put(instKey, now, health.Timeouts{Expire: ix.patchTTL}) // positive: Config.Validate
	ix.fx.wakeBy(now.Add(ix.patchTTL))
}

// changed records a change of s: a new revision, the cached views dropped,
// its watchers due a delivery.
func (ix *index) changed(s *service) {
	ix.rev++
	s.rev = ix.rev
	// Readers fill the cache holding mu for reading (cacheOf), so under the
	// write lock a load and a store do what a swap would, without its
	// locked instruction when nobody read the last revision.
	if vc := s.cache.Load(); vc != nil {
		s.cache.Store(nil)
		if ix.history > 0 {
			s.remember(vc, ix.history) // a revision someone read: a watcher may resume from it
		}
	}
	ix.fx.dirty = append(ix.fx.dirty, s.key)
}

// ensureService returns the service of svcKey, creating an implicit one of
// the given kind, or ErrKindMismatch when it exists with the other kind.
func (ix *index) ensureService(svcKey model.ServiceKey, ephemeral bool) (*service, error) {
	s := ix.services[svcKey]
	if s == nil {
		s = &service{key: svcKey, ephemeral: ephemeral}
		ix.addService(s)
		return s, nil
	}
	if s.ephemeral != ephemeral {
		return nil, kindMismatch(s)
	}
	return s, nil
}

// addService puts s in the index.
func (ix *index) addService(s *service) {
	ix.services[s.key] = s
	ix.quota.nsServices[s.key.Namespace]++
	ix.fx.services = true
	ix.fx.catalogs = append(ix.fx.catalogs, s.key.Namespace)
}

// dropService takes the service of svcKey out of the index.
func (ix *index) dropService(svcKey model.ServiceKey) {
	if _, ok := ix.services[svcKey]; ok {
		delete(ix.services, svcKey)
		if ix.quota.nsServices[svcKey.Namespace]--; ix.quota.nsServices[svcKey.Namespace] == 0 {
			delete(ix.quota.nsServices, svcKey.Namespace)
		}
		ix.fx.catalogs = append(ix.fx.catalogs, svcKey.Namespace)
	}
	ix.fx.services = true
}

// removeService drops s from the index. Watchers see an empty view.
func (ix *index) removeService(s *service) {
	ix.dropService(s.key)
	ix.emptySvcs.Remove(s.key)
	ix.changed(s)
	ix.fx.gone = append(ix.fx.gone, s)
}

// apply applies cmd from o (zero for the store's feed), which the rules
// accepted, to the index: first
// model.ResolveCommand (a re-put keeps the stored health, a patch merges
// with the stored one), then the change; countdowns it starts start at
// now. In cluster mode every node's index mirrors the commands its
// replicated store applied, so this never refuses: where the node's
// ephemeral data conflicts with an accepted command (a race between an
// ephemeral and a persistent registration of one service on two nodes),
// the conflict is recorded and the ephemeral side keeps the service.
func (ix *index) apply(cmd *model.Command, o model.Origin, now time.Time) {
	ix.applyChange(cmd, o, now, model.ResolveCommand(cmd, (*indexState)(ix)))
}

// applyResolved is apply for a command its store resolved already
// (StoreFeed.Applied): a put carries the health it keeps and a patch is
// merged, so they are applied as they are, without looking up again what
// they replace; the other ops are resolved here, for whether they change
// anything.
func (ix *index) applyResolved(cmd *model.Command, now time.Time) {
	switch cmd.Op {
	case model.OpPutInstance, model.OpPatchInstance:
		ix.applyChange(cmd, model.Origin{}, now, true)
	default:
		ix.apply(cmd, model.Origin{}, now)
	}
}

// applyChange is apply once cmd was resolved: changes is what
// model.ResolveCommand reported.
func (ix *index) applyChange(cmd *model.Command, o model.Origin, now time.Time, changes bool) {
	switch cmd.Op {
	case model.OpCreateService, model.OpUpdateService:
		ix.putService(cmd.Service)
	case model.OpDeleteService:
		// Not only a definition goes: an empty implicit service goes with
		// it, a change that ResolveCommand, which counts definitions, does
		// not report.
		s := ix.services[cmd.SvcKey]
		if s == nil {
			return
		}
		s.def = nil
		if s.empty() {
			ix.removeService(s)
		} else {
			ix.changed(s)
		}
	case model.OpPutInstance:
		ix.putInstance(cmd.Instance)
	case model.OpDeleteInstance:
		if !changes {
			return
		}
		s, sl := ix.lookup(cmd.Key)
		last := sl.pers()
		sl.setPers(nil)
		ix.note(cmd.Key, EventRemoved, nil, "deleted")
		ix.fx.targets = append(ix.fx.targets, target{instKey: cmd.Key})
		ix.dropSlotIfDead(sl, last, now)
		ix.changed(s)
	case model.OpPatchInstance:
		merged := cmd.Patch
		had := ix.patches[merged.Key] != nil
		ix.patches[merged.Key] = &merged
		ix.note(merged.Key, EventPatched, nil, "")
		if s, sl := ix.lookup(merged.Key); sl != nil {
			sl.setPatch(&merged)
			ix.changed(s)
		} else if !had {
			ix.startPatchCountdown(merged.Key, now)
		}
	case model.OpRemovePatch:
		if !changes {
			return
		}
		delete(ix.patches, cmd.Key)
		why := ""
		if o.Expiry {
			why = "expired"
		}
		ix.note(cmd.Key, EventPatchRemoved, nil, why)
		ix.patchGone.Remove(cmd.Key)
		if s, sl := ix.lookup(cmd.Key); sl != nil {
			sl.setPatch(nil)
			ix.changed(s)
		}
	case model.OpSetHealth:
		if !changes {
			return
		}
		s, sl := ix.lookup(cmd.Key)
		sl.setPers(sl.pers().withHealth(cmd.Healthy))
		ix.noteHealth(s, cmd.Key, cmd.Healthy)
		ix.changed(s)
		ix.fx.targets = append(ix.fx.targets, target{svc: s, sl: sl})
	}
}

// putService stores a definition, creating the service if needed.
func (ix *index) putService(def model.Service) {
	s := ix.services[def.Key]
	if s == nil {
		s = &service{key: def.Key, ephemeral: def.Ephemeral}
		ix.addService(s)
	} else if s.ephemeral != def.Ephemeral {
		ix.fx.conflicts = append(ix.fx.conflicts, conflict{what: conflictDefinition, name: def.Key.String(), ephemeral: s.ephemeral})
		return
	}
	s.def = &def
	ix.emptySvcs.Remove(s.key)
	ix.changed(s)
	if !s.ephemeral {
		ix.fx.targets = append(ix.fx.targets, target{svc: s})
	}
}

// putInstance stores a persistent instance as given, health included
// (apply resolved a re-put's health; a state reload carries it).
func (ix *index) putInstance(inst model.Instance) {
	s, err := ix.ensureService(inst.Service, false)
	if err != nil {
		ix.fx.conflicts = append(ix.fx.conflicts, conflict{what: conflictInstance, name: inst.Key().String(), ephemeral: true, err: err})
		return
	}
	i, found := s.findSlot(inst.Cluster, inst.IP, inst.Port)
	var sl *slot
	if found {
		sl = s.slots[i]
		stored := newRec(&inst)
		if cur := sl.pers(); cur != nil && cur.equal(stored) {
			return
		}
		sl.setPers(stored)
		ix.noteSlot(sl, EventUpdated, nil, "")
	} else {
		// A new instance: its slot and rec in one allocation, as a
		// slotBlock is for an ephemeral one.
		wasEmpty := s.empty()
		b := &persBlock{sl: slot{svc: s}, rec: recOf(&inst)}
		b.x.pers = &b.rec
		b.sl.x = &b.x
		sl = ix.placeSlot(s, i, &b.sl, &b.rec)
		ix.slotBornIn(sl, wasEmpty)
		ix.noteSlot(sl, EventRegistered, nil, "")
	}
	ix.changed(s)
	ix.fx.targets = append(ix.fx.targets, target{svc: s, sl: sl})
}

// expire handles every deadline of the index that passed by now, each as
// of its own deadline (what an expiry starts counts from there, so that
// one late run ends where many timely ones would): a beat publication
// turns unhealthy, then goes; a session whose keep-alive lapsed closes;
// emptied implicit services still empty leave the index; deregistrations
// are forgotten once no handed lease can contradict them. It returns the
// patches whose instance has been gone for PatchTTL, for the driver to
// remove through the store. The countdowns an expiry starts land in the
// lease sets handled after it.
func (ix *index) expire(now time.Time) []model.InstanceKey {
	ix.beatDeregs.Expire(now, nil)
	ix.beatLeases.ExpireAt(now, func(pi *pubInst, ev health.Event, at time.Time) {
		ix.beatEvent(pi, ev, at)
	})
	ix.sessionLeases.ExpireAt(now, func(p *publisher, _ health.Event, at time.Time) {
		ix.fx.lapsed = append(ix.fx.lapsed, p.id)
		ix.expired.sessions++
		ix.closeSession(p, "session expired", at)
	})
	ix.emptySvcs.Expire(now, func(svcKey model.ServiceKey, _ health.Event) {
		if s := ix.services[svcKey]; s != nil && s.empty() && s.def == nil {
			ix.dropService(svcKey)
		}
	})
	var orphans []model.InstanceKey
	ix.patchGone.Expire(now, func(instKey model.InstanceKey, _ health.Event) {
		orphans = append(orphans, instKey)
	})
	return orphans
}

// beatEvent applies a beat lease transition, at now.
func (ix *index) beatEvent(pi *pubInst, ev health.Event, now time.Time) {
	switch ev {
	case health.EventUnhealthy:
		if pi.inst.healthy {
			ix.noteSlot(pi.slot, EventUnhealthy, pi.pub, "beat missed")
			ix.replaceInst(pi, pi.inst.withHealth(false))
		}
	case health.EventExpired: // the tracker has dropped the lease already
		ix.expired.leases++
		ix.dropBeat(pi, "lease expired", now)
	}
}

// dropBeat removes a beat publication, why, and its publisher once it has
// no other; countdowns start at now. The caller has dropped the
// publication's lease.
func (ix *index) dropBeat(pi *pubInst, why string, now time.Time) {
	ix.unpublish(pi, true, why, now)
	ix.changed(pi.slot.svc)
	ix.pubChanged(pi.pub)
	ix.dropBeatPublisherIfEmpty(pi.pub, pi.inst)
}

// dropBeatPublisherIfEmpty forgets a beat publisher with no instances;
// last is the instance it published last, whose ip:port keys it.
func (ix *index) dropBeatPublisherIfEmpty(pub *publisher, last *rec) {
	if pub.insts.len() == 0 {
		ix.removeBeatPub(last.ip, pub)
		pub.closed = true
	}
}

// closeSession removes all of p's instances, why, changing each affected
// service once, and forgets p; countdowns start at now. Its Session ends
// (an effect). The caller has dropped p's lease (or is the lease tracker
// expiring it).
func (ix *index) closeSession(p *publisher, why string, now time.Time) {
	p.closed = true
	delete(ix.sessions, p.id)
	var touched []*service
	for _, pi := range p.insts.all() {
		ix.unpublish(pi, false, why, now)
		if s := pi.slot.svc; len(touched) == 0 || touched[len(touched)-1] != s {
			touched = append(touched, s)
		}
	}
	p.insts = pubList{}
	seen := make(map[*service]bool, len(touched))
	for _, s := range touched {
		if !seen[s] {
			seen[s] = true
			ix.changed(s)
		}
	}
	ix.pubChanged(p)
	if s := p.session(); s != nil {
		ix.fx.ended = append(ix.fx.ended, s)
	}
}

// next returns the earliest deadline of the index's leases and
// countdowns.
func (ix *index) next() (time.Time, bool) {
	var t time.Time
	ok := false
	for _, at := range [...]func() (time.Time, bool){ix.beatLeases.Next, ix.sessionLeases.Next, ix.emptySvcs.Next, ix.patchGone.Next, ix.beatDeregs.Next} {
		if n, nok := at(); nok && (!ok || n.Before(t)) {
			t, ok = n, true
		}
	}
	return t, ok
}

// publish adds or replaces pub's publication of inst, which is valid and
// has its defaults. With limited (a write taken here, not a peer's
// record), a new publication must fit in the limits (see admitNew), or
// nothing changes. The caller reports the change (pubChanged).
func (ix *index) publish(pub *publisher, inst model.Instance, limited bool) (*pubInst, error) {
	s := ix.services[inst.Service]
	i, found := 0, false
	if s != nil {
		i, found = s.findSlot(inst.Cluster, inst.IP, inst.Port)
	}
	return ix.publishAt(s, i, found, pub, inst, limited, nil)
}

// publishAt is publish with inst's key looked up already: s is the
// service of inst's key (or nil), i the index of the key's slot in s.slots
// or where it would go, found whether it is there (see instLoc in
// delta.go). A new slot is made in blk when it is not nil (see beatBlock),
// in a slotBlock of its own otherwise.
func (ix *index) publishAt(s *service, i int, found bool, pub *publisher, inst model.Instance, limited bool, blk *slotBlock) (*pubInst, error) {
	return ix.publishAtKey(s, i, found, pub, inst, limited, blk, ipOrder(inst.IP))
}

// publishAtKey is publishAt knowing ipKey, ipOrder(inst.IP).
func (ix *index) publishAtKey(s *service, i int, found bool, pub *publisher, inst model.Instance, limited bool, blk *slotBlock, ipKey uint32) (*pubInst, error) {
	if s != nil && !s.ephemeral {
		return nil, kindMismatch(s)
	}
	if found {
		if pi := s.slots[i].publication(pub); pi != nil {
			// issue 15: the same instance again changes nothing; a
			// publication that is not the one served changes no view.
			if pi.inst.sameInstance(&inst) {
				return pi, nil
			}
			served := s.slots[i].current() == pi.inst
			ix.noteChange(pi, &inst, pub)
			pi.setInst(newRec(&inst))
			if served {
				ix.changed(s)
			}
			ix.notePublication(pi, true)
			return pi, nil
		}
	}
	if limited {
		if err := ix.admitNew(pub, s, found, &inst); err != nil {
			return nil, err
		}
	}
	if s == nil {
		s = &service{key: inst.Service, ephemeral: true}
		ix.addService(s)
	}
	if !found {
		// The common case, a new instance: one allocation (slotBlock).
		wasEmpty := s.empty()
		if blk == nil {
			blk = new(slotBlock)
		}
		sl, pi := blk.init(s, pub, &inst, ipKey)
		ix.placeSlot(s, i, sl, pi.inst)
		pub.insts.add(pi)
		ix.slotBornIn(sl, wasEmpty)
		if ix.noting {
			ix.noteSlot(sl, EventRegistered, pub, "")
		}
		ix.changed(s)
		ix.notePublication(pi, true)
		return pi, nil
	}
	stored := newRec(&inst)
	sl := s.slots[i]
	born := !sl.live()
	prev := sl.current() // issue 15: what the view shows before
	pi := &pubInst{pub: pub, slot: sl, inst: stored}
	pub.insts.add(pi)
	at := 0
	if sl.head != nil {
		pubID := pub.pubID()
		at, _ = slices.BinarySearchFunc(sl.pubs(), pubID, func(p *pubInst, id string) int { return strings.Compare(p.pub.pubID(), id) })
	}
	sl.insertPub(at, pi)
	if born {
		ix.slotBorn(sl)
	}
	if ix.noting { // tested here: noteSlot is not inlined, and this is every registration's path
		ix.noteSlot(sl, EventRegistered, pub, "")
	}
	// issue 15: another publisher of a key, with the same instance, changes
	// no view.
	if born || sl.current() == stored && !stored.equal(prev) {
		ix.changed(s)
	}
	ix.notePublication(pi, true)
	return pi, nil
}

// unpublish removes one publication, why (the journal's reason); the
// countdowns its slot's death starts start at now. With detach, it is also
// removed from its publisher's list (a caller removing them all skips
// that). The caller drops the publication's lease, if any.
func (ix *index) unpublish(pi *pubInst, detach bool, why string, now time.Time) {
	ix.noteSlot(pi.slot, EventRemoved, pi.pub, why)
	ix.notePublication(pi, false) // issue 15: per-instance replication (delta.go)
	sl := pi.slot
	sl.removePub(pi)
	if detach {
		pi.pub.insts.remove(pi)
	}
	ix.dropSlotIfDead(sl, pi.inst, now)
	if sl.live() && pi.pub.kind == pubSession { // the slot, and perhaps pi's block, stays (effects.released)
		ix.fx.released = append(ix.fx.released, pi)
	}
}

// replaceInst swaps a publication's instance for next and records the
// change.
func (ix *index) replaceInst(pi *pubInst, next *rec) {
	pi.setInst(next)
	ix.pubChanged(pi.pub)
	ix.changed(pi.slot.svc)
}

// pubChanged records a change of pub: its record is due to the replicator
// (none standalone). Every change of a publisher's instances goes through
// here, so that the record is replicated from one place.
func (ix *index) pubChanged(pub *publisher) {
	if !ix.solo {
		ix.fx.replicate = append(ix.fx.replicate, pub)
	}
}

// admit checks a normalized cmd from o against the rules (model.AdmitCommand
// over the index: a service's kind, no delete while instances exist,
// patches only for instances the index holds, manual health only for NONE
// clusters), then against what only the registry knows: a patch's expiry
// waits for its newest countdown, and the limits (admitCommand). It
// returns model.ErrNoop for a command that has nothing to do.
//
// A replicated store checks the replicated rules again in its state
// machine (model.CheckCommand), at apply time; the others involve
// ephemeral data and can only be checked on the node that takes the
// write.
func (ix *index) admit(cmd *model.Command, o model.Origin) error {
	if err := model.AdmitCommand(cmd, (*indexState)(ix), o); err != nil {
		return err
	}
	if cmd.Op == model.OpRemovePatch && o.Expiry {
		if _, ok := ix.patchGone.Get(cmd.Key); ok {
			return model.ErrNoop // it came back and went again since: a new countdown runs
		}
	}
	return ix.admitCommand(cmd)
}

// indexState is the index as the rules read it (model.CommandState). It
// is a type of its own so that the index's own method set stays what its
// driver may call.
type indexState index

var _ model.CommandState = (*indexState)(nil)

// Service reports the service of k. The index never holds a persistent
// record in an ephemeral service (CheckConsistency), and a persistent
// service's slots all hold one, so Persistent is its slot count.
func (x *indexState) Service(k model.ServiceKey) model.ServiceState {
	s := x.services[k]
	if s == nil {
		return model.ServiceState{}
	}
	st := model.ServiceState{Exists: true, Ephemeral: s.ephemeral, Definition: s.def, Instances: len(s.slots)}
	if !s.ephemeral {
		st.Persistent = len(s.slots)
	}
	return st
}

// Instance reports the slot of k.
func (x *indexState) Instance(k model.InstanceKey) model.InstanceState {
	_, sl := (*index)(x).lookup(k)
	if sl == nil {
		return model.InstanceState{}
	}
	st := model.InstanceState{Exists: true}
	if pr := sl.pers(); pr != nil {
		st.Persistent, st.Healthy = true, pr.healthy
	}
	return st
}

// Patch returns the stored patch of k.
func (x *indexState) Patch(k model.InstanceKey) (model.InstancePatch, bool) {
	if p := x.patches[k]; p != nil {
		return *p, true
	}
	return model.InstancePatch{}, false
}

// beatPublishedAs returns beat publisher pub's publication of inst's key
// if it holds inst exactly, or nil (pub may be nil). pub publishes inst's
// ip:port, nearly always once, so its own list is shorter than a lookup
// in the index. The caller holds mu.
func beatPublishedAs(pub *publisher, inst *model.Instance) *pubInst {
	if pub == nil {
		return nil
	}
	for _, pi := range pub.insts.all() {
		if pi.inst.cluster == inst.Cluster && pi.slot.svc.key == inst.Service {
			if pi.inst.sameInstance(inst) {
				return pi
			}
			return nil
		}
	}
	return nil
}

// beatPub returns the beat publisher of ip:port, or nil. Beat publishers are
// indexed by IP (a string key takes the map's fast path) and chained by
// port, since an IP rarely has more than one.
func (ix *index) beatPub(ip string, port int) *publisher {
	return beatPubIn(ix.beats[ip], port)
}

// beatPubIn returns the beat publisher of port in the list from head.
func beatPubIn(head *publisher, port int) *publisher {
	for p := head; p != nil; p = p.next {
		if int(p.port) == port {
			return p
		}
	}
	return nil
}

// slotAt is where an instance key is in the index, as publishAt takes it:
// its service (nil when there is none), the index of its slot in s.slots
// or where it would go, and whether it is there.
type slotAt struct {
	s     *service
	i     int
	found bool
	ipKey uint32 // ipOrder of the instance's IP
}

// beatLoc is a lookup of the beat publisher of an ip:port under mu (pub,
// nil when there was none) and ix.beatsGen then. Until beatsGen moves, the
// lookup holds, after mu was released and taken again: a standalone
// Register, which validates between its pre-check and its registration,
// looks the publisher up once.
type beatLoc struct {
	ok   bool // the lookup was made
	pub  *publisher
	head *publisher // the first beat publisher of the ip then (pub's list)
	gen  uint64
	at   instLoc // the lookup of the instance's key, when made (relocate checks it)
}

// beatPubAt is beatPub of ip:port, loc's if it still holds (loc may be
// nil).
func (ix *index) beatPubAt(loc *beatLoc, ip string, port int) *publisher {
	if loc != nil && loc.ok && loc.gen == ix.beatsGen {
		return loc.pub
	}
	return ix.beatPub(ip, port)
}

// addBeatPub indexes a new beat publisher of ip.
func (ix *index) addBeatPub(ip string, p *publisher) { ix.addBeatPubAt(nil, ip, p) }

// addBeatPubAt is addBeatPub with the list of ip taken from loc, if it
// still holds (loc may be nil): the registration of a new ip:port then
// reads the map once, in its pre-check, and writes it once.
func (ix *index) addBeatPubAt(loc *beatLoc, ip string, p *publisher) {
	if loc != nil && loc.ok && loc.gen == ix.beatsGen {
		p.next = loc.head
	} else {
		p.next = ix.beats[ip]
	}
	ix.beatsGen++
	ix.beats[ip] = p
}

// removeBeatPub drops the beat publisher p of ip from the index.
func (ix *index) removeBeatPub(ip string, p *publisher) {
	ix.beatsGen++
	head := ix.beats[ip]
	if head == p {
		if p.next == nil {
			delete(ix.beats, ip)
		} else {
			ix.beats[ip] = p.next
		}
		p.next = nil // a publisher kept alive (a beatBlock whose slot lives on) keeps no other
		return
	}
	for q := head; q != nil; q = q.next {
		if q.next == p {
			q.next = p.next
			p.next = nil
			return
		}
	}
}
