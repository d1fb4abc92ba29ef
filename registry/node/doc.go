// Package node assembles one cluster node of Muster in one call: Muster's
// TCP transport, the membership (memberlist, or a static peer list),
// Distro, a Raft replica of the persistent data (Dragonboat on Badger,
// over the same transport) and the health checks, around a
// registry.Registry.
//
//	cfg := node.DefaultConfig()
//	cfg.NodeID, cfg.Dir = "n1", "/var/lib/muster"
//	cfg.TransportAddr, cfg.GossipAddr = "10.0.0.1:7001", "10.0.0.1:7946"
//	cfg.Seeds = []string{"10.0.0.2:7946", "10.0.0.3:7946"}
//	cfg.Secret, cfg.GossipKey = secret, gossipKey // credentials: required
//	cfg.RaftNodes = []string{"n1", "n2", "n3"} // replicas 1, 2, 3
//	cfg.DeploymentID = 1 // the same on every node, unique to the cluster
//	n, err := node.Start(ctx, cfg) // transport, membership, registry: started
//	if err != nil { ... }
//	defer n.Close()                // registry, then membership, then transport
//	err = n.WaitReady(ctx)         // loaded from the peers, Raft caught up
//	reg := n.Registry()
//
// # Addresses and ports
//
// Both addresses default to 127.0.0.1 with port 0: the system picks free
// ports, which TransportAddr and GossipAddr return once started. Peers
// learn a node's transport address from the membership (it travels in the
// memberlist meta), and Raft addresses are node IDs on the transport, so
// only the gossip seeds must be known in advance: one running node's
// GossipAddr is enough. The transport resolves node IDs through the
// membership inside the node; there is nothing to wire.
//
// A restarted node should come back on the gossip address it had
// (Node.GossipAddr of its first run, as GossipAddr): memberlist ties a
// node's name to its address and refuses the name at another one while
// the old entry is remembered. examples/cluster does so.
//
// # Security
//
// DefaultConfig is secure and incomplete: Validate refuses a config without
// transport credentials (Secret or mutual TLS) and, with gossip, without a
// GossipKey, unless Insecure is set (tests on loopback only). Raft always
// runs over the authenticated transport. Validate names every missing field
// at once.
//
// # Lifecycle
//
// Start brings up the transport, then the membership (joining the seeds),
// then the registry (Distro loads the peers' data; Raft starts or restarts
// from Dir). The node is ready once the registry is (Ready, WaitReady): a
// restarting node never serves before it has loaded. Close stops in the
// opposite order — the registry first, handing this node's sessions over
// while the network is up, then the membership (a leave is broadcast), then
// the transport — and waits for every goroutine. Kill stops as a crash
// would (network first, nothing handed over), for failure tests and demos.
//
// # Timings
//
// LAN (the default) is the packages' own defaults; Fast suits nodes on one
// host. A starting node that finds no peer to load from waits
// Timings.Load before it is ready as the first node of a cluster.
//
// # Hooks
//
// WrapTransport and WrapGossipTransport wrap the node's transport and
// memberlist's network transport, for fault injection, and RaftFS puts
// the Raft log on another file system (a strict in-memory one drops
// unsynced writes at a simulated power loss: bench/faultlab); Transport,
// Membership, Replicator and Raft expose what the node runs.
//
// # Engines
//
// The node builds the registry's engines (registry.Config's Replicator,
// Transport and Store: they must be left unset in Config.Registry): a
// distro.Replicator over its transport and membership (registry.Distro), a
// Raft store with RaftNodes, RaftMembers or JoinRaft (package
// registry/raftcp), and, when health checks are on and name no MySQL
// checker, a health/mysqlcheck checker, which it closes after the
// registry.
//
// # Raft
//
// RaftNodes lists the node IDs of the Raft group's first members, each
// once, in the same order on every node: replica i+1 is RaftNodes[i], and
// a node finds its own replica ID there (RaftMembers, replica ID → node
// ID, is for IDs chosen otherwise). SnapshotEntries and
// CompactionOverhead are the replica's snapshot settings: a snapshot every
// SnapshotEntries applied entries (what a restart replays at most), and
// CompactionOverhead entries of log kept behind it (how far behind a
// replica may be and still catch up from the log rather than by a
// streamed copy of the state). DefaultConfig has raftstore's 10000 and
// 5000; Validate refuses fewer than 16 and 1.
package node
