package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/muster-io/muster/internal/ports"
	"github.com/muster-io/muster/registry"
	musternode "github.com/muster-io/muster/registry/node"
	"github.com/muster-io/muster/transport"
)

// raftDeployment is the demo cluster's Raft DeploymentID: set on every
// member, unique to the cluster.
const raftDeployment = 0x64656d6f

// timings are the knobs of the demo cluster. The defaults are short so that
// the whole scenario fits in about 30 s; production values are the
// packages' DefaultConfig ones (memberlist's LAN profile, Nacos's timings).
type timings struct {
	Probe       time.Duration // memberlist probe interval (failure detection ≈ 3–5 probes)
	SyncDelay   time.Duration // distro: how long changes to one record are merged before sending
	Verify      time.Duration // distro: anti-entropy period
	Orphan      time.Duration // distro: how long a dead node's session records outlive it
	Load        time.Duration // distro: how long a starting node waits for its peers' snapshots
	CheckEvery  time.Duration // health: the shortest TCP check interval
	RaftRTT     time.Duration // Dragonboat's tick; an election takes about 10 ticks
	BeatTimeout time.Duration // beat instances: unhealthy after this without a beat
}

func defaultTimings() timings {
	return timings{
		Probe:       200 * time.Millisecond,
		SyncDelay:   20 * time.Millisecond,
		Verify:      time.Second,
		Orphan:      2 * time.Second,
		Load:        2 * time.Second,
		CheckEvery:  200 * time.Millisecond,
		RaftRTT:     10 * time.Millisecond,
		BeatTimeout: 3 * time.Second,
	}
}

// settings are the node assembly's timings for the demo's knobs.
func (t timings) settings() musternode.Timings {
	nt := musternode.Fast()
	nt.ProbeInterval, nt.ProbeTimeout = t.Probe, t.Probe/2
	nt.GossipInterval, nt.PushPull = t.Probe/5, 5*t.Probe
	nt.GossipTCPTimeout, nt.GossipDead = t.Probe, 5*t.Probe
	nt.Rejoin, nt.Leave = 2*t.Probe, t.Probe
	nt.SyncDelay, nt.Verify, nt.Orphan, nt.Tombstone = t.SyncDelay, t.Verify, t.Orphan, 10*t.Verify
	nt.Load, nt.CheckInterval = t.Load, t.CheckEvery
	nt.RaftRTT = max(t.RaftRTT, time.Millisecond)
	return nt
}

// spec is what a node keeps across restarts: its ID, its addresses and its
// data directory. The first start picks free ports below the kernel's
// ephemeral range; memberlist ties a name to its gossip address, so a
// restarted node reuses them, as a real process restarted on the same host
// would. Raft needs no address of its own: its
// messages go over Muster's transport, addressed by node ID.
type spec struct {
	id     string
	gossip string // memberlist, UDP and TCP; "" until the first start
	tcp    string // Muster's transport, which carries Distro and Raft
	dir    string
}

// node is one running member: a node.Node (transport, membership, registry
// with Distro, Raft and the health checkers).
type node struct {
	spec
	n   *musternode.Node
	reg *registry.Registry
}

// cluster starts, crashes, stops and restarts the nodes of one process.
type cluster struct {
	t     timings
	specs []spec
	raft  map[uint64]string // replica ID → node ID
	log   *slog.Logger

	mu    sync.Mutex
	nodes []*node // nil while a node is down

	// wrapTCP and wrapGossip, if set, wrap a node's transports (tests
	// inject faults through them).
	wrapTCP    func(id string, t transport.Transport) transport.Transport
	wrapGossip func(id string, t memberlist.Transport) memberlist.Transport
}

// newCluster names n nodes and their directories under dir. It starts
// nothing.
func newCluster(n int, t timings, dir string, log *slog.Logger) (*cluster, error) {
	c := &cluster{t: t, raft: map[uint64]string{}, nodes: make([]*node, n), log: log}
	for i := range n {
		id := fmt.Sprintf("node-%d", i+1)
		c.specs = append(c.specs, spec{id: id, dir: filepath.Join(dir, id)})
		c.raft[uint64(i+1)] = id
	}
	return c, nil
}

// start starts node i, new or restarted from its directory, joining the
// nodes started before it. It does not wait for the node to be ready.
func (c *cluster) start(ctx context.Context, i int) (*node, error) {
	if c.node(i) != nil {
		return nil, fmt.Errorf("%s is running", c.specs[i].id)
	}
	s := c.specs[i]
	cfg := musternode.DefaultConfig()
	cfg.NodeID, cfg.Dir, cfg.Logger = s.id, s.dir, c.log
	cfg.Secret = []byte("muster-demo-cluster-secret")
	cfg.GossipKey = []byte("muster-demo-gossip-key-32-bytes!")
	cfg.RaftMembers, cfg.DeploymentID = c.raft, raftDeployment
	cfg.Timings = c.t.settings()
	if s.gossip == "" {
		// Ports the kernel never hands out as a connection's source port,
		// so the node finds them free when it restarts (internal/ports).
		var err error
		if s.gossip, err = ports.Loopback(true); err != nil {
			return nil, err
		}
		if s.tcp, err = ports.Loopback(false); err != nil {
			return nil, err
		}
	}
	cfg.GossipAddr, cfg.TransportAddr = s.gossip, s.tcp
	for _, o := range c.specs {
		if o.gossip != "" && o.id != s.id {
			cfg.Seeds = append(cfg.Seeds, o.gossip)
		}
	}
	if c.wrapTCP != nil {
		cfg.WrapTransport = func(t transport.Transport) transport.Transport { return c.wrapTCP(s.id, t) }
	}
	if c.wrapGossip != nil {
		cfg.WrapGossipTransport = func(t memberlist.Transport) memberlist.Transport { return c.wrapGossip(s.id, t) }
	}
	mn, err := musternode.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	n := &node{spec: s, n: mn, reg: mn.Registry()}
	n.gossip, n.tcp = mn.GossipAddr(), mn.TransportAddr()
	c.mu.Lock()
	c.specs[i], c.nodes[i] = n.spec, n
	c.mu.Unlock()
	return n, nil
}

// node returns node i, or nil while it is down.
func (c *cluster) node(i int) *node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i]
}

// take marks node i down and returns it (nil if it was down already).
func (c *cluster) take(i int) *node {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[i]
	c.nodes[i] = nil
	return n
}

// crash stops node i as a killed process would: its network goes first, so
// it tells nobody; the others find out by probing.
func (c *cluster) crash(i int) {
	if n := c.take(i); n != nil {
		_ = n.n.Kill()
	}
}

// stop closes node i gracefully: the registry hands its sessions over while
// the network is up, then the node leaves the membership.
func (c *cluster) stop(i int) {
	if n := c.take(i); n != nil {
		_ = n.n.Close()
	}
}

// close stops every running node gracefully, all at once.
func (c *cluster) close() {
	done := make(chan struct{})
	for i := range c.specs {
		go func() {
			c.stop(i)
			done <- struct{}{}
		}()
	}
	for range c.specs {
		<-done
	}
}

// live returns the running nodes.
func (c *cluster) live() []*node {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*node
	for _, n := range c.nodes {
		if n != nil {
			out = append(out, n)
		}
	}
	return out
}

// index returns the position of the node with this ID, or -1.
func (c *cluster) index(id string) int {
	for i, s := range c.specs {
		if s.id == id {
			return i
		}
	}
	return -1
}

// leader returns the Raft leader as seen by the running nodes, or "" while
// they do not agree on one.
func (c *cluster) leader() string {
	leader := ""
	for _, n := range c.live() {
		id, ok := n.n.Raft().Leader()
		if !ok {
			return ""
		}
		name := c.raft[id]
		if leader != "" && leader != name {
			return ""
		}
		leader = name
	}
	return leader
}
