package registry

import (
	"crypto/sha256"
	"errors"
	"iter"
	"slices"
	"strconv"
	"strings"
	"unsafe"

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
// hash is the first 12 bytes of the SHA-256 of the instance's key
// (namespace, group, service, cluster, ip, port) in 16 characters (see
// hashDigits): a key of fixed length, whatever the instance's names, that
// a peer checks against the payload (a record never carries another key's
// instance). (The first version, never released, wrote 32 hex digits: a
// node reads such a key as a whole session record, see below, and so does
// that version read this one's.) Every
// record is an ordinary distro record: versioned, synced, verified,
// repaired, loaded, tombstoned and orphaned on its own, so each invariant
// of distro holds per instance, and a change costs one record to encode,
// send, decode and apply, whatever the session's size.
//
// A peer groups a session's instance records under one remote publisher
// (r.core.remotePub("s/"+sessionID+"/")), whose ID is the session's, so that a
// slot that several sessions publish shows the same one on every node. A
// node of an earlier version, which knows only whole records, reads each
// instance record as a session of one instance: it serves the same
// instances.
//
// Beat publishers (one ip:port, at most Limits.MaxInstancesPerEndpoint
// instances, nearly always one) stay whole records: their takeover moves
// the publisher as a whole (takeover.go).

// instHashLen is the length of an instance record key's hash: 12 bytes of
// SHA-256 (96 bits: a collision within one session needs about 2^48 of
// its instances) in 16 characters of hashDigits.
const instHashLen = 16

// hashDigits are the digits of an instance hash: base64's, with '.' and
// '_' for '+' and '/' ('/' separates the key's parts). Neither is '-',
// which the tail of every session ID holds ("<nodeID>-<16 hex digits>"),
// so that the key of a whole session record ("s/" + sessionID, written
// by an earlier version) never parses as an instance record's, whatever
// the node ID.
const hashDigits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._"

// replState is what replication keeps on a session publisher.
type replState struct {
	// rkey is the r.remote key of a peer's grouped copy ("s/<id>/").
	rkey string
	// dirty are a local session's instance records to write at its next
	// replicate, by instance hash: the publication to send, or nil to
	// delete the record.
	dirty hashMap
}

// hashMap maps instance hashes to publications. It holds its first entry
// inline: a session nearly always publishes one instance, and a Go map of
// one entry costs some 250 bytes (a session's dirty records, on its
// owner). Its zero value is empty.
type hashMap struct {
	one  string // the inline entry's hash, "" when there is none (a hash never is)
	oneV *pubInst
	more map[string]*pubInst
}

// get returns the entry of h.
func (m *hashMap) get(h string) (*pubInst, bool) {
	if h != "" && m.one == h {
		return m.oneV, true
	}
	v, ok := m.more[h]
	return v, ok
}

// put sets the entry of h, which is not "".
func (m *hashMap) put(h string, v *pubInst) {
	if m.one == h {
		m.oneV = v
		return
	}
	if _, ok := m.more[h]; ok {
		m.more[h] = v
		return
	}
	if m.one == "" {
		m.one, m.oneV = h, v
		return
	}
	if m.more == nil {
		m.more = make(map[string]*pubInst)
	}
	m.more[h] = v
}

// del removes the entry of h, if any.
func (m *hashMap) del(h string) {
	if h != "" && m.one == h {
		m.one, m.oneV = "", nil
		return
	}
	delete(m.more, h)
}

// len returns the number of entries.
func (m *hashMap) len() int {
	n := len(m.more)
	if m.one != "" {
		n++
	}
	return n
}

// all yields the entries, in no particular order; the loop may del the
// entry it is given.
func (m *hashMap) all() iter.Seq2[string, *pubInst] {
	return func(yield func(string, *pubInst) bool) {
		if m.one != "" && !yield(m.one, m.oneV) {
			return
		}
		for h, v := range m.more {
			if !yield(h, v) {
				return
			}
		}
	}
}

// reset removes every entry, keeping the map's storage.
func (m *hashMap) reset() {
	m.one, m.oneV = "", nil
	clear(m.more)
}

// instHash returns the record key hash of the instance key (svc, cluster,
// ip, port).
func instHash(svc model.ServiceKey, cluster, ip string, port int) string {
	h := instHashDigits(svc, cluster, ip, port)
	return string(h[:])
}

// instHashDigits is instHash's digits, in an array (comparing them with a
// string allocates nothing).
func instHashDigits(svc model.ServiceKey, cluster, ip string, port int) [instHashLen]byte {
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
	for i := 0; i < instHashLen/4; i++ { // 3 bytes make 4 digits
		v := uint32(sum[3*i])<<16 | uint32(sum[3*i+1])<<8 | uint32(sum[3*i+2])
		out[4*i], out[4*i+1], out[4*i+2], out[4*i+3] = hashDigits[v>>18&63], hashDigits[v>>12&63], hashDigits[v>>6&63], hashDigits[v&63]
	}
	return out
}

// isHashDigit reports whether c is one of hashDigits.
func isHashDigit(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_'
}

// piHash returns the instance hash of a publication.
func piHash(pi *pubInst) string {
	return instHash(pi.slot.svc.key, pi.inst.cluster, pi.inst.ip, int(pi.inst.port))
}

// splitInstRecordKey splits an instance record key into its session ID and
// instance hash.
func splitInstRecordKey(recordKey string) (sid, hash string, ok bool) {
	rest, ok := strings.CutPrefix(recordKey, sessionPrefix)
	if !ok {
		return "", "", false
	}
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 || len(rest)-i-1 != instHashLen {
		return "", "", false
	}
	hash = rest[i+1:]
	for j := 0; j < len(hash); j++ {
		if !isHashDigit(hash[j]) {
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
	pub.replState().dirty.put(piHash(pi), pi)
}

// noteUnpublished records that pi left its publisher. The caller holds mu.
func (r *Registry) noteUnpublished(pi *pubInst) {
	pub := pi.pub
	if !r.cluster || pub.kind != pubSession || pub.remote {
		return
	}
	pub.replState().dirty.put(piHash(pi), nil)
}

func (p *publisher) replState() *replState {
	x := p.extra()
	if x.repl == nil {
		x.repl = &replState{}
	}
	return x.repl
}

// replicateSession writes the instance records of session p that changed
// since its last replicate: O(what changed). A closed session deletes them
// all. The caller holds mu.
func (r *Registry) replicateSession(p *publisher) {
	st := p.repl()
	if st == nil || st.dirty.len() == 0 {
		return
	}
	rkey := p.recordKey()
	// One Write: the records of one change leave in one sync message.
	changes := make([]distro.Change, 0, st.dirty.len())
	for h, pi := range st.dirty.all() {
		if pi == nil || p.closed {
			changes = append(changes, distro.Change{Key: rkey + "/" + h, Delete: true})
			continue
		}
		changes = append(changes, r.instRecordChange(rkey, h, pi))
	}
	errs := r.replicator.Write(changes)
	if errs == nil {
		st.dirty.reset()
		return
	}
	// A change whose write failed stays dirty: the session's next change
	// writes it again (one instance record is the whole of that instance's
	// state, so nothing else would).
	for h := range st.dirty.all() {
		k := rkey + "/" + h
		i := slices.IndexFunc(changes, func(c distro.Change) bool { return c.Key == k })
		if i < 0 || i >= len(errs) || errs[i] == nil ||
			errors.Is(errs[i], distro.ErrNotFound) && changes[i].Delete || errors.Is(errs[i], distro.ErrClosed) {
			st.dirty.del(h)
			continue
		}
		r.log.Warn("replicating a session change failed; it is written again with the session's next change",
			"record", k, "delete", changes[i].Delete, "err", errs[i])
	}
}

// encodeInsts returns the record payload of pis.
func encodeInsts(pis []*pubInst) []byte {
	return appendInsts(make([]byte, 0, 192*len(pis)), pis)
}

// appendInsts appends the record payload of pis to b.
func appendInsts(b []byte, pis []*pubInst) []byte {
	var one [1]model.Instance // a session's instance record: no list to allocate
	pl := pubPayload{Instances: one[:0]}
	if len(pis) > len(one) {
		pl.Instances = make([]model.Instance, 0, len(pis))
	}
	for _, pi := range pis {
		pl.Instances = append(pl.Instances, pi.inst.instance(pi.slot.svc))
	}
	return pl.AppendMsgpack(b)
}

// instRecordChange returns the write of pi's instance record, whose key is
// rkey + "/" + hash. The key and the payload are one allocation, the key
// first: distro keeps both as long as it holds this version, and one
// allocation rounds up to a size class once, not twice (16 B an instance
// at the benchmarks' sizes). pi's rec then shares its strings with the
// payload (shareIn), so that the owner keeps an instance's bytes once, as
// a peer does (decodeInstRecord). The caller holds mu.
func (r *Registry) instRecordChange(rkey, hash string, pi *pubInst) distro.Change {
	r.encBuf = appendInsts(r.encBuf[:0], []*pubInst{pi})
	kn := len(rkey) + 1 + len(hash)
	buf := make([]byte, kn+len(r.encBuf))
	copy(buf[copy(buf, rkey):], "/")
	copy(buf[len(rkey)+1:], hash)
	copy(buf[kn:], r.encBuf)
	pl := buf[kn:]
	pi.inst.shareIn(unsafe.String(unsafe.SliceData(pl), len(pl)))
	return distro.Change{Kind: distro.KindSession, Key: unsafe.String(unsafe.SliceData(buf), kn), Payload: pl}
}

// instRecord is an instance record from a peer, decoded and checked.
type instRecord struct {
	dr   distro.Record
	sid  string
	hash string
	inst *model.Instance // nil for a tombstone
	// gone is a tombstone's key of the instance it removes, when known
	// (hasGone; removedKey).
	gone    model.InstanceKey
	hasGone bool
}

// decodeInstRecord decodes and checks an instance record from a peer: a
// valid ephemeral instance, one, whose key hashes to the record's.
//
// The instance's strings share the payload's bytes (issue 30.2: one copy
// of an instance on a peer, not distro's payload and the index's strings
// beside it): distro keeps the payload, unmodified, as long as it holds
// the record, and hands each one over in an allocation of its own; the
// index keeps the strings only while the publication is this version's
// (applyInstRecord). Decoding is bounded and checked as for a copy.
func (r *Registry) decodeInstRecord(dr distro.Record, sid, hash string) (instRecord, error) {
	ir := instRecord{dr: dr, sid: sid, hash: hash}
	if dr.Deleted {
		ir.gone, ir.hasGone = removedKey(dr.Payload, hash)
		return ir, nil
	}
	insts, err := r.decodePayloadWith(model.UnmarshalInstanceListShared, dr)
	if err != nil {
		return ir, err
	}
	if len(insts) != 1 {
		return ir, &model.ValidationError{Field: "record.instances", Rule: "an instance record carries one instance", Value: strconv.Itoa(len(insts))}
	}
	in := &insts[0]
	if h := instHashDigits(in.Service, in.Cluster, in.IP, in.Port); string(h[:]) != hash {
		return ir, &model.ValidationError{Field: "record.key", Rule: "must be the hash of the instance's key", Value: dr.Key}
	}
	ir.inst = in
	return ir, nil
}

// goneKey returns the key of the instance that tombstone ir removes, or
// nil when it is not known.
func (ir *instRecord) goneKey() *model.InstanceKey {
	if !ir.hasGone {
		return nil
	}
	return &ir.gone
}

// removedKey returns the key of the instance that a tombstone removes,
// read from payload, the version it removes (distro hands it over with
// the tombstone: distro.Store), and whether there is one: not when the
// payload is nil or not one instance whose key hashes to hash (a version
// this node could not decode, and refused). The key's strings are windows
// on payload: the caller keeps none of them.
func removedKey(payload []byte, hash string) (model.InstanceKey, bool) {
	if payload == nil {
		return model.InstanceKey{}, false
	}
	l, _, err := model.UnmarshalInstanceListShared(payload, 1)
	if err != nil || len(l.Instances) != 1 {
		return model.InstanceKey{}, false
	}
	in := l.Instances[0].WithDefaults()
	if h := instHashDigits(in.Service, in.Cluster, in.IP, in.Port); string(h[:]) != hash {
		return model.InstanceKey{}, false
	}
	return in.Key(), true
}

// groupedCopy is a peer's session as this node holds it: the publisher,
// its pubExtra and its replication state, in one allocation (a peer's session is new
// with its first record, nearly always its only one).
type groupedCopy struct {
	pub  publisher
	x    pubExtra
	repl replState
}

// newGroupedCopy returns the empty grouped copy of session sid of node
// owner, under the r.remote key gkey.
func newGroupedCopy(gkey, sid, owner string) *publisher {
	g := &groupedCopy{
		pub:  publisher{kind: pubSession, id: sid, remote: true},
		x:    pubExtra{owner: owner},
		repl: replState{rkey: gkey},
	}
	g.pub.x, g.x.repl = &g.x, &g.repl
	return &g.pub
}

// applyBatch applies records of other owners, decoding them before it
// takes the lock and applying them under one hold of it, so that the
// instance records of one sync (a ReplaceService, a session's close) reach
// queries and watchers together.
func (ds distroStore) applyBatch(drs []distro.Record) {
	r := ds.r
	var first [1]instRecord // a sync nearly always carries one record
	irs := first[:0]
	for i := range drs {
		dr := &drs[i]
		sid, hash, ok := splitInstRecordKey(dr.Key)
		if !ok || dr.Kind != distro.KindSession {
			ds.Apply(*dr)
			continue
		}
		if !sessionOf(sid, dr.Owner) {
			r.ignoreRecord("ignoring a session record written by a node other than the session's", dr, nil)
			continue
		}
		ir, err := r.decodeInstRecord(*dr, sid, hash)
		if err != nil {
			r.ignoreRecord("ignoring a malformed record", dr, err)
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
	now := r.leaseStart()
	for i := range irs {
		ir := &irs[i]
		gkey := ir.dr.Key[:len(ir.dr.Key)-len(ir.hash)] // sessionPrefix + ir.sid + "/", without building it
		r.core.applyInstRecord(gkey, ir.sid, ir.hash, ir.dr.Owner, ir.inst, ir.goneKey(), r.members != nil && !r.members[ir.dr.Owner], now)
	}
	r.carryOut() // once for the batch: its records reach queries and watchers together
}

// ignoreRecord logs a peer's record that is not applied, and why. It is
// out of line, as are the apply path's other logs: that path runs on a
// goroutine per message, whose stack grows (a copy) with every frame.
func (r *Registry) ignoreRecord(msg string, dr *distro.Record, err error) {
	if err == nil {
		r.log.Warn(msg, "record", dr.Key, "owner", dr.Owner)
		return
	}
	r.log.Warn(msg, "record", dr.Key, "owner", dr.Owner, "err", err)
}

// ApplyBatch implements distro.BatchStore.
func (ds distroStore) ApplyBatch(drs []distro.Record) { ds.applyBatch(drs) }

// sameInstance reports whether r stores inst (valid or not, with its
// defaults): registering inst again would change nothing. It allocates
// nothing.
func (r *rec) sameInstance(inst *model.Instance) bool {
	return r.id == inst.ID && r.cluster == inst.Cluster && r.ip == inst.IP && int(r.port) == inst.Port &&
		r.weight == inst.Weight && r.healthy == inst.Healthy && r.enabled == inst.Enabled && r.md.Equal(inst.Metadata)
}

// instLoc is where an instance key is in the index, or would go: found
// under mu by locate, and checked again in O(1) by relocate once the lock
// has been released and taken again (Session.Register validates in
// between), so that a registration looks its key up once.
type instLoc struct {
	ok    bool
	gen   uint64   // r.svcGen when s was read
	s     *service // nil: no service of the key
	i     int      // the slot's index in s.slots, or where it would go
	found bool
	// at is the slot at i (nil at the end); before, the one before it
	// (nil at the start). The keys of slots never change and s.slots is
	// sorted, so while both are still at i-1 and i the key is still at i,
	// or still goes there.
	at, before *slot
	ipKey      uint32 // ipOrder of the instance's IP, when ok
}

// ipKeyOf returns ipOrder(inst.IP), loc's if it was made (of inst).
func (loc *instLoc) ipKeyOf(inst *model.Instance) uint32 {
	if loc.ok {
		return loc.ipKey
	}
	return ipOrder(inst.IP)
}

// locate looks inst's key up, fills loc, and returns pub's publication of
// it if pub holds inst exactly, or nil. The caller holds mu (read or
// write).
func (r *Registry) locate(pub *publisher, inst *model.Instance, loc *instLoc) *pubInst {
	s := r.locateKey(inst, loc)
	if s == nil || !loc.found || !s.ephemeral {
		return nil
	}
	if pi := loc.at.publication(pub); pi != nil && pi.inst.sameInstance(inst) {
		return pi
	}
	return nil
}

// locateKey looks inst's key up, fills loc and returns the key's service
// (nil when there is none). The caller holds mu (read or write).
func (r *Registry) locateKey(inst *model.Instance, loc *instLoc) *service {
	s := r.core.service(&inst.Service)
	*loc = instLoc{ok: true, gen: r.svcGen.Load(), s: s, ipKey: ipOrder(inst.IP)}
	if s == nil {
		return nil
	}
	i, found := s.findSlotKey(inst.Cluster, inst.IP, loc.ipKey, inst.Port)
	loc.i, loc.found = i, found
	if i < len(s.slots) {
		loc.at = s.slots[i]
	}
	if i > 0 {
		loc.before = s.slots[i-1]
	}
	return s
}

// relocate returns inst's service, slot index and whether the slot is
// there, as publishAt takes them: loc's, if nothing moved since locate
// filled it, or looked up again. The caller holds mu.
func (r *Registry) relocate(loc *instLoc, inst *model.Instance) (*service, int, bool) {
	if loc.ok && loc.gen == r.svcGen.Load() {
		s, i := loc.s, loc.i
		if s == nil {
			return nil, 0, false
		}
		n := len(s.slots)
		atOK := i < n && s.slots[i] == loc.at || i == n && loc.at == nil
		beforeOK := i == 0 && loc.before == nil || i > 0 && i <= n && s.slots[i-1] == loc.before
		if atOK && (loc.found || beforeOK) {
			return s, i, loc.found
		}
	}
	s := r.core.service(&inst.Service)
	if s == nil {
		return nil, 0, false
	}
	i, found := s.findSlot(inst.Cluster, inst.IP, inst.Port)
	return s, i, found
}

// unchanged reports whether the open session already publishes inst (with
// its defaults) exactly: registering it again changes nothing, and is
// answered under the read lock, before validation (what is stored was
// valid). It leaves in loc where inst's key is, for the publish.
func (s *Session) unchanged(inst *model.Instance, loc *instLoc) bool {
	r := s.r
	r.mu.RLock()
	ok := r.checkWrite() == nil && !s.pub.closed && !s.pub.remote && r.locate(s.pub, inst, loc) != nil
	r.mu.RUnlock()
	return ok
}

// renewIfUnchanged renews the lease of beat publisher pub's publication of
// inst, and returns it, if it holds inst exactly (pub may be nil). The
// caller holds mu.
func (r *Registry) renewIfUnchanged(pub *publisher, inst *model.Instance) *pubInst {
	pi := beatPublishedAs(pub, inst)
	if pi == nil {
		return nil
	}
	r.wakeAt(r.core.renewBeat(pi, inst, r.now()))
	return pi
}

// renewUnchangedBeat is Register's answer, standalone, to a beat
// registration of an instance held exactly: its lease is renewed, before
// validation (what is stored was valid). It reports whether it was; when
// not, loc holds the lookups of inst's beat publisher and of its key, for
// the registration.
func (r *Registry) renewUnchangedBeat(inst *model.Instance, loc *beatLoc) bool {
	r.mu.Lock()
	if r.checkWrite() != nil {
		r.mu.Unlock()
		return false
	}
	*loc = r.core.beatLocOf(inst.IP, inst.Port)
	renewed := r.renewIfUnchanged(loc.pub, inst) != nil
	if !renewed {
		r.locateKey(inst, &loc.at)
	}
	r.mu.Unlock()
	return renewed
}

// sessionOf reports whether session ID sid names node as the node that
// opened it: sid is node, "-", 16 hex digits, and maybe "-" and a
// collision counter (see OpenSession). Only that node writes the session's
// records: a record of it from another owner is a bug or an attack, and is
// refused (it would otherwise end or rewrite another node's session).
func sessionOf(sid, node string) bool {
	rest, ok := strings.CutPrefix(sid, node+"-")
	if !ok || len(rest) < 16 {
		return false
	}
	for _, c := range rest[:16] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	rest = rest[16:]
	if rest == "" {
		return true
	}
	n, ok := strings.CutPrefix(rest, "-")
	if !ok || n == "" {
		return false
	}
	for _, c := range n {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
