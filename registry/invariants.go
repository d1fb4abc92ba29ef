package registry

import (
	"strings"
)

// checkCarriedOut reports, through bad, effects that were recorded but not
// carried out: every change of the driver's is carried out before mu is
// released.
func (ix *index) checkCarriedOut(bad func(format string, args ...any)) {
	if !ix.fx.empty() {
		bad("the index holds effects not carried out: %+v", ix.fx)
	}
}

// checkInvariants reports, through bad, every broken invariant of the
// index: its services, slots, publishers, leases, patches and counts.
func (ix *index) checkInvariants(bad func(format string, args ...any)) {
	pubsSeen := map[*pubInst]bool{}
	beatInsts := 0
	for key, s := range ix.services {
		if key != s.key || key != key.WithDefaults() {
			bad("service %s indexed under %s", s.key, key)
		}
		if s.empty() && s.def == nil {
			if _, ok := ix.emptySvcs.Get(key); !ok {
				bad("empty implicit service %s has no clean-up countdown", key)
			}
		}
		if len(s.keys) != len(s.slots) {
			bad("%s: %d keys for %d slots", key, len(s.keys), len(s.slots))
		}
		otherCl := 0
		for i, sl := range s.slots {
			if cur := sl.current(); cur != nil {
				if i < len(s.keys) && s.keys[i] != slotKey(cur) {
					bad("%s: slot %d has the key %#x, not %#x", key, i, s.keys[i], slotKey(cur))
				}
				if cur.cluster != s.cl {
					otherCl++
				}
			}
		}
		if otherCl != s.otherCl || s.empty() && s.cl != "" {
			bad("%s: %d slots of another cluster than %q, counted %d", key, otherCl, s.cl, s.otherCl)
		}
		if !s.empty() {
			if _, ok := ix.emptySvcs.Get(key); ok {
				bad("service %s has instances and a clean-up countdown", key)
			}
		}
		for i, sl := range s.slots {
			if sl.svc != s {
				bad("%s: slot %d points to service %v", key, i, sl.svc.key)
			}
			if !sl.live() {
				bad("%s: slot %d is dead but indexed", key, i)
				continue
			}
			cur := sl.current()
			if i > 0 {
				prev := s.slots[i-1].current()
				// The order of the strings (ipKey 0), which findSlot's keys
				// must agree with.
				if prev != nil && compareSlot(prev, cur.cluster, cur.ip, 0, int(cur.port)) >= 0 {
					bad("%s: slots %d and %d out of order", key, i-1, i)
				}
			}
			for _, r := range [...]*rec{sl.pers(), cur} {
				if r != nil && r.ipKey != ipOrder(r.ip) {
					bad("%s: slot %s holds the IP key %#x, not %#x", key, sl.key(), r.ipKey, ipOrder(r.ip))
				}
			}
			// current() relies on it: a slot with a head has no
			// persistent instance.
			if s.ephemeral && sl.pers() != nil || !s.ephemeral && sl.head != nil {
				bad("%s: slot %s holds the other kind", key, sl.key())
			}
			checkSlotPubs(sl, func(format string, args ...any) {
				bad("%s: slot %s: "+format, append([]any{key, sl.key()}, args...)...)
			})
			pubs := sl.pubs()
			for j, pi := range pubs {
				pubsSeen[pi] = true
				if pi.slot != sl {
					bad("%s: publication of %s points to another slot", key, sl.key())
				}
				if pi.pub.closed {
					bad("%s: %s published by a closed publisher", key, sl.key())
				}
				if pi.inst.cluster != cur.cluster || pi.inst.ip != cur.ip || pi.inst.port != cur.port {
					bad("%s: slot %s holds a publication of another key", key, sl.key())
				}
				if j > 0 && strings.Compare(pubs[j-1].pub.peekID(), pi.pub.peekID()) >= 0 {
					bad("%s: publishers of %s out of order", key, sl.key())
				}
				if pi.pub.kind == pubBeat && !pi.pub.remote {
					beatInsts++
					if _, ok := ix.beatLeases.Get(pi); !ok {
						bad("%s: beat instance %s has no lease", key, sl.key())
					}
				}
			}
			if p := ix.patches[sl.key()]; p != sl.patch() {
				bad("%s: slot %s does not carry its patch", key, sl.key())
			}
		}
	}
	check := func(p *publisher) {
		if p.closed {
			bad("closed publisher %s still indexed", p.peekID())
		}
		if p.insts.len() == 0 && p.kind == pubBeat {
			bad("beat publisher %s has no instances", p.peekID())
		}
		for _, pi := range p.insts.all() {
			if pi.pub != p {
				bad("publisher %s lists another's publication", p.peekID())
			}
			if !pubsSeen[pi] {
				bad("publisher %s lists a publication missing from the index", p.peekID())
			}
			delete(pubsSeen, pi)
		}
	}
	for ip, head := range ix.beats {
		for p := head; p != nil; p = p.next {
			if p.kind != pubBeat || p.insts.len() > 0 && p.insts.first().inst.ip != ip {
				bad("beat publisher chained under %s is not of %s", ip, ip)
			}
			for _, pi := range p.insts.all() {
				if pi.inst.port != p.port {
					bad("beat publisher %s:%d publishes port %d", ip, p.port, pi.inst.port)
				}
			}
			if p.remote {
				bad("remote publisher %s indexed as a beat publisher of this node", p.peekID())
			}
			check(p)
		}
	}
	ttl := 0
	for id, p := range ix.sessions {
		if p.id != id || p.kind != pubSession {
			bad("session %s indexed under %s", p.id, id)
		}
		if p.session().ttl > 0 {
			ttl++
		}
		check(p)
	}
	for rkey, p := range ix.remote {
		if !p.remote || p.recordKey() != rkey {
			bad("remote publisher %s indexed under %s", p.peekID(), rkey)
		}
		if p.insts.len() == 0 {
			bad("remote publisher %s has no instances", rkey)
		}
		check(p)
	}
	for pi := range pubsSeen {
		bad("publication of %s by %s is in the index but not in its publisher", pi.slot.key(), pi.pub.peekID())
	}
	if n := ix.beatLeases.Len(); n != beatInsts {
		bad("%d beat leases for %d beat instances", n, beatInsts)
	}
	if n := ix.sessionLeases.Len(); n != ttl {
		bad("%d session leases for %d sessions with a TTL", n, ttl)
	}
	for key, p := range ix.patches {
		if p.Key != key {
			bad("patch of %s indexed under %s", p.Key, key)
		}
	}
	ix.checkQuotas(bad)
}

// checkSlotPubs checks the layout of sl's publications (see slot): the
// list is out of line, in the extra, only while it holds two or more, its
// first is the head, and an extra that holds nothing is dropped.
func checkSlotPubs(sl *slot, bad func(format string, args ...any)) {
	x := sl.x
	if x == nil {
		return
	}
	if x.empty() {
		bad("keeps an empty extra")
	}
	if x.many == nil {
		return
	}
	if n := len(*x.many); n < 2 {
		bad("%d publications out of line", n)
	} else if sl.head != (*x.many)[0] {
		bad("its head is not the first of its %d publications", n)
	}
}

// checkQuotas checks the counts the limits are enforced on against the
// index.
func (ix *index) checkQuotas(bad func(string, ...any)) {
	instances := 0
	ns := map[string]int{}
	for key, s := range ix.services {
		instances += len(s.slots)
		ns[key.Namespace]++
	}
	if instances != ix.quota.instances {
		bad("%d instances counted for %d in the index", ix.quota.instances, instances)
	}
	if len(ns) != len(ix.quota.nsServices) {
		bad("%d namespaces counted for %d in the index", len(ix.quota.nsServices), len(ns))
	}
	for name, n := range ns {
		if ix.quota.nsServices[name] != n {
			bad("namespace %s: %d services counted for %d in the index", name, ix.quota.nsServices[name], n)
		}
	}
}

// checkWatchers checks the count of open watchers the limits are enforced
// on. The caller holds mu.
func (r *Registry) checkWatchers(bad func(string, ...any)) {
	watchers := 0
	for _, g := range r.watch.groups {
		for _, w := range g.watchers {
			if w.closed.Load() == nil {
				watchers++
			}
		}
	}
	if n := r.core.watchers(); watchers != n {
		bad("%d watchers counted for %d open", n, watchers)
	}
}
