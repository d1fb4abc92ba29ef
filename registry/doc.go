// Package registry is Muster's engine: the service registry that host
// programs embed. It keeps an in-memory index of services and their
// instances and answers queries and watches from it.
//
// # Lifecycle
//
//	reg, err := registry.New(registry.DefaultConfig()) // validates, starts nothing
//	err = reg.Start(ctx)                                // goroutines start here
//	defer reg.Close()                                   // idempotent; waits for them
//
// Config carries every dependency, each with a safe default when nil: the
// clock (github.com/jonboulle/clockwork; tests pass a fake one and advance
// it), the *slog.Logger, and the random source. Nothing is global: two
// registries in one process never see each other.
//
// # Standalone and cluster modes
//
// With no Distro and no Raft configuration the registry runs standalone: one
// node, and the persistent data (service definitions, persistent instances,
// patches) is kept in memory and lost on Close. The durable standalone
// setup is Raft without Distro: a single-replica group (InitialMembers of
// one, over a transport such as a one-node transport.MemNetwork, which
// opens no port) keeps the persistent data on disk across restarts, and is
// ready in about half a second (its election).
//
// Package registry/node assembles a cluster node in one call: transport,
// membership, Distro, Raft and checks, closed in the right order.
//
// Config.Distro makes it one node of a cluster (package distro). Every
// publisher (session or beat ip:port) is replicated, owned by one node (a
// beat publisher as one record, a session as one record per instance, so
// that a change costs what changed): a session by the node it was opened on, a beat publisher by the
// rendezvous-hash owner of its ip:port among the live members. Only the
// owner changes the record and runs its leases; every change is pushed to
// the other nodes, whose copies are read-only. A Register, Heartbeat or
// Deregister of a beat instance that reaches another node is forwarded to
// the owner over the transport (ForwardAttempts tries, with backoff, while
// ownership moves), so clients may talk to any node. A node that closes
// ends its sessions and sends their removal to its peers first
// (HandoverTimeout). When a node dies its sessions' instances are removed
// from the others after the orphan timeout,
// and its beat publishers are adopted by their new owners, which continue
// their leases from the last renewal they knew. When a key moves because the
// membership changed (a partition heals and the key returns to its owner),
// the node that ran its lease until then hands it to the new owner, which
// keeps the newer last beat of the two: an instance its client kept beating
// on the other side stays, healthy (one deregistered on the new owner within
// a lease period stays gone). A node that starts loads
// the records of its peers first: until then Query and Watch fail with
// ErrNotReady (Config.ServeBeforeReady lifts that), so a restarting node
// never serves empty lists; beat writes that reach it as the owner fail
// with ErrNotReady too, since it may not know yet the record its previous
// run left for the ip:port (clients retry, as Nacos clients do). The first
// node of a new cluster finds nobody to load from and waits
// distro.Config.LoadTimeout (3 s) before it is ready; nodes of a cold
// cluster, all starting empty together, are ready as soon as each sees the
// cluster size it expects (distro.Config.ColdStartMembers) and has heard from
// every other member that it is loading too.
// Watchers are node-local, as in Nacos: a change made on any node reaches
// the watchers of every node through replication.
//
// Config.Raft keeps the persistent data in a Raft group (package
// raftstore): writes are proposed, decided by the replicated state machine
// on every node alike, and mirrored into each node's index from its change
// feed; the call returns once the change is visible on the node that took
// it. A Query with Linearizable set first waits for a Raft read index, so
// it sees every write acknowledged anywhere before it began. Without a
// quorum, writes fail with ErrNoLeader after a bounded wait and reads go on
// from the local copy. Readiness also waits until the node has applied what
// was committed when it started. The rules that involve ephemeral data
// (kind of a service used by ephemeral instances, a patch of an ephemeral
// instance) are checked on the node that takes the write; those on
// persistent data alone are checked by the state machine.
//
// Config.HealthChecks (on in DefaultConfig) probes persistent instances
// with TCP, HTTP or MySQL checks (package health). Each node probes the
// instances whose ip:port it owns (every one when standalone; with Raft
// but no Distro, the Raft leader probes them all; with Distro but no Raft,
// where persistent data is not replicated, each node probes what it
// holds), starting from
// the stored health so that a handover neither leaves a gap nor flips an
// instance twice. Only transitions are written, through the store (Raft in
// cluster mode); a write that fails for lack of a leader is retried with
// backoff until it is stored or moot. CheckStatus shows a node's view of an
// instance's checks: last result, latency, reason, flap damping.
//
// # Data
//
// Services live in namespaces and groups (see package model). A service is
// ephemeral or persistent, fixed by its first registration or its creation
// (ErrKindMismatch otherwise).
//
// Ephemeral instances belong to a publisher, which keeps them alive:
//
//   - A Session (OpenSession) stands for a connection the host manages. Its
//     instances live until the host closes it, or until its optional TTL
//     lapses without KeepAlive. Closing it removes all of its instances at
//     once, with one revision change per affected service. Its labels
//     (client IP, SDK version, application: the host's choice) and those
//     of the node's other sessions are listed by Sessions.
//   - Without a session, Register publishes the instance through the beat
//     publisher of its ip:port, and heartbeats keep it alive, as Nacos 1.x
//     clients do: unhealthy after 15 s without a beat, deleted after 30 s,
//     both overridable per instance through the preserved metadata keys
//     (model.MetaHeartBeatTimeout, model.MetaIPDeleteTimeout). A beat makes
//     an unhealthy instance healthy again. Heartbeat takes the instance's
//     key and fails with ErrNotFound when the registry no longer holds it
//     (Nacos's "not found" that makes a client register again);
//     HeartbeatInstance carries the whole instance, registers it again
//     itself, and says whether it did (BeatResult.Registered).
//
// Several publishers may publish the same instance key: the instance stays
// while any of them does (a client that reconnects before its old session
// ends does not flap).
//
// Persistent instances (Ephemeral=false) are stored until Deregister. Their
// health is never a reason to delete them; it is set by health checks or, for
// clusters whose check type is NONE, by SetHealth.
//
// Operators' overrides (PatchInstance: weight, enabled, metadata entries) are
// stored apart from what the publisher registered, win when the instance is
// read, survive re-registration, and are dropped PatchTTL (60 s) after the
// instance is gone. Services with neither instances nor a stored definition
// are removed after EmptyServiceTTL (60 s).
//
// # Reads
//
// Query returns a *model.ServiceView: the instances in a stable order, after
// the query's filters (clusters, healthy only, and by default enabled only),
// with the protection threshold applied as Nacos does — when the healthy
// share of the cluster- and enabled-filtered instances is at or below the
// service's ProtectThreshold, every instance is returned and served as
// healthy, the view is flagged Protected, and the real health is kept in
// RealHealth. A HealthyOnly query under protection therefore returns every
// instance (Nacos 1.x did the same; Nacos 2.x never protects such queries,
// which defeats the purpose of protection).
//
// Views are immutable and shared: the registry builds a view once per
// revision of a service and query shape, and every reader of that revision
// gets the same pointer. Querying an unchanged service costs a map lookup
// and two atomic loads, with no allocation. Revisions increase with every
// change of a service and never repeat on a node, even across a delete and
// a re-creation.
//
// SelectOne picks one instance at random, weighted by Weight, among those
// served healthy, enabled and with a positive weight.

// GetInstance returns one instance by its key, as the unfiltered view
// (disabled instances included) serves it. ListServices pages through a
// namespace's services, filtered by group and by substrings of the name and
// the group (Nacos's catalog search).
//
// Watch returns a Watcher whose Next delivers the newest view of a query and
// the typed delta (added, removed, updated instances) against the previous
// delivery. Delivery never blocks the registry: a slow watcher skips
// intermediate views. A watcher ends when its context ends, when it is
// closed, or when the registry closes. WatchServices watches the list of the services
// of a namespace in the same way: the newest sorted list, and the services
// added and removed since the previous delivery. Both kinds count against
// Limits.MaxWatchers.
//
// # Limits
//
// Config.Limits bounds what the clients of the embedding host can make the
// registry hold: open sessions, instances per session, per beat ip:port,
// per service and in all, services per namespace, namespaces, open
// watchers, and the entries and characters of each metadata set (whose
// limits have hard ceilings that Validate enforces). The defaults
// (DefaultLimits) are far above what real deployments use. A write past a
// limit fails with an error matching ErrLimit that names the limit and its
// value, and changes nothing; a write that only replaces what is held
// (a re-registration, a beat) is never refused. In a cluster, every node
// checks the writes it takes against its index, which holds the whole
// cluster's data, and a publisher record from a peer with more instances
// than the per-publisher caps is refused whole before it is decoded (a
// session's instance records are one instance each: its owner keeps
// MaxInstancesPerSession); the nodes must share one Limits. See Limits for the cost of each unit.
//
// Only current members of the Distro membership may forward writes: the
// owner refuses any other transport peer with ErrNotMember.
//
// # Time
//
// Every deadline follows the configured clock. On a fake clock, a test
// moves the clock and calls Tick, which returns once every deadline that
// passed has been handled (registrytest does both in Advance).
//
// # Concurrency
//
// Every method of Registry and Session is safe for concurrent use. A
// Watcher's Next must be called from one goroutine at a time. Methods that
// may block take a context first. The registry runs the housekeeper
// (leases, keep-alives and clean-ups, driven by the clock) and the notifier
// (watch deliveries); with active checks, the health writer; in cluster
// mode, one goroutine that waits for readiness. The replicator, the raft
// store and the health scheduler it creates run their own, and Close stops
// all of them and waits. The transport and the membership given in
// Config.Distro stay the caller's: close them after the registry.
//
// # Errors
//
// Errors match the sentinels in errors.go with errors.Is; invalid input
// matches model.ErrInvalid and names the field and the rule.
package registry
