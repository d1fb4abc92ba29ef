package registrytest

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/muster-io/muster/distro"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/raftstore"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/raftcp"
	"github.com/muster-io/muster/transport"
)

// ClusterOptions configures a test cluster. The zero value is ready to use.
type ClusterOptions struct {
	// Nodes is the number of nodes; default 3. They are named "n1", "n2"…
	Nodes int
	// Config is every node's registry configuration; nil means
	// registry.DefaultConfig() without active health checks and with
	// the event journal on (HistoryEvents = registry.DefaultHistoryEvents). NodeID, Clock,
	// Logger, Rand, Replicator, Transport and Store are set per node.
	Config *registry.Config
	// Distro is the replication configuration; nil means
	// distro.DefaultConfig() with its merge window off (SyncDelay
	// distro.NoSyncDelay): every write is sent at once, so that a write
	// followed by Settle (or Advance, or Eventually) is visible on every
	// peer without the test moving the clock. A test of the merge window
	// sets Distro with a SyncDelay: a write then leaves its node only
	// after SyncDelay of fake time, and Settle, which never moves the
	// clock, does not wait for it (Advance does). Transport and Membership
	// are set per node; NodeID, Store, Clock, Logger and Rand are the
	// node's registry's.
	Distro *distro.Config
	// Seed seeds the nodes' random sources and the network; 0 derives one
	// from the test's name.
	Seed uint64
	// LogLevel is the lowest level logged to the test; default Warn.
	LogLevel slog.Level
	// Clock is shared by every node; nil means a new fake clock at Epoch.
	Clock *clockwork.FakeClock
	// Raft, when set, gives every node a raftstore replica (real Dragonboat
	// and Badger, data in the test's temporary directory, which survives
	// Stop and Restart) through registry/raftcp, configured from it:
	// ReplicaID, Dir, Transport and InitialMembers are set per node, and a
	// zero DeploymentID is given one (the cluster's Raft traffic runs on its
	// own RaftNet, so a test need not choose it). Raft
	// traffic goes over the node's endpoint on RaftNet
	// (raftstore.Config.Transport), which Partition, Isolate, Heal and Stop
	// cut like Net. Dragonboat runs on real time:
	// use a small RTTMillisecond, and WaitFor rather than Eventually for
	// what depends on it.
	Raft *raftstore.Config
	// Step is the largest single move of the clock in Advance, so that
	// periodic work (sync, verify) runs at every period it would in real
	// time; default 500 ms.
	Step time.Duration
	// Parallel is for a test that calls t.Parallel; see Options.Parallel.
	Parallel bool
}

// Cluster is a cluster of registries in one process: one MemNetwork, static
// membership that follows the test's partitions, stops and restarts (a
// stand-in for a failure detector that is never wrong), and one fake clock.
//
// When the test ends, the harness heals the network, lets two verify
// periods pass, checks that every live node holds the same records and the
// same instances, checks each index, closes every node and fails the test if
// a goroutine started since NewCluster is still running.
type Cluster struct {
	// Clock is the nodes' fake clock.
	Clock *clockwork.FakeClock
	// Net is the network between the nodes; tests may drop, delay or hold
	// messages on it directly.
	Net *transport.MemNetwork
	// RaftNet carries the Raft traffic with ClusterOptions.Raft (nil
	// otherwise). It is a network of its own, on real time like Dragonboat,
	// so that Raft's steady heartbeats neither keep Net from settling nor
	// stall behind Net's fake-clock delays; Partition, Isolate, Heal and Stop
	// act on both.
	RaftNet *transport.MemNetwork
	// Seed is the seed of the cluster's random sources.
	Seed uint64

	t       testing.TB
	opts    ClusterOptions
	dcfg    distro.Config
	nodes   []*Node
	groupOf map[string]int // partition group of each node; nil when whole
	raftDir string
	raftMem map[uint64]string // replica ID → node ID (the Raft address)
}

// Node is one node of a Cluster.
type Node struct {
	// Registry is the node's registry; nil while the node is stopped.
	*registry.Registry
	// ID is the node's ID.
	ID string
	// Transport is the node's endpoint on the network.
	Transport *transport.MemTransport
	// RaftTransport is the node's endpoint on RaftNet (nil without Raft).
	RaftTransport *transport.MemTransport
	// Membership is the node's view of the live members.
	Membership *distro.Static

	repl   *distro.Replicator // the running registry's
	raft   *raftcp.Store      // with ClusterOptions.Raft
	starts int
}

// Replicator returns the node's replicator (nil while the node is
// stopped): the *distro.Replicator itself (Get, Range, Settle), where
// Registry.Internals().Replicator gives the registry.Replicator interface.
func (n *Node) Replicator() *distro.Replicator {
	if n.Registry == nil {
		return nil
	}
	return n.repl
}

// RaftNode returns the node's Raft replica, nil without
// ClusterOptions.Raft or while the node is stopped.
func (n *Node) RaftNode() *raftstore.Node {
	if n.Registry == nil || n.raft == nil {
		return nil
	}
	return n.raft.Node()
}

// closeTransports closes the node's network endpoints.
func (n *Node) closeTransports() {
	_ = n.Transport.Close()
	if n.RaftTransport != nil {
		_ = n.RaftTransport.Close()
	}
}

// NewCluster starts a cluster and returns once every node is ready.
func NewCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	leaks := newLeakCheck(opts.Parallel)
	if opts.Nodes <= 0 {
		opts.Nodes = 3
	}
	if opts.Step <= 0 {
		opts.Step = 500 * time.Millisecond
	}
	if opts.Clock == nil {
		opts.Clock = clockwork.NewFakeClockAt(Epoch)
	}
	if opts.Seed == 0 {
		h := fnv.New64a()
		h.Write([]byte(t.Name()))
		opts.Seed = h.Sum64()
	}
	if opts.LogLevel == 0 {
		opts.LogLevel = slog.LevelWarn
	}
	dcfg := distro.DefaultConfig()
	dcfg.SyncDelay = distro.NoSyncDelay // see ClusterOptions.Distro
	if opts.Distro != nil {
		dcfg = *opts.Distro
	}
	c := &Cluster{
		Clock: opts.Clock,
		Net:   &transport.MemNetwork{Clock: opts.Clock, Seed: opts.Seed},
		Seed:  opts.Seed,
		t:     t,
		opts:  opts,
		dcfg:  dcfg,
	}
	for i := range opts.Nodes {
		c.nodes = append(c.nodes, &Node{ID: fmt.Sprintf("n%d", i+1)})
	}
	if opts.Raft != nil {
		c.RaftNet = &transport.MemNetwork{Seed: opts.Seed}
		c.raftDir = t.TempDir()
		c.raftMem = make(map[uint64]string)
		for i, n := range c.nodes {
			c.raftMem[uint64(i+1)] = n.ID
		}
	}
	t.Cleanup(func() { c.cleanup(leaks) })
	for _, n := range c.nodes {
		c.start(n)
	}
	c.AwaitReady()
	return c
}

// Node returns node i (from 0).
func (c *Cluster) Node(i int) *Node { return c.nodes[i] }

// Nodes returns every node, stopped ones included.
func (c *Cluster) Nodes() []*Node { return slices.Clone(c.nodes) }

// Live returns the running nodes.
func (c *Cluster) Live() []*Node {
	var out []*Node
	for _, n := range c.nodes {
		if n.Registry != nil {
			out = append(out, n)
		}
	}
	return out
}

// start creates and starts n's transport, membership and registry.
func (c *Cluster) start(n *Node) {
	c.t.Helper()
	tr, err := c.Net.Node(n.ID)
	if err != nil {
		c.t.Fatalf("registrytest: network node %s: %v", n.ID, err)
	}
	n.Transport = tr
	n.Membership = distro.NewStatic(distro.Member{ID: n.ID})
	n.starts++

	cfg := registry.DefaultConfig()
	cfg.HealthChecks, cfg.HistoryEvents = nil, registry.DefaultHistoryEvents
	if c.opts.Config != nil {
		cfg = *c.opts.Config
	}
	dc := c.dcfg
	dc.Transport = tr
	dc.Membership = n.Membership
	dc.NodeID, dc.Store, dc.Clock, dc.Logger, dc.Rand = "", nil, nil, nil, nil // the registry's
	distroFunc := registry.Distro(dc)
	cfg.Replicator = func(env registry.Env, records distro.Store) (registry.Replicator, error) {
		d, err := distroFunc(env, records)
		if err == nil {
			n.repl = d.(*distro.Replicator)
		}
		return d, err
	}
	cfg.Transport = tr
	cfg.NodeID = n.ID
	cfg.Store, n.raft = nil, nil
	if c.opts.Raft != nil {
		rc := *c.opts.Raft
		rc.ReplicaID = uint64(c.Index(n) + 1)
		if rc.DeploymentID == 0 {
			// The cluster's Raft traffic stays on its own RaftNet, so any
			// ID keeps it apart: one from the seed, which a test has no
			// reason to choose.
			rc.DeploymentID = c.opts.Seed | 1
		}
		rt, err := c.RaftNet.Node(n.ID)
		if err != nil {
			c.t.Fatalf("registrytest: raft network node %s: %v", n.ID, err)
		}
		n.RaftTransport = rt
		rc.RaftAddress, rc.Transport = n.ID, rt
		rc.Dir = filepath.Join(c.raftDir, n.ID)
		rc.InitialMembers = maps.Clone(c.raftMem)
		n.raft = raftcp.New(rc)
		cfg.Store = n.raft.Open
	}
	cfg.Clock = c.Clock
	seed := c.Seed ^ uint64(n.starts)<<32 ^ fnvString(n.ID)
	cfg.Rand = rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)
	cfg.Logger = slog.New(slog.NewTextHandler(c.t.Output(), &slog.HandlerOptions{Level: c.opts.LogLevel}))

	reg, err := registry.New(cfg)
	if err != nil {
		c.t.Fatalf("registrytest: node %s: %v", n.ID, err)
	}
	n.Registry = reg
	c.updateMembership()
	if err := reg.Start(context.Background()); err != nil {
		c.t.Fatalf("registrytest: start node %s: %v", n.ID, err)
	}
}

// Index returns n's index in the cluster, or -1.
func (c *Cluster) Index(n *Node) int { return slices.Index(c.nodes, n) }

// WaitFor polls cond in real time until it holds, letting the cluster
// settle between polls, and fails the test after timeout. It is for what
// runs on real time (Raft); fake-clock behaviour uses Eventually.
func (c *Cluster) WaitFor(timeout time.Duration, cond func() bool, format string, args ...any) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("registrytest: after %v: "+format, append([]any{timeout}, args...)...)
		}
		c.Settle()
		time.Sleep(5 * time.Millisecond)
	}
}

func fnvString(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// updateMembership gives every live node the live members it can reach.
func (c *Cluster) updateMembership() {
	live := c.Live()
	for _, n := range live {
		var ms []distro.Member
		for _, m := range live {
			if c.reachable(n.ID, m.ID) {
				ms = append(ms, distro.Member{ID: m.ID})
			}
		}
		n.Membership.Set(ms...)
	}
}

func (c *Cluster) reachable(a, b string) bool {
	return c.groupOf == nil || c.groupOf[a] == c.groupOf[b]
}

// Partition splits the cluster into groups of node indexes; nodes left out
// of every group form one more group. Each side sees the others as dead.
func (c *Cluster) Partition(groups ...[]int) {
	c.t.Helper()
	c.groupOf = make(map[string]int)
	for _, n := range c.nodes {
		c.groupOf[n.ID] = len(groups)
	}
	for g, idx := range groups {
		for _, i := range idx {
			c.groupOf[c.nodes[i].ID] = g
		}
	}
	for _, a := range c.nodes {
		for _, b := range c.nodes {
			if a.ID < b.ID && !c.reachable(a.ID, b.ID) {
				c.Net.Partition(a.ID, b.ID)
				if c.RaftNet != nil {
					c.RaftNet.Partition(a.ID, b.ID)
				}
			}
		}
	}
	c.updateMembership()
	c.Settle()
}

// Isolate cuts node i off from every other node.
func (c *Cluster) Isolate(i int) { c.Partition([]int{i}) }

// Heal ends every partition.
func (c *Cluster) Heal() {
	c.t.Helper()
	c.groupOf = nil
	c.Net.Heal()
	if c.RaftNet != nil {
		c.RaftNet.Heal()
	}
	c.updateMembership()
	c.Settle()
}

// Stop crashes node i: its network goes first, so nothing is handed over,
// and the others are told it is dead.
func (c *Cluster) Stop(i int) { c.stop(i, true) }

// Shutdown closes node i gracefully: it hands its sessions over (see
// registry.Config.HandoverTimeout) before its network closes, then the
// others are told it left.
func (c *Cluster) Shutdown(i int) { c.stop(i, false) }

func (c *Cluster) stop(i int, crash bool) {
	c.t.Helper()
	n := c.nodes[i]
	if n.Registry == nil {
		return
	}
	if crash {
		n.closeTransports()
	}
	if err := n.Registry.Close(); err != nil {
		c.t.Errorf("registrytest: close %s: %v", n.ID, err)
	}
	n.closeTransports()
	n.Registry = nil
	c.updateMembership()
	c.Settle()
}

// Restart starts node i again, empty, under the same ID. It does not wait
// for the node to be ready: see AwaitReady.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	n := c.nodes[i]
	if n.Registry != nil {
		c.t.Fatalf("registrytest: restart of running node %s", n.ID)
	}
	c.start(n)
	c.Settle()
}

// AwaitReady advances the clock until every live node is ready.
func (c *Cluster) AwaitReady() {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second) // Raft elections run on real time
	for i := 0; i < 1000 || c.opts.Raft != nil && time.Now().Before(deadline); i++ {
		ready := true
		for _, n := range c.Live() {
			ready = ready && n.Ready()
		}
		if ready {
			return
		}
		if i < 1000 {
			c.Advance(c.opts.Step)
		} else {
			c.Settle()
			time.Sleep(5 * time.Millisecond)
		}
	}
	c.t.Fatalf("registrytest: nodes not ready after %v of fake time", 1000*c.opts.Step)
}

// Advance moves the clock by d, in steps of at most Options.Step, letting
// the cluster settle after each. When it returns, as after Settle, every
// live node's watchers have been handed the newest view (a Watcher's Next
// returns at once with what changed), as Registry.Advance guarantees.
func (c *Cluster) Advance(d time.Duration) {
	c.t.Helper()
	for d > 0 {
		step := min(d, c.opts.Step)
		c.Clock.Advance(step)
		d -= step
		c.Settle()
	}
}

// Settle waits until the nodes have handled every deadline that passed and
// nothing is left in flight: when it returns, nothing more happens on Net
// until the clock moves, a held message is delivered or the test calls a
// node. It works in rounds. A round runs every live node's
// Internals().Settle (its deadlines, and what the registry sends in the
// background, answered) and
// its replicator's Settle (everything distro has due at the clock's time,
// run, up to the messages it hands to the network), then waits until
// nothing is in flight on Net: no handler running, however long it takes,
// and no caller waiting for a response it has not taken (MemNetwork.WaitIdle).
// Settle returns after the first quiet round: one in which no Settle reports
// that its replicator did anything and no message was sent on Net.
//
// Why one quiet round is enough. Settle starts with Net idle, and each round
// ends with Net idle, so a quiet round starts with no handler running and
// no response untaken. Every message sent counts in Net's total the moment
// it is sent, so none was sent during the round, and none is in flight at
// its end. Each replicator, at its Settle, had no goroutine running and none
// due to wake at the clock's time, and had run nothing since the previous
// round's Settle. What could make a node act after its Settle is a message
// (none was delivered: none was sent, Net was idle at the start and is at
// the end), its clock (it does not move during Settle), a poke from its
// registry (whose own work ran in Settle; what Settle started in the background
// was answered, which takes messages), or another node (only through a
// message). So nothing was running anywhere at the end of the round, and
// nothing can start by itself: no timing is involved, however slowly
// goroutines are scheduled. Messages held on Net (a link delay on the
// clock, the manual queue) wait for the test and do not keep Settle
// waiting. Raft traffic (RaftNet) runs on real time and is not waited for.
//
// Every round also flushes every live node's watchers (FlushWatchers), and
// the last, quiet round applied nothing after its flush: when Settle
// returns, each watcher has been handed its node's newest view.
//
// Settle does not move the clock. With the default ClusterOptions.Distro,
// distro sends every write at once, so a write followed by Settle is
// visible on every peer. A test that sets ClusterOptions.Distro with a
// SyncDelay has its writes held on their node for SyncDelay of fake time:
// Advance by SyncDelay (or Step) to see them on the peers.
//
// The deadline is a guard against a node that never settles; reaching it
// fails the test and says what was still busy.
func (c *Cluster) Settle() {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	if err := c.Net.WaitIdle(ctx); err != nil {
		c.t.Fatalf("registrytest: the cluster did not settle: %d messages still in flight: %v", c.Net.InFlight(), err)
	}
	last := c.Net.TotalStats().Messages
	for {
		did := false
		for _, n := range c.Live() {
			if err := n.Internals().Settle(ctx); err != nil {
				c.t.Fatalf("registrytest: node %s did not settle: %v", n.ID, err)
			}
			d, err := n.Replicator().Settle(ctx)
			if err != nil {
				c.t.Fatalf("registrytest: node %s did not settle: %v", n.ID, err)
			}
			did = did || d
		}
		for _, n := range c.Live() {
			if err := n.Internals().FlushWatchers(ctx); err != nil {
				c.t.Fatalf("registrytest: node %s did not hand its watchers their views: %v", n.ID, err)
			}
		}
		if err := c.Net.WaitIdle(ctx); err != nil {
			c.t.Fatalf("registrytest: the cluster did not settle: %d messages still in flight: %v", c.Net.InFlight(), err)
		}
		now := c.Net.TotalStats().Messages
		if !did && now == last {
			break
		}
		last = now
	}
	if c.RaftNet != nil {
		// Raft is not waited for (see above), but tests that move the clock in
		// steps through what Raft applies on real time were written against a
		// Settle that took real time: leave Raft that much of it.
		time.Sleep(raftGap)
	}
}

const (
	// settleTimeout bounds Settle in real time: reaching it is a failure.
	settleTimeout = 30 * time.Second
	// raftGap is the real time each Settle leaves Raft, with ClusterOptions.Raft.
	raftGap = 3 * time.Millisecond
)

// Step advances the clock by one ClusterOptions.Step and settles.
func (c *Cluster) Step() {
	c.t.Helper()
	c.Advance(c.opts.Step)
}

// Eventually advances the clock in steps until cond holds, for at most
// limit of fake time, and fails the test otherwise. cond is checked first,
// before the clock moves, and after each step, each time once the cluster
// has settled: whenever cond is checked, and when Eventually returns, every
// live node's watchers have been handed the newest view (see Advance).
func (c *Cluster) Eventually(limit time.Duration, cond func() bool, format string, args ...any) {
	c.t.Helper()
	c.Settle()
	for waited := time.Duration(0); ; waited += c.opts.Step {
		if cond() {
			return
		}
		if waited >= limit {
			c.t.Fatalf("registrytest: after %v: "+format, append([]any{limit}, args...)...)
		}
		c.Advance(c.opts.Step)
	}
}

// CheckConverged returns an error unless every live node holds the same
// live records (keys, owners, revisions) and serves the same instances of
// every service.
func (c *Cluster) CheckConverged() error {
	live := c.Live()
	if len(live) < 2 {
		return nil
	}
	ref := live[0]
	refRecs, refInsts := snapshot(ref)
	var errs []string
	for _, n := range live[1:] {
		recs, insts := snapshot(n)
		if d := diffMaps(refRecs, recs); d != "" {
			errs = append(errs, fmt.Sprintf("records %s vs %s: %s", ref.ID, n.ID, d))
		}
		if d := diffMaps(refInsts, insts); d != "" {
			errs = append(errs, fmt.Sprintf("instances %s vs %s: %s", ref.ID, n.ID, d))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("registrytest: nodes disagree:\n%s", strings.Join(errs, "\n"))
	}
	return nil
}

// snapshot returns a node's live records and the instances of its services
// in the default namespace (where the harness's checks look), as comparable
// strings.
func snapshot(n *Node) (recs, insts map[string]string) {
	recs = make(map[string]string)
	n.Replicator().Range(func(r distro.Record) bool {
		if !r.Deleted {
			recs[r.Key] = fmt.Sprintf("%s@%d", r.Owner, r.Revision)
		}
		return true
	})
	insts = make(map[string]string)
	ctx := context.Background()
	for page := 1; ; page++ {
		list, err := n.ListServices(ctx, registry.ListOptions{Page: page, PageSize: 500})
		if err != nil || len(list.Services) == 0 {
			break
		}
		for _, sum := range list.Services {
			v, err := n.Query(ctx, model.Query{Service: sum.Key, IncludeDisabled: true})
			if err != nil {
				continue
			}
			for _, in := range v.Instances {
				insts[in.Key().String()] = fmt.Sprintf("healthy=%v weight=%v enabled=%v md=%v", in.Healthy, in.Weight, in.Enabled, in.Metadata)
			}
		}
	}
	return recs, insts
}

func diffMaps(a, b map[string]string) string {
	var out []string
	for k, va := range a {
		if vb, ok := b[k]; !ok {
			out = append(out, fmt.Sprintf("%s only in the first (%s)", k, va))
		} else if va != vb {
			out = append(out, fmt.Sprintf("%s: %s vs %s", k, va, vb))
		}
	}
	for k, vb := range b {
		if _, ok := a[k]; !ok {
			out = append(out, fmt.Sprintf("%s only in the second (%s)", k, vb))
		}
	}
	slices.SortFunc(out, cmp.Compare)
	if len(out) > 10 {
		out = append(out[:10], fmt.Sprintf("… and %d more", len(out)-10))
	}
	return strings.Join(out, "; ")
}

func (c *Cluster) cleanup(leaks *leakCheck) {
	t := c.t
	if !t.Failed() {
		c.Heal()
		verify := c.dcfg.VerifyInterval
		c.Advance(2 * verify)
		if err := c.CheckConverged(); err != nil {
			t.Errorf("%v", err)
		}
	}
	if t.Failed() {
		t.Logf("registrytest: cluster ran with seed %d", c.Seed)
	}
	for _, n := range c.Live() {
		if err := n.Internals().CheckConsistency(); err != nil {
			t.Errorf("registrytest: node %s: inconsistent index: %v", n.ID, err)
		}
		if err := n.Registry.Close(); err != nil {
			t.Errorf("registrytest: close %s: %v", n.ID, err)
		}
		n.closeTransports()
		n.Registry = nil
	}
	if err := leaks.find(leakWait); err != nil {
		t.Errorf("registrytest: leaked goroutines: %v", err)
	}
}
