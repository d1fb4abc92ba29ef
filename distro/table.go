package distro

import (
	"hash/maphash"
	"strings"
	"time"
	"unsafe"
)

// table is the pure core's record store: every record this node holds, bucketed by key hash,
// with per-owner bucket hashes kept current on every change (O(1)), and a time-ordered queue of
// tombstones and orphan markers for expiry. No goroutines, no clock, no locks: the driver
// serializes access and passes the time in.
type table struct {
	nb int
	// buckets[b] holds the entries of the keys that keyHash puts in bucket b (bucketOf), the
	// unit of digests and snapshot pages. A peer can choose keys of one bucket (keyHash is
	// public): what bounds a bucket's size is the caps on pages and verify answers, as before.
	buckets []entrySet
	// seed seeds the hash that places a key within its bucket (frag): keyHash, which picks the
	// bucket, is the same on every node and public, and keys a peer chose to collide in it
	// must not make probe sequences long. Go's maps were seeded the same way.
	seed   maphash.Seed
	owners map[string]*ownerState
	// names holds the owner IDs the entries name, one string each, counted (entry.owner).
	names map[string]*ownerName
	// epoch is the time of the first install: entries keep their time as an offset from it.
	epoch    time.Time
	epochSet bool
	gcq      []gcItem // tombstones and orphan markers, in the order (and time) they were made
	gchead   int
	// self is the node's ID; forgot is the highest revision of a record of self's that expire
	// removed. A node writes every revision above it (Replicator.nextRevLocked): a peer may still
	// hold the forgotten version (it received or loaded it later, so its TTL runs later), and a
	// version written again would name two states there.
	self   string
	forgot uint64
	// changes counts the entries installed and removed: the only changes of what the table
	// holds for a key (an orphan marker keeps its record's version), so that a list of versions
	// taken from it is current while the count is the same.
	changes uint64
}

// entry is what the table knows about a key: a Record, packed (issue 30.2: a node holds one
// per record, a million of them at a million instances). The Record's fields are the key,
// owner, rev, kind, deleted and the payload (payload, record); the owner's ID is one string
// for all the entries of that owner (names), and the payload a pointer and a length (its bytes
// are never modified: see Record). 64 bytes, against 112 for a Record and the rest.
type entry struct {
	key   string
	owner *ownerName
	// pl and plen are the payload's bytes; pl is nil for a nil payload (a tombstone, and an
	// orphan marker, which drops its payload: see orphan), and points to the zero-size
	// allocation for an empty one (the two encode differently).
	pl   *byte
	rev  uint64
	at   int64  // when this version was installed here: ns after the table's epoch (recvAt)
	plen uint32 // ≤ MaxPayloadLen
	// sum is payloadSum(payload), computed once at install.
	sum     uint32
	kind    Kind
	deleted bool // tombstone
	// orphan marks a record removed locally after its owner left: it is no longer held (not in
	// digests, Get or snapshots) but its version still refuses older updates, and yields to the
	// same or a newer version from its owner (see offer).
	orphan bool
	// adopting is set once Store.Adopt was called for this version, so it is not called twice.
	adopting bool
	// local is set on records this node wrote in this incarnation (Put, Delete), as opposed to
	// its own records loaded from peers, written by a previous incarnation.
	local bool
	// loaded is set on records installed from a peer's snapshot during the startup load: the
	// Store is told of them once, when the load has merged every peer's snapshot (finishLoad),
	// never of an intermediate version another snapshot replaces.
	loaded bool
}

// ownerName is an owner's ID as the entries name it, with the number of entries naming it.
type ownerName struct {
	id   string
	refs int
}

// ownerID returns the ID of the entry's owner.
func (e *entry) ownerID() string { return e.owner.id }

// payload returns the entry's payload (shared: never modified).
func (e *entry) payload() []byte {
	if e.pl == nil {
		return nil
	}
	return unsafe.Slice(e.pl, e.plen)
}

// record returns the entry's record.
func (e *entry) record() Record {
	return Record{Key: e.key, Owner: e.owner.id, Revision: e.rev, Payload: e.payload(), Kind: e.kind, Deleted: e.deleted}
}

// version returns the entry's version (a Record of its Owner and Revision, for Newer).
func (e *entry) version() Record { return Record{Owner: e.owner.id, Revision: e.rev} }

// held reports whether the entry is a record this node holds (live or tombstone).
func (e *entry) held() bool { return !e.orphan }

// live reports whether the entry is a held, non-deleted record.
func (e *entry) live() bool { return !e.orphan && !e.deleted }

// ownerState aggregates the held records of one owner.
type ownerState struct {
	sums []uint64 // per bucket: sum of versionHash over held records (tombstones included)
	held int      // held records
	live int      // held live records
}

type gcItem struct {
	key string
	rev uint64
	at  time.Time
}

func newTable(nb int) *table {
	return &table{nb: nb, buckets: make([]entrySet, nb), seed: maphash.MakeSeed(), owners: map[string]*ownerState{}, names: map[string]*ownerName{}}
}

// frag returns the fragment of key's hash that places it within its bucket (entrySet): a hash
// seeded per table (see seed), independent of keyHash. Its low bit is set: 0 marks an empty
// slot. It costs what a Go map's own hash of the key cost (the runtime's string hash).
func (t *table) frag(key string) uint32 { return uint32(maphash.String(t.seed, key)>>32) | 1 }

func (t *table) get(key string) *entry {
	return t.buckets[bucketOf(keyHash(key), t.nb)].get(key, t.frag(key))
}

// getHashed is get of a key whose hash (keyHash) is kh. It also returns the key's fragment
// (frag), for an install that follows (installOver).
func (t *table) getHashed(key string, kh uint64) (e *entry, frag uint32) {
	frag = t.frag(key)
	return t.buckets[bucketOf(kh, t.nb)].get(key, frag), frag
}

// reserve makes room for n entries in bucket b, if it holds none (a load fills buckets from
// empty: its set then does not grow step by step).
func (t *table) reserve(b, n int) { t.buckets[b].reserve(n) }

func (t *table) owner(id string) *ownerState {
	o := t.owners[id]
	if o == nil {
		o = &ownerState{sums: make([]uint64, t.nb)}
		t.owners[id] = o
	}
	return o
}

// name returns the ownerName of id, counting one more entry that names it.
func (t *table) name(id string) *ownerName {
	n := t.names[id]
	if n == nil {
		n = &ownerName{id: id}
		t.names[id] = n
	}
	n.refs++
	return n
}

// unname counts one entry fewer that names n, forgetting it at none (node IDs come and go).
func (t *table) unname(n *ownerName) {
	if n.refs--; n.refs == 0 && t.names[n.id] == n {
		delete(t.names, n.id)
	}
}

// stamp returns now as an entry's time (entry.at).
func (t *table) stamp(now time.Time) int64 {
	if !t.epochSet {
		t.epoch, t.epochSet = now, true
	}
	return int64(now.Sub(t.epoch))
}

// recvAt returns when e's version was installed here (local clock): e.at as a time.
func (t *table) recvAt(e *entry) time.Time { return t.epoch.Add(time.Duration(e.at)) }

// account adds (sign +1) or removes (sign -1) e's contribution to its owner's aggregates; kh is
// the hash of e's key. Tombstones count in the bucket hashes: a peer that missed a deletion by
// another owner than the one it holds the key under is found only through them.
func (t *table) account(e *entry, kh uint64, sign int) {
	if !e.held() {
		return
	}
	o := t.owner(e.owner.id)
	h := versionHash(kh, e.rev, e.deleted, e.sum)
	b := bucketOf(kh, t.nb)
	live := 0
	if !e.deleted {
		live = 1
	}
	if sign > 0 {
		o.sums[b] += h
		o.held++
		o.live += live
		return
	}
	o.sums[b] -= h
	o.held--
	o.live -= live
	if o.held == 0 {
		delete(t.owners, e.owner.id) // node IDs come and go with hosts
	}
}

// accepts reports whether rec may replace what the table holds for its key: it must be newer,
// or, over an orphan marker, at least as new (the real owner's record wins over a local orphan
// removal of the same version).
func (t *table) accepts(rec Record) bool { return acceptsOver(t.get(rec.Key), rec) }

// acceptsOver is accepts, e being the entry of rec's key (nil: none).
func acceptsOver(e *entry, rec Record) bool {
	if e == nil {
		return true
	}
	if e.orphan {
		return !e.version().Newer(rec)
	}
	return rec.Newer(e.version())
}

// install stores rec (the caller checked accepts or owns the key) and returns the previous entry
// state (a copy) and whether there was one.
func (t *table) install(rec Record, now time.Time) (prev entry, had bool) {
	kh := keyHash(rec.Key)
	old, frag := t.getHashed(rec.Key, kh)
	_, prev, had = t.installOver(rec, kh, frag, old, now)
	return prev, had
}

// installOver is install of rec, whose key's hash is kh and fragment frag, and whose key's
// entry is old (nil: none), as the caller found them under the same hold of its lock
// (getHashed). It also returns the new entry.
func (t *table) installOver(rec Record, kh uint64, frag uint32, old *entry, now time.Time) (e *entry, prev entry, had bool) {
	e = &entry{
		key: rec.Key, owner: t.name(rec.Owner), pl: unsafe.SliceData(rec.Payload), rev: rec.Revision,
		at: t.stamp(now), plen: uint32(len(rec.Payload)), sum: payloadSum(rec.Payload), kind: rec.Kind, deleted: rec.Deleted,
	}
	t.buckets[bucketOf(kh, t.nb)].put(e, frag, old)
	t.changes++
	// The new version counts before the old one leaves: an owner replacing its only record
	// keeps its aggregates (account prunes an owner whose count reaches 0).
	t.account(e, kh, +1)
	if old != nil {
		prev, had = *old, true
		t.account(old, kh, -1)
		t.unname(old.owner)
	}
	if rec.Deleted {
		t.gcq = append(t.gcq, gcItem{key: rec.Key, rev: rec.Revision, at: now})
	}
	return e, prev, had
}

// orphan turns a held live record into an orphan marker and returns the tombstone to hand to the
// Store, which carries e's payload (what it removes: see Store.Apply).
//
// The marker keeps no window on the removed version's allocation (a received record's key and
// payload are one: joinKeyPayload): its key, and its gc item's, are a copy of the key, and it
// drops the payload (its sum stays, though nothing reads it either: verify lists a marker as
// deleted, and compares sums of live versions only). Nothing reads an orphan
// marker's payload: it is not held (no digest, Get, snapshot, sync or consistency check shows
// it), the Store hears of a version that replaces it only from that version (it is not live),
// and accepts and staleness compare versions only. Else the removed payload would stay alive
// for TombstoneTTL after the Store let it go, and, through the gc item, after the marker itself
// was replaced (the owner re-sent the version, or a newer version came).
func (t *table) orphan(e *entry, now time.Time) Record {
	t.account(e, keyHash(e.key), -1)
	rec := e.record()
	rec.Deleted = true
	key := strings.Clone(e.key)
	e.key, e.pl, e.plen = key, nil, 0
	e.orphan = true
	e.at = t.stamp(now)
	t.gcq = append(t.gcq, gcItem{key: key, rev: e.rev, at: now})
	return rec
}

// remove deletes the entry of key and returns it.
func (t *table) remove(key string) *entry {
	kh := keyHash(key)
	e := t.buckets[bucketOf(kh, t.nb)].remove(key, t.frag(key))
	if e != nil {
		t.account(e, kh, -1)
		t.unname(e.owner)
		t.changes++
	}
	return e
}

// expire removes tombstones and orphan markers made at or before cutoff, unless a newer version
// replaced them meanwhile. O(expired).
//
// An item expires the entry only if the entry is still the state it was queued for: a
// tombstone or orphan marker made at the item's time (recvAt), not later. The revision alone
// does not say so: another owner's record of the same revision (it wins the tie-break: a
// beat written while views differed), or the same version orphaned again after its owner
// re-sent it, may have replaced the queued state since, and its TTL runs from then. Expired by
// the older item, it would go early, and a stale copy it still had to refuse would come back
// (issue 27.2).
func (t *table) expire(cutoff time.Time) int {
	n := 0
	for t.gchead < len(t.gcq) && !t.gcq[t.gchead].at.After(cutoff) {
		it := t.gcq[t.gchead]
		t.gcq[t.gchead] = gcItem{}
		t.gchead++
		if e := t.get(it.key); e != nil && e.rev == it.rev && (e.deleted || e.orphan) && !t.recvAt(e).After(it.at) {
			if e.owner.id == t.self {
				t.forgot = max(t.forgot, e.rev)
			}
			t.remove(it.key)
			n++
		}
	}
	if t.gchead > 1024 && t.gchead*2 > len(t.gcq) {
		t.gcq = append(t.gcq[:0:0], t.gcq[t.gchead:]...)
		t.gchead = 0
	}
	return n
}

// digest returns the bucket hashes of owner's held records (nil if it has none).
func (t *table) digest(owner string) []uint64 {
	if o := t.owners[owner]; o != nil {
		return o.sums
	}
	return nil
}

// bucketSum is the hash of what this node holds in bucket b, of every owner (what a snapshot
// page serves there): the sum over owners of the owner's bucket hash mixed with the owner's ID,
// so that the same versions held under another owner differ. O(owners).
func (t *table) bucketSum(b int) uint64 {
	var s uint64
	for id, o := range t.owners {
		if v := o.sums[b]; v != 0 {
			s += mix64(v ^ keyHash(id))
		}
	}
	return s
}

// each calls fn for every entry in bucket b (orphan markers included) until fn returns false,
// in no particular order (the slots' order, which the table's seed decides). fn may change the
// entry, but not install nor remove a key of bucket b (entrySet.each): no caller does.
func (t *table) each(b int, fn func(*entry) bool) bool { return t.buckets[b].each(fn) }

// all calls fn for every entry until fn returns false, bucket by bucket (see each).
func (t *table) all(fn func(*entry) bool) {
	for b := range t.buckets {
		if !t.each(b, fn) {
			return
		}
	}
}

// len returns the number of entries (orphan markers included).
func (t *table) len() int {
	n := 0
	for i := range t.buckets {
		n += t.buckets[i].len()
	}
	return n
}
