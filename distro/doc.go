// Package distro replicates records between Muster nodes: the AP half of the registry, after
// Nacos's Distro protocol, with the version checks Nacos lacks.
//
// # Usage
//
// The host builds a transport and a membership; the registry implements Store:
//
//	cfg := distro.DefaultConfig()
//	cfg.NodeID = "n1"
//	cfg.Transport = tr   // a transport.Transport whose LocalID is "n1"
//	cfg.Membership = mem // distro.NewStatic(...) by hand, or a gossip.Memberlist
//	cfg.Store = store    // the registry's: it is told of every record another node changes
//	r, err := distro.New(cfg) // validates, starts nothing
//	err = r.Start(ctx)        // handlers, membership, the load from the peers in the background
//	err = r.WaitReady(ctx)    // loaded (or alone after LoadTimeout)
//
//	rec, err := r.Put(distro.KindSession, key, payload) // on the record's owner only
//	rec, err = r.Delete(key)                            // a tombstone
//	rec, ok := r.Get(key)                               // any node: what it holds
//	owner := r.Owner(key)                               // the HRW owner of a beat key
//
//	err = r.Flush(ctx) // a graceful stop: send what waits in its merge window
//	err = r.Close()    // removes its handlers; the transport and membership stay the caller's
//
// Tests on a fake clock call Settle after moving the clock: it runs what is due and returns
// once it has run.
//
// Membership is an interface. Static is driven by hand (tests, harnesses; its notifications are
// synchronous). Package distro/gossip runs hashicorp/memberlist; it is a package of its own, so
// that distro does not link memberlist.
//
// # Records and names
//
// A Record is the state of one unit of replication, with a version: Revision, then Owner as a
// tie-break. The registry encodes its content into Payload. Names in this package:
//
//   - key is a record key (Record.Key): opaque here, unique per record.
//   - owner and member are node IDs (Record.Owner, Members).
//   - A publisher is the registry's, not distro's: a beat publisher is one record, a session one
//     record per instance, so that a change costs what changed. Distro never sees a publisher ID.
//
// Every node holds every record. Only the record's owner changes it. A session record belongs to
// the node it was opened on. A beat record belongs to the rendezvous-hash (HRW) owner of its key
// among the live members; the registry routes beat writes and health checks with Owner.
//
// # Invariants
//
// Each one has a fault-injection test over transport.MemNetwork with a fake clock.
//
//  1. Single writer. Put and Delete fail with ErrNotOwner unless this node owns the key. A
//     record in a sync or repair from a node other than its Owner is refused.
//  2. No rollback. A received record is installed only if its version is newer than the one
//     held. Duplicates, reordering and late retries are ignored.
//  3. No resurrection. A deletion is a tombstone with a version. It is kept TombstoneTTL
//     (default 60 s, at least two verify periods) and included in snapshots, so a stale update
//     never revives it.
//  4. No echo. A node sends only records it owns, checked again at send time. Applying a
//     received record schedules nothing.
//  5. Convergence. Verify repairs whatever sync lost: after faults stop, live nodes agree within
//     two verify periods.
//
// # Sync
//
// A change schedules one task per (key, peer), due at now+SyncDelay. Later changes merge into
// it: the window is anchored at the first change, like Nacos. The task sends the record's state
// at send time, so a burst ships once. SyncDelay NoSyncDelay sends at once.
//
// Due tasks to one peer go in one message, up to MaxBatch records and 1 MiB of payload. At most
// one message per peer is in flight. A failed send is retried after RetryMin·2^(n−1), capped at
// RetryMax, drawn in [d/2, d). The tasks of a peer that leaves are dropped.
//
// # Verify
//
// Every VerifyInterval each node sends each peer a digest of the records it owns: Buckets sums
// of a 64-bit hash of (key, revision, deleted, CRC-32C of the payload), tombstones included. The sums are kept current
// on every change in O(1), so a round costs O(Buckets) whatever the record count: 8 bytes a
// bucket (docs/scaling.md has the measured bytes).
//
// Buckets holding records whose sync to that peer is on its first attempt are left out of the
// round, never the same bucket two rounds in a row: the peer lacks those changes only because
// they are on their way.
//
// The peer compares the rest with its copies of that owner's records. It answers the buckets
// that differ with its versions there: that owner's records (orphan markers included, as
// deletions) and the beat records HRW now assigns to that owner, whoever wrote them. The owner
// then sends the records the peer lacks or holds older, names the ones it no longer holds (the
// peer drops them), and moves past any newer version of a key it owns (see Nodes that come
// back).
//
// A verify also renews the peer's copies of the owner's records: it is the last-known-alive
// time given to Store.Adopt. Tombstones count in the hashes because a peer may hold the key
// under another owner (an older version). The cost is one small repair when nodes expire a
// tombstone at slightly different times.
//
// # Load
//
// Start pulls a paged snapshot (whole buckets, up to 4,096 records a page) from every member in
// parallel and merges by version. Each record travels about once: the first peer to answer is
// taken whole, with the hash of each of its buckets; the others send only the buckets whose
// hashes differ from those.
//
// A node is ready once every member it knows was tried and at least one answered. A peer that
// answers ErrNotMember is asked again. Nodes never serve snapshots or verify answers before
// their own load (Nacos #8436): a loading peer answers ErrNotReady, which is not an answer, so
// nodes restarting together wait for a survivor rather than take each other's empty state.
//
// Unanswered peers are retried. If none answers within LoadTimeout, the node is ready as the
// first one and logs it. A whole cluster starting cold is ready at once when
// Config.ColdStartMembers says how many nodes it has, that many are listed, and every other one
// is loading too.
//
// Records of this node's previous incarnation found in the snapshots are settled: its sessions
// died with it and are tombstoned; its beats are adopted if HRW still names it. The Store is
// given the merged result, each loaded foreign record once, at its final version, before the
// node is ready; never an intermediate version that another snapshot replaced. A record it was
// given during the load (by a sync) that a loaded tombstone or own record replaces is removed
// from it. A Put made before ready moves past its previous incarnation's version instead of
// being replaced by it.
//
// # Orphans and adoption
//
// When membership drops a node, its beat records whose HRW owner is now this node go to
// Store.Adopt at once: the store resumes the lease from the last renewal and Puts a new
// revision, or Deletes it. Its session records are removed after OrphanTimeout (Store.Apply with
// Deleted set and the record's own version), unless it comes back. So is any beat record still
// carrying the gone owner by then.
//
// On a join the same rule moves the keys whose HRW owner is now the new node: the new owner
// adopts them. The old one learns through Store.MembersChanged and Owner that it no longer runs
// their lease, and its Put for them fails with ErrNotOwner.
//
// HRW moves only what it must. When a member joins a cluster of N, about 1/(N+1) of the beat
// keys move, all to it. When one leaves, only its share moves, spread over the others
// (TestHRWMovement). Nacos's modulo hash moves nearly every key.
//
// A node leaving gracefully need not wait for OrphanTimeout. It deletes its own session records
// and calls Flush, which sends every change still in its merge window (or retry backoff) at once
// and returns when each has been sent or has failed once. The registry does this in Close.
//
// # Nodes that come back
//
// Orphan removals are local. The record becomes an orphan marker: not held (not in Get, Range,
// digests or snapshots), but it keeps its version for TombstoneTTL. A marker refuses older
// versions and yields to the same or a newer version from the real owner. So a node that was
// only partitioned gets its live records back through its next verify, while a dead node's
// records, which nobody sends again, stay removed.
//
// A restarted node loads its own records from its peers and continues their revisions. It may
// miss some (a peer it cannot reach holds them), so a version it writes is never one its
// previous incarnation wrote: every revision is at least its epoch, the clock at its start in
// microseconds (a revision reads as the time its writer started, or later). Its new writes are
// newer than anything it wrote before and win at once. If its clock was set back by more than
// it was down, a version may still repeat with another payload: the payload's checksum in the
// digest shows it, and the owner moves past it. If it writes a key that peers hold at a higher
// version (or as an orphan marker), the verify answer shows it the higher version and it moves
// its record past it.
//
// The same rule settles beat keys written on both sides of a partition. A peer reports to a
// key's HRW owner whatever version it holds of that key, whoever wrote it, and the owner moves
// past it. A node holding a beat record of a key HRW assigns to it, written by another node,
// adopts it. If it holds a newer deletion of the key instead (another owner's tombstone, or an
// orphan marker), it refuses the record, and at its next verify tick takes the deletion over as
// a tombstone of its own, above it: the deletion's owner may no longer hold it (its tombstone
// expired first, or it restarted), and nothing else shows the record's writer, whose verify
// hears only of its own records and of the keys HRW assigns to it, that it was deleted.
//
// An owner no longer holds a version of its own when it holds nothing of the key, or another
// owner's tombstone or older version there: it tells the peer to drop its copy. It leaves the
// copy to another owner only when it holds that owner's newer live record, which that owner
// sends to the peer (a drop first would show the peer's Store the key deleted in between). It
// never waits for the owner of a tombstone: that owner forgets it TombstoneTTL after writing
// it, possibly long before the nodes that got it late forget their copies.
//
// When an owner tells a peer to drop a record it no longer holds, only live copies go.
// Tombstones and orphan markers stay their TTL: they refuse stale copies, and they show an owner
// that lost its state which version to move past. A tombstone forgotten after TombstoneTTL lets
// the key start again at a lower revision (another node's epoch): only then does the Store see
// a lower revision. Its owner writes above the forgotten version.
//
// # Security
//
// Only members act. Every handler (sync, repair, verify, snapshot) checks, before decoding
// anything, that the sender the transport authenticated (the handler's from argument) is a
// current member. Others get ErrNotMember and nothing else, and are counted. HRW ownership is
// computed over the same members.
//
// ErrNotMember is retryable: a node that has just joined may reach a peer before the peer lists
// it. Syncs retry with backoff, verify runs again, and the loader asks such a peer again until
// it answers or LoadTimeout passes.
//
// The gossip membership requires a gossip key unless Insecure is set (see package
// distro/gossip): a node without it cannot join, so it is never a member and never owns a key.
//
// Every list in a message has a per-type cap, checked at its header before anything is
// allocated: MaxMessageRecords records per sync or repair, 65,536 per snapshot page, 16,384
// versions or drops, at most Buckets buckets. Nil and hollow elements are refused. Lists grow
// with the elements that arrive.
//
// # Concurrency
//
// All Replicator methods are safe for concurrent use. Put, Delete, Get, Range, Owner and Members
// never block on the network; they take one mutex briefly (Range copies first).
//
// Store calls are made one at a time, in a per-key version order, with no distro lock held (see
// Store). An Apply or Adopt overtaken by a newer version of its key before its delivery (for
// instance the Store's own Put after an earlier Adopt) is skipped.
//
// One run goroutine drives the clock: sync timers, verify rounds, orphan timeouts, tombstone
// expiry. Sends, verify rounds and the load run in goroutines that Close waits for. Time comes
// from Config.Clock (tests use a fake one). Request deadlines are real time, derived from the
// context given to the transport. The gossip membership always runs on real time.
//
// # Monitoring
//
// Replicator.Stats returns the counters (syncs sent, received, applied and refused by reason,
// verify rounds, divergent buckets, repairs, orphans, adoptions) and the state (ready, load
// duration, members, records) as a plain struct; package registry/metrics exports them to
// Prometheus. Replicator.Compare reports, record by record, how this node's records differ from
// a peer's (missing here or there, older, newer), with verify's digests: an operator's
// consistency check that changes nothing.
//
// # Decisions where the design was silent
//
//   - The sync answer is a request/response, not a one-way send, so failures are known and
//     retried. One batch per peer in flight keeps a peer's syncs ordered.
//   - Delete of a key this node holds no live record of fails with ErrNotFound.
//   - A session Put on a key held live by another live member fails with ErrNotOwner. After that
//     member left, the key may be taken over.
//   - Adoption happens on membership changes and after the load (a scan of all records). It
//     happens at once when a beat record arrives from an owner that is not a member. It happens
//     at the next verify tick for a beat record of a key HRW assigns here that a live node wrote
//     while it thought it owned the key; those keys are noted on receipt, so the tick stays
//     O(buckets). A double adoption under split views is settled by the version order (revision,
//     then owner ID), at most once per verify period while views disagree.
//   - Records' payloads are shared, never copied: callers must not modify them.
//   - A bucket is never split across snapshot pages. A bucket holding more than 65,536 records
//     cannot be served: the page fails, saying to raise Buckets.
//   - Messages from non-members are refused, not dropped silently: the error tells a node that
//     has just joined to retry.
package distro
