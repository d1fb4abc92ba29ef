package registry

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"

	"github.com/muster-io/muster/distro"
	"github.com/muster-io/muster/model"
)

// Replication at the grain of one instance (issue 15). A session may
// publish a thousand instances; sending its whole record on every change
// cost the owner an encoding of all of them under the registry's lock, and
// every peer a decoding and a diff of all of them. So a session is
// replicated as records of one instance each:
//
//	"s/" + sessionID + "/" + hash  payload pubPayload{Instances: [inst]}
//
// (a session with no instance has no record; a header record was tried
// and dropped: it cost a second record for every session of one instance,
// the common case, and nothing read it).
//
// hash is the first 16 bytes, in lower-case hex, of the SHA-256 of the
// instance's key (namespace, group, service, cluster, ip, port): a key of
// fixed length, whatever the instance's names, that a peer checks against
// the payload (a record never carries another key's instance). Every
// record is an ordinary distro record: versioned, synced, verified,
// repaired, loaded, tombstoned and orphaned on its own, so each invariant
// of distro holds per instance, and a change costs one record to encode,
// send, decode and apply, whatever the session's size.
//
// A peer groups a session's instance records under one remote publisher
// (r.remote["s/"+sessionID+"/"]), whose ID is the session's, so that a
// slot that several sessions publish shows the same one on every node. A
// node of an earlier version, which knows only whole records, reads each
// instance record as a session of one instance: it serves the same
// instances.
//
// Beat publishers (one ip:port, at most Limits.MaxInstancesPerEndpoint
// instances, nearly always one) stay whole records: their takeover moves
// the publisher as a whole (takeover.go).

// instHashLen is the length of an instance record key's hash (hex digits).
const instHashLen = 32

// replState is what replication keeps on a session publisher.
type replState struct {
	// rkey is the r.remote key of a peer's grouped copy ("s/<id>/").
	rkey string
	// insts are a grouped copy's publications, by instance hash.
	insts map[string]*pubInst
	// dirty are a local session's instance records to write at its next
	// replicate, by instance hash: the publication to send, or nil to
	// delete the record.
	dirty map[string]*pubInst
}

// instHash returns the record key hash of the instance key (svc, cluster,
// ip, port).
func instHash(svc model.ServiceKey, cluster, ip string, port int) string {
	var buf [512]byte
	b := append(buf[:0], svc.Namespace...)
	b = append(b, 0)
	b = append(b, svc.Group...)
	b = append(b, 0)
	b = append(b, svc.Name...)
	b = append(b, 0)
	b = append(b, cluster...)
	b = append(b, 0)
	b = append(b, ip...)
	b = append(b, 0)
	b = strconv.AppendInt(b, int64(port), 10)
	sum := sha256.Sum256(b)
	var out [instHashLen]byte
	hex.Encode(out[:], sum[:instHashLen/2])
	return string(out[:])
}

// piHash returns the instance hash of a publication.
func piHash(pi *pubInst) string {
	return instHash(pi.slot.svc.key, pi.inst.cluster, pi.inst.ip, int(pi.inst.port))
}

// splitInstKey splits an instance record key into its session ID and
// instance hash.
func splitInstKey(key string) (sid, hash string, ok bool) {
	rest, ok := strings.CutPrefix(key, sessionPrefix)
	if !ok {
		return "", "", false
	}
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 || len(rest)-i-1 != instHashLen {
		return "", "", false
	}
	hash = rest[i+1:]
	for j := 0; j < len(hash); j++ {
		if c := hash[j]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", "", false
		}
	}
	return rest[:i], hash, true
}

// notePublished records that pub's publication pi is new or changed: a
// local session replicates it at its next replicate. The caller holds mu.
func (r *Registry) notePublished(pub *publisher, pi *pubInst) {
	if !r.cluster || pub.kind != pubSession || pub.remote {
		return
	}
	st := pub.replState()
	if st.dirty == nil {
		st.dirty = make(map[string]*pubInst)
	}
	st.dirty[piHash(pi)] = pi
}

// noteUnpublished records that pi left its publisher. The caller holds mu.
func (r *Registry) noteUnpublished(pi *pubInst) {
	pub := pi.pub
	if !r.cluster || pub.kind != pubSession || pub.remote {
		return
	}
	st := pub.replState()
	if st.dirty == nil {
		st.dirty = make(map[string]*pubInst)
	}
	st.dirty[piHash(pi)] = nil
}

func (p *publisher) replState() *replState {
	if p.repl == nil {
		p.repl = &replState{}
	}
	return p.repl
}

// replicateSession writes the instance records of session p that changed
// since its last replicate: O(what changed). A closed session deletes them
// all. The caller holds mu.
func (r *Registry) replicateSession(p *publisher) {
	st := p.repl
	if st == nil || len(st.dirty) == 0 {
		return
	}
	key := recordKey(p)
	// One Write: the records of one change leave in one sync message.
	changes := make([]distro.Change, 0, len(st.dirty))
	for h, pi := range st.dirty {
		k := key + "/" + h
		if pi == nil || p.closed {
			changes = append(changes, distro.Change{Key: k, Delete: true})
			continue
		}
		changes = append(changes, distro.Change{Kind: distro.KindSession, Key: k, Payload: encodeInsts([]*pubInst{pi})})
	}
	clear(st.dirty)
	for i, err := range r.replicator.Write(changes) {
		if err != nil && !errors.Is(err, distro.ErrNotFound) {
			r.log.Debug("replicating a session change failed", "record", changes[i].Key, "delete", changes[i].Delete, "err", err)
		}
	}
}

// encodeInsts returns the record payload of pis.
func encodeInsts(pis []*pubInst) []byte {
	pl := pubPayload{Instances: make([]model.Instance, len(pis))}
	for i, pi := range pis {
		pl.Instances[i] = pi.inst.instance(pi.slot.svc)
	}
	b, err := model.Marshal(&pl)
	if err != nil { // plain structs of validated values always encode
		panic("registry: encoding a publisher: " + err.Error())
	}
	return b
}

// instRecord is an instance record from a peer, decoded and checked.
type instRecord struct {
	rec  distro.Record
	sid  string
	hash string
	inst *model.Instance // nil for a tombstone
}

// decodeInstRecord decodes and checks an instance record from a peer: a
// valid ephemeral instance, one, whose key hashes to the record's.
func (r *Registry) decodeInstRecord(rec distro.Record, sid, hash string) (instRecord, error) {
	ir := instRecord{rec: rec, sid: sid, hash: hash}
	if rec.Deleted {
		return ir, nil
	}
	insts, err := r.decodePayload(rec)
	if err != nil {
		return ir, err
	}
	if len(insts) != 1 {
		return ir, &model.ValidationError{Field: "record.instances", Rule: "an instance record carries one instance", Value: strconv.Itoa(len(insts))}
	}
	in := &insts[0]
	if instHash(in.Service, in.Cluster, in.IP, in.Port) != hash {
		return ir, &model.ValidationError{Field: "record.key", Rule: "must be the hash of the instance's key", Value: rec.Key}
	}
	ir.inst = in
	return ir, nil
}

// applyInstLocked installs an instance record of a peer's session in its
// grouped copy: one publication added, changed or removed. The caller
// holds mu.
func (r *Registry) applyInstLocked(ir instRecord) {
	gkey := sessionPrefix + ir.sid + "/"
	if local := r.sessions[ir.sid]; local != nil {
		// Another node writes this node's session: it took the key over (a
		// newer version won). The session ends here; its copy is rebuilt
		// from that node's records.
		r.log.Warn("a session of this node is written by another node", "session", ir.sid, "owner", ir.rec.Owner)
		r.sessionLeases.Remove(local)
		r.closeSessionQuietly(local)
	}
	p := r.remote[gkey]
	if ir.inst == nil {
		if p == nil {
			return
		}
		pi := p.repl.insts[ir.hash]
		if pi == nil {
			return
		}
		delete(p.repl.insts, ir.hash)
		served := pi.slot.current() == pi.inst
		why := "removed by its owner"
		if r.members != nil && !r.members[ir.rec.Owner] {
			why = "orphaned: its owner node left" // distro's orphan removal (OrphanTimeout)
		}
		r.unpublish(pi, true, why)
		if served {
			r.changed(pi.slot.svc)
		}
		p.rev++
		if len(p.insts) == 0 {
			delete(r.remote, gkey)
			p.closed = true
		}
		return
	}
	if p == nil {
		p = &publisher{kind: pubSession, id: ir.sid, remote: true, owner: ir.rec.Owner, repl: &replState{rkey: gkey, insts: map[string]*pubInst{}}}
		r.remote[gkey] = p
	}
	// No per-session cap here: the owner keeps MaxInstancesPerSession, and
	// a copy passes it for a moment when a new instance's record arrives
	// before the removal that made room for it (a refused record would
	// never be repaired: distro holds its version).
	pi, err := r.publish(p, *ir.inst, false)
	if err != nil {
		r.log.Warn("a replicated instance conflicts with this node's index", "instance", ir.inst.Key().String(), "err", err)
	} else {
		p.repl.insts[ir.hash] = pi
		p.rev++
	}
	if len(p.insts) == 0 {
		delete(r.remote, gkey)
		p.closed = true
	}
}

// closeSessionQuietly ends local session p without replicating: another
// node owns its records now. The caller holds mu.
func (r *Registry) closeSessionQuietly(p *publisher) {
	p.remote = true // replicate skips it
	r.closeSessionLocked(p, "taken over by another node")
}

// applyBatch applies records of other owners, decoding them before it
// takes the lock and applying them under one hold of it, so that the
// instance records of one sync (a ReplaceService, a session's close) reach
// queries and watchers together.
func (ds distroStore) applyBatch(recs []distro.Record) {
	r := ds.r
	var irs []instRecord
	for _, rec := range recs {
		sid, hash, ok := splitInstKey(rec.Key)
		if !ok || rec.Kind != distro.KindSession {
			ds.Apply(rec)
			continue
		}
		ir, err := r.decodeInstRecord(rec, sid, hash)
		if err != nil {
			r.log.Warn("ignoring a malformed record", "record", rec.Key, "owner", rec.Owner, "err", err)
			continue
		}
		irs = append(irs, ir)
	}
	if len(irs) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state.Load() == stateClosed {
		return
	}
	for _, ir := range irs {
		r.applyInstLocked(ir)
	}
}

// ApplyBatch implements distro.BatchStore.
func (ds distroStore) ApplyBatch(recs []distro.Record) { ds.applyBatch(recs) }

// sameInstance reports whether r stores inst (valid or not, with its
// defaults): registering inst again would change nothing. It allocates
// nothing.
func (r *rec) sameInstance(inst *model.Instance) bool {
	return r.id == inst.ID && r.cluster == inst.Cluster && r.ip == inst.IP && int(r.port) == inst.Port &&
		r.weight == inst.Weight && r.healthy == inst.Healthy && r.enabled == inst.Enabled && r.md.Equal(inst.Metadata)
}

// publishedAs returns pub's publication of inst's key if it holds inst
// exactly, or nil. The caller holds mu (read or write).
func (r *Registry) publishedAs(pub *publisher, inst *model.Instance) *pubInst {
	s := r.services[inst.Service]
	if s == nil || !s.ephemeral {
		return nil
	}
	i, found := s.findSlot(inst.Cluster, inst.IP, inst.Port)
	if !found {
		return nil
	}
	if pi := s.slots[i].publication(pub); pi != nil && pi.inst.sameInstance(inst) {
		return pi
	}
	return nil
}

// unchanged reports whether the open session already publishes inst (with
// its defaults) exactly: registering it again changes nothing, and is
// answered under the read lock, before validation (what is stored was
// valid).
func (s *Session) unchanged(inst *model.Instance) bool {
	r := s.r
	r.mu.RLock()
	ok := r.checkWrite() == nil && !s.pub.closed && !s.pub.remote && r.publishedAs(s.pub, inst) != nil
	r.mu.RUnlock()
	return ok
}

// renewIfUnchanged renews the lease of beat publisher pub's publication of
// inst, and returns it, if it holds inst exactly (pub may be nil). The
// caller holds mu.
func (r *Registry) renewIfUnchanged(pub *publisher, inst *model.Instance) *pubInst {
	if pub == nil {
		return nil
	}
	pi := r.publishedAs(pub, inst)
	if pi == nil {
		return nil
	}
	t := inst.BeatTimings()
	now := r.now()
	_ = r.beatLeases.Put(pi, now, beatTimeouts(t)) // the stored timings passed validation
	r.wakeAt(now.Add(min(t.Unhealthy, t.Delete)))
	return pi
}

// renewUnchangedBeat is Register's answer, standalone, to a beat
// registration of an instance held exactly: its lease is renewed, before
// validation (what is stored was valid). It reports whether it was.
func (r *Registry) renewUnchangedBeat(inst *model.Instance) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.checkWrite() == nil && r.renewIfUnchanged(r.beatPub(inst.IP, inst.Port), inst) != nil
}
