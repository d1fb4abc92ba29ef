package distro

import "time"

// table is the pure core's record store: every record this node holds, bucketed by key hash,
// with per-owner bucket hashes kept current on every change (O(1)), and a time-ordered queue of
// tombstones and orphan markers for expiry. No goroutines, no clock, no locks: the driver
// serializes access and passes the time in.
type table struct {
	nb      int
	buckets []map[string]*entry
	owners  map[string]*ownerState
	gcq     []gcItem // tombstones and orphan markers, in the order (and time) they were made
	gchead  int
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

// entry is what the table knows about a key.
type entry struct {
	rec    Record
	kh     uint64
	recvAt time.Time // when this version was installed here (local clock)
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
	// sum is payloadSum(rec.Payload), computed once at install (after the four bools, it takes
	// no room: the entry stays 112 bytes).
	sum uint32
}

// held reports whether the entry is a record this node holds (live or tombstone).
func (e *entry) held() bool { return !e.orphan }

// live reports whether the entry is a held, non-deleted record.
func (e *entry) live() bool { return !e.orphan && !e.rec.Deleted }

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
	t := &table{nb: nb, buckets: make([]map[string]*entry, nb), owners: map[string]*ownerState{}}
	for i := range t.buckets {
		t.buckets[i] = map[string]*entry{}
	}
	return t
}

func (t *table) get(key string) *entry {
	return t.buckets[bucketOf(keyHash(key), t.nb)][key]
}

// getHashed is get of a key whose hash (keyHash) is kh.
func (t *table) getHashed(key string, kh uint64) *entry {
	return t.buckets[bucketOf(kh, t.nb)][key]
}

// reserve makes room for n entries in bucket b, if it holds none (a load fills buckets from
// empty: its map then does not grow step by step).
func (t *table) reserve(b, n int) {
	if len(t.buckets[b]) == 0 {
		t.buckets[b] = make(map[string]*entry, n)
	}
}

func (t *table) owner(id string) *ownerState {
	o := t.owners[id]
	if o == nil {
		o = &ownerState{sums: make([]uint64, t.nb)}
		t.owners[id] = o
	}
	return o
}

// account adds (sign +1) or removes (sign -1) e's contribution to its owner's aggregates.
// Tombstones count in the bucket hashes: a peer that missed a deletion by another owner than the
// one it holds the key under is found only through them.
func (t *table) account(e *entry, sign int) {
	if !e.held() {
		return
	}
	o := t.owner(e.rec.Owner)
	h := versionHash(e.kh, e.rec.Revision, e.rec.Deleted, e.sum)
	b := bucketOf(e.kh, t.nb)
	live := 0
	if !e.rec.Deleted {
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
		delete(t.owners, e.rec.Owner) // node IDs come and go with hosts
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
		return !e.rec.Newer(rec)
	}
	return rec.Newer(e.rec)
}

// install stores rec (the caller checked accepts or owns the key) and returns the previous entry
// state (a copy) and whether there was one.
func (t *table) install(rec Record, now time.Time) (prev entry, had bool) {
	kh := keyHash(rec.Key)
	_, prev, had = t.installOver(rec, kh, t.getHashed(rec.Key, kh), now)
	return prev, had
}

// installOver is install of rec, whose key's hash is kh and whose key's entry is old (nil:
// none), as the caller found them under the same hold of its lock. It also returns the new entry.
func (t *table) installOver(rec Record, kh uint64, old *entry, now time.Time) (e *entry, prev entry, had bool) {
	e = &entry{rec: rec, kh: kh, recvAt: now, sum: payloadSum(rec.Payload)}
	t.buckets[bucketOf(kh, t.nb)][rec.Key] = e
	t.changes++
	// The new version counts before the old one leaves: an owner replacing its only record
	// keeps its aggregates (account prunes an owner whose count reaches 0).
	t.account(e, +1)
	if old != nil {
		prev, had = *old, true
		t.account(old, -1)
	}
	if rec.Deleted {
		t.gcq = append(t.gcq, gcItem{key: rec.Key, rev: rec.Revision, at: now})
	}
	return e, prev, had
}

// orphan turns a held live record into an orphan marker and returns the tombstone to hand to the
// Store.
func (t *table) orphan(e *entry, now time.Time) Record {
	t.account(e, -1)
	e.orphan = true
	e.recvAt = now
	t.gcq = append(t.gcq, gcItem{key: e.rec.Key, rev: e.rec.Revision, at: now})
	rec := e.rec
	rec.Deleted, rec.Payload = true, nil
	return rec
}

// remove deletes the entry of key and returns it.
func (t *table) remove(key string) *entry {
	kh := keyHash(key)
	b := t.buckets[bucketOf(kh, t.nb)]
	e := b[key]
	if e != nil {
		t.account(e, -1)
		delete(b, key)
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
		if e := t.get(it.key); e != nil && e.rec.Revision == it.rev && (e.rec.Deleted || e.orphan) && !e.recvAt.After(it.at) {
			if e.rec.Owner == t.self {
				t.forgot = max(t.forgot, e.rec.Revision)
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

// each calls fn for every entry in bucket b (orphan markers included) until fn returns false.
func (t *table) each(b int, fn func(*entry) bool) bool {
	for _, e := range t.buckets[b] {
		if !fn(e) {
			return false
		}
	}
	return true
}

// all calls fn for every entry until fn returns false.
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
	for _, b := range t.buckets {
		n += len(b)
	}
	return n
}
