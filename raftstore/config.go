package raftstore

import (
	"fmt"
	"log/slog"
	"maps"
	"net"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/vfs"
	"github.com/muster-io/muster/internal/cfgerr"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/transport"
)

// Config configures a Node. Set the required fields (ReplicaID, DeploymentID, Dir,
// InitialMembers or Join, and Transport or RaftAddress with TLS); every other field left zero
// takes its default (DefaultConfig), as everywhere in this module, and what can be turned off
// says how (NoSnapshots, NoBatchWait).
type Config struct {
	// ReplicaID is this replica's ID in the shard, ≥ 1. A removed ID can
	// never be reused.
	ReplicaID uint64
	// ShardID is the Raft shard (default 1).
	ShardID uint64
	// DeploymentID identifies the cluster: the same on every member, and
	// different from every other Dragonboat cluster that can reach these
	// addresses (Dragonboat drops traffic of another deployment). It must
	// be set (≥ 1); there is no default, since 1 is what every deployment
	// that left it unset shares. It is frozen into Dir: a restart must use
	// the same value.
	DeploymentID uint64
	// RaftAddress is the host:port Dragonboat listens on, or with Transport
	// set this node's ID on that transport. It is frozen into Dir: a restart
	// must use the same address, so a Dir made without Transport cannot be
	// reused with it (Dragonboat refuses to start).
	RaftAddress string
	// Dir holds Dragonboat's data (Dir/raft) and Badger's (Dir/badger). A
	// restart reuses it; two nodes never share it.
	Dir string
	// InitialMembers (replica ID → RaftAddress) bootstraps a new shard; the
	// same map on every initial member. Ignored on restart (Dir holds the
	// membership). Empty with Join to join an existing shard, after a
	// member called AddReplica for this node.
	InitialMembers map[uint64]string
	// Join starts this replica as a new member of a running shard.
	Join bool
	// JoinMembers, with Join, are the running shard's members the host
	// knows (replica ID → RaftAddress, a node ID with Transport). Until the
	// joining replica has learnt the shard's membership from its leader,
	// Raft traffic over Transport that claims one of these replicas is
	// passed on only from that node: another member cannot pose as the
	// leader to a joiner. A replica not listed is bound to the first
	// authenticated node that sends as it.
	JoinMembers map[uint64]string
	// RTTMillisecond is Dragonboat's tick (default 50; tests use 5–10).
	// ElectionRTT and HeartbeatRTT count ticks (defaults 10 and 1).
	RTTMillisecond uint64
	ElectionRTT    uint64
	HeartbeatRTT   uint64
	// SnapshotEntries: a (metadata-only, for the on-disk state machine)
	// snapshot every N applied entries, which lets the log be compacted
	// and lagging or joining replicas catch up by a streamed snapshot
	// (default 10000; NoSnapshots disables). CompactionOverhead entries are kept
	// behind a snapshot (default 5000), and more while a snapshot is being
	// streamed to a replica and for a while after, so that it can go on
	// from the log (see doc.go, Snapshots).
	SnapshotEntries    uint64
	CompactionOverhead uint64
	// ProposeTimeout bounds how long a Propose call waits, from its start,
	// for its command to be committed, retrying while there is no leader;
	// then ErrNoLeader (default 3 s).
	ProposeTimeout time.Duration
	// ReadTimeout bounds Barrier (and linearizable reads) the same way
	// (default 3 s).
	ReadTimeout time.Duration
	// MaxBatch caps the commands packed into one Raft entry by the proposal
	// batcher (default 256; 1 disables batching).
	MaxBatch int
	// BatchWait is how long the batcher keeps collecting, after an entry's
	// callers have their results, while fewer commands are queued than that
	// entry answered (plus those queued then): callers that issue their
	// next command as soon as the last returns then share one entry instead
	// of splitting into cohorts that take turns (default 1 ms; NoBatchWait, or any negative
	// value, proposes whatever is queued at once). It is real time, as Dragonboat is. A
	// command never waits longer than BatchWait for the entry it goes in,
	// and one that arrives after the window goes out at once.
	BatchWait time.Duration
	// SyncCommitIndex writes every change of the commit index to the Raft
	// log synchronously, as Dragonboat does by itself. By default a change
	// of the commit index alone waits for the replica's next write (entries,
	// a term or vote, a snapshot record, Close): Raft does not need it on
	// disk, and it saves about half of a follower's fsyncs under load. See
	// "The commit index" in doc.go.
	SyncCommitIndex bool
	// Listener receives the change feed (nil ignores it). See Listener for
	// its concurrency contract.
	Listener Listener
	// Logger receives the node's logs and Badger's (nil discards).
	// Dragonboat's own logs are discarded: see doc.go.
	Logger *slog.Logger
	// Limits are the validation limits of commands.
	Limits model.Limits
	// Clock timestamps proposals for Stats.ProposeLatency (nil is the real
	// clock). Dragonboat runs on real time, and so do the bounded waits and
	// the pause between their attempts.
	Clock clockwork.Clock

	// TLS turns on Dragonboat's mutual TLS on its own TCP transport (used
	// when Transport is nil): every node presents a certificate from the
	// CA and checks its peer's; a client checks that the server's
	// certificate names the host of the RaftAddress it dials (a SAN DNS
	// name or IP). That is all it checks: Dragonboat hands a received
	// batch to Raft without the connection it came on, so no replica ID
	// is bound to a certificate, and any certificate from the CA can act
	// as any replica (a holder of one claiming a member's replica ID makes
	// the members panic). Validate therefore refuses TLS unless
	// TLSAnyReplica says so; Transport is the mode that binds every
	// replica to its node's proven identity. Not allowed with Transport,
	// whose own security then applies.
	TLS *TLSFiles
	// TLSAnyReplica accepts TLS (Dragonboat's own TCP transport with its
	// mutual TLS) although it binds no replica ID to a certificate: every
	// holder of a certificate from the CA is trusted as every replica, and
	// the CA must issue certificates only to members. Default false:
	// carry Raft over Transport instead.
	TLSAnyReplica bool
	// Insecure allows Raft over Dragonboat's own TCP transport with neither
	// TLS nor Transport. Anyone who can reach RaftAddress can then join,
	// read and crash the cluster (a rogue NodeHost claiming a member's
	// replica ID makes the members panic). Tests and demos only.
	Insecure bool

	// FS, if set, is the file system under Dragonboat's data (Dir/raft:
	// the Raft log, its snapshot records and its flag files), passed to
	// Dragonboat as NodeHostConfig.Expert.FS; Badger's data (Dir/badger)
	// stays on the operating system's. Nil is the operating system's. It
	// is for fault tests: on a strict in-memory FS (vfs.NewStrictMem) a
	// test drops every write that was not synced, as a power loss does,
	// and restarts the Node on what is left (bench/faultlab). Dragonboat
	// accepts only a *vfs.MemFS (vfs.NewMem, vfs.NewStrictMem) or a
	// *vfs.ErrorFS (vfs.Wrap, whose Injector can also act on a sync), and
	// panics on any other type, so Validate refuses it. The directories of
	// abandoned snapshot streams are removed from the operating system's
	// file system only.
	FS vfs.FS

	// Transport, if set, carries the Raft messages and snapshots over this
	// Muster transport (kinds KindRaftMessages and KindRaftChunk) instead of
	// Dragonboat's own TCP transport: they share the connection Distro
	// uses, its shared-secret handshake or TLS, and whatever wraps it (a
	// test's fault injector cuts Raft traffic too). RaftAddress and the
	// addresses of InitialMembers and AddReplica are then the transport's
	// node IDs; RaftAddress defaults to Transport.LocalID(). Every inbound
	// batch and snapshot chunk is checked before Dragonboat sees it
	// (deployment, shard, target replica, a sender that is a member whose
	// node is the authenticated peer, message types, chunk fields); what
	// fails is dropped and counted (Node.InboundStats). This is the
	// recommended setup. The Node does not close the transport.
	Transport transport.Transport

	// transport replaces Dragonboat's TCP transport (tests: partitions).
	transport config.TransportFactory
	// dragonboat, for tests, replaces the Dragonboat version the binary
	// was built with (see vetted).
	dragonboat string
	// pace, for tests, times the waits that follow Dragonboat (the batcher's
	// window, the pause between attempts); nil is real time.
	pace clockwork.Clock
	// noForward, for tests, keeps a follower's entries on Dragonboat's own
	// way to the leader (see forward.go).
	noForward bool
	// noMerge, for tests, proposes followers' entries each as its own.
	noMerge bool
}

// TLSFiles names the PEM files of Dragonboat's mutual TLS.
type TLSFiles struct {
	CAFile   string // the CA that issued every member's certificate
	CertFile string // this node's certificate
	KeyFile  string // its private key
}

// DefaultConfig returns the defaults; set ReplicaID, DeploymentID, Dir,
// InitialMembers (or Join), and either Transport (recommended) or
// RaftAddress with TLS and TLSAnyReplica.
func DefaultConfig() Config {
	return Config{
		ShardID:            1,
		RTTMillisecond:     50,
		ElectionRTT:        10,
		HeartbeatRTT:       1,
		SnapshotEntries:    10000,
		CompactionOverhead: 5000,
		ProposeTimeout:     3 * time.Second,
		ReadTimeout:        3 * time.Second,
		MaxBatch:           maxBatchCommands,
		BatchWait:          time.Millisecond,
	}
}

// NoSnapshots, as Config.SnapshotEntries, turns the Node's snapshots off: the log is then
// never compacted.
const NoSnapshots = ^uint64(0)

// NoBatchWait, as Config.BatchWait, turns the batcher's window off.
const NoBatchWait time.Duration = -1

// withDefaults returns c with each zero field set to its default.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	cfgerr.Default(&c.ShardID, d.ShardID)
	cfgerr.Default(&c.RTTMillisecond, d.RTTMillisecond)
	cfgerr.Default(&c.HeartbeatRTT, d.HeartbeatRTT)
	cfgerr.Default(&c.ElectionRTT, max(d.ElectionRTT, 10*c.HeartbeatRTT))
	cfgerr.Default(&c.SnapshotEntries, d.SnapshotEntries)
	cfgerr.Default(&c.CompactionOverhead, d.CompactionOverhead)
	cfgerr.Default(&c.ProposeTimeout, max(d.ProposeTimeout, 2*c.rtt()))
	cfgerr.Default(&c.ReadTimeout, max(d.ReadTimeout, 2*c.rtt()))
	cfgerr.Default(&c.MaxBatch, d.MaxBatch)
	cfgerr.Default(&c.BatchWait, d.BatchWait)
	return c
}

// snapshotEvery is SnapshotEntries, 0 for NoSnapshots.
func (c *Config) snapshotEvery() uint64 {
	if c.SnapshotEntries == NoSnapshots {
		return 0
	}
	return c.SnapshotEntries
}

func invalidConfig(field, rule string) error {
	return fmt.Errorf("%w: %s %s", ErrInvalidConfig, field, rule)
}

// Validate checks c and reports every broken rule in one error, each
// naming the field and the rule; the error matches ErrInvalidConfig. Zero
// fields are checked as their defaults.
func (c *Config) Validate() error {
	d := c.withDefaults()
	return d.validate()
}

func (c *Config) validate() error {
	var errs []error
	check := func(ok bool, field, rule string) {
		if !ok {
			errs = append(errs, fmt.Errorf("%s %s", field, rule))
		}
	}
	check(c.ReplicaID != 0, "ReplicaID", "must be ≥ 1")
	check(c.ShardID != 0, "ShardID", "must be ≥ 1")
	check(c.DeploymentID != 0, "DeploymentID", "must be set (≥ 1), the same on every member and unique to this cluster; there is no default, since Dragonboat's default 1 is shared by every deployment that left it unset")
	check(c.Dir != "", "Dir", "must be set")
	check(c.RTTMillisecond != 0, "RTTMillisecond", "must be ≥ 1")
	check(c.HeartbeatRTT != 0, "HeartbeatRTT", "must be ≥ 1")
	check(c.ElectionRTT > 2*c.HeartbeatRTT, "ElectionRTT", "must be more than 2 × HeartbeatRTT")
	check(c.ProposeTimeout >= 2*c.rtt(), "ProposeTimeout", "must be at least 2 × RTTMillisecond")
	check(c.ReadTimeout >= 2*c.rtt(), "ReadTimeout", "must be at least 2 × RTTMillisecond")
	check(c.MaxBatch >= 1 && c.MaxBatch <= maxBatchCommands, "MaxBatch", fmt.Sprintf("must be 1–%d", maxBatchCommands))
	check(c.BatchWait <= c.ProposeTimeout/4, "BatchWait", "must be at most ProposeTimeout / 4 (NoBatchWait: off)")
	check(!c.Join || len(c.InitialMembers) == 0, "InitialMembers", "must be empty with Join")
	check(c.Join || len(c.JoinMembers) == 0, "JoinMembers", "must be empty without Join (InitialMembers names a new shard's members)")
	switch c.FS.(type) {
	case nil, *vfs.MemFS, *vfs.ErrorFS:
	default:
		check(false, "FS", fmt.Sprintf("must be nil, a *vfs.MemFS or a *vfs.ErrorFS (the only types Dragonboat accepts), is %T", c.FS))
	}
	byNodeID := c.Transport != nil
	self := c.raftAddress()
	if byNodeID {
		limit := messageLimit(c.Transport)
		check(limit >= minTransportMessage, "Transport", fmt.Sprintf("must accept messages of at least %d bytes (a snapshot chunk), accepts %d", minTransportMessage, limit))
		check(self == c.Transport.LocalID(), "RaftAddress", fmt.Sprintf("must be empty or the transport's node ID %q with Transport set", c.Transport.LocalID()))
		check(c.TLS == nil, "TLS", "must be nil with Transport (Raft then uses the transport's TLS or secret)")
	} else if c.transport == nil {
		_, port, err := net.SplitHostPort(c.RaftAddress)
		check(err == nil && port != "", "RaftAddress", "must be host:port")
		check(c.TLS != nil || c.Insecure, "TLS", "must be set (CAFile, CertFile, KeyFile) for Raft over Dragonboat's own TCP transport, or set Transport to carry Raft over Muster's authenticated transport; without either anyone who can reach RaftAddress can join or crash the cluster, which only Insecure: true allows")
		if t := c.TLS; t != nil {
			check(t.CAFile != "" && t.CertFile != "" && t.KeyFile != "", "TLS", "must name CAFile, CertFile and KeyFile")
			check(c.TLSAnyReplica, "TLS", "on Dragonboat's own TCP transport binds no replica ID to a certificate (any certificate from the CA can act as any replica and crash the members): set Transport to carry Raft over Muster's transport, which binds each replica to its node's proven identity, or TLSAnyReplica: true to accept that")
		}
	}
	check(!c.TLSAnyReplica || c.TLS != nil, "TLSAnyReplica", "needs TLS (it accepts Dragonboat's mutual TLS, which binds no replica to a certificate)")
	if len(c.InitialMembers) > 0 {
		check(c.InitialMembers[c.ReplicaID] == self, "InitialMembers", "must map ReplicaID to RaftAddress")
		var zeroID, badAddr bool
		for id, addr := range c.InitialMembers {
			zeroID = zeroID || id == 0
			if byNodeID {
				badAddr = badAddr || addr == ""
			} else if _, _, err := net.SplitHostPort(addr); err != nil {
				badAddr = true
			}
		}
		check(!zeroID, "InitialMembers", "IDs must be ≥ 1")
		if byNodeID {
			check(!badAddr, "InitialMembers", "node IDs must not be empty")
		} else {
			check(!badAddr, "InitialMembers", "addresses must be host:port")
		}
	}
	return cfgerr.Join(ErrInvalidConfig, errs...)
}

// raftAddress is RaftAddress, or the transport's node ID when it is empty
// and Transport is set.
func (c *Config) raftAddress() string {
	if c.RaftAddress == "" && c.Transport != nil {
		return c.Transport.LocalID()
	}
	return c.RaftAddress
}

func (c *Config) rtt() time.Duration { return time.Duration(c.RTTMillisecond) * time.Millisecond }

// clone returns a copy of c that shares no map with it.
func (c Config) clone() Config {
	c.InitialMembers = maps.Clone(c.InitialMembers)
	c.JoinMembers = maps.Clone(c.JoinMembers)
	if c.TLS != nil {
		t := *c.TLS
		c.TLS = &t
	}
	return c
}
