// Package raftstore is Muster's CP store: service definitions, persistent
// instances (with their health) and instance-metadata patches, replicated
// by Raft (Dragonboat v4) into an on-disk state machine kept in Badger v4.
//
// It does not know the registry. The registry proposes typed Commands and
// keeps its in-memory index current on every node through the Listener
// change feed.
//
// # Use
//
//	cfg := raftstore.DefaultConfig()
//	cfg.ReplicaID, cfg.DeploymentID, cfg.Dir = 1, 4711, "/var/lib/muster/raft"
//	cfg.Transport = tcp // Muster's transport (Secret or mutual TLS): node IDs are addresses
//	cfg.InitialMembers = map[uint64]string{1: "n1", 2: "n2", 3: "n3"}
//	cfg.Listener = myIndex
//	n, err := raftstore.New(cfg)      // validates, starts nothing
//	err = n.Start(ctx)                // opens Badger, starts Dragonboat
//	err = n.WaitReady(ctx)            // caught up with what was committed
//	res, err := n.Propose(ctx, raftstore.Command{Op: raftstore.OpPutInstance, Instance: inst})
//	// err: validation, ErrNoLeader, ErrClosed, ctx; res.Rejected: the state rules said no
//	defer n.Close()
//
// A restart uses the same RaftAddress, DeploymentID and Dir (Dragonboat
// freezes them into the directory); InitialMembers is then ignored.
//
// # Transport and security
//
// Raft runs over one of two transports, and Validate refuses to start on
// neither secured:
//
//   - Config.Transport (recommended): a Muster transport, authenticated by
//     its Secret or mutual TLS, with every inbound Raft batch and snapshot
//     chunk checked before Dragonboat sees it (below). Each replica is
//     bound to a node: a message from replica R is accepted only from the
//     authenticated peer whose node ID the membership gives R (with mutual
//     TLS, the ID its certificate names), so credentials for one node
//     cannot act as another node's replica.
//   - Dragonboat's own TCP transport at RaftAddress, with Config.TLS:
//     Dragonboat's mutual TLS (CA, certificate, key files). It proves that
//     a peer holds a certificate from the CA, and no more: Dragonboat
//     hands a received batch to Raft without the connection it came on,
//     so no replica ID can be bound to a certificate there, and any
//     certificate from the CA acts as any replica (a holder claiming a
//     member's replica ID from its own address makes the members panic,
//     TestRogueCertHolderCrashesDragonboatTLS). Validate refuses this mode
//     unless Config.TLSAnyReplica says it is chosen; the CA must then
//     issue certificates to members only.
//
// Config.Insecure allows Dragonboat's TCP transport with neither; anyone
// who can reach RaftAddress can then join, read or crash the cluster (a
// NodeHost of the same deployment claiming a member's replica ID from its
// own address makes the members panic). There is no default DeploymentID:
// Dragonboat drops traffic from other deployments, and a default would be
// shared by every cluster that kept it.
//
// With Config.Transport set, Raft messages
// (KindRaftMessages, one way) and snapshot chunks (KindRaftChunk, one
// request per chunk, so chunks arrive in order) go over a Muster transport
// instead: one connection per peer pair shared with Distro, with the
// transport's shared-secret handshake or TLS, and any wrapper around it (a
// test's fault injector cuts Raft like the rest). KindRaftMessages is an
// ordered kind (transport.OrderedHandler): a peer's batches reach
// Dragonboat one at a time in the order they were sent, as over
// Dragonboat's own TCP. A wrapper that does not implement OrderedHandler
// gets a plain handler and loses that order: Raft stays correct, but
// under load Replicate messages overtake each other, followers reject the
// later ones and the leader falls back to probing, which costs throughput.
// Addresses are then the
// transport's node IDs: RaftAddress defaults to Transport.LocalID(), and
// InitialMembers and AddReplica take node IDs. A new replica joins with
// Join after a member called AddReplica for it; it catches up by a
// streamed snapshot when the log was compacted.
//
// Inbound checks (over Config.Transport). Dragonboat panics on some
// malformed messages (To = 0, a source address other than the one it knows
// for a replica) and writes snapshot chunks where their fields say. So
// every batch must have this DeploymentID and Dragonboat's transport
// version, name the authenticated peer as its source, carry only message
// types that travel between nodes (no local types, no InstallSnapshot;
// NoOP does travel: it is how a replica at a higher term tells a
// stale leader, TestStaleLeaderHearsHigherTerm), and each message must be for this shard, to this replica, from a current
// member of the shard whose node is the authenticated peer. Membership is
// Dragonboat's, cached and read again when Dragonboat reports a change;
// until a replica knows it (starting, joining, or starting from its
// directory) the replicas it starts with (InitialMembers, or the bootstrap
// record of its directory) are pinned to their nodes, and any other
// replica ID to the first authenticated peer that sends as it.
// A snapshot chunk gets the same checks, and its file must be the one
// Dragonboat names after the index (no path), with no external files, no
// witness, sane counts, and a membership that moves no known replica to
// another node. What fails is dropped, answered with an error, and counted
// by rule (Node.InboundStats); it never reaches Dragonboat. Before
// Dragonboat's protobuf decoder runs, a batch's wire format is walked and
// refused if decoding it would allocate more than 16 times its size (plus
// 64 KiB), or it holds more than 16,384 messages or 262,144 entries (a
// chunk: more than 4,096 membership entries). The records of a streamed
// snapshot are checked as its chunks arrive, as RecoverFromSnapshot checks
// them (below): Dragonboat keeps a received snapshot and would fail to
// recover it on every start. A peer that
// passes is trusted with Raft's semantics, as in any Raft: with a shared
// secret, every holder of the secret can act as every node.
//
// # Commands and their rules
//
// Commands are validated before they are proposed (Command.Validate: model's
// rules, a known op, at most MaxCommandSize encoded); default namespace,
// group and cluster names are filled in. Applying is deterministic: a
// command is applied or rejected with a typed reason (ErrServiceExists,
// ErrServiceNotFound, ErrServiceNotEmpty, ErrKindMismatch,
// ErrInstanceNotFound) that is part of the replicated result, the same on
// every replica. Command is model.Command, and the rules are model's
// (model.CheckCommand, the replicated rules; the registry admits a write
// with model.AdmitCommand, which adds the rules that involve ephemeral
// data, before it proposes it):
//
//   - CreateService: rejected if a definition exists, or if it is ephemeral
//     and persistent instances exist.
//   - UpdateService: rejected if there is neither a definition nor a
//     persistent instance (unless Upsert), or if it is ephemeral and
//     persistent instances exist, or if its kind differs from the stored
//     definition's.
//   - DeleteService: rejected if there is neither a definition nor a
//     persistent instance, or if persistent instances exist.
//   - PutInstance: rejected if the stored definition (or the instance) is
//     ephemeral; a re-put keeps the stored health.
//   - DeleteInstance, RemovePatch: idempotent.
//   - PatchInstance: merged with the stored patch; no existence check.
//   - SetHealth: rejected if no such persistent instance; idempotent.
//
// Raftstore knows only persistent instances: the registry checks ephemeral
// ones before it proposes.
//
// # Writes: batching, retries, no leader
//
// Propose hands the command to a batcher: while the node's Raft entry is in
// flight, commands that arrive meanwhile are packed into the next entry (at
// most 256 commands or 256 KiB), each with its own result (group commit):
// BenchmarkPersistentRegister compares it with one command per entry. Once
// an entry's callers have their results, the batcher waits up to
// Config.BatchWait (default 1 ms) for as many commands as that entry
// answered plus those queued then, so callers that write again at once
// share the next entry instead of splitting into cohorts that take turns;
// a command arriving after the window goes out at once.
// Temporary Dragonboat errors (no leader yet, busy, a timed-out attempt)
// are retried within Config.ProposeTimeout, after which the call fails with
// ErrNoLeader. Each
// entry carries a unique ID (a random per-start nonce and a sequence
// number) and the state machine applies an ID at most once within a window
// of 50,000 indices, so a retry of an attempt that did commit returns the
// first outcome instead of applying twice. A call that failed with
// ErrNoLeader, ErrClosed or its ctx's error may still be applied later: the
// Listener is the source of truth.
//
// Forwarding (over Config.Transport). A follower does not propose its
// entry through Dragonboat, which would hand it to the leader as one more
// entry of the round (three nodes: three entries, each written to every
// log and applied on its own). It sends the entry to the leader
// (KindRaftPropose); the leader's batcher waits, like for its own callers
// and within the same BatchWait, for the followers that forwarded lately,
// and proposes their entries with its own as one merged entry: one log
// write and one apply a round. Each part keeps its proposer's ID, so the
// dedupe and the outcome are as before. The follower answers its callers
// once its own listener has the entry's changes, so a write is visible
// where it was made when Propose returns. When forwarding fails (no leader, the
// leader unreachable or changed, no answer within an attempt) the follower
// proposes the same entry itself; once the leader has answered, it is not
// proposed again. The leader merges only while every other member forwards
// saying it applies merged entries: an earlier version would skip one, and
// must never run on a log that holds them. Stats.EntriesForwarded,
// ForwardFallbacks, EntriesForwardedIn and MergedEntries count it.
//
// # Reads
//
// Reads (GetService, GetInstance, GetPatch, Instances, State) are served
// from the local Badger: fast, and on a follower possibly behind the
// leader. ReadOptions{Linearizable: true} makes them call Barrier first:
// a ReadIndex through the leader, then a wait until the local state machine
// has applied up to it. When Barrier returns, the Listener has seen every
// write committed before the call. Without a leader, local reads still
// answer; Barrier and linearizable reads fail with ErrNoLeader after
// Config.ReadTimeout.
//
// # The change feed
//
// The Listener is called on Dragonboat's apply goroutine, serialized and in
// log order: Reset with a complete copy of the state when the state machine
// opens its data (also when empty) or recovers from a snapshot, then
// Applied with every committed command and its outcome. A Change's Cmd is
// the command as applied (PutInstance: the stored instance, with the kept
// health; PatchInstance: the merged patch). One Raft entry may carry many
// commands; they share an Index. Listener calls must be quick and must not
// call Node's write methods or Barrier (they would wait for the goroutine
// the call is blocking). The slice Applied gets is reused by the next
// call: a listener keeps the Change values, not the slice.
//
// # Storage
//
// The state machine is a Dragonboat IOnDiskStateMachine. Each Update
// applies its entries in one Badger transaction (split into several only
// when it grows large) that also writes the applied index; Open returns that
// index. What the rules and the dedupe check read is kept in memory beside
// Badger: every service (definition, count of persistent instances), every
// persistent instance's health, every patch, the dedupe records. It is
// built from Badger when the state is loaded (Open, RecoverFromSnapshot)
// and changed with each write, so applying a command reads nothing from
// Badger (SetHealth reads the record it rewrites). Entries are decoded by
// hand in one pass that charges what the committed-data bound's walk
// would, into a buffer reused from batch to batch (model.AppendCommands),
// and instances are encoded by hand (model.Instance.AppendMsgpack): the
// same bytes as msgpack's. Badger runs
// with SyncWrites off: Sync (which Dragonboat calls before snapshots and
// periodically) calls db.Sync, and the Raft log itself
// is fsynced by Dragonboat, so a crash loses at most a suffix that is
// replayed. A crash between Badger's creating a memtable or value-log file
// and sizing it leaves an empty file that badger.Open refuses
// (dgraph-io/badger#2207); Start removes such files first (they hold no
// entry). PrepareSnapshot holds a read-only Badger transaction
// (a point-in-time view); SaveSnapshot streams its pairs as length-prefixed
// msgpack records (deterministic: Badger iterates in key order);
// RecoverFromSnapshot first checks every record while it copies the
// stream to a spool file beside Badger's directory (each value decoded by
// its kind under the committed-data bound and validated with the rules of
// the commands, with Config.Limits, which must be the same on every
// member; patches, merged, may hold more metadata), and refuses the whole
// snapshot with ErrCorrupt naming the first bad record; then it drops
// everything, loads the pairs with a write batch, writes the applied index
// last, syncs, and resets the Listener. Values read from Badger decode
// under the same bound.
// Applied entries also leave a small dedupe record (entry ID → index and
// result codes), cleaned up once older than the window.
//
// # The commit index
//
// Dragonboat's Pebble LogDB fsyncs every change of a replica's hard state
// (term, vote, commit index), so a change of the commit index alone, which
// every replica sees about once per entry after the entry itself, costs a
// synchronous write of its own: about half of a follower's fsyncs under
// load. Raft does not need the commit index on disk (etcd's raft does not
// sync it either): a restarted replica learns it from the leader, or
// commits its log again once elected, and the state machine's applied
// index (which Open returns) keeps entries from being applied twice. So
// the Node wraps the LogDB (logdb.go; Dragonboat's own, same format and
// name) and holds such an update back until the replica's next write of
// entries, a term or a vote, before any snapshot record (whose index must
// not be above the stored commit index: Dragonboat panics at restart), and
// on Close. A crash loses at most the commit index since the last write,
// never an entry, a term or a vote; TestCrashKeepsAcknowledgedWrites kills
// a process running a cluster and restarts it from its directories.
// Config.SyncCommitIndex turns the wrapper off; Stats.CommitWritesDeferred
// counts the writes held back, and Stats.LazyCommit (the metric
// muster_raft_lazy_commit) says whether the wrapper is on.
//
// Why go:linkname. Dragonboat's public way to choose the LogDB is
// config.LogDBFactory (NodeHostConfig.Expert.LogDBFactory), and the
// wrapper is one: what it cannot reach publicly is the LogDB it wraps.
// The default, "sharded-pebble", is built by internal/logdb.NewDefaultLogDB
// only; the public plugins are Tan (plugin/tan: a different on-disk format
// and LogDB name, so Dragonboat refuses to open an existing data directory
// with it) and a tee of Tan and Pebble for Dragonboat's own tests
// (plugin/tee). Wrapping Tan would change the format of every deployed
// Dir; reimplementing the Pebble LogDB would copy its format by hand. So
// the wrapper reaches the default constructor with go:linkname, which
// checks no types: it is used only with the Dragonboat version it was
// checked against (TestDragonboatVersionVetted holds go.mod to it). A
// binary whose build information names another version, or none, runs as
// with SyncCommitIndex: Start logs a Warn through Config.Logger (the
// registry's logger through registry/raftcp) and Stats.LazyCommit is
// false. The trade-off is then only speed (about twice the fsyncs on a
// follower), never safety.
//
// # Snapshots and log compaction
//
// The Node takes the (metadata-only) snapshots itself, every
// SnapshotEntries applied entries counted from the replica's last
// snapshot (also across restarts: a restart replays at most about
// SnapshotEntries entries), trying a failed one again; Dragonboat's
// automatic ones are off. A replica too far behind gets the state
// streamed at the leader's applied index and continues from the log after
// it; with Dragonboat's automatic compaction a stream slower than
// SnapshotEntries + CompactionOverhead entries of writes was stale once
// installed, and a replica restarted under steady writes never caught up.
// So the log is kept from a stream's index while it is in flight and, once
// it was sent, until as many entries again (twice over, plus
// CompactionOverhead) have been applied, and, over Config.Transport (where
// the receiver's acknowledgements are seen), while the receiver is still
// more than CompactionOverhead behind (installing a large state can take
// longer than streaming it), within a bound; the compaction index never
// goes back. Over Config.Transport, a received
// stream that was abandoned half-way has its directory removed when the
// next one starts (Dragonboat would keep it for 15 minutes, up to 128 of
// them); completed ones are removed by Dragonboat as newer snapshots are
// taken.
//
// Registry-sized values stay inside Badger's LSM tree (below its value
// threshold), so the value log does not grow and needs no garbage
// collection. Keep Dir whole: the Raft log (Dir/raft) and the state
// machine (Dir/badger) must live and die together. Losing Badger's
// unsynced tail is fine (the log is replayed from the index Open reports),
// but a state machine older than the last Raft snapshot makes Dragonboat
// panic.
//
// # Sizing
//
// Dragonboat runs with the tiny LogDB profile and one LogDB shard, and a
// 2-worker execution engine (both are hard settings frozen into Dir: never
// change them for an existing directory). Badger runs with 8 MiB memtables
// (two), no block cache, no compression, 16 MiB value-log files, two
// compactors. BenchmarkIdleNodeRSS reports an idle one-node process at about
// 23 MiB resident (13.5 MiB of Go heap). No Quiesce (it delays leader failover by tens of
// seconds). Production defaults: RTTMillisecond 50, ElectionRTT 10,
// HeartbeatRTT 1, CheckQuorum and PreVote on.
//
// # The one process-wide setting
//
// Dragonboat's logger factory is global to the process and can be set only
// once. The first Node started installs a factory that discards Dragonboat's
// logs (unless the host program installed one before, which is then kept).
// Badger's logs and the node's own go to Config.Logger.
//
// # Monitoring
//
// Node.Stats returns the counters and gauges: proposals by outcome and a latency histogram
// (Stats.ProposeLatency, on Config.Clock), entries and their retried attempts, the Raft
// log's synchronous writes (Stats.LogWrites: commands per fsync), leader changes, the
// applied and last log index and their difference (apply lag), snapshots created, sent,
// received and recovered, and InboundStats. Package registry/metrics exports them to
// Prometheus.
//
// # Time
//
// Dragonboat runs on real time (its ticks, election and request timeouts);
// the bounded waits of Propose, Barrier and membership changes are real-time
// context deadlines for that reason, and so is the pause between retries
// (paced by a fake clock, a retry would wait for a test to move it).
// Config.Clock only timestamps Stats.ProposeLatency.
package raftstore
