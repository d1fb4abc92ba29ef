package registry

import (
	"strings"
	"time"

	"github.com/muster-io/muster/health"
	"github.com/muster-io/muster/model"
)

// The replica side of the index core (core.go): the copies of other
// nodes' publishers (remote), installed from their records; a beat
// publisher whose owner changes (demote, promote, and the merge of two
// histories of one ip:port); the beat leases a key's previous owner hands
// over; a session's swap of its instances of one service. As in core.go,
// each method takes plain values (decoded and checked instances, the
// record's key and owner, the start of any lease or countdown) and reports
// what its change means outside the index in the effects. The driver
// (replicate.go, takeover.go, session.go) decodes the records, asks the
// replicator who owns what, and carries the effects out.

// peerRecord is a publisher record of another node as the core takes it,
// decoded and checked by the driver (decodePayload).
type peerRecord struct {
	recordKey string // "s/" + session ID, or "b/" + ip:port
	owner     string // the node that wrote it
	kind      pubKind
	deleted   bool             // a tombstone
	insts     []model.Instance // valid, ephemeral, with their defaults; none in a tombstone
}

// applyRecord installs pr, a whole publisher record of another node (an
// instance record of a session goes to applyInstRecord).
// ownedBeat reports that pr is a beat record this node owns by the hash
// (the driver asks the replicator): then this node's history of the
// ip:port wins (applyOwnBeat), and leases start at now. Otherwise the
// record's owner is the publisher's, and a copy this node held as its own
// becomes a replica.
func (ix *index) applyRecord(pr *peerRecord, ownedBeat bool, now time.Time) {
	local := ix.localPub(pr.recordKey)
	if ownedBeat {
		ix.applyOwnBeat(pr, local, now)
		return
	}
	if local != nil {
		ix.demote(local, pr.owner) // another node owns it now
	}
	ix.installRemote(pr, now)
}

// installRemote makes the remote copy of pr's publisher hold pr's
// instances (none when pr is a tombstone), creating or dropping it as
// needed, and returns it, or nil when it is gone. The countdowns of the
// slots it empties start at now.
func (ix *index) installRemote(pr *peerRecord, now time.Time) *publisher {
	p := ix.remote[pr.recordKey]
	if p == nil {
		if pr.deleted || len(pr.insts) == 0 {
			return nil
		}
		// pr's key is a window on its record's key, which shares its
		// allocation with the payload (distro): the copy, which may
		// outlive this version, keeps a copy of its own.
		pr.recordKey = strings.Clone(pr.recordKey)
		p = newRemotePub(pr)
		ix.remote[pr.recordKey] = p
	}
	p.extra().owner = pr.owner // the record's writer: a key's owner moves
	ix.setPublications(p, pr.insts, now)
	if p.insts.len() == 0 {
		ix.dropRemote(p, now)
		return nil
	}
	return p
}

// applyOwnBeat handles a record of a beat publisher this node owns by the
// hash, written by another node that believed it owned it (membership
// views differed: a partition, a join). A publisher held here (local)
// keeps its instances and gains the other's (each was alive where it was
// written; one no client beats expires with its lease), and a removal
// there does not remove it here; one this node did not hold is adopted:
// its writer ran its lease until now. Either way this node then writes a
// newer revision as the owner, which every node takes.
func (ix *index) applyOwnBeat(pr *peerRecord, local *publisher, now time.Time) {
	if local != nil {
		ix.mergeIntoLocal(local, pr.insts, now)
		return
	}
	if p := ix.installRemote(pr, now); p != nil {
		ix.promote(p, now)
	}
}

// adoption is what adopt did with a record.
type adoption uint8

const (
	adoptedNone   adoption = iota // nothing: a tombstone, or a record of no instance
	adoptedMerged                 // merged into this node's publisher of the key
	adoptedCopy                   // the record's publisher is this node's now
)

// adopt makes this node the owner of pr, the beat record of a node that
// left, whose leases it continues from lastRenewed; the countdowns of the
// slots its replica of the key no longer holds start at now. A publisher
// this node already runs for the key (a write it took while it loaded,
// after a restart) keeps its instances, gains the record's, and writes a
// revision past the record's.
func (ix *index) adopt(pr *peerRecord, lastRenewed, now time.Time) adoption {
	if local := ix.localPub(pr.recordKey); local != nil {
		ix.mergeIntoLocal(local, pr.insts, lastRenewed)
		return adoptedMerged
	}
	p := ix.installRemote(pr, now)
	if p == nil {
		return adoptedNone
	}
	ix.promote(p, lastRenewed)
	return adoptedCopy
}

// mergeIntoLocal adds to local beat publisher p the instances of insts it
// does not publish, leased as if last beaten at last, and records a new
// revision of p. Past the endpoint's cap, the rest is left out (a
// conflict).
func (ix *index) mergeIntoLocal(p *publisher, insts []model.Instance, last time.Time) {
	for i := range insts {
		if ix.beatPubInst(insts[i].IP, insts[i].Port, insts[i].Cluster, insts[i].Service) != nil {
			continue
		}
		if n := p.insts.len(); n >= ix.lim.MaxInstancesPerEndpoint { // the owner's cap holds
			ix.fx.conflicts = append(ix.fx.conflicts, conflict{what: conflictMergeCap, name: p.recordKey(), n: len(insts) - i,
				err: limitError("MaxInstancesPerEndpoint", ix.lim.MaxInstancesPerEndpoint, "endpoint publishes %d", n)})
			break
		}
		if _, err := ix.publish(p, insts[i], false); err != nil {
			ix.fx.conflicts = append(ix.fx.conflicts, conflict{what: conflictReplicated, name: insts[i].Key().String(), err: err})
		}
	}
	for _, pi := range p.insts.all() {
		if _, ok := ix.beatLeases.Get(pi); !ok {
			ix.leaseFrom(pi, last)
		}
	}
	ix.pubChanged(p)
}

// leaseFrom (re)starts pi's beat lease as if its last beat was at last. A
// deadline already past is handled at the next expire.
func (ix *index) leaseFrom(pi *pubInst, last time.Time) {
	t := pi.inst.instance(pi.slot.svc).BeatTimings()
	_ = ix.beatLeases.Put(pi, last, beatTimeouts(t)) // the timings passed validation
	ix.fx.wakeBy(last.Add(min(t.Unhealthy, t.Delete)))
}

// setPublications makes p publish exactly insts, changing each affected
// service once; the countdowns of the slots it empties start at now. An
// instance the index refuses (a service of the other kind) is a conflict.
func (ix *index) setPublications(p *publisher, insts []model.Instance, now time.Time) {
	want := make(map[model.InstanceKey]*model.Instance, len(insts))
	for i := range insts {
		want[insts[i].Key()] = &insts[i]
	}
	var touched []*service
	kept := p.insts.all()[:0]
	for _, pi := range p.insts.all() {
		instKey := pi.slot.key()
		inst, ok := want[instKey]
		if !ok {
			if !p.remote {
				ix.beatLeases.Remove(pi)
			}
			ix.unpublish(pi, false, "removed by its owner", now)
			touched = append(touched, pi.slot.svc)
			continue
		}
		delete(want, instKey)
		if next := newRec(inst); !next.equal(pi.inst) {
			ix.noteChange(pi, inst, p)
			pi.setInst(next)
			touched = append(touched, pi.slot.svc)
		}
		kept = append(kept, pi)
	}
	p.insts.keep(kept)
	for i := range insts {
		if want[insts[i].Key()] == nil {
			continue
		}
		if _, err := ix.publish(p, insts[i], false); err != nil {
			ix.fx.conflicts = append(ix.fx.conflicts, conflict{what: conflictReplicated, name: insts[i].Key().String(), err: err})
		}
	}
	seen := make(map[*service]bool, len(touched))
	for _, s := range touched {
		if !seen[s] && ix.services[s.key] == s {
			seen[s] = true
			ix.changed(s)
		}
	}
}

// dropRemote removes a remote publisher and its instances; the countdowns
// it starts start at now.
func (ix *index) dropRemote(p *publisher, now time.Time) {
	ix.setPublications(p, nil, now)
	delete(ix.remote, p.recordKey())
	p.closed = true
}

// demote turns a publisher this node owned into a remote copy: node owner
// owns it now (the journal names it). Its leases stop here; its instances stay until the new
// owner's record replaces them. A session's Session ends (an effect).
func (ix *index) demote(p *publisher, owner string) {
	rkey := p.recordKey()
	switch p.kind {
	case pubBeat:
		for _, pi := range p.insts.all() {
			ix.beatLeases.Remove(pi)
		}
		if p.insts.len() > 0 {
			ix.removeBeatPub(p.insts.first().inst.ip, p)
		}
		p.next = nil
	case pubSession:
		ix.sessionLeases.Remove(p)
		delete(ix.sessions, p.id)
		if s := p.session(); s != nil {
			ix.fx.ended = append(ix.fx.ended, s)
			// Its extra lives in the Session (Session.px): a copy of its
			// own lets the Session go.
			p.x = &pubExtra{repl: p.x.repl}
		}
	}
	p.remote, p.extra().owner = true, owner
	ix.remote[rkey] = p
}

// promote makes a remote beat publisher this node's own, with leases that
// continue from lastBeat, and records the change (pubChanged: the new
// ownership replicates).
func (ix *index) promote(p *publisher, lastBeat time.Time) {
	delete(ix.remote, p.recordKey())
	p.remote = false
	ix.addBeatPub(p.insts.first().inst.ip, p)
	for _, pi := range p.insts.all() {
		ix.leaseFrom(pi, lastBeat)
	}
	ix.pubChanged(p)
}

// releaseBeat demotes own beat publisher p, whose key another node owns now,
// and returns the leases it ran, each with the age of its last beat as of
// now, for the new owner (see takeover.go).
func (ix *index) releaseBeat(p *publisher, owner string, now time.Time) []handedLease {
	out := make([]handedLease, 0, p.insts.len())
	for _, pi := range p.insts.all() {
		st, ok := ix.beatLeases.Get(pi)
		if !ok {
			continue
		}
		out = append(out, handedLease{Inst: pi.inst.instance(pi.slot.svc), Age: max(now.Sub(st.LastTouch), 0)})
	}
	ix.demote(p, owner)
	return out
}

// takenLease is a handed-over beat lease whose key this node owns: the
// instance (valid, ephemeral, with its defaults) and its last beat on this
// node's clock.
type takenLease struct {
	inst model.Instance
	last time.Time
}

// takeHandedLeases takes over leases, in order, as of now: each lease runs from
// the newer of its own last beat and the handed one (takeLease), and each
// publisher that changed records the change (pubChanged), once.
func (ix *index) takeHandedLeases(leases []takenLease, now time.Time) {
	var changed []*publisher // in the order of the leases: deterministic
	seen := make(map[*publisher]bool)
	for i := range leases {
		if p := ix.takeLease(leases[i].inst, leases[i].last, now); p != nil && !seen[p] {
			seen[p] = true
			changed = append(changed, p)
		}
	}
	for _, p := range changed {
		ix.pubChanged(p)
	}
}

// takeLease makes this node's lease of inst, whose key it owns, run from
// last if that is newer than its own last beat, and returns the publisher
// it changed, or nil. The caller records the change (pubChanged).
func (ix *index) takeLease(inst model.Instance, last, now time.Time) *publisher {
	t := inst.BeatTimings()
	if !last.Add(t.Delete).After(now) {
		return nil // lapsed: this node would have expired it too
	}
	to := beatTimeouts(t)
	healthy := to.Unhealthy == 0 || last.Add(to.Unhealthy).After(now)
	if pi := ix.beatPubInst(inst.IP, inst.Port, inst.Cluster, inst.Service); pi != nil {
		if st, ok := ix.beatLeases.Get(pi); ok && !last.After(st.LastTouch) {
			return nil // this node's own lease is as new
		}
		ix.leaseFrom(pi, last)
		if pi.inst.healthy != healthy {
			pi.setInst(pi.inst.withHealth(healthy))
			ix.changed(pi.slot.svc)
		}
		return pi.pub
	}
	if _, ok := ix.beatDeregs.Get(inst.Key()); ok {
		// Deregistered here within a lease period. The handed beat may be
		// older or newer (an age only says how old it was when sent, not how
		// long it travelled): the deregistration wins, and a client that
		// beats on registers again.
		return nil
	}
	p := ix.beatPub(inst.IP, inst.Port)
	if p == nil {
		if rp := ix.remote[beatRecordKey(inst.IP, inst.Port)]; rp != nil {
			ix.promote(rp, now)
			p = rp
		}
	}
	fresh := p == nil
	if fresh {
		p = &publisher{kind: pubBeat, port: uint16(inst.Port), id: model.Endpoint(inst.IP, inst.Port)}
	}
	inst.Healthy = healthy
	pi, err := ix.publish(p, inst, fresh) // a fresh publisher counts against the limits
	if err != nil {
		ix.fx.conflicts = append(ix.fx.conflicts, conflict{what: conflictHanded, name: inst.Key().String(), err: err})
		return nil
	}
	if fresh {
		ix.addBeatPub(inst.IP, p)
	}
	ix.leaseFrom(pi, last)
	return p
}

// noteDeregistered remembers, from now for ttl, that the beat instance
// with instKey was deregistered on this node, so that a lease handed over
// later does not bring it back.
func (ix *index) noteDeregistered(instKey model.InstanceKey, ttl time.Duration, now time.Time) {
	_ = ix.beatDeregs.Put(instKey, now, health.Timeouts{Expire: ttl}) // ttl > 0: validated beat timings
	ix.fx.wakeBy(now.Add(ttl))
}

// replaceService makes next the instances of service svc that session
// publisher pub publishes (see Session.ReplaceService): pub's other
// instances of svc leave first, making room under the limits for those
// that come (keep holds the keys of next); on a failure (a limit) every
// step is undone and the error returned, so that pub publishes what it
// did. The countdowns of the slots it empties start at now. On success
// the caller records pub's change (pubChanged).
func (ix *index) replaceService(pub *publisher, svc model.ServiceKey, next []model.Instance, now time.Time) error {
	sv := ix.services[svc]
	if sv != nil && !sv.ephemeral {
		return kindMismatch(sv)
	}
	// The publications that leave, found first: usually none (a
	// registration of a new service, or of the same key again), and then
	// nothing is copied. A publication's slot is in its service's object as
	// the index holds it (a service leaves the index only once empty).
	var leaving []*pubInst
	if sv != nil {
		kept := keptKeys(next)
		for _, pi := range pub.insts.all() {
			if pi.slot.svc == sv && !kept.has(pi.inst) {
				leaving = append(leaving, pi)
			}
		}
	}
	type gone struct {
		inst *rec
		svc  *service
	}
	var left []gone
	for _, pi := range leaving {
		left = append(left, gone{pi.inst, pi.slot.svc})
		ix.unpublish(pi, true, "replaced", now)
		ix.changed(pi.slot.svc)
	}
	type undo struct {
		pi   *pubInst
		prev *rec // nil: the publication is new
		was  rec  // prev's content: a change retires prev (empties it)
	}
	var done []undo
	s := sv // svc's service, once a publication created it
	for i := range next {
		// One lookup of the key serves the undo record and the publish.
		var prev *rec
		var was rec
		at, found := 0, false
		if s != nil {
			at, found = s.findSlot(next[i].Cluster, next[i].IP, next[i].Port)
			if found {
				if pi := s.slots[at].publication(pub); pi != nil {
					prev, was = pi.inst, *pi.inst
				}
			}
		}
		pi, err := ix.publishAt(s, at, found, pub, next[i], true, nil)
		if err == nil {
			s = pi.slot.svc
		}
		if err != nil {
			for j := len(done) - 1; j >= 0; j-- {
				if u := done[j]; u.prev != nil {
					*u.prev = u.was
					u.pi.inst = u.prev
					ix.changed(u.pi.slot.svc)
				} else {
					ix.unpublish(u.pi, true, "write undone", now)
					ix.changed(u.pi.slot.svc)
				}
			}
			for _, g := range left {
				// Unlimited: this only restores what the session held.
				_, _ = ix.publish(pub, g.inst.instance(g.svc), false)
			}
			return err
		}
		done = append(done, undo{pi, prev, was})
	}
	return nil
}

// keptSet is the keys (cluster, ip, port) of the instances that a
// replaceService keeps, all of one service: a scan of them for the usual
// few (a Nacos 2.x client registers one instance of a service per
// connection), a map for many.
type keptSet struct {
	next []model.Instance
	keys map[keptKey]bool // nil: scan next
}

type keptKey struct {
	cluster, ip string
	port        int
}

// keptScan is the most instances a keptSet scans.
const keptScan = 8

func keptKeys(next []model.Instance) keptSet {
	k := keptSet{next: next}
	if len(next) > keptScan {
		k.keys = make(map[keptKey]bool, len(next))
		for i := range next {
			k.keys[keptKey{next[i].Cluster, next[i].IP, next[i].Port}] = true
		}
	}
	return k
}

// has reports whether the key of r (an instance of the same service) is
// among the kept ones.
func (k keptSet) has(r *rec) bool {
	if k.keys != nil {
		return k.keys[keptKey{r.cluster, r.ip, int(r.port)}]
	}
	for i := range k.next {
		if n := &k.next[i]; n.Port == int(r.port) && n.IP == r.ip && n.Cluster == r.cluster {
			return true
		}
	}
	return false
}

// remoteBlock is a remote publisher with its pubExtra, in one allocation.
type remoteBlock struct {
	pub publisher
	x   pubExtra
}

// newRemotePub returns an empty publisher for pr, a record of another
// node.
func newRemotePub(pr *peerRecord) *publisher {
	b := &remoteBlock{pub: publisher{remote: true, kind: pr.kind}, x: pubExtra{owner: pr.owner}}
	p := &b.pub
	p.x = &b.x
	switch pr.kind {
	case pubSession:
		p.id = strings.TrimPrefix(pr.recordKey, sessionPrefix)
	default:
		p.id = strings.TrimPrefix(pr.recordKey, beatPrefix)
		if _, port, ok := splitEndpoint(p.id); ok {
			p.port = uint16(port)
		}
	}
	return p
}

// localPub returns the publisher this node owns under recordKey, or nil.
func (ix *index) localPub(recordKey string) *publisher {
	if id, ok := strings.CutPrefix(recordKey, sessionPrefix); ok {
		return ix.sessions[id]
	}
	id, ok := strings.CutPrefix(recordKey, beatPrefix)
	if !ok {
		return nil
	}
	host, port, ok := splitEndpoint(id)
	if !ok {
		return nil
	}
	return ix.beatPub(host, port)
}

// beatPubInst returns the beat publication of (ip, port, cluster, service),
// or nil.
func (ix *index) beatPubInst(ip string, port int, cluster string, svc model.ServiceKey) *pubInst {
	if pub := ix.beatPub(ip, port); pub != nil {
		for _, pi := range pub.insts.all() {
			if pi.inst.cluster == cluster && pi.slot.svc.key == svc {
				return pi
			}
		}
	}
	return nil
}

// applyInstRecord installs one instance record of a peer's session, the
// session sid of node owner, in its grouped copy (ix.remote[groupKey]):
// the publication of the instance whose key hashes to hash is added or
// changed to inst, or removed when inst is nil (a tombstone; gone is the
// key of the instance it removes when known, see instPublication;
// ownerGone says the owner has left the membership, which makes it an
// orphan's removal). A record of this node's own live session is a copy
// coming back, say from a peer's load: the session is the truth, and the
// record changes nothing. Countdowns of the slots it empties start at now.
func (ix *index) applyInstRecord(groupKey, sid, hash, owner string, inst *model.Instance, gone *model.InstanceKey, ownerGone bool, now time.Time) {
	if ix.sessions[sid] != nil {
		return
	}
	p := ix.remote[groupKey]
	if inst == nil {
		if p == nil {
			return
		}
		pi := ix.instPublication(p, gone, hash)
		if pi == nil {
			return
		}
		served := pi.slot.current() == pi.inst
		why := "removed by its owner"
		if ownerGone {
			why = "orphaned: its owner node left" // distro's orphan removal (OrphanTimeout)
		}
		ix.unpublish(pi, true, why, now)
		if served {
			ix.changed(pi.slot.svc)
		}
		ix.dropIfEmptyCopy(groupKey, p)
		return
	}
	if p == nil {
		// groupKey and sid are windows on the record's key, which shares
		// its allocation with the payload (distro): the copy, which may
		// outlive this version, keeps copies of its own.
		groupKey = strings.Clone(groupKey)
		p = newGroupedCopy(groupKey, groupKey[len(sessionPrefix):len(groupKey)-1], owner)
		ix.remote[groupKey] = p
	}
	// inst's strings share its record's payload (decodeInstRecord): the
	// service's key is the index's, or a copy for a new service, so that a
	// service does not keep the payload of its first record.
	s := ix.services[inst.Service]
	at, found := 0, false
	var was *rec // the copy's publication of inst's key before: the previous version's
	if s != nil {
		inst.Service = s.key
		if at, found = s.findSlot(inst.Cluster, inst.IP, inst.Port); found {
			if old := s.slots[at].publication(p); old != nil {
				was = old.inst
			}
		}
	} else {
		inst.Service = model.ServiceKey{Namespace: strings.Clone(inst.Service.Namespace), Group: strings.Clone(inst.Service.Group), Name: strings.Clone(inst.Service.Name)}
	}
	// No per-session cap here: the owner keeps MaxInstancesPerSession, and
	// a copy passes it for a moment when a new instance's record arrives
	// before the removal that made room for it (a refused record would
	// never be repaired: distro holds its version).
	if pi, err := ix.publishAt(s, at, found, p, *inst, false, nil); err != nil {
		ix.refusedReplica(inst, err)
	} else if was != nil && pi.inst == was {
		// The same instance in a new version: publish kept the
		// publication's rec, whose strings share the previous version's
		// payload, which distro no longer holds. The rec of this one
		// (equal: no view changes) lets it go, emptied (it may be the
		// slot's block's, which lives as long as the slot). A changed
		// instance's rec publish replaced and emptied already.
		pi.setInst(newRec(inst))
	}
	ix.dropIfEmptyCopy(groupKey, p)
}

// instPublication returns the publication of grouped copy p of the
// instance whose key hashes to hash, or nil. A peer keeps no map from
// hashes to publications (35 B an instance): a tombstone comes with the
// payload of the version it removes (distro.Store), whose instance's key,
// gone, finds the publication through the index. Without it (nil: that
// payload was not one instance whose key hashes to the record's, a version
// this node could not decode and refused), the key of each of p's
// publications is hashed, O(p's instances), which only such a record
// costs (up to the owner's MaxInstancesPerSession hashes, under the lock).
func (ix *index) instPublication(p *publisher, gone *model.InstanceKey, hash string) *pubInst {
	if gone != nil {
		if s := ix.services[gone.Service]; s != nil {
			if at, found := s.findSlot(gone.Cluster, gone.IP, gone.Port); found {
				return s.slots[at].publication(p)
			}
		}
		return nil
	}
	for _, pi := range p.insts.all() {
		if h := instHashDigits(pi.slot.svc.key, pi.inst.cluster, pi.inst.ip, int(pi.inst.port)); string(h[:]) == hash {
			return pi
		}
	}
	return nil
}

// dropIfEmptyCopy forgets the grouped copy p once it holds nothing.
func (ix *index) dropIfEmptyCopy(groupKey string, p *publisher) {
	if p.insts.len() == 0 {
		delete(ix.remote, groupKey)
		p.closed = true
	}
}

// refusedReplica reports a peer's instance that the index refused (out of
// line: the apply path runs on a goroutine per message, whose stack grows
// by copies with every frame).
func (ix *index) refusedReplica(inst *model.Instance, err error) {
	ix.fx.conflicts = append(ix.fx.conflicts, conflict{what: conflictReplicated, name: inst.Key().String(), err: err})
}
