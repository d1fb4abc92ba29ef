package registry

import (
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/muster-io/muster/distro"
	"github.com/muster-io/muster/health"
	"github.com/muster-io/muster/model"
)

// Replication of ephemeral data. Each publisher (session or beat ip:port) is
// one distro record, owned by one node: sessions by the node they were
// opened on, beat publishers by the rendezvous-hash owner of their ip:port.
// The owner runs the publisher's leases and puts a new revision of the
// record on every change (pubChanged); distro carries it to the other
// nodes, whose copies are "remote" publishers: their instances are in the
// index like any other, but nothing here runs their leases or changes them
// except a newer record (distroStore.Apply).
//
// Record keys: "s/" + session ID, "b/" + ip:port. The beat key is also what
// decides the owner of active health checks of an ip:port, so that one
// node handles an endpoint's beats and its probes.

const (
	sessionPrefix = "s/"
	beatPrefix    = "b/"
)

// pubPayload is a publisher record's payload: its instances, with their
// health (model's wire type, msgpack-encoded).
type pubPayload = model.InstanceList

// recordKey returns p's distro record key.
func recordKey(p *publisher) string {
	if p.repl != nil && p.repl.rkey != "" {
		return p.repl.rkey // a peer's grouped session copy (delta.go)
	}
	if p.kind == pubSession {
		return sessionPrefix + p.key()
	}
	return beatPrefix + p.key()
}

// beatRecordKey returns the record key of the beat publisher of ip:port.
func beatRecordKey(ip string, port int) string { return beatPrefix + model.Endpoint(ip, port) }

// replicate puts p's current state in distro, if p is a publisher this node
// owns. The caller holds mu.
func (r *Registry) replicate(p *publisher) {
	d := r.replicator
	if !r.cluster || p.remote {
		return
	}
	if p.kind == pubSession {
		r.replicateSession(p) // a record per instance (delta.go)
		return
	}
	key := recordKey(p)
	if p.closed || len(p.insts) == 0 {
		if _, err := d.Delete(key); err != nil {
			r.log.Debug("replicating a removal failed", "record", key, "err", err)
		}
		return
	}
	if _, err := d.Put(distro.KindBeat, key, p.encode()); err != nil {
		r.log.Debug("replicating a change failed", "record", key, "err", err)
	}
}

// encode returns p's record payload.
func (p *publisher) encode() []byte { return encodeInsts(p.insts) }

// decodePayload decodes and checks a record payload from a peer. Every
// instance must be valid and ephemeral; a beat record's must all share the
// record's ip:port.
func (r *Registry) decodePayload(rec distro.Record) ([]model.Instance, error) {
	var pl pubPayload
	var err error
	capN, capName := r.payloadCap(rec.Kind)
	if pl.Instances, err = decodeInstances(rec.Payload, capN, capName); err != nil {
		return nil, err
	}
	for i := range pl.Instances {
		inst := pl.Instances[i].WithDefaults()
		if err := r.validInstance(&inst); err != nil {
			return nil, err
		}
		if !inst.Ephemeral {
			return nil, &model.ValidationError{Field: "record.instances.ephemeral", Rule: "must be true"}
		}
		if rec.Kind == distro.KindBeat && beatRecordKey(inst.IP, inst.Port) != rec.Key {
			return nil, &model.ValidationError{Field: "record.instances.ip", Rule: "must match the beat record's ip:port", Value: rec.Key}
		}
		pl.Instances[i] = inst
	}
	return pl.Instances, nil
}

// Replicator returns the registry's replicator (Config.Replicator), or nil
// for a standalone registry. It is meant for diagnostics and tests;
// writing through it bypasses the registry.
func (r *Registry) Replicator() Replicator {
	if !r.cluster {
		return nil
	}
	return r.replicator
}

// distroStore is the registry as distro sees it.
type distroStore struct{ r *Registry }

var _ distro.Store = distroStore{}

// Apply installs a record of another owner.
func (ds distroStore) Apply(rec distro.Record) {
	r := ds.r
	if _, _, ok := splitInstKey(rec.Key); ok && rec.Kind == distro.KindSession {
		ds.applyBatch([]distro.Record{rec}) // an instance record (delta.go)
		return
	}
	var insts []model.Instance
	if !rec.Deleted {
		var err error
		if insts, err = r.decodePayload(rec); err != nil {
			r.log.Warn("ignoring a malformed record", "record", rec.Key, "owner", rec.Owner, "err", err)
			return
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state.Load() == stateClosed {
		return
	}
	if rec.Kind == distro.KindSession && !sessionOf(strings.TrimPrefix(rec.Key, sessionPrefix), rec.Owner) {
		r.log.Warn("ignoring a session record written by a node other than the session's", "record", rec.Key, "owner", rec.Owner)
		return
	}
	local := r.localPub(rec.Key)
	if rec.Kind == distro.KindBeat && r.ownsKey(rec.Key) {
		r.applyOwnBeat(rec, local, insts)
		return
	}
	if local != nil {
		r.demote(local) // another node owns it now
	}
	r.installRemote(rec, insts)
}

// installRemote makes the remote copy of rec's publisher hold insts (none
// when rec is a tombstone), creating or dropping it as needed, and returns
// it, or nil when it is gone. The caller holds mu.
func (r *Registry) installRemote(rec distro.Record, insts []model.Instance) *publisher {
	p := r.remote[rec.Key]
	if p == nil {
		if rec.Deleted || len(insts) == 0 {
			return nil
		}
		p = newRemotePub(rec)
		r.remote[rec.Key] = p
	}
	r.setPublications(p, insts)
	if len(p.insts) == 0 {
		r.dropRemote(p)
		return nil
	}
	return p
}

// applyOwnBeat handles a record of a beat publisher this node owns by the
// hash, written by another node that believed it owned it (membership
// views differed: a partition, a join). A publisher held here keeps its
// instances and gains the other's (each was alive where it was written;
// one no client beats expires with its lease), and a removal there does
// not remove it here; one this node did not hold is adopted: its writer
// ran its lease until now. Either way this node then writes a newer
// revision as the owner, which every node takes. The caller holds mu.
func (r *Registry) applyOwnBeat(rec distro.Record, local *publisher, insts []model.Instance) {
	now := r.now()
	if local != nil {
		r.mergeIntoLocal(local, insts, now)
		return
	}
	if p := r.installRemote(rec, insts); p != nil {
		r.promote(p, now)
	}
}

// mergeIntoLocal adds to local beat publisher p the instances of insts it
// does not publish, leased as if last beaten at last, and replicates the
// result as a new revision. The caller holds mu.
func (r *Registry) mergeIntoLocal(p *publisher, insts []model.Instance, last time.Time) {
	for i := range insts {
		if r.beatPubInst(insts[i].IP, insts[i].Port, insts[i].Cluster, insts[i].Service) != nil {
			continue
		}
		if n := len(p.insts); n >= r.lim.MaxInstancesPerEndpoint { // the owner's cap holds
			r.log.Warn("not merging instances past the endpoint's cap", "record", recordKey(p),
				"unmerged", len(insts)-i, "err", limitError("MaxInstancesPerEndpoint", r.lim.MaxInstancesPerEndpoint, "endpoint publishes %d", n))
			break
		}
		if _, err := r.publish(p, insts[i], false); err != nil {
			r.log.Warn("a replicated instance conflicts with this node's index", "instance", insts[i].Key().String(), "err", err)
		}
	}
	for _, pi := range p.insts {
		if _, ok := r.beatLeases.Get(pi); !ok {
			r.leaseFrom(pi, last)
		}
	}
	r.pubChanged(p)
}

// leaseFrom (re)starts pi's beat lease as if its last beat was at last. A
// deadline already past is handled at the housekeeper's next run. The
// caller holds mu.
func (r *Registry) leaseFrom(pi *pubInst, last time.Time) {
	t := pi.inst.instance(pi.slot.svc).BeatTimings()
	pi.interval = t.Interval
	_ = r.beatLeases.Put(pi, last, beatTimeouts(t)) // the timings passed validation
	r.wakeAt(last.Add(min(t.Unhealthy, t.Delete)))
}

// Adopt makes this node the owner of a beat record whose owner left.
func (ds distroStore) Adopt(rec distro.Record, lastRenewed time.Time) {
	r := ds.r
	if rec.Kind != distro.KindBeat || rec.Deleted {
		return
	}
	insts, err := r.decodePayload(rec)
	if err != nil {
		r.log.Warn("not adopting a malformed record", "record", rec.Key, "err", err)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state.Load() == stateClosed {
		return
	}
	if local := r.localPub(rec.Key); local != nil {
		// This node already runs a publisher for the key (a write it took
		// while it loaded, after a restart): it keeps its instances, gains
		// the record's, and writes a revision past the record's.
		r.mergeIntoLocal(local, insts, lastRenewed)
		r.log.Debug("merged an adopted record into a publisher of this node", "record", rec.Key, "from", rec.Owner, "revision", rec.Revision)
		return
	}
	p := r.installRemote(rec, insts)
	if p == nil {
		return
	}
	r.promote(p, lastRenewed)
	r.log.Debug("adopted a beat publisher", "record", rec.Key, "from", rec.Owner)
}

// MembersChanged hands over what this node no longer owns.
func (ds distroStore) MembersChanged(members []string) {
	r := ds.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state.Load() == stateClosed {
		return
	}
	r.members = make(map[string]bool, len(members))
	for _, m := range members {
		r.members[m] = true
	}
	var moved []*publisher
	for _, head := range r.beats {
		for p := head; p != nil; p = p.next {
			if !r.ownsKey(recordKey(p)) {
				moved = append(moved, p)
			}
		}
	}
	// The new owners take over the leases this node ran (see takeover.go).
	handed := map[string][]handedLease{}
	now := r.now()
	for _, p := range moved {
		owner := r.replicator.Owner(recordKey(p))
		handed[owner] = append(handed[owner], r.handedLeasesOf(p, now)...)
		r.demote(p)
	}
	r.sendLeases(handed)
	if len(moved) > 0 {
		r.log.Info("beat publishers handed over", "count", len(moved), "members", len(members))
	}
	r.checksMembersChanged()
}

// ownsKey reports whether this node owns the beat record key. The caller
// need not hold mu.
func (r *Registry) ownsKey(key string) bool {
	return !r.cluster || r.replicator.Owner(key) == r.cfg.NodeID
}

// newRemotePub returns an empty publisher for a record of another node.
func newRemotePub(rec distro.Record) *publisher {
	p := &publisher{remote: true, owner: rec.Owner}
	switch rec.Kind {
	case distro.KindSession:
		p.kind = pubSession
		p.id = strings.TrimPrefix(rec.Key, sessionPrefix)
	default:
		p.kind = pubBeat
		p.id = strings.TrimPrefix(rec.Key, beatPrefix)
		if _, port, ok := splitEndpoint(p.id); ok {
			p.port = uint16(port)
		}
	}
	return p
}

// splitEndpoint parses "ip:port".
func splitEndpoint(s string) (string, int, bool) {
	host, portStr, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, false
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, false
	}
	return host, port, true
}

// localPub returns the publisher this node owns under the record key, or
// nil. The caller holds mu.
func (r *Registry) localPub(key string) *publisher {
	if id, ok := strings.CutPrefix(key, sessionPrefix); ok {
		return r.sessions[id]
	}
	id, ok := strings.CutPrefix(key, beatPrefix)
	if !ok {
		return nil
	}
	host, port, ok := splitEndpoint(id)
	if !ok {
		return nil
	}
	return r.beatPub(host, port)
}

// setPublications makes p publish exactly insts, changing each affected
// service once. The caller holds mu.
func (r *Registry) setPublications(p *publisher, insts []model.Instance) {
	want := make(map[model.InstanceKey]*model.Instance, len(insts))
	for i := range insts {
		want[insts[i].Key()] = &insts[i]
	}
	var touched []*service
	kept := p.insts[:0]
	for _, pi := range p.insts {
		key := pi.slot.key()
		inst, ok := want[key]
		if !ok {
			if !p.remote {
				r.beatLeases.Remove(pi)
			}
			r.unpublish(pi, false, "removed by its owner")
			touched = append(touched, pi.slot.svc)
			continue
		}
		delete(want, key)
		if next := newRec(inst); !next.equal(pi.inst) {
			r.noteChange(pi, inst, p)
			pi.inst = next
			touched = append(touched, pi.slot.svc)
		}
		kept = append(kept, pi)
	}
	clear(p.insts[len(kept):])
	p.insts = kept
	for i := range insts {
		if want[insts[i].Key()] == nil {
			continue
		}
		if _, err := r.publish(p, insts[i], false); err != nil {
			r.log.Warn("a replicated instance conflicts with this node's index", "instance", insts[i].Key().String(), "err", err)
		}
	}
	seen := make(map[*service]bool, len(touched))
	for _, s := range touched {
		if !seen[s] && r.services[s.key] == s {
			seen[s] = true
			r.changed(s)
		}
	}
	p.rev++
}

// dropRemote removes a remote publisher and its instances. The caller holds
// mu.
func (r *Registry) dropRemote(p *publisher) {
	r.setPublications(p, nil)
	delete(r.remote, recordKey(p))
	p.closed = true
}

// demote turns a publisher this node owned into a remote copy: another node
// owns it now. Its leases stop here; its instances stay until the new
// owner's record replaces them. The caller holds mu.
func (r *Registry) demote(p *publisher) {
	key := recordKey(p)
	switch p.kind {
	case pubBeat:
		for _, pi := range p.insts {
			r.beatLeases.Remove(pi)
		}
		if len(p.insts) > 0 {
			r.removeBeatPub(p.insts[0].inst.ip, p)
		}
		p.next = nil
	case pubSession:
		r.sessionLeases.Remove(p)
		delete(r.sessions, p.id)
		if p.session != nil {
			p.session.end()
			p.session = nil
		}
	}
	p.remote = true
	r.remote[key] = p
}

// promote makes a remote beat publisher this node's own, with leases that
// continue from lastBeat, and replicates the new ownership. The caller holds
// mu.
func (r *Registry) promote(p *publisher, lastBeat time.Time) {
	delete(r.remote, recordKey(p))
	p.remote = false
	r.addBeatPub(p.insts[0].inst.ip, p)
	for _, pi := range p.insts {
		r.leaseFrom(pi, lastBeat)
	}
	r.pubChanged(p)
}

// beatTimeouts returns the lease thresholds of beat timings.
func beatTimeouts(t model.BeatTimings) health.Timeouts {
	to := health.Timeouts{Unhealthy: t.Unhealthy, Expire: t.Delete}
	if to.Unhealthy >= to.Expire {
		to.Unhealthy = 0 // deleted before it would turn unhealthy: one threshold
	}
	return to
}
