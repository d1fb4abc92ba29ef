package registry

import (
	"iter"
	"maps"
	"time"

	"github.com/muster-io/muster/health"
	"github.com/muster-io/muster/model"
)

// The core's face to its driver. The Registry holds its index as a named
// field (Registry.core) and reaches it only through methods: the reads
// below, the changes in core.go and core_replica.go, and ready / advance,
// which hand out what the changes so far mean outside the index.
// boundary_test.go checks that no code outside the index's methods reads
// its fields.

// ready returns the effects of the changes made since the last advance,
// for the driver to carry out (Registry.carryOut), in the manner of
// etcd-io/raft's RawNode.Ready. The value shares its lists' storage with
// the core: the driver reads it, makes no change to the index until it
// calls advance, and does not keep it after that.
func (ix *index) ready() effects { return ix.fx }

// pending returns the two effects that a common write has, the services
// whose views changed and the earliest new deadline, and whether there are
// others (effects.rare), for which the driver calls ready: the common
// write's carryOut then copies three words, not the whole effects. The
// list shares its storage with the core, as ready's do.
func (ix *index) pending() (dirty []model.ServiceKey, wake time.Time, rare bool) {
	return ix.fx.dirty, ix.fx.wake, ix.fx.rare()
}

// advance clears the effects that ready handed out, keeping their storage
// for the next change; rare says whether any but dirty and wake were there
// (effects.rare), so that a common write clears two lists, not twelve.
func (ix *index) advance(rare bool) {
	if rare {
		ix.fx.resetRest()
	}
	ix.fx.wake = time.Time{}
	cut(&ix.fx.dirty)
}

// rare reports whether fx holds any effect but dirty services and a wake
// time: a standalone write records those two and nothing else, so one test
// (the lists' lengths or-ed) passes the rest.
func (fx *effects) rare() bool {
	return len(fx.gone)|len(fx.catalogs)|len(fx.targets)|len(fx.notes)|len(fx.replicate)|len(fx.events)|
		len(fx.lapsed)|len(fx.ended)|len(fx.conflicts)|len(fx.released) != 0 || fx.services
}

// configure sets what New decides after building the index: the past
// revisions kept per service for WatchFrom (history), whether changes
// record journal events (noting), and whether the registry is standalone,
// so that changes record no replication effects (solo).
func (ix *index) configure(history int, noting, solo bool) {
	ix.history, ix.noting, ix.solo = history, noting, solo
}

// Reads. The driver holds mu (read or write) across a read and its use of
// the result.

// service returns the service of *key, or nil. It takes the key by
// pointer: a ServiceKey is 48 bytes, and passed by value it is copied into
// the inlined call (16-byte moves over the caller's 8-byte stores, likely a
// store-forwarding stall) before every lookup; the notifier makes one per
// watcher, and BenchmarkWatchFanout took 30 % more CPU.
func (ix *index) service(key *model.ServiceKey) *service { return ix.services[*key] }

// allServices ranges over the services, in no order.
func (ix *index) allServices() iter.Seq2[model.ServiceKey, *service] { return maps.All(ix.services) }

// serviceCount returns the number of services.
func (ix *index) serviceCount() int { return len(ix.services) }

// cloneServices returns a copy of the map of services, for the lock-free
// query snapshot.
func (ix *index) cloneServices() map[model.ServiceKey]*service { return maps.Clone(ix.services) }

// namespaceServices returns the number of services of namespace ns.
func (ix *index) namespaceServices(ns string) int { return ix.quota.nsServices[ns] }

// namespaceCount returns the number of namespaces that hold services.
func (ix *index) namespaceCount() int { return len(ix.quota.nsServices) }

// hasPatch reports whether a patch of instKey is stored.
func (ix *index) hasPatch(instKey model.InstanceKey) bool { return ix.patches[instKey] != nil }

// allPatches ranges over the keys of the stored patches, in no order.
func (ix *index) allPatches() iter.Seq[model.InstanceKey] { return maps.Keys(ix.patches) }

// allSessions ranges over this node's open sessions, in no order. A range
// may close the session it is handed (endSession).
func (ix *index) allSessions() iter.Seq[*publisher] { return maps.Values(ix.sessions) }

// sessionCount returns the number of this node's open sessions.
func (ix *index) sessionCount() int { return len(ix.sessions) }

// hasSession reports whether a session with id is open.
func (ix *index) hasSession(id string) bool { return ix.sessions[id] != nil }

// remotePub returns the replica of another node's publisher with
// recordKey, or nil.
func (ix *index) remotePub(recordKey string) *publisher { return ix.remote[recordKey] }

// allBeatPubs ranges over this node's beat publishers, in no order.
func (ix *index) allBeatPubs() iter.Seq[*publisher] {
	return func(yield func(*publisher) bool) {
		for _, head := range ix.beats {
			for p := head; p != nil; p = p.next {
				if !yield(p) {
					return
				}
			}
		}
	}
}

// beatLocOf looks up the beat publisher of ip:port, for beatPubAt.
func (ix *index) beatLocOf(ip string, port int) beatLoc {
	head := ix.beats[ip]
	return beatLoc{ok: true, pub: beatPubIn(head, port), head: head, gen: ix.beatsGen}
}

// counts returns the index's counts (Registry.Counts).
func (ix *index) counts() Counts {
	c := Counts{
		Services:   len(ix.services),
		Namespaces: make(map[string]int, len(ix.quota.nsServices)),
		Instances:  ix.quota.instances,
		Sessions:   len(ix.sessions),
		Watchers:   ix.quota.watchers,
	}
	for ns, n := range ix.quota.nsServices {
		c.Namespaces[ns] = n
	}
	return c
}

// watchers returns the number of open watchers, as counted against
// Limits.MaxWatchers.
func (ix *index) watchers() int { return ix.quota.watchers }

// expiries returns what this node's leases ended.
func (ix *index) expiries() expiries { return ix.expired }

// Changes that the driver's calls make: each records its effects, which
// the driver carries out before it releases mu.

// admitWatcher counts a new watcher, or fails with ErrLimit at
// Limits.MaxWatchers.
func (ix *index) admitWatcher() error {
	if n := ix.quota.watchers; n >= ix.lim.MaxWatchers {
		return limitError("MaxWatchers", ix.lim.MaxWatchers, "%d watchers are open", n)
	}
	ix.quota.watchers++
	return nil
}

// watcherClosed uncounts a watcher that admitWatcher counted.
func (ix *index) watcherClosed() { ix.quota.watchers-- }

// admitSession fails with ErrLimit at Limits.MaxSessions.
func (ix *index) admitSession() error {
	if n := len(ix.sessions); n >= ix.lim.MaxSessions {
		return limitError("MaxSessions", ix.lim.MaxSessions, "%d sessions are open", n)
	}
	return nil
}

// openSession adds the session publisher p, whose ID is unique
// (hasSession), with a keep-alive of ttl from now if ttl > 0.
func (ix *index) openSession(p *publisher, ttl time.Duration, now time.Time) {
	ix.sessions[p.id] = p
	if ttl > 0 {
		_ = ix.sessionLeases.Put(p, now, health.Timeouts{Expire: ttl}) // ttl > 0: checked by OpenSession
		ix.fx.wakeBy(now.Add(ttl))
	}
}

// keepAlive renews the keep-alive of session p, from now.
func (ix *index) keepAlive(p *publisher, now time.Time) { ix.sessionLeases.Touch(p, now) }

// endSession drops the keep-alive of session p and closes it, why (see
// closeSession); countdowns start at now.
func (ix *index) endSession(p *publisher, why string, now time.Time) {
	ix.sessionLeases.Remove(p)
	ix.closeSession(p, why, now)
}

// publishBeat publishes inst, valid and with its defaults, through the
// beat publisher pub of its ip:port (fresh: a new one, indexed here once
// the publication is admitted), and (re)starts its lease from now (see
// publish). The driver has looked up, or promoted, pub (loc, if not nil,
// is the lookup), and looked up where inst's key is (at); a new slot is
// made in blk, if not nil.
func (ix *index) publishBeat(pub *publisher, loc *beatLoc, at slotAt, inst *model.Instance, fresh bool, blk *slotBlock, now time.Time) (*pubInst, error) {
	pi, err := ix.publishAtKey(at.s, at.i, at.found, pub, *inst, true, blk, at.ipKey)
	if err != nil {
		return nil, err
	}
	if fresh {
		ix.addBeatPubAt(loc, inst.IP, pub)
	}
	ix.pubChanged(pub)
	t := inst.BeatTimings()
	// The timings passed Validate, so the lease accepts them.
	_ = ix.beatLeases.Put(pi, now, beatTimeouts(t))
	ix.fx.wakeBy(now.Add(min(t.Unhealthy, t.Delete)))
	return pi, nil
}

// renewBeat restarts, from now, the lease of pi, which holds inst (with
// its defaults) exactly, and returns the lease's first deadline, for the
// driver to wake by. Nothing else changes, so it records no effect: the
// standalone re-registration of a held beat instance is a hot path.
func (ix *index) renewBeat(pi *pubInst, inst *model.Instance, now time.Time) time.Time {
	t := inst.BeatTimings()
	_ = ix.beatLeases.Put(pi, now, beatTimeouts(t)) // the stored timings passed validation
	return now.Add(min(t.Unhealthy, t.Delete))
}

// beatInterval returns the interval handed back to the beats of pi: its
// instance's preserved.heart.beat.interval, kept in its lease's Timeouts
// (beatTimeouts), or 0 when pi has no lease (a session's or a replica's).
func (ix *index) beatInterval(pi *pubInst) time.Duration { return ix.beatLeases.Interval(&pi.lease) }

// touchBeat renews pi's lease from now and makes the instance healthy
// again if it was not. It reports whether that changed the index (there
// are effects to carry out).
func (ix *index) touchBeat(pi *pubInst, now time.Time) bool {
	_, revived := ix.beatLeases.Touch(pi, now)
	if revived || !pi.inst.healthy {
		ix.note(pi.slot.key(), EventHealthy, pi.pub, "beat resumed")
		ix.replaceInst(pi, pi.inst.withHealth(true))
		return true
	}
	return false
}

// deregisterBeat removes the beat instance with instKey, published by pi
// (or not held here: nil), deregistered on this node, and remembers that
// for as long as its lease would have run, so that a lease handed over
// later does not bring it back (see takeLease; standalone, no lease is
// handed over). Countdowns start at now.
func (ix *index) deregisterBeat(instKey model.InstanceKey, pi *pubInst, now time.Time) {
	if !ix.solo {
		ttl := model.DefaultIPDeleteTimeout
		if pi != nil {
			ttl = pi.inst.instance(pi.slot.svc).BeatTimings().Delete
		}
		ix.noteDeregistered(instKey, ttl, now)
	}
	if pi != nil {
		ix.beatLeases.Remove(pi)
		ix.dropBeat(pi, "deregistered", now)
	}
}

// unpublishSession removes session publisher p's publication of instKey,
// if it has one, why; countdowns start at now.
func (ix *index) unpublishSession(p *publisher, instKey model.InstanceKey, why string, now time.Time) {
	if _, sl := ix.lookup(instKey); sl != nil {
		if pi := sl.publication(p); pi != nil {
			ix.unpublish(pi, true, why, now)
			ix.changed(sl.svc)
			ix.pubChanged(p)
		}
	}
}
