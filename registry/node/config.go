package node

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/lni/vfs"
	"github.com/muster-io/muster/distro"
	"github.com/muster-io/muster/distro/gossip"
	"github.com/muster-io/muster/health"
	"github.com/muster-io/muster/health/mysqlcheck"
	"github.com/muster-io/muster/internal/cfgerr"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/raftstore"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/raftcp"
	"github.com/muster-io/muster/transport"
)

// Config configures a Node. Start from DefaultConfig; New copies it and
// never writes to the caller's value.
type Config struct {
	// NodeID names the node on the transport, in the membership, in
	// session IDs and in logs. Required; unique in the cluster.
	NodeID string
	// Dir holds the node's Raft data (Dir/raft, Dir/badger). Required with
	// Raft (RaftNodes, RaftMembers or JoinRaft); a restart reuses it.
	Dir string

	// TransportAddr is the host:port Muster's transport (Distro, forwarded
	// writes and Raft) listens on. Default "127.0.0.1:0": loopback, and
	// port 0 picks a free port (see Node.TransportAddr). Peers learn it
	// from the membership, so port 0 works across hosts too.
	TransportAddr string
	// AdvertiseAddr is the transport address peers dial, if it is not
	// the bound one (a wildcard listen address, NAT).
	AdvertiseAddr string
	// GossipAddr is the host:port memberlist binds (UDP and TCP). Default
	// "127.0.0.1:0" (see Node.GossipAddr). Unused with Peers.
	GossipAddr string
	// GossipAdvertiseAddr is the gossip host:port peers use, if it is not
	// the bound one.
	GossipAdvertiseAddr string
	// Seeds are gossip addresses of nodes to join at Start, and to re-join
	// while they are not members. One running node is enough; the node's
	// own address may be listed. The first node of a cluster has none.
	Seeds []string
	// Peers, instead of gossip, is a static membership: node ID →
	// transport address of every other node. There is no failure detection:
	// every peer counts as live, so a dead peer keeps the beat keys it owns
	// and its sessions are never orphaned. Use Seeds unless the membership
	// is managed by something else. Not allowed with Seeds.
	Peers map[string]string
	// Expect is the number of nodes in the cluster, this one included (as
	// Consul's bootstrap_expect): a node whose membership lists that many,
	// every other one loading too, is in a cold cluster and ready at once
	// instead of after the Load timing (distro.Config.ColdStartMembers).
	// 0 means: the static Peers and this node, or else the Raft members; set
	// it when the cluster has more nodes than Raft replicas, and keep it
	// current when the cluster grows (the Raft members only bootstrap: they do
	// not follow AddReplica). Too small a value lets nodes restarting
	// together, whose views lack the members holding state, be ready
	// empty. With neither, a starting node waits the Load timing.
	Expect int

	// RaftNodes bootstraps a new Raft group for persistent data: the node
	// IDs of its initial members, in the same order on every one of them;
	// replica i+1 is RaftNodes[i] (Raft runs over the transport, addressed
	// by node ID). NodeID must be among them. Ignored on a restart (Dir
	// holds the membership). Nil, with RaftMembers nil and without
	// JoinRaft, means no Raft: persistent data lives in memory and is
	// lost on Close.
	RaftNodes []string
	// RaftMembers is RaftNodes with the replica IDs chosen: replica ID →
	// node ID of every initial member (the same map on every one of
	// them), for a group whose IDs are not 1…n. Set RaftNodes or
	// RaftMembers, not both.
	RaftMembers map[uint64]string
	// ReplicaID is this node's Raft replica ID; 0 means the ID RaftNodes
	// or RaftMembers gives NodeID. Required with JoinRaft.
	ReplicaID uint64
	// JoinRaft starts this replica as a new member of a running group,
	// after a member added it (raftstore.Node.AddReplica). With it,
	// RaftNodes or RaftMembers, if set, name the running group's members:
	// until the joiner learns the membership from the leader, Raft traffic
	// claiming one of them is accepted only from that node
	// (raftstore.Config.JoinMembers).
	JoinRaft bool
	// DeploymentID identifies the cluster's Raft group: the same on every
	// member, unique among the clusters that can reach each other.
	// Required with Raft.
	DeploymentID uint64
	// SnapshotEntries: the Raft replica takes a snapshot (of metadata
	// only: the state is in Badger already) every SnapshotEntries applied
	// entries and compacts its log, so that a restart replays at most
	// about that many entries and the log's disk use stays bounded. A
	// replica too far behind the leader's compacted log gets the state
	// streamed. Zero: 10000 (raftstore's default). At least 16: without
	// snapshots the log grows without bound and every restart replays all
	// of it, so raftstore.NoSnapshots is refused here.
	SnapshotEntries uint64
	// CompactionOverhead entries of the log are kept behind each snapshot
	// (zero: 5000, raftstore's default), so that a replica that is a little behind (a
	// restart, a short partition) catches up from the log rather than by a
	// streamed copy of the whole state; more are kept while a stream is in
	// flight and for a while after it. Raise both for a large
	// write rate: a replica down for longer than CompactionOverhead
	// entries of writes needs a stream.
	CompactionOverhead uint64

	// Secret authenticates the nodes on the transport (at least 16 bytes,
	// shared by all); see transport.TCPConfig.Secret. Secret or TLS is
	// required unless Insecure.
	Secret []byte
	// TLS secures the transport (mutual TLS; the peer's certificate must
	// name its node ID); see transport.TCPConfig.TLS.
	TLS *tls.Config
	// GossipKey encrypts and authenticates memberlist's gossip (16, 24 or
	// 32 bytes, shared by all). Required with gossip unless Insecure.
	GossipKey []byte
	// GossipLabel, if set, labels the node's gossip (memberlist's Label):
	// packets and streams with another label, or none, are dropped. The
	// same on every node; an embedder's fixed name keeps its gossip apart
	// from other memberlist clusters on the network.
	GossipLabel string
	// Insecure allows a node without credentials: anyone who can reach
	// its ports joins the cluster. For tests: Validate refuses it unless
	// TransportAddr and GossipAddr are loopback addresses.
	Insecure bool

	// Timings are the protocol timings; DefaultConfig uses LAN(), tests and
	// demos on loopback Fast().
	Timings Timings

	// Registry is the base registry configuration (limits, TTLs, health
	// checks, ServeBeforeReady). The node builds its Replicator, Transport
	// and Store, which must be left unset; NodeID and Logger are the
	// node's, and SweepInterval and ForwardTimeout the Timings' when those
	// are set. Default registry.DefaultConfig().
	Registry registry.Config
	// Logger receives every component's logs, tagged node=NodeID once
	// (do not add it yourself). Nil discards.
	Logger *slog.Logger

	// WrapTransport, if set, wraps the node's transport before Distro and
	// Raft use it: a test's fault injector cuts their traffic. The Node
	// still closes the transport it created. A wrapper should also offer
	// transport.OrderedHandler (and transport.SizeLimiter) by passing them
	// on to the transport it wraps: without HandleOrdered, Raft's messages
	// are delivered unordered, which Raft survives but which slows it
	// under load.
	WrapTransport func(transport.Transport) transport.Transport
	// WrapGossipTransport, if set, wraps memberlist's network transport
	// (see gossip.Config.WrapTransport).
	WrapGossipTransport func(memberlist.Transport) memberlist.Transport
	// RaftFS, if set, is the file system under the Raft log
	// (raftstore.Config.FS; Badger stays on the operating system's): a
	// fault test's strict in-memory FS, which drops unsynced writes at a
	// simulated power loss. Nil is the operating system's.
	RaftFS vfs.FS
}

// Timings are the periods and timeouts of one node. All nodes of a cluster
// should use the same. Start from LAN or Fast and change what you need. As
// everywhere in the module, a zero field takes its default (LAN's, or the
// one its package derives from the fields set: distro's TombstoneTTL from
// Verify, raftstore's Propose and Read from RaftRTT; a zero Sweep or
// Forward leaves Registry's SweepInterval and ForwardTimeout), and
// "off" is the packages' named constants: distro.NoSyncDelay sends every
// change at once, raftstore.NoBatchWait turns the batcher's wait off.
type Timings struct {
	// Memberlist's failure detection and gossip (see
	// gossip.Config): a crashed node is detected after a few
	// probe intervals.
	ProbeInterval, ProbeTimeout  time.Duration
	SuspicionMult                int
	GossipInterval, PushPull     time.Duration
	GossipTCPTimeout, GossipDead time.Duration
	Rejoin, Leave                time.Duration
	// Distro (see distro.Config): SyncDelay merges changes, Verify is the
	// anti-entropy period, Orphan how long a dead node's sessions outlive
	// it, Load how long a starting node waits for a peer to load from
	// when none answers, Request bounds each request.
	SyncDelay, Verify, Orphan, Tombstone, Load, Request time.Duration
	// RaftRTT is Dragonboat's tick (an election takes about 10);
	// Propose and Read bound a write and a read index without a leader.
	RaftRTT, Propose, Read time.Duration
	// RaftBatchWait is how long the proposal batcher waits for the callers
	// it just answered to come back (raftstore.Config.BatchWait;
	// raftstore.NoBatchWait: off).
	RaftBatchWait time.Duration
	// ReconnectMin and ReconnectMax bound the transport's redial backoff.
	ReconnectMin, ReconnectMax time.Duration
	// CheckInterval, if not 0, is the shortest interval of the TCP health
	// checks (first checks within it, then every 1–2 of it); 0 keeps
	// health.DefaultConfig's (Nacos's).
	CheckInterval time.Duration
	// Sweep caps the registry's housekeeping sleep; Forward bounds a
	// forwarded write.
	Sweep, Forward time.Duration
}

// LAN returns the packages' defaults: memberlist's LAN profile (a crashed
// node is detected in about 5 s), Nacos's Distro timings (a starting node
// that finds nobody to load from waits Load = 3 s), a 50 ms Raft tick.
func LAN() Timings {
	ml := gossip.DefaultConfig()
	dc := distro.DefaultConfig()
	rc := raftstore.DefaultConfig()
	tc := transport.DefaultTCPConfig()
	reg := registry.DefaultConfig()
	return Timings{
		ProbeInterval: ml.ProbeInterval, ProbeTimeout: ml.ProbeTimeout, SuspicionMult: ml.SuspicionMult,
		GossipInterval: ml.GossipInterval, PushPull: ml.PushPullInterval,
		GossipTCPTimeout: ml.TCPTimeout, GossipDead: ml.GossipToTheDeadTime,
		Rejoin: ml.RejoinInterval, Leave: ml.LeaveTimeout,
		SyncDelay: dc.SyncDelay, Verify: dc.VerifyInterval, Orphan: dc.OrphanTimeout,
		Tombstone: dc.TombstoneTTL, Load: dc.LoadTimeout, Request: dc.RequestTimeout,
		RaftRTT: time.Duration(rc.RTTMillisecond) * time.Millisecond, Propose: rc.ProposeTimeout, Read: rc.ReadTimeout,
		RaftBatchWait: rc.BatchWait,
		ReconnectMin:  tc.ReconnectMin, ReconnectMax: tc.ReconnectMax,
		Sweep: reg.SweepInterval, Forward: reg.ForwardTimeout,
	}
}

// withDefaults returns t with each zero membership field and a zero
// RaftRTT set to LAN's: the gossip configuration and the Raft tick are
// built here, not defaulted by their packages. The other zero fields pass
// through, so that each package derives its own default from the fields
// that are set (distro's TombstoneTTL from Verify, the transport's
// ReconnectMax from ReconnectMin, raftstore's Propose and Read from the
// tick), and a zero Sweep or Forward leaves Registry's setting.
func (t Timings) withDefaults() Timings {
	d := LAN()
	for _, f := range []struct{ v, def *time.Duration }{
		{&t.ProbeInterval, &d.ProbeInterval}, {&t.ProbeTimeout, &d.ProbeTimeout},
		{&t.GossipInterval, &d.GossipInterval}, {&t.PushPull, &d.PushPull},
		{&t.GossipTCPTimeout, &d.GossipTCPTimeout}, {&t.GossipDead, &d.GossipDead},
		{&t.Rejoin, &d.Rejoin}, {&t.Leave, &d.Leave},
		{&t.RaftRTT, &d.RaftRTT},
	} {
		cfgerr.Default(f.v, *f.def)
	}
	cfgerr.Default(&t.SuspicionMult, d.SuspicionMult)
	return t
}

// Fast returns short timings for nodes on one host (tests, demos): 200 ms
// probes (a crash is detected in about a second), 20 ms sync delay, 1 s
// verify, 2 s orphans, 2 s load, a 10 ms Raft tick, 200 ms checks.
func Fast() Timings {
	p := 200 * time.Millisecond
	return Timings{
		ProbeInterval: p, ProbeTimeout: p / 2, SuspicionMult: 2,
		GossipInterval: p / 5, PushPull: 5 * p, GossipTCPTimeout: p, GossipDead: 5 * p,
		Rejoin: 2 * p, Leave: p,
		SyncDelay: 20 * time.Millisecond, Verify: time.Second, Orphan: 2 * time.Second,
		Tombstone: 10 * time.Second, Load: 2 * time.Second, Request: time.Second,
		RaftRTT: 10 * time.Millisecond, Propose: 2 * time.Second, Read: 2 * time.Second,
		RaftBatchWait: raftstore.DefaultConfig().BatchWait,
		ReconnectMin:  20 * time.Millisecond, ReconnectMax: 500 * time.Millisecond,
		CheckInterval: p, Sweep: 100 * time.Millisecond, Forward: time.Second,
	}
}

// DefaultConfig returns the defaults: loopback addresses with free ports,
// LAN timings, registry.DefaultConfig, and no credentials: NodeID, Secret
// or TLS, GossipKey (with gossip), and Dir and DeploymentID (with Raft)
// still have to be set, or Validate refuses the config.
func DefaultConfig() Config {
	rc := raftstore.DefaultConfig()
	return Config{
		TransportAddr:      "127.0.0.1:0",
		GossipAddr:         "127.0.0.1:0",
		SnapshotEntries:    rc.SnapshotEntries,
		CompactionOverhead: rc.CompactionOverhead,
		Timings:            LAN(),
		Registry:           nodeRegistryConfig(),
	}
}

// minSnapshotEntries is the smallest SnapshotEntries Validate accepts.
const minSnapshotEntries = 16

// nodeRegistryConfig is registry.DefaultConfig with the event journal on
// (Explain): a cluster's operators want the history of an instance.
func nodeRegistryConfig() registry.Config {
	c := registry.DefaultConfig()
	c.HistoryEvents = registry.DefaultHistoryEvents
	return c
}

// raft reports whether the node runs a Raft replica.
func (c *Config) raft() bool { return len(c.RaftNodes) > 0 || len(c.RaftMembers) > 0 || c.JoinRaft }

// raftMembers is the initial Raft membership, replica ID → node ID:
// RaftMembers, or RaftNodes numbered from 1.
func (c *Config) raftMembers() map[uint64]string {
	if len(c.RaftNodes) == 0 {
		return c.RaftMembers
	}
	m := make(map[uint64]string, len(c.RaftNodes))
	for i, id := range c.RaftNodes {
		m[uint64(i+1)] = id
	}
	return m
}

// replicaID is ReplicaID, or the ID the initial membership gives NodeID
// (0 if none).
func (c *Config) replicaID() uint64 {
	if c.ReplicaID != 0 {
		return c.ReplicaID
	}
	members := c.raftMembers()
	for _, id := range slices.Sorted(maps.Keys(members)) {
		if members[id] == c.NodeID {
			return id
		}
	}
	return 0
}

// Validate reports every missing or invalid field, each with its rule, in
// one error matching ErrInvalidConfig; it also validates the transport's and
// the membership's configurations built from c. The Raft and registry
// configurations are validated by New.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, rule string) { errs = append(errs, fmt.Errorf("%s %s", field, rule)) }
	if c.NodeID == "" {
		bad("NodeID", "must be set")
	}
	if len(c.Secret) == 0 && c.TLS == nil && !c.Insecure {
		bad("Secret", "or TLS must be set (the transport authenticates peers with one of them), or Insecure: true")
	}
	if c.Insecure {
		for field, addr := range map[string]string{"TransportAddr": c.TransportAddr, "GossipAddr": c.GossipAddr} {
			if addr == "" && field == "GossipAddr" {
				continue // no gossip (static Peers)
			}
			if host, _, err := net.SplitHostPort(addr); err == nil && !isLoopback(host) {
				bad("Insecure", fmt.Sprintf("is for tests on loopback only, but %s is %q: set credentials to listen elsewhere", field, addr))
			}
		}
	}
	if host, _, err := net.SplitHostPort(c.TransportAddr); err != nil {
		bad("TransportAddr", "must be host:port (port 0 for any)")
	} else if ip := net.ParseIP(host); (host == "" || ip != nil && ip.IsUnspecified()) && c.AdvertiseAddr == "" {
		bad("AdvertiseAddr", "must be set when TransportAddr is a wildcard: peers dial the address the node advertises")
	}
	gossip := len(c.Peers) == 0
	if gossip && len(c.GossipKey) == 0 && !c.Insecure {
		bad("GossipKey", "must be set (16, 24 or 32 bytes: memberlist's gossip key), or Insecure: true")
	}
	if len(c.Peers) > 0 && len(c.Seeds) > 0 {
		bad("Peers", "and Seeds are exclusive: a static membership has no gossip")
	}
	if c.Expect < 0 {
		bad("Expect", "must be >= 0 (0: from Peers or RaftMembers)")
	}
	for id, addr := range c.Peers {
		if _, _, err := net.SplitHostPort(addr); err != nil || id == "" {
			bad("Peers", fmt.Sprintf("must map node IDs to host:port, got %q → %q", id, addr))
			break
		}
	}
	if gossip {
		if _, _, err := net.SplitHostPort(c.GossipAddr); err != nil {
			bad("GossipAddr", "must be host:port (port 0 for any)")
		}
	}
	if c.raft() {
		if c.Dir == "" {
			bad("Dir", "must be set with Raft (RaftNodes, RaftMembers or JoinRaft)")
		}
		if c.DeploymentID == 0 {
			bad("DeploymentID", "must be set (≥ 1) with Raft: the same on every member, unique to this cluster")
		}
		if len(c.RaftNodes) > 0 && len(c.RaftMembers) > 0 {
			bad("RaftNodes", "and RaftMembers are exclusive: set one (RaftNodes numbers the replicas from 1)")
		}
		seen := make(map[string]bool, len(c.RaftNodes))
		for _, id := range c.RaftNodes {
			if id == "" || seen[id] {
				bad("RaftNodes", fmt.Sprintf("must list distinct, non-empty node IDs, got %q", c.RaftNodes))
				break
			}
			seen[id] = true
		}
		if c.replicaID() == 0 {
			bad("ReplicaID", "must be set, or RaftNodes or RaftMembers must give NodeID a replica ID")
		}
		if c.SnapshotEntries != 0 && c.SnapshotEntries < minSnapshotEntries || c.SnapshotEntries == raftstore.NoSnapshots {
			bad("SnapshotEntries", fmt.Sprintf("must be at least %d (DefaultConfig: %d), got %d: without snapshots the Raft log grows without bound and every restart replays all of it", minSnapshotEntries, raftstore.DefaultConfig().SnapshotEntries, c.SnapshotEntries))
		}
	}
	if c.Registry.Replicator != nil || c.Registry.Transport != nil || c.Registry.Store != nil {
		bad("Registry", "must leave Replicator, Transport and Store unset: the node builds them")
	}
	base := c.baseRegistryConfig(nil) // the engines, which need the transport, are checked at Start
	base.NodeID = "node"
	if err := base.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("Registry: %w", err))
	}
	if len(errs) == 0 {
		tc, mc := c.tcpConfig(), c.memberlistConfig("127.0.0.1:1")
		if err := tc.Validate(); err != nil {
			errs = append(errs, err)
		}
		if gossip {
			if err := mc.Validate(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return cfgerr.Join(ErrInvalidConfig, errs...)
}

// tcpConfig is the transport's configuration (Resolve is set by Start).
func (c *Config) tcpConfig() transport.TCPConfig {
	tc := transport.DefaultTCPConfig()
	tc.NodeID, tc.ListenAddr, tc.AdvertiseAddr = c.NodeID, c.TransportAddr, c.AdvertiseAddr
	tc.Secret, tc.TLS, tc.Insecure = c.Secret, c.TLS, c.Insecure
	t := c.Timings.withDefaults()
	tc.ReconnectMin, tc.ReconnectMax = t.ReconnectMin, t.ReconnectMax
	tc.Clock = c.Registry.Clock
	return tc
}

// memberlistConfig is the membership's configuration, carrying the
// transport address peers dial.
func (c *Config) memberlistConfig(transportAddr string) gossip.Config {
	t := c.Timings.withDefaults()
	mc := gossip.DefaultConfig()
	mc.NodeID, mc.TransportAddr, mc.Seeds = c.NodeID, transportAddr, slices.Clone(c.Seeds)
	if host, port, err := net.SplitHostPort(c.GossipAddr); err == nil {
		mc.BindAddr = host
		mc.BindPort = atoiOr(port, 0)
	}
	if host, port, err := net.SplitHostPort(c.GossipAdvertiseAddr); err == nil {
		mc.AdvertiseAddr, mc.AdvertisePort = host, atoiOr(port, 0)
	}
	mc.SecretKey, mc.Insecure, mc.Label = c.GossipKey, c.Insecure, c.GossipLabel
	mc.ProbeInterval, mc.ProbeTimeout, mc.SuspicionMult = t.ProbeInterval, t.ProbeTimeout, t.SuspicionMult
	mc.GossipInterval, mc.PushPullInterval = t.GossipInterval, t.PushPull
	mc.TCPTimeout, mc.GossipToTheDeadTime = t.GossipTCPTimeout, t.GossipDead
	mc.RejoinInterval, mc.LeaveTimeout = t.Rejoin, t.Leave
	mc.WrapTransport = c.WrapGossipTransport
	mc.Clock = c.Registry.Clock
	return mc
}

// baseRegistryConfig is the registry's configuration without its engines.
func (c *Config) baseRegistryConfig(log *slog.Logger) registry.Config {
	t := c.Timings.withDefaults()
	cfg := c.Registry
	cfg.NodeID, cfg.Logger = c.NodeID, log
	if t.Sweep > 0 {
		cfg.SweepInterval = t.Sweep
	}
	if t.Forward > 0 {
		cfg.ForwardTimeout = t.Forward
	}
	if cfg.HealthChecks != nil {
		hc := *cfg.HealthChecks
		if t.CheckInterval > 0 {
			hc.FirstIntervalMin, hc.FirstIntervalMax = t.CheckInterval/2, t.CheckInterval
			hc.TCPInterval.Min, hc.TCPInterval.Max = t.CheckInterval, 2*t.CheckInterval
		}
		cfg.HealthChecks = &hc
	}
	return cfg
}

// registryConfig is the registry's configuration over tr and members. The
// replicator the registry builds is handed to keep; cp is the Raft store,
// nil without Raft; mc is the MySQL checker the node made for the health
// checks (nil if Registry.HealthChecks is nil or names its own), to close
// after the registry.
func (c *Config) registryConfig(tr transport.Transport, members distro.Membership, log *slog.Logger, keep func(*distro.Replicator)) (cfg registry.Config, cp *raftcp.Store, mc *mysqlcheck.Checker, err error) {
	t := c.Timings.withDefaults()
	cfg = c.baseRegistryConfig(log)
	if hc := cfg.HealthChecks; hc != nil && hc.Checkers[model.CheckMySQL] == nil {
		if mc, err = mysqlcheck.New(mysqlcheck.Config{Clock: c.Registry.Clock, Logger: log}); err != nil {
			return cfg, nil, nil, err
		}
		hc.Checkers = maps.Clone(hc.Checkers)
		if hc.Checkers == nil {
			hc.Checkers = make(map[model.CheckType]health.Checker, 1)
		}
		hc.Checkers[model.CheckMySQL] = mc
	}

	dc := distro.DefaultConfig()
	dc.Transport, dc.Membership = tr, members
	dc.SyncDelay, dc.VerifyInterval, dc.OrphanTimeout = t.SyncDelay, t.Verify, t.Orphan
	dc.TombstoneTTL, dc.LoadTimeout, dc.RequestTimeout = t.Tombstone, t.Load, t.Request
	dc.ColdStartMembers = c.expect()
	distroFunc := registry.Distro(dc)
	cfg.Replicator = func(env registry.Env, records distro.Store) (registry.Replicator, error) {
		d, err := distroFunc(env, records)
		if err == nil {
			keep(d.(*distro.Replicator))
		}
		return d, err
	}
	cfg.Transport = tr

	if c.raft() {
		rc := raftstore.DefaultConfig()
		rc.ReplicaID, rc.DeploymentID, rc.Dir = c.replicaID(), c.DeploymentID, c.Dir
		rc.Transport, rc.Join = tr, c.JoinRaft
		if !c.JoinRaft {
			rc.InitialMembers = maps.Clone(c.raftMembers())
		} else {
			rc.JoinMembers = maps.Clone(c.raftMembers())
		}
		rc.SnapshotEntries, rc.CompactionOverhead = c.SnapshotEntries, c.CompactionOverhead
		rc.RTTMillisecond = uint64(max(t.RaftRTT.Milliseconds(), 1))
		rc.ProposeTimeout, rc.ReadTimeout = t.Propose, t.Read
		rc.BatchWait = t.RaftBatchWait
		rc.FS = c.RaftFS
		cp = raftcp.New(rc) // Clock nil: the registry's
		cfg.Store = cp.Open
	}
	return cfg, cp, mc, nil
}

// expect is the cluster size a cold start waits for: Expect, or else the
// static peers and this node, or else the Raft members; 0 if none is known.
func (c *Config) expect() int {
	switch {
	case c.Expect > 0:
		return c.Expect
	case len(c.Peers) > 0:
		n := len(c.Peers)
		if _, ok := c.Peers[c.NodeID]; !ok {
			n++
		}
		return n
	}
	return len(c.raftMembers())
}

// staticMembers is the Peers list as members, sorted by ID.
func (c *Config) staticMembers() []distro.Member {
	ids := make([]string, 0, len(c.Peers))
	for id := range c.Peers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	out := make([]distro.Member, 0, len(ids))
	for _, id := range ids {
		out = append(out, distro.Member{ID: id, Addr: c.Peers[id]})
	}
	return out
}

func atoiOr(s string, def int) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return def
	}
	return n
}

// isLoopback reports whether host names a loopback address.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
