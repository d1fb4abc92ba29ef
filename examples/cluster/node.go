package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/muster-io/muster/distro"
	"github.com/muster-io/muster/raftstore"
	"github.com/muster-io/muster/registry"
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

// spec is what a node keeps across restarts: its ID, its addresses and its
// data directory. Memberlist ties a name to its gossip address, so a
// restarted node reuses its addresses, as a real process restarted on the
// same host would. Raft needs no address of its own: its messages go over
// Muster's transport, addressed by node ID (raftstore.Config.Transport).
type spec struct {
	id      string
	replica uint64
	gossip  string // memberlist, UDP and TCP
	tcp     string // Muster's node-to-node transport, which carries Distro and Raft
	dir     string
}

// node is one running member: the transport, the membership and the
// registry that owns the Raft replica and the health checkers.
type node struct {
	spec
	tcp *transport.TCP
	ml  *distro.Memberlist
	reg *registry.Registry
}

// cluster starts, crashes, stops and restarts the nodes of one process.
type cluster struct {
	t       timings
	specs   []spec
	seeds   []string
	initial map[uint64]string
	log     *slog.Logger

	mu    sync.Mutex
	nodes []*node // nil while a node is down

	// wrapTCP and wrapGossip, if set, wrap a node's transports (tests
	// inject faults through them).
	wrapTCP    func(id string, t transport.Transport) transport.Transport
	wrapGossip func(id string, t memberlist.Transport) memberlist.Transport
}

// newCluster picks the addresses of n nodes on 127.0.0.1 and their
// directories under dir. It starts nothing.
func newCluster(n int, t timings, dir string, log *slog.Logger) (*cluster, error) {
	c := &cluster{t: t, initial: map[uint64]string{}, nodes: make([]*node, n), log: log}
	used := map[int]bool{}
	for i := range n {
		var ports [2]int
		for k := range ports {
			p, err := freePort(used, k == 0)
			if err != nil {
				return nil, err
			}
			ports[k] = p
		}
		s := spec{
			id:      fmt.Sprintf("node-%d", i+1),
			replica: uint64(i + 1),
			gossip:  addr(ports[0]),
			tcp:     addr(ports[1]),
			dir:     filepath.Join(dir, fmt.Sprintf("node-%d", i+1)),
		}
		c.specs = append(c.specs, s)
		c.seeds = append(c.seeds, s.gossip)
		c.initial[s.replica] = s.id // Raft addresses are node IDs: Raft goes over the transport
	}
	return c, nil
}

func addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// freePort returns a loopback port nobody listens on (for gossip, on UDP as
// well as TCP) and that this cluster has not handed out before.
func freePort(used map[int]bool, udp bool) (int, error) {
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		ok := !used[p]
		if ok && udp {
			u, err := net.ListenPacket("udp", addr(p))
			if err != nil {
				ok = false
			} else {
				_ = u.Close()
			}
		}
		_ = l.Close()
		if ok {
			used[p] = true
			return p, nil
		}
	}
	return 0, errors.New("no free port on 127.0.0.1")
}

// start starts node i: its TCP transport, its memberlist (joining the
// others), and its registry with Distro, a Raft replica (new, or restarted
// from its directory) and the health checkers. It does not wait for the
// node to be ready.
func (c *cluster) start(ctx context.Context, i int) (*node, error) {
	if c.node(i) != nil {
		return nil, fmt.Errorf("%s is running", c.specs[i].id)
	}
	n := &node{spec: c.specs[i]}
	log := c.log.With("node", n.id)
	if err := os.MkdirAll(n.dir, 0o755); err != nil {
		return nil, err
	}

	// Muster's transport finds peers through the membership, which carries
	// each node's transport address in its memberlist meta.
	var members atomic.Pointer[distro.Memberlist]
	tc := transport.DefaultTCPConfig()
	tc.NodeID, tc.ListenAddr, tc.Logger = n.id, n.spec.tcp, log
	tc.Secret = []byte("muster-demo-cluster-secret")
	tc.ReconnectMin, tc.ReconnectMax = 20*time.Millisecond, 500*time.Millisecond
	tc.Resolve = func(id string) (string, error) {
		if m := members.Load(); m != nil {
			return m.Addr(id)
		}
		return "", distro.ErrUnknownMember
	}
	tcp, err := transport.NewTCP(tc)
	if err != nil {
		return nil, err
	}
	if err := tcp.Start(ctx); err != nil {
		return nil, err
	}
	n.tcp = tcp
	var tr transport.Transport = tcp
	if c.wrapTCP != nil {
		tr = c.wrapTCP(n.id, tcp)
	}

	host, port, _ := net.SplitHostPort(n.gossip)
	mc := distro.DefaultMemberlistConfig()
	mc.NodeID, mc.BindAddr, mc.TransportAddr, mc.Seeds, mc.Logger = n.id, host, tcp.Addr(), c.seeds, log
	mc.BindPort, _ = strconv.Atoi(port)
	mc.SecretKey = []byte("muster-demo-gossip-key-32-bytes!") // every node the same 32-byte key
	mc.ProbeInterval, mc.ProbeTimeout, mc.SuspicionMult = c.t.Probe, c.t.Probe/2, 2
	mc.GossipInterval, mc.PushPullInterval = c.t.Probe/5, 5*c.t.Probe
	mc.TCPTimeout, mc.GossipToTheDeadTime = c.t.Probe, 5*c.t.Probe
	mc.RejoinInterval, mc.LeaveTimeout = 2*c.t.Probe, c.t.Probe
	if c.wrapGossip != nil {
		id := n.id
		mc.WrapTransport = func(t memberlist.Transport) memberlist.Transport { return c.wrapGossip(id, t) }
	}
	ml, err := distro.NewMemberlist(mc)
	if err == nil {
		members.Store(ml)
		err = ml.Start(ctx)
	}
	if err != nil {
		_ = tcp.Close()
		return nil, err
	}
	n.ml = ml

	dc := distro.DefaultConfig()
	dc.Transport, dc.Membership, dc.Logger = tr, ml, log
	dc.SyncDelay, dc.VerifyInterval, dc.OrphanTimeout = c.t.SyncDelay, c.t.Verify, c.t.Orphan
	dc.TombstoneTTL, dc.LoadTimeout, dc.RequestTimeout = 10*c.t.Verify, c.t.Load, time.Second

	rc := raftstore.DefaultConfig() // Raft over tr, Muster's transport: its checks and authentication
	rc.ReplicaID, rc.Transport, rc.Dir, rc.InitialMembers, rc.Logger = n.replica, tr, n.dir, c.initial, log
	rc.DeploymentID = raftDeployment
	rc.RTTMillisecond = uint64(max(c.t.RaftRTT.Milliseconds(), 1))
	rc.ProposeTimeout, rc.ReadTimeout = 2*time.Second, 2*time.Second

	cfg := registry.DefaultConfig()
	cfg.NodeID, cfg.Logger = n.id, log
	cfg.Distro, cfg.Raft = &dc, &rc
	hc := *cfg.HealthChecks
	hc.Logger = log
	hc.FirstIntervalMin, hc.FirstIntervalMax = c.t.CheckEvery/2, c.t.CheckEvery
	hc.TCPInterval.Min, hc.TCPInterval.Max = c.t.CheckEvery, 2*c.t.CheckEvery
	cfg.HealthChecks = &hc
	cfg.SweepInterval = 100 * time.Millisecond
	cfg.ForwardTimeout = time.Second

	reg, err := registry.New(cfg)
	if err == nil {
		err = reg.Start(ctx)
	}
	if err != nil {
		_ = ml.Close()
		_ = tcp.Close()
		return nil, err
	}
	n.reg = reg
	c.mu.Lock()
	c.nodes[i] = n
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
		_ = n.tcp.Close()
		_ = n.ml.Kill()
		_ = n.reg.Close()
	}
}

// stop closes node i gracefully: the registry hands its sessions over while
// the network is up, then the node leaves the membership.
func (c *cluster) stop(i int) {
	if n := c.take(i); n != nil {
		_ = n.reg.Close()
		_ = n.ml.Close()
		_ = n.tcp.Close()
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
		id, ok := n.reg.RaftNode().Leader()
		if !ok {
			return ""
		}
		name := c.specs[id-1].id
		if leader != "" && leader != name {
			return ""
		}
		leader = name
	}
	return leader
}
