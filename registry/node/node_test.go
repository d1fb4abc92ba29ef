package node_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/ports"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/raftstore"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/node"
	"go.uber.org/goleak"
)

var (
	secret    = []byte("node-test-transport-secret")
	gossipKey = []byte("node-test-gossip-key-32-bytes!!!")
)

// testConfig is a loopback node with credentials, fast timings and free
// ports.
func testConfig(t *testing.T, id string, dir string, seeds []string, raft []string) node.Config {
	cfg := node.DefaultConfig()
	cfg.NodeID, cfg.Dir, cfg.Seeds = id, filepath.Join(dir, id), seeds
	cfg.Secret, cfg.GossipKey = secret, gossipKey
	cfg.RaftNodes, cfg.DeploymentID = raft, 7
	cfg.Timings = node.Fast()
	cfg.Registry.HealthChecks = nil
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	return cfg
}

// startCluster starts n nodes: the first with no seeds, the others seeded
// with its bound gossip address, all with port 0 for both addresses.
func startCluster(t *testing.T, n int) []*node.Node {
	t.Helper()
	dir := t.TempDir()
	var raft []string
	for i := range n {
		raft = append(raft, fmt.Sprintf("n%d", i+1))
	}
	ctx := context.Background()
	var nodes []*node.Node
	var seeds []string
	for i := range n {
		nd, err := node.Start(ctx, testConfig(t, fmt.Sprintf("n%d", i+1), dir, seeds, raft))
		if err != nil {
			t.Fatalf("start n%d: %v", i+1, err)
		}
		t.Cleanup(func() { _ = nd.Close() })
		nodes = append(nodes, nd)
		if seeds == nil {
			seeds = []string{nd.GossipAddr()}
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for _, nd := range nodes {
		if err := nd.WaitReady(wctx); err != nil {
			t.Fatalf("%s not ready: %v", nd.ID(), err)
		}
	}
	return nodes
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, timeout time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func serves(reg *registry.Registry, svc model.ServiceKey, n int) bool {
	v, err := reg.Query(context.Background(), model.Query{Service: svc})
	return err == nil && len(v.Instances) == n
}

func TestClusterOnLoopback(t *testing.T) {
	defer goleak.VerifyNone(t)
	nodes := startCluster(t, 3)
	ctx := context.Background()
	for _, nd := range nodes {
		if !strings.HasPrefix(nd.TransportAddr(), "127.0.0.1:") || strings.HasSuffix(nd.TransportAddr(), ":0") {
			t.Fatalf("%s transport address %q: want a bound loopback port", nd.ID(), nd.TransportAddr())
		}
		if !strings.HasPrefix(nd.GossipAddr(), "127.0.0.1:") || strings.HasSuffix(nd.GossipAddr(), ":0") {
			t.Fatalf("%s gossip address %q: want a bound loopback port", nd.ID(), nd.GossipAddr())
		}
		if got := len(nd.Membership().Members()); got != 3 {
			t.Fatalf("%s sees %d members, want 3", nd.ID(), got)
		}
	}

	// An ephemeral write on n1 is seen on every node.
	eph := model.ServiceKey{Group: "g", Name: "eph"}
	sess, err := nodes[0].Registry().OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.Register(ctx, model.NewInstance(eph, "10.0.0.1", 80)); err != nil {
		t.Fatal(err)
	}
	for _, nd := range nodes {
		waitFor(t, 10*time.Second, func() bool { return serves(nd.Registry(), eph, 1) }, nd.ID()+" serves the session's instance")
	}

	// A persistent write on n3 commits through Raft and is seen everywhere.
	per := model.ServiceKey{Group: "g", Name: "per"}
	in := model.NewInstance(per, "10.0.0.2", 81)
	in.Ephemeral = false
	if err := nodes[2].Registry().Register(ctx, in); err != nil {
		t.Fatal(err)
	}
	for _, nd := range nodes {
		waitFor(t, 10*time.Second, func() bool { return serves(nd.Registry(), per, 1) }, nd.ID()+" serves the persistent instance")
	}
	if _, ok := nodes[0].Raft().Leader(); !ok {
		t.Fatal("no Raft leader")
	}
	// The Raft log holds back commit-index-only writes (raftstore's default).
	var deferred uint64
	for _, nd := range nodes {
		deferred += nd.Raft().Stats().CommitWritesDeferred
	}
	if deferred == 0 {
		t.Fatal("no commit-index-only write deferred on any replica")
	}

	// A graceful close of n1 hands its session over: its instance leaves
	// the others at once, not after the orphan timeout.
	if err := nodes[0].Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := nodes[0].Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	for _, nd := range nodes[1:] {
		waitFor(t, time.Second, func() bool { return serves(nd.Registry(), eph, 0) }, nd.ID()+" dropped the closed node's session")
	}
	for _, nd := range nodes[1:] {
		if err := nd.Close(); err != nil {
			t.Fatalf("close %s: %v", nd.ID(), err)
		}
	}
}

func TestKillAndRestart(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the nodes' cleanups
	dir := t.TempDir()
	raft := []string{"n1", "n2", "n3"}
	ctx := context.Background()
	var nodes []*node.Node
	var cfgs []node.Config
	var seeds []string
	for i := range 3 {
		cfg := testConfig(t, fmt.Sprintf("n%d", i+1), dir, seeds, raft)
		// A restart reuses the addresses, as a process restarted on the same
		// host does (memberlist ties a name to its address).
		cfg.TransportAddr, cfg.GossipAddr = freeAddr(t), freeAddr(t)
		nd, err := node.Start(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = nd.Close() })
		nodes, cfgs = append(nodes, nd), append(cfgs, cfg)
		seeds = append(seeds, nd.GossipAddr())
	}
	for _, nd := range nodes {
		if err := nd.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	per := model.ServiceKey{Group: "g", Name: "per"}
	register := func(reg *registry.Registry, port int) {
		t.Helper()
		in := model.NewInstance(per, "10.0.0.2", port)
		in.Ephemeral = false
		if err := reg.Register(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	register(nodes[0].Registry(), 81)
	waitFor(t, 10*time.Second, func() bool { return serves(nodes[2].Registry(), per, 1) }, "n3 serves the first write")

	// n3 crashes: the others find it dead by probing, and Raft commits
	// without it.
	if err := nodes[2].Kill(); err != nil {
		t.Fatalf("kill: %v", err)
	}
	waitFor(t, 10*time.Second, func() bool { return len(nodes[0].Membership().Members()) == 2 }, "n1 sees n3 dead")
	register(nodes[1].Registry(), 82)

	// n3 restarts from its directory, loads and catches up.
	cfgs[2].Seeds = seeds[:2]
	n3, err := node.Start(ctx, cfgs[2])
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	t.Cleanup(func() { _ = n3.Close() })
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := n3.WaitReady(wctx); err != nil {
		t.Fatalf("restarted n3 not ready: %v", err)
	}
	waitFor(t, 10*time.Second, func() bool { return serves(n3.Registry(), per, 2) }, "restarted n3 serves both writes")
}

func TestValidateNamesEveryMissingField(t *testing.T) {
	cfg := node.DefaultConfig()
	cfg.RaftMembers = map[uint64]string{1: "n1"}
	err := cfg.Validate()
	if !errors.Is(err, node.ErrInvalidConfig) {
		t.Fatalf("Validate = %v, want ErrInvalidConfig", err)
	}
	for _, field := range []string{"NodeID", "Secret", "GossipKey", "Dir", "DeploymentID", "ReplicaID"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("Validate error does not name %s: %v", field, err)
		}
	}
	if _, err := node.New(cfg); !errors.Is(err, node.ErrInvalidConfig) {
		t.Fatalf("New = %v, want ErrInvalidConfig", err)
	}

	cfg = node.DefaultConfig()
	cfg.NodeID, cfg.Insecure = "n1", true
	if err := cfg.Validate(); err != nil {
		t.Fatalf("an Insecure node without Raft: %v", err)
	}
	cfg.Secret = []byte("short")
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "Secret") {
		t.Fatalf("a short Secret: %v", err)
	}
	cfg = node.DefaultConfig()
	cfg.NodeID, cfg.Secret, cfg.GossipKey = "n1", secret, gossipKey
	cfg.TransportAddr = "0.0.0.0:7001"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "AdvertiseAddr") {
		t.Fatalf("a wildcard transport address without AdvertiseAddr: %v", err)
	}
	cfg.AdvertiseAddr = "10.0.0.1:7001"
	if err := cfg.Validate(); err != nil {
		t.Fatalf("a wildcard transport address with AdvertiseAddr: %v", err)
	}
	cfg.Secret, cfg.GossipKey, cfg.Insecure = nil, nil, true
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "Insecure is for tests on loopback only") {
		t.Fatalf("Insecure on a wildcard transport address: %v", err)
	}
	cfg = node.DefaultConfig()
	cfg.NodeID, cfg.Insecure = "n1", true
	cfg.Registry.EmptyServiceTTL = -time.Second // 0 is the default
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "EmptyServiceTTL") {
		t.Fatalf("an invalid base registry config: %v", err)
	}
	cfg = node.DefaultConfig()
	cfg.NodeID, cfg.Secret = "n1", secret
	cfg.Peers = map[string]string{"n2": "127.0.0.1:7002"}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("a static membership needs no gossip key: %v", err)
	}
	cfg.Seeds = []string{"127.0.0.1:7946"}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "Peers") {
		t.Fatalf("Peers with Seeds: %v", err)
	}
}

// The Raft settings: RaftNodes lists each node ID once (distinct, this
// node among them) and excludes RaftMembers; the snapshot settings have
// their lower bounds. Each error names its field.
func TestValidateRaftSettings(t *testing.T) {
	raftConfig := func() node.Config {
		cfg := node.DefaultConfig()
		cfg.NodeID, cfg.Secret, cfg.GossipKey = "n2", secret, gossipKey
		cfg.Dir, cfg.DeploymentID = t.TempDir(), 7
		cfg.RaftNodes = []string{"n1", "n2", "n3"}
		return cfg
	}
	cfg := raftConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("RaftNodes with the defaults: %v", err)
	}
	for _, tc := range []struct {
		name, field string
		change      func(*node.Config)
	}{
		{"a node ID twice", "RaftNodes", func(c *node.Config) { c.RaftNodes = []string{"n1", "n2", "n1"} }},
		{"an empty node ID", "RaftNodes", func(c *node.Config) { c.RaftNodes = []string{"n1", "n2", ""} }},
		{"RaftNodes and RaftMembers", "RaftMembers", func(c *node.Config) { c.RaftMembers = map[uint64]string{1: "n1", 2: "n2"} }},
		{"NodeID not listed", "ReplicaID", func(c *node.Config) { c.RaftNodes = []string{"n1", "n3"} }},
		{"no snapshots", "SnapshotEntries", func(c *node.Config) { c.SnapshotEntries = raftstore.NoSnapshots }},
		{"too few snapshot entries", "SnapshotEntries", func(c *node.Config) { c.SnapshotEntries = 15 }},
	} {
		cfg := raftConfig()
		tc.change(&cfg)
		err := cfg.Validate()
		if !errors.Is(err, node.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: Validate = %v, want ErrInvalidConfig naming %s", tc.name, err, tc.field)
		}
	}
	// Zero is the default, as everywhere: raftstore's 10000 and 5000, and
	// zero Timings are LAN's.
	cfg = raftConfig()
	cfg.SnapshotEntries, cfg.CompactionOverhead, cfg.Timings = 0, 0, node.Timings{}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("zero snapshot settings and timings: %v", err)
	}
	// Without Raft the snapshot settings are not used, and not checked.
	cfg = raftConfig()
	cfg.RaftNodes, cfg.SnapshotEntries, cfg.CompactionOverhead = nil, 0, 0
	if err := cfg.Validate(); err != nil {
		t.Fatalf("no Raft, zero snapshot settings: %v", err)
	}
}

// The node's Raft replica takes a snapshot once SnapshotEntries entries
// were applied, and not before: the setting reaches the replica (the
// default, 10000, would take none in this test).
func TestSnapshotEntries(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	const every = 32
	cfg := testConfig(t, "n1", t.TempDir(), nil, []string{"n1"})
	cfg.SnapshotEntries, cfg.CompactionOverhead = every, every/2
	ctx := context.Background()
	nd, err := node.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Close()
	if err := nd.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	per := model.ServiceKey{Group: "g", Name: "snap"}
	port := 0
	register := func() {
		t.Helper()
		port++
		in := model.NewInstance(per, "10.0.0.3", port)
		in.Ephemeral = false
		if err := nd.Registry().Register(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	raft := nd.Raft()
	for raft.Stats().Applied < every-4 {
		register()
	}
	if st := raft.Stats(); st.SnapshotsCreated != 0 {
		t.Fatalf("%d snapshots at applied index %d, below SnapshotEntries %d", st.SnapshotsCreated, st.Applied, every)
	}
	for raft.Stats().Applied < every+4 {
		register()
	}
	waitFor(t, 10*time.Second, func() bool { return raft.Stats().SnapshotsCreated >= 1 }, fmt.Sprintf("a snapshot after %d entries (applied %d)", every, raft.Stats().Applied))
	for raft.Stats().Applied < 3*every+4 {
		register()
	}
	waitFor(t, 10*time.Second, func() bool { return raft.Stats().SnapshotsCreated >= 3 }, "a snapshot every SnapshotEntries entries")
	if st := raft.Stats(); st.SnapshotsCreated > 4 {
		t.Fatalf("%d snapshots at applied index %d with SnapshotEntries %d", st.SnapshotsCreated, st.Applied, every)
	}
}

// freeAddr returns a loopback address nobody listens on now (TCP and UDP),
// outside the kernel's ephemeral range: a node restarted on it finds it
// free (see internal/ports).
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := ports.Loopback(true)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// A static peer list instead of gossip: no memberlist, no gossip key;
// replication and Raft work as with gossip.
func TestStaticPeers(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	dir := t.TempDir()
	addrs := map[string]string{"n1": freeAddr(t), "n2": freeAddr(t)}
	raft := map[uint64]string{1: "n1", 2: "n2"}
	ctx := context.Background()
	var nodes []*node.Node
	for _, id := range []string{"n1", "n2"} {
		cfg := testConfig(t, id, dir, nil, nil)
		cfg.RaftMembers = raft // replica IDs given, rather than RaftNodes
		cfg.GossipKey = nil    // no gossip: not needed
		cfg.TransportAddr = addrs[id]
		cfg.Peers = map[string]string{}
		for o, a := range addrs {
			if o != id {
				cfg.Peers[o] = a
			}
		}
		n, err := node.Start(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.Close() })
		if n.GossipAddr() != "" {
			t.Fatalf("%s has a gossip address %q with static peers", id, n.GossipAddr())
		}
		nodes = append(nodes, n)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for _, n := range nodes {
		if err := n.WaitReady(wctx); err != nil {
			t.Fatal(err)
		}
	}
	per := model.ServiceKey{Group: "g", Name: "per"}
	in := model.NewInstance(per, "10.0.0.2", 81)
	in.Ephemeral = false
	if err := nodes[0].Registry().Register(ctx, in); err != nil {
		t.Fatal(err)
	}
	eph := model.ServiceKey{Group: "g", Name: "eph"}
	sess, err := nodes[1].Registry().OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.Register(ctx, model.NewInstance(eph, "10.0.0.1", 80)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return serves(nodes[1].Registry(), per, 1) }, "n2 serves the persistent write")
	waitFor(t, 10*time.Second, func() bool { return serves(nodes[0].Registry(), eph, 1) }, "n1 serves n2's session")
}

// syncBuffer collects the nodes' logs.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Nodes closed gracefully, all at once, log no error (memberlist's
// goroutines that outlive its sockets are expected), and every line names
// its node once.
func TestGracefulCloseLogsNoError(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(io.MultiWriter(&logs, t.Output()), &slog.HandlerOptions{Level: slog.LevelWarn}))
	dir := t.TempDir()
	ctx := context.Background()
	var nodes []*node.Node
	var seeds []string
	for i := range 3 {
		cfg := testConfig(t, fmt.Sprintf("n%d", i+1), dir, seeds, nil) // no Raft: quicker
		cfg.Logger = log
		n, err := node.Start(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.Close() })
		nodes = append(nodes, n)
		seeds = []string{nodes[0].GossipAddr()}
	}
	for _, n := range nodes {
		if err := n.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, func() bool { return len(nodes[2].Membership().Members()) == 3 }, "n3 sees every member")
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.Close(); err != nil {
				t.Errorf("close %s: %v", n.ID(), err)
			}
		}()
	}
	wg.Wait()
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "level=ERROR") {
			t.Errorf("graceful close logged an error: %s", line)
		}
		if line != "" && strings.Count(line, "node=") != 1 {
			t.Errorf("node= not once: %s", line)
		}
	}
}

// Close during Start stops whatever Start has made and leaves no goroutine;
// Start then fails with ErrClosed (or had finished).
func TestCloseDuringStart(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	dir := t.TempDir()
	for i := range 5 {
		cfg := testConfig(t, "n1", filepath.Join(dir, fmt.Sprint(i)), nil, []string{"n1"})
		n, err := node.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() { errc <- n.Start(context.Background()) }()
		if i > 0 {
			time.Sleep(time.Duration(i) * 5 * time.Millisecond) // land the Close at different points of Start
		}
		if err := n.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		if err := <-errc; err != nil && !errors.Is(err, node.ErrClosed) {
			t.Fatalf("start: %v", err)
		}
		_ = n.Close() // after a Start that finished past the first Close
		if err := n.Start(context.Background()); !errors.Is(err, node.ErrClosed) {
			t.Fatalf("Start after Close: %v, want ErrClosed", err)
		}
	}
}

// TestGossipLabel: nodes with the same GossipLabel form one membership; a
// node with another label, seeded with them, is not let in.
func TestGossipLabel(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	dir := t.TempDir()
	ctx := context.Background()
	start := func(id, label string, seeds []string) *node.Node {
		cfg := testConfig(t, id, dir, seeds, nil)
		cfg.GossipLabel = label
		n, err := node.Start(ctx, cfg)
		if err != nil {
			t.Fatalf("start %s: %v", id, err)
		}
		t.Cleanup(func() { _ = n.Close() })
		return n
	}
	n1 := start("n1", "blue", nil)
	seeds := []string{n1.GossipAddr()}
	n2 := start("n2", "blue", seeds)
	n3 := start("n3", "green", seeds)
	waitFor(t, 10*time.Second, func() bool {
		return len(n1.Membership().Members()) == 2 && len(n2.Membership().Members()) == 2
	}, "n1 and n2 (same label) see each other")
	time.Sleep(time.Second) // several gossip and rejoin rounds (Fast)
	for _, n := range []*node.Node{n1, n2} {
		for _, m := range n.Membership().Members() {
			if m.ID == "n3" {
				t.Fatalf("%s lists n3, whose gossip label differs", n.ID())
			}
		}
	}
	if got := len(n3.Membership().Members()); got != 1 {
		t.Fatalf("n3 (another label) lists %d members, want only itself", got)
	}
}
