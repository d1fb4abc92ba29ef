package distro

import "time"

// Store is implemented by the registry: it holds what the records describe (its publishers).
//
// Concurrency contract:
//   - Calls are serialized: never two at once, from whatever goroutine distro runs them on
//     (a transport handler, the sync loop, the membership callback).
//   - Per key, calls arrive in version order: a record is never applied after a newer one of the
//     same key. (An orphan removal carries the version of the record it removes, and the owner
//     may re-send that same version when it comes back. Once a tombstone has been forgotten,
//     after Config.TombstoneTTL, the key may start again at a lower revision.)
//   - distro holds none of its own locks while calling the Store, so the Store may call the
//     Replicator's read methods (Owner, Get, Members, Range) and also Put and Delete (Adopt
//     typically ends in a Put). A Store method must not block long: it delays every other
//     delivery.
//   - The Store never sees its own writes: records this node Puts are not passed to Apply.
type Store interface {
	// Apply installs rec from another owner: it is newer than anything applied before for the
	// key. rec.Deleted means remove what the record held (a beat publisher, a session's
	// instance): the owner's tombstone, an orphan removal after the owner left (same revision as
	// the last record, Deleted set), the owner saying in verify that it no longer holds the
	// record, or, during the startup load, a newer record of this node's previous incarnation
	// replacing it (same version as the record removed, Deleted set; the Store may receive it
	// for a record it never got). A record of a key this node owned means another node took the
	// key over (a newer version won): the Store stops its lease.
	//
	// A Deleted rec carries in Payload the payload of the live version it removes from this
	// node's table (shared, never modified, as every payload), so that the Store can find what
	// it removes from the payload's content rather than keep an index by key for it. distro
	// hands the Store a deletion only when it replaced a live version of the key in its table:
	// a tombstone over a tombstone or an orphan marker is not handed over, as the deletion it
	// replaced was (or will be: a queued deletion overtaken by a newer one is still delivered,
	// not dropped as stale). Payload is nil only if the removed version's was. The version
	// removed is of the same key but need not be the one the Store last applied: it may be a
	// loaded record not yet handed over (see above), or one whose Apply was overtaken in the
	// queue and never delivered; the Store may so be handed a deletion of a version it does not
	// hold, or no longer holds (an orphan removal, then the owner's tombstone of the same
	// version, re-sent in between), and must ignore it. Tombstones on the wire and in the table
	// carry no payload: only what the Store is handed does.
	Apply(rec Record)

	// Adopt hands this node ownership of a beat record whose owner left or whose HRW owner is now
	// this node. lastRenewed is the last time this node knew the record alive (last sync or verify
	// renewal from the old owner, on this node's clock). The store resumes the lease from it and
	// Puts a new revision (or Deletes the key if the lease already lapsed). Until it does, the
	// record keeps its old owner. After a restart rec.Owner may be this node itself: a beat record
	// of its previous incarnation, found in the peers' snapshots, that HRW still assigns to it.
	Adopt(rec Record, lastRenewed time.Time)

	// MembersChanged tells the store the live member set changed (it re-evaluates what it owns,
	// e.g. health-check targets keyed by ip:port, with Replicator.Owner). members is sorted and
	// includes this node.
	MembersChanged(members []string)
}

// BatchStore is a Store that takes several records at once. When the Store implements it, distro
// hands it every run of queued Apply calls together (the records of one sync message, one repair,
// one orphan removal), in queue order, under the same contract as Apply for each record: a Store
// applies them under one hold of its own lock, so that readers see them together.
type BatchStore interface {
	Store
	// ApplyBatch is Apply of each record of recs, in order. It must not keep recs.
	ApplyBatch(recs []Record)
}
