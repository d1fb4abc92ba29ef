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
func (p *publisher) recordKey() string {
	if st := p.repl(); st != nil && st.rkey != "" {
		return st.rkey // a peer's grouped session copy (delta.go)
	}
	if p.kind == pubSession {
		return sessionPrefix + p.pubID()
	}
	return beatPrefix + p.pubID()
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
	rkey := p.recordKey()
	if p.closed || p.insts.len() == 0 {
		if _, err := d.Delete(rkey); err != nil {
			r.log.Debug("replicating a removal failed", "record", rkey, "err", err)
		}
		return
	}
	if _, err := d.Put(distro.KindBeat, rkey, p.encode()); err != nil {
		r.log.Debug("replicating a change failed", "record", rkey, "err", err)
	}
}

// encode returns p's record payload.
func (p *publisher) encode() []byte { return encodeInsts(p.insts.all()) }

// decodePayload decodes and checks a record payload from a peer. Every
// instance must be valid and ephemeral; a beat record's must all share the
// record's ip:port.
func (r *Registry) decodePayload(dr distro.Record) ([]model.Instance, error) {
	return r.decodePayloadWith(model.UnmarshalInstanceList, dr)
}

// decodePayloadWith is decodePayload with unmarshal for
// model.UnmarshalInstanceList (or its Shared form: see decodeInstRecord).
func (r *Registry) decodePayloadWith(unmarshal func([]byte, int) (model.InstanceList, int, error), dr distro.Record) ([]model.Instance, error) {
	var pl pubPayload
	var err error
	capN, capName := r.payloadCap(dr.Kind)
	if pl.Instances, err = decodeInstancesWith(unmarshal, dr.Payload, capN, capName); err != nil {
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
		if dr.Kind == distro.KindBeat && beatRecordKey(inst.IP, inst.Port) != dr.Key {
			return nil, &model.ValidationError{Field: "record.instances.ip", Rule: "must match the beat record's ip:port", Value: dr.Key}
		}
		pl.Instances[i] = inst
	}
	return pl.Instances, nil
}

// distroStore is the registry as distro sees it: the driver of the index
// core's replica side (core_replica.go). Each method decodes and checks
// what distro hands it, asks the replicator what only it knows (who owns a
// key), and calls the core under mu.
type distroStore struct{ r *Registry }

var _ distro.Store = distroStore{}

// peerRecord decodes and checks dr, a whole publisher record of another
// node (see decodePayload), for the core.
func (r *Registry) peerRecord(dr distro.Record) (*peerRecord, error) {
	pr := &peerRecord{recordKey: dr.Key, owner: dr.Owner, kind: pubBeat, deleted: dr.Deleted}
	if dr.Kind == distro.KindSession {
		pr.kind = pubSession
	}
	if !dr.Deleted {
		var err error
		if pr.insts, err = r.decodePayload(dr); err != nil {
			return nil, err
		}
	}
	return pr, nil
}

// Apply installs a record of another owner (see index.applyRecord).
func (ds distroStore) Apply(dr distro.Record) {
	r := ds.r
	if _, _, ok := splitInstRecordKey(dr.Key); ok && dr.Kind == distro.KindSession {
		ds.applyBatch([]distro.Record{dr}) // an instance record (delta.go)
		return
	}
	pr, err := r.peerRecord(dr)
	if err != nil {
		r.log.Warn("ignoring a malformed record", "record", dr.Key, "owner", dr.Owner, "err", err)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state.Load() == stateClosed {
		return
	}
	if dr.Kind == distro.KindSession && !sessionOf(strings.TrimPrefix(dr.Key, sessionPrefix), dr.Owner) {
		r.log.Warn("ignoring a session record written by a node other than the session's", "record", dr.Key, "owner", dr.Owner)
		return
	}
	r.core.applyRecord(pr, dr.Kind == distro.KindBeat && r.ownsRecord(dr.Key), r.leaseStart())
	r.carryOut()
}

// Adopt makes this node the owner of a beat record whose owner left (see
// index.adopt).
func (ds distroStore) Adopt(dr distro.Record, lastRenewed time.Time) {
	r := ds.r
	if dr.Kind != distro.KindBeat || dr.Deleted {
		return
	}
	pr, err := r.peerRecord(dr)
	if err != nil {
		r.log.Warn("not adopting a malformed record", "record", dr.Key, "err", err)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state.Load() == stateClosed {
		return
	}
	how := r.core.adopt(pr, lastRenewed, r.leaseStart())
	r.carryOut()
	switch how {
	case adoptedMerged:
		r.log.Debug("merged an adopted record into a publisher of this node", "record", dr.Key, "from", dr.Owner, "revision", dr.Revision)
	case adoptedCopy:
		r.log.Debug("adopted a beat publisher", "record", dr.Key, "from", dr.Owner)
	}
}

// MembersChanged hands over what this node no longer owns: its beat
// publishers of keys that another node owns now become replicas (see
// index.releaseBeat), and their leases go to the new owners (takeover.go).
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
	for p := range r.core.allBeatPubs() {
		if !r.ownsRecord(p.recordKey()) {
			moved = append(moved, p)
		}
	}
	handed := map[string][]handedLease{}
	now := r.now()
	for _, p := range moved {
		owner := r.replicator.Owner(p.recordKey())
		handed[owner] = append(handed[owner], r.core.releaseBeat(p, owner, now)...)
	}
	r.carryOut()
	r.sendLeases(handed)
	if len(moved) > 0 {
		r.log.Info("beat publishers handed over", "count", len(moved), "members", len(members))
	}
	r.checksMembersChanged()
}

// ownsRecord reports whether this node owns the beat record recordKey.
// The caller need not hold mu.
func (r *Registry) ownsRecord(recordKey string) bool {
	return !r.cluster || r.replicator.Owner(recordKey) == r.cfg.NodeID
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

// beatTimeouts returns the lease of beat timings: its thresholds, and the
// interval handed back to beats, which the lease carries for
// index.beatInterval.
func beatTimeouts(t model.BeatTimings) health.Timeouts {
	to := health.Timeouts{Unhealthy: t.Unhealthy, Expire: t.Delete, Interval: t.Interval}
	if to.Unhealthy >= to.Expire {
		to.Unhealthy = 0 // deleted before it would turn unhealthy: one threshold
	}
	return to
}
