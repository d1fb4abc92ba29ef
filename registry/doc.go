// Package registry is Muster's engine: the service registry that host
// programs embed. It keeps an in-memory index of services and their
// instances and answers queries and watches from it.
//
// # Walkthrough
//
// A standalone registry, in memory:
//
//	reg, err := registry.New(registry.DefaultConfig()) // validates, starts nothing
//	err = reg.Start(ctx)                                // goroutines start here
//	defer reg.Close()                                   // idempotent; waits for them
//
//	sess, err := reg.OpenSession(ctx, registry.SessionOptions{}) // a client connection
//	err = sess.Register(ctx, model.NewInstance(svc, "10.0.0.1", 8080))
//	err = reg.Register(ctx, inst)           // an ephemeral instance kept alive by beats…
//	interval, err := reg.Heartbeat(ctx, inst.Key())
//	view, err := reg.Query(ctx, model.Query{Service: svc, HealthyOnly: true})
//	w, err := reg.Watch(ctx, model.Query{Service: svc}) // w.Next: newest view and delta
//
// A cluster node adds engines, which the registry reaches through
// interfaces it defines and builds through Config:
//
//	cfg := registry.DefaultConfig()
//	cfg.NodeID = "n1"
//	cfg.Replicator = registry.Distro(dc) // ephemeral data: Distro over dc's transport
//	cfg.Transport = tr                   // forwarded beat writes, lease handovers
//	cfg.Store = raftcp.New(rc).Open      // persistent data: Raft (registry/raftcp)
//
// Package registry/node does all of it in one call (transport, gossip
// membership, Distro, Raft and the checks), and closes it in the right
// order. Package registry/registrytest gives tests a registry, or a cluster
// of them, on a fake clock.
//
// # Config and engines
//
//   - Config carries every dependency, each with a safe default when nil:
//     the clock (github.com/jonboulle/clockwork; tests pass a fake one), the
//     *slog.Logger and the random source.
//   - The engines are interfaces: Replicator (replicator.go), Store and its
//     StoreFeed (cpstore.go), Transport (network.go). Each states its
//     concurrency contract. New builds them through ReplicatorFunc and
//     StoreFunc, handing each an Env: the values the registry owns (node ID,
//     clock, logger, a random source, limits).
//   - Nothing is overwritten: a field a nested config may set (a logger, a
//     clock) means the registry's when nil and is kept when set; a field
//     the registry owns (distro's NodeID and Store, raftstore's Listener and
//     Limits, the checks' OnTransition) is refused when set.
//   - A standalone registry links no engine: no Raft, no gossip, no MySQL
//     driver.
//   - Nothing is global: two registries in one process never see each
//     other.
//
// # Modes
//
//   - Standalone (no Replicator, no Store): one node; persistent data
//     (service definitions, persistent instances, patches) lives in memory
//     and is lost on Close.
//   - Durable standalone: a Store without a Replicator, such as a
//     single-replica Raft group over a one-node transport.MemNetwork, which
//     opens no port.
//   - Cluster: a Replicator (ephemeral data) and a Store (persistent data).
//     A Replicator without a Store replicates ephemeral data only: each
//     node keeps the persistent data it took, unreplicated.
//
// # Ephemeral data in a cluster
//
//   - Every publisher (a session, or the beat publisher of an ip:port) is
//     replicated, owned by one node: a session by the node it was opened
//     on, a beat publisher by the rendezvous-hash owner of its ip:port
//     among the live members.
//   - A session is one record per instance and a beat publisher one
//     record, so a change costs what changed, whatever the session's size.
//   - Registering an instance exactly as it is held changes nothing: no
//     revision, no watcher woken, nothing replicated.
//   - Only the owner changes a record and runs its leases; the other nodes'
//     copies are read-only.
//   - A Register, Heartbeat or Deregister of a beat instance that reaches
//     another node is forwarded to the owner (ForwardAttempts tries, with
//     backoff, while ownership moves), so clients may talk to any node.
//     Only current members may forward: the owner refuses any other peer
//     with ErrNotMember.
//   - A node that closes ends its sessions and sends their removal first
//     (HandoverTimeout).
//   - When a node dies, its sessions' instances leave the other nodes after
//     the replicator's orphan timeout, and its beat publishers are adopted
//     by their new owners, which continue their leases from the last
//     renewal they knew.
//   - When a key moves back (a partition heals), the node that ran its
//     lease hands it to the new owner, which keeps the newer last beat of
//     the two. An instance deregistered on the new owner within a lease
//     period stays gone.
//   - A starting node loads its peers' records first. Until then Query and
//     Watch fail with ErrNotReady (ServeBeforeReady lifts that), and so do
//     beat writes it owns: it may not know yet the record its previous run
//     left. The first node of a new cluster waits the replicator's load
//     timeout; the nodes of a cold cluster are ready once each has heard
//     that every member it expects is loading too.
//   - Watchers are node-local, as in Nacos; replication brings every
//     node's changes to them.
//
// # Persistent data in a Store
//
//   - Writes are proposed, decided by the store's rules on every node
//     alike, and mirrored into each node's index from its change feed. A
//     call returns once its change is visible on the node that took it.
//   - The rules are model's, one set for both stores: the node that takes
//     a write admits it (model.AdmitCommand over its index, with the
//     rules that involve ephemeral data: the kind of a service used by
//     ephemeral instances, a patch of an ephemeral instance), and the
//     store checks the replicated rules again when it applies it
//     (model.CheckCommand). Commands are model.Command, as in the log.
//   - A Query with Linearizable set first waits for a barrier, so it sees
//     every write acknowledged anywhere before it began.
//   - Without a quorum, writes fail with ErrNoLeader after a bounded wait;
//     reads go on from the local copy.
//   - Readiness also waits until the node has applied what was committed
//     when it started.
//
// # Health checks
//
//   - HealthChecks (on in DefaultConfig) probes persistent instances with
//     TCP, HTTP or MySQL checks (package health; the MySQL checker is in
//     health/mysqlcheck, to be put in HealthChecks.Checkers).
//   - The owner of an ip:port probes its instances: every one when
//     standalone; the Store's leader with a Store but no Replicator; with a
//     Replicator but no Store, each node what it holds.
//   - A new prober starts from the stored health: a handover neither leaves
//     a gap nor flips an instance twice.
//   - Only transitions are written, through the store; a write that fails
//     for lack of a leader is retried with backoff until stored or moot.
//   - Explain shows a node's view of an instance's checks
//     (Explanation.Check), beside its history.
//
// # Data
//
//   - Services live in namespaces and groups (package model). A service is
//     ephemeral or persistent, fixed by its first registration or its
//     creation (ErrKindMismatch otherwise).
//   - A Session (OpenSession) stands for a connection the host manages. Its
//     instances live until it closes, or until its optional TTL lapses
//     without KeepAlive. Closing it removes all of its instances at once.
//     Sessions lists the node's sessions and their labels.
//   - Without a session, Register publishes an ephemeral instance through
//     the beat publisher of its ip:port, and heartbeats keep it alive, as
//     Nacos 1.x clients do: unhealthy after 15 s without a beat, deleted
//     after 30 s, both overridable per instance (model.MetaHeartBeatTimeout,
//     model.MetaIPDeleteTimeout). A beat makes an unhealthy instance
//     healthy again.
//   - Heartbeat fails with ErrNotFound when the registry no longer holds
//     the instance (the client registers again); HeartbeatInstance carries
//     the instance, registers it again itself, and says so
//     (BeatResult.Registered).
//   - Several publishers may publish one instance key: it stays while any
//     of them does.
//   - Persistent instances (Ephemeral=false) stay until Deregister. Health
//     checks, or SetHealth for clusters whose check type is NONE, set their
//     health; it never deletes them.
//   - Operators' overrides (PatchInstance: weight, enabled, metadata) win
//     when the instance is read, survive re-registration, and are dropped
//     PatchTTL after the instance is gone.
//   - A service with neither instances nor a stored definition is removed
//     after EmptyServiceTTL.
//
// # Reads
//
//   - Query returns a *model.ServiceView: the instances in a stable order,
//     after the query's filters (clusters, healthy only, and by default
//     enabled only).
//   - Protection, as in Nacos: when the healthy share of the cluster- and
//     enabled-filtered instances is at or below the service's
//     ProtectThreshold, every instance is served as healthy, the view is
//     flagged Protected and RealHealth keeps the truth. A HealthyOnly query
//     under protection returns every instance (as Nacos 1.x; Nacos 2.x
//     never protects such queries).
//   - Views are immutable and shared: built once per revision of a service
//     and query shape. Querying an unchanged service allocates nothing.
//   - Revisions increase with every change of a service and never repeat on
//     a node, even across a delete and a re-creation.
//   - SelectOne picks an instance at random, weighted by Weight, among
//     those served healthy, enabled and with a positive weight.
//   - GetInstance returns one instance by its key. ListServices pages
//     through a namespace's services, filtered by group and name.
//   - Watch delivers the newest view of a query and the typed delta against
//     the previous delivery; a slow watcher skips intermediate views and
//     never blocks the registry. WatchServices watches a namespace's list
//     of services alike. Both count against Limits.MaxWatchers.
//   - WatchFrom resumes a watch from the Cursor of an update (a client that
//     reconnects): the change since, when the registry still keeps that
//     revision (Config.WatchHistory), or the current view as a reset. A
//     cursor is this node's and this run's: elsewhere it resumes with a
//     reset.
//
// # Limits
//
//   - Limits bounds what clients can make the registry hold: sessions,
//     instances (per session, per beat ip:port, per service, in all),
//     services per namespace, namespaces, watchers and metadata.
//   - A write past a limit fails with ErrLimit, naming the limit, and
//     changes nothing. A write that only replaces what is held (a
//     re-registration, a beat) is never refused.
//   - In a cluster every node checks the writes it takes against its whole
//     index; a peer's record past the per-publisher caps is refused whole
//     (a session's records hold one instance each: only its owner keeps
//     MaxInstancesPerSession). The nodes must share one Limits.
//
// # Time and concurrency
//
//   - Every deadline follows the configured clock. On a fake clock, a test
//     moves it and calls Internals().Settle, which returns once every
//     deadline that passed has been handled (registrytest's Advance does
//     both).
//   - Every method of Registry and Session is safe for concurrent use. A
//     Watcher's Next must be called from one goroutine at a time. Methods
//     that may block take a context first.
//   - The registry runs the housekeeper (leases, keep-alives, clean-ups),
//     the notifier (watch deliveries), the health writer with active
//     checks, and in cluster mode one goroutine that waits for readiness.
//     Its engines run their own. Close stops all of them and waits.
//   - The transport and the membership stay the caller's: close them after
//     the registry.
//   - Inside, the index is a core of plain code (core.go, core_replica.go,
//     core_driver.go): no goroutine, no clock, no I/O. The Registry holds
//     it as a named field and reaches it only through its methods. Every
//     change, a caller's write, a peer's record, a handed lease or a
//     deadline, is a call into it under the registry's lock, with the time
//     it starts from; the core then hands out what the change means as a
//     value (views to deliver, records to replicate, checks to re-target,
//     the next deadline), which the registry carries out before it
//     releases the lock, as etcd-io/raft's RawNode.Ready and Advance do.
//
// # Internals
//
// Registry carries what a host calls: its lifecycle (Start, Close, Done,
// Ready, WaitReady), writes (sessions, Register, Heartbeat, service
// definitions, patches, SetHealth), reads and watches, and the probes an
// operator's console or a health endpoint asks for (Stats, Counts,
// Explain, Owner, NodeID, Sessions). What only tests and diagnostics need is
// behind one accessor, Registry.Internals, so that it neither crowds the
// type a host holds nor reads as part of the registry's contract:
//
//   - Settle and FlushWatchers, the barriers a test calls after moving a
//     fake clock (registrytest's Advance and Settle call them);
//   - CheckConsistency, the walk of the index's invariants that registrytest
//     runs when a test ends;
//   - Replicator and HealthChecks, the engines the registry drives, for
//     their Stats (package registry/metrics) and for diagnostics (writing
//     through them bypasses the registry);
//   - CheckStatus, one instance's active-check status (Explain reports it
//     too).
//
// A new need of tests or tools goes there, not onto Registry.
//
// # Errors
//
// Errors match the sentinels in errors.go with errors.Is; invalid input
// matches model.ErrInvalid and names the field and the rule. The rule
// errors (ErrNotFound, ErrServiceExists, ErrServiceNotEmpty,
// ErrKindMismatch, ErrHealthChecked) are model's.
package registry
