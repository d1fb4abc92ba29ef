// Package distro replicates publisher records between Muster nodes: the AP half of the
// registry, after Nacos's Distro protocol, with the version checks Nacos lacks.
//
// A Record is the whole state of one unit of replication (the registry encodes it into Payload:
// a beat publisher, or one instance of a session, so that a change costs what changed) with a
// version: Revision, then Owner as a tie-break. Every node holds every record. Only the record's
// owner changes it: a session record belongs to the node it was opened on, a beat record to the
// rendezvous-hash (HRW) owner of its key among the live members. The registry implements Store
// and calls the Replicator: Put and Delete on the owner, Owner to route writes and health
// checks, Get and Range to read.
//
// # Usage
//
//	cfg := distro.DefaultConfig()
//	cfg.NodeID, cfg.Transport, cfg.Membership, cfg.Store = id, tr, mem, store
//	r, err := distro.New(cfg) // validates, starts nothing
//	err = r.Start(ctx)        // handlers, membership subscription, load in the background
//	err = r.WaitReady(ctx)    // loaded from the peers (or first node after LoadTimeout)
//	rec, err := r.Put(distro.KindSession, key, payload)
//	defer r.Close()
//
// Membership is an interface: Static is driven by hand (tests, harnesses; notifications are
// synchronous); package distro/gossip's Memberlist runs hashicorp/memberlist and carries each
// node's transport address in its node meta (Memberlist.Addr plugs into
// transport.TCPConfig.Resolve). It is a package of its own, so that distro does not link
// memberlist.
//
// # Security
//
// Only members act. Every handler (sync, repair, verify, snapshot) checks, before decoding
// anything, that the sender the transport authenticated (the handler's from argument) is a
// current member; others get ErrNotMember and nothing else, and are counted. HRW ownership is
// computed over the same members. ErrNotMember is retryable: a node that has just joined may
// reach a peer before the peer lists it, so syncs retry with backoff, verify runs again, and the
// loader asks such a peer again until it answers or LoadTimeout passes.
//
// The gossip membership requires a gossip key (gossip.Config.SecretKey; Validate refuses a
// config without one unless Insecure is set): a node without it cannot join, so it is never a
// member and never owns a key. It binds 127.0.0.1 unless BindAddr says otherwise. Keys rotate
// on a running cluster with gossip.Memberlist.AddKey (everywhere), UseKey (everywhere),
// RemoveKey (everywhere).
//
// Every list in a message has a per-type cap checked at its header before anything is
// allocated (MaxMessageRecords records per sync or repair, 65,536 per snapshot page, 16,384
// versions or drops, at most Buckets buckets), nil and hollow elements are refused, and lists
// grow with the elements that arrive.
//
// # Invariants
//
//  1. Single writer. Put and Delete fail with ErrNotOwner unless this node owns the key; a
//     record arriving in a sync or repair from a node other than its Owner is refused.
//  2. No rollback. A received record is installed only if its version is newer than the one
//     held. Duplicates, reordering and late retries are ignored.
//  3. No resurrection. A deletion is a tombstone with a version, kept TombstoneTTL (default 60 s,
//     at least two verify periods), included in snapshots, so a stale update never revives it.
//  4. No echo. A node sends only records it owns (checked again at send time); applying a
//     received record schedules nothing.
//  5. Convergence. Verify repairs whatever sync lost: after faults stop, live nodes agree within
//     two verify periods.
//
// Each has a fault-injection test over transport.MemNetwork with a fake clock.
//
// # Mechanisms
//
// Sync: a change schedules one task per (key, peer) at now+SyncDelay; later changes merge into
// it (the window is anchored at the first change, like Nacos). The task sends the record's state
// at send time, so a burst ships once. Due tasks to the same peer go in one message (up to
// MaxBatch records, 1 MiB of payload); at most one message per peer is in flight. A failed
// send is retried after RetryMin·2^(n−1), capped at RetryMax, drawn in [d/2, d); tasks of a
// peer that leaves are dropped. SyncDelay 0 sends at once.
//
// Verify: every VerifyInterval each node sends each peer the bucket hashes of the records it
// owns: Buckets sums of a 64-bit hash of (key, revision, deleted) over its records, tombstones
// included, kept current on every change in O(1), so a round costs O(Buckets), 8 KiB with the
// default 1024 buckets whatever the record count (8,229 bytes per peer per round measured with
// 100,000 and 1,000,000 records, docs/scaling.md). Buckets holding records whose sync to that
// peer is on its first attempt are listed as not to compare this round (never the same bucket
// two rounds in a row): the peer lacks those changes only because they are on their way. The
// peer compares the rest with its copies of that owner's records and answers
// the differing buckets with its versions there: that owner's records (orphan markers included,
// as deletions) and the beat records HRW now assigns to that owner whoever wrote them. The owner
// then sends the records the peer lacks or holds older, names the ones it no longer holds (the
// peer drops them), and moves past any newer version of a key it owns (see below). A verify also
// renews the peer's copies of the owner's records: it is the last-known-alive time given to
// Store.Adopt. Tombstones count in the hashes because a peer may hold the key under another
// owner (an older version); the cost is one small repair when nodes expire a tombstone at
// slightly different times.
//
// Load: Start pulls a paged snapshot (whole buckets, up to 4,096 records a page) from every
// member in parallel and merges by version, each record about once: the first peer to answer
// is taken whole with the hash of each of its buckets, the others send only the buckets whose
// hashes differ from those (the merge is the same as of their whole snapshots). It then reports ready once every member it knows was
// tried and at least one answered (and none answered ErrNotMember, which is asked again). Nodes never serve snapshots or verify answers before their
// own load (Nacos #8436): a peer that is itself loading answers ErrNotReady, which does not count
// as an answer, so nodes restarting together wait for a survivor rather than take each other's
// empty state. Unanswered peers are retried until one answers; if none does within LoadTimeout
// (no peer reachable), the node is ready as the first one and logs it. A whole cluster starting
// cold is ready at once when Config.ColdStartMembers says how many nodes it has and that many
// are listed, every other one loading too. Records of this node's previous incarnation found in the
// snapshots are settled: its sessions died with it and are tombstoned, its beats are adopted if
// HRW still names it. The Store is given the merged result of the load (each loaded foreign
// record once, at its final version, before the node is ready), never an intermediate version
// another snapshot replaced; a record it was given during the load (by a sync) and that a
// loaded tombstone or own record replaces is removed from it; a Put made before ready moves
// past its previous incarnation's version instead of being replaced by it.
//
// Orphans and adoption: when membership drops a node, its beat records whose HRW owner is now
// this node are handed to Store.Adopt at once (the store resumes the lease from the last renewal
// and Puts a new revision, or Deletes it); its session records are removed after OrphanTimeout
// (Store.Apply with Deleted set and the record's own version) unless it comes back; so is any
// beat record still carrying its owner by then (never taken over by the new owner). On a join
// the same rule moves the keys whose HRW owner is now the new node: the new owner adopts them,
// the old one learns through Store.MembersChanged and Owner that it no longer runs their lease,
// and its Put for them fails with ErrNotOwner.
//
// A node leaving gracefully need not wait for OrphanTimeout: it deletes its
// own session records and calls Replicator.Flush, which sends every change
// still in its merge window (or retry backoff) at once and returns when each
// has been sent or has failed once (the registry does this in Close).
//
// HRW moves only what it must: when a member joins a cluster of N, about 1/(N+1) of the beat
// keys move, all to it; when one leaves, only its ~1/N of the keys move, spread over the others
// (tested with 20,000 keys over 5 members: 17.0 % moved on a sixth member's join, 20.2 % on one
// member's leave). Nacos's modulo hash moves nearly every key.
//
// # Version rules for nodes that come back
//
// Orphan removals are local: the record is turned into an orphan marker that is not held (not in
// Get, Range, digests or snapshots) but keeps its version for TombstoneTTL. A marker refuses older
// versions and yields to the same or a newer version from the real owner, so a node that was only
// partitioned gets its live records back through its next verify, while a dead node's records,
// which nobody sends again, stay removed. A restarted node loads its own records from its peers
// and continues their revisions; if it restarts without them (no peer reachable) and writes a key
// that peers hold at a higher version (or as an orphan marker), the verify answer shows it the
// higher version and it moves its record past it. The same rule settles beat keys written on
// both sides of a partition: a peer reports to a key's HRW owner whatever version it holds of
// that key, whoever wrote it, and the owner moves past it; a node holding a beat record of a key
// HRW assigns to it, written by another node, adopts it. When an owner tells a peer to drop a
// record it no longer holds, only live copies go: tombstones and orphan markers stay their TTL,
// since they are what refuses stale copies and what shows an owner that lost its state which
// version to move past. A tombstone forgotten after TombstoneTTL allows the key to start again at
// revision 1: the Store sees a lower revision only then.
//
// # Concurrency
//
// All Replicator methods are safe for concurrent use. Put, Delete, Get, Range, Owner and Members
// never block on the network and take one mutex briefly (Range copies first). Store calls are
// made one at a time, in a per-key version order, with no distro lock held (see Store); an
// Apply or Adopt overtaken by a newer version of its key before its delivery (for instance the
// Store's own Put after an earlier Adopt) is skipped. One run
// goroutine drives the clock (sync timers, verify rounds, orphan timeouts, tombstone expiry);
// sends, verify rounds and the load run in goroutines tracked by Close. Time comes from
// Config.Clock (tests use a fake one); request deadlines are real time, derived from the
// context given to the transport. The gossip membership always runs on real time.
//
// # Monitoring
//
// Replicator.Stats returns the counters (syncs sent, received, applied and refused by reason,
// verify rounds, divergent buckets, repairs, orphans, adoptions) and the state (ready, load
// duration, members, records) as a plain struct; package registry/metrics exports them to
// Prometheus. Replicator.Compare reports, record by record, how this node's records differ
// from a peer's (missing here or there, older, newer), with verify's digests: an operator's
// consistency check that changes nothing.
//
// # Decisions where the design was silent
//
//   - The sync answer is a request/response (not a one-way send), so failures are known and
//     retried; one batch per peer in flight keeps a peer's syncs ordered.
//   - Delete of a key this node holds no live record of fails with ErrNotFound.
//   - A session Put on a key held live by another live member fails with ErrNotOwner; after
//     that member left, the key may be taken over.
//   - Adoption happens on membership changes and after the load (a scan of all records), when
//     a beat record arrives from an owner that is not a member (at once), and at the next verify
//     tick for a beat record of a key HRW assigns here that a live node wrote while it thought it
//     owned the key (those keys are noted on receipt, so the tick stays O(buckets)); a double
//     adoption under split views is settled by the version order (revision, then owner ID), at
//     most once per verify period while views disagree.
//   - Records' payloads are shared, never copied: callers must not modify them.
//   - A single bucket is never split across snapshot pages: with the default 1024 buckets and
//     small payloads a page stays far below the 4 MiB transport frame. A bucket holding more
//     than 65,536 records cannot be served (the page fails, saying to raise Buckets).
//   - Messages from non-members are refused, not dropped silently: the error tells a node that
//     has just joined to retry.
package distro
