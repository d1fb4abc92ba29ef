package raftstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/ports"
	"github.com/muster-io/muster/model"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// recListener mirrors the state machine from its change feed, as the
// registry will.
type recListener struct {
	mu        sync.Mutex
	resets    int
	opened    uint64 // the index of the last Reset
	index     uint64
	services  map[model.ServiceKey]model.Service
	instances map[model.InstanceKey]model.Instance
	patches   map[model.InstanceKey]model.InstancePatch
	changes   int
}

func newRecListener() *recListener {
	l := &recListener{}
	l.Reset(State{})
	l.resets = 0
	return l
}

func (l *recListener) Reset(st State) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.resets++
	l.index, l.opened = st.Index, st.Index
	l.services = map[model.ServiceKey]model.Service{}
	l.instances = map[model.InstanceKey]model.Instance{}
	l.patches = map[model.InstanceKey]model.InstancePatch{}
	for _, s := range st.Services {
		l.services[s.Key] = s
	}
	for _, i := range st.Instances {
		l.instances[i.Key()] = i
	}
	for _, p := range st.Patches {
		l.patches[p.Key] = p
	}
}

func (l *recListener) Applied(changes []Change) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ch := range changes {
		if ch.Index < l.index {
			panic(fmt.Sprintf("index went back: %d < %d", ch.Index, l.index))
		}
		l.index = ch.Index
		l.changes++
		if ch.Rejected != nil {
			continue
		}
		c := ch.Cmd
		switch c.Op {
		case OpCreateService, OpUpdateService:
			l.services[c.Service.Key] = c.Service
		case OpDeleteService:
			delete(l.services, c.SvcKey)
		case OpPutInstance:
			l.instances[c.Instance.Key()] = c.Instance
		case OpDeleteInstance:
			delete(l.instances, c.Key)
		case OpPatchInstance:
			l.patches[c.Patch.Key] = c.Patch
		case OpRemovePatch:
			delete(l.patches, c.Key)
		case OpSetHealth:
			i := l.instances[c.Key]
			i.Healthy = c.Healthy
			l.instances[c.Key] = i
		}
	}
}

// has reports whether the mirrored state holds instance key.
func (l *recListener) has(key model.InstanceKey) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.instances[key]
	return ok
}

// state returns the mirrored state in State's order.
func (l *recListener) state() State {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := State{Index: l.index}
	for _, s := range l.services {
		st.Services = append(st.Services, s)
	}
	for _, i := range l.instances {
		st.Instances = append(st.Instances, i)
	}
	for _, p := range l.patches {
		st.Patches = append(st.Patches, p)
	}
	sortState(&st)
	return st
}

// freePort returns a loopback address nobody listens on, outside the
// kernel's ephemeral range: replicas restart on theirs (see internal/ports).
func freePort(t testing.TB) string {
	t.Helper()
	addr, err := ports.Loopback(false)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

type testLogWriter struct{ t testing.TB }

func (w testLogWriter) Write(b []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(b))
	return len(b), nil
}

// testDeployment is the DeploymentID of the tests' clusters.
const testDeployment = 0x6d75737465

func testConfig(t testing.TB, dir string, id uint64, addr string) Config {
	cfg := DefaultConfig()
	cfg.ReplicaID = id
	cfg.DeploymentID = testDeployment
	cfg.Insecure = true // Dragonboat's TCP transport on loopback; security tests turn it off
	cfg.RaftAddress = addr
	cfg.Dir = dir
	cfg.RTTMillisecond = 10
	cfg.ElectionRTT = 10
	cfg.HeartbeatRTT = 1
	cfg.ProposeTimeout = 2 * time.Second
	cfg.ReadTimeout = 2 * time.Second
	if os.Getenv("RAFTSTORE_TEST_LOG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(testLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return cfg
}

// cluster is a set of replicas on loopback in this process.
type cluster struct {
	t     testing.TB
	cfgs  map[uint64]Config
	nodes map[uint64]*Node
	lis   map[uint64]*recListener
}

func newCluster(t testing.TB, size int, tweak func(*Config)) *cluster {
	t.Helper()
	members := map[uint64]string{}
	for id := uint64(1); id <= uint64(size); id++ {
		members[id] = freePort(t)
	}
	return newClusterAt(t, members, tweak)
}

// newClusterAt starts a cluster whose replicas listen at members.
func newClusterAt(t testing.TB, members map[uint64]string, tweak func(*Config)) *cluster {
	t.Helper()
	return newClusterIn(t, t.TempDir(), members, tweak)
}

// newClusterIn starts a cluster whose replicas keep their data in
// root/<ID>: a new one, or the one a crashed process left there.
func newClusterIn(t testing.TB, root string, members map[uint64]string, tweak func(*Config)) *cluster {
	t.Helper()
	c := &cluster{t: t, cfgs: map[uint64]Config{}, nodes: map[uint64]*Node{}, lis: map[uint64]*recListener{}}
	for id, addr := range members {
		cfg := testConfig(t, filepath.Join(root, fmt.Sprint(id)), id, addr)
		cfg.InitialMembers = members
		if tweak != nil {
			tweak(&cfg)
		}
		c.cfgs[id] = cfg
	}
	t.Cleanup(c.closeAll)
	for id := range c.cfgs {
		c.start(id)
	}
	c.waitLeader()
	return c
}

func (c *cluster) start(id uint64) *Node {
	c.t.Helper()
	cfg := c.cfgs[id]
	l := newRecListener()
	cfg.Listener = l
	n, err := New(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		c.t.Fatalf("start %d: %v", id, err)
	}
	c.nodes[id], c.lis[id] = n, l
	return n
}

// join adds a new replica id through the leader and starts it with Join.
func (c *cluster) join(id uint64, tweak func(*Config)) *Node {
	c.t.Helper()
	return c.joinAt(id, freePort(c.t), tweak)
}

// joinAt is join with the new replica's Raft address given.
func (c *cluster) joinAt(id uint64, addr string, tweak func(*Config)) *Node {
	c.t.Helper()
	var root string
	for _, cfg := range c.cfgs {
		root = filepath.Dir(cfg.Dir)
		break
	}
	cfg := testConfig(c.t, filepath.Join(root, fmt.Sprint(id)), id, addr)
	cfg.Join = true
	if tweak != nil {
		tweak(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.any().AddReplica(ctx, id, addr); err != nil {
		c.t.Fatalf("add replica %d: %v", id, err)
	}
	c.cfgs[id] = cfg
	return c.start(id)
}

func (c *cluster) stop(id uint64) {
	c.t.Helper()
	if n := c.nodes[id]; n != nil {
		if err := n.Close(); err != nil {
			c.t.Errorf("close %d: %v", id, err)
		}
		delete(c.nodes, id)
	}
}

func (c *cluster) closeAll() {
	for id := range c.nodes {
		c.stop(id)
	}
}

// any returns some running node.
func (c *cluster) any() *Node {
	for _, n := range c.nodes {
		return n
	}
	c.t.Fatal("no running node")
	return nil
}

func (c *cluster) waitLeader() uint64 {
	c.t.Helper()
	var leader uint64
	c.eventually(10*time.Second, "a leader known to all running nodes", func() bool {
		leader = 0
		for _, n := range c.nodes {
			id, ok := n.Leader()
			if !ok || (leader != 0 && id != leader) {
				return false
			}
			leader = id
		}
		_, running := c.nodes[leader]
		return running
	})
	return leader
}

// eventually polls cond until it holds or the deadline passes.
func (c *cluster) eventually(d time.Duration, what string, cond func() bool) {
	c.t.Helper()
	waitFor(c.t, d, what, cond, func() {
		for id, n := range c.nodes {
			if n != nil {
				c.t.Logf("replica %d: %+v", id, n.Stats())
			}
		}
	})
}

func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	waitFor(t, d, what, cond, nil)
}

// waitFor polls cond until it holds; past d it logs the engine's
// goroutines and what explain says, and fails.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool, explain func()) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			if explain != nil {
				explain()
			}
			var dump strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&dump, 2)
			t.Logf("goroutines in Raft, snapshots and the state machine:\n%s", engineStacks(dump.String()))
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// converged waits until every running node's store and listener hold the
// same state as want's store.
func (c *cluster) converged(ref uint64) State {
	c.t.Helper()
	ctx := context.Background()
	// A linearizable read may find no leader under load (an election
	// under a short ReadTimeout): retried, like settle's writes.
	var want State
	deadline := time.Now().Add(20 * time.Second)
	for {
		var err error
		want, err = c.nodes[ref].State(ctx, ReadOptions{Linearizable: true})
		if err == nil {
			break
		}
		if !errors.Is(err, ErrNoLeader) || time.Now().After(deadline) {
			c.t.Fatal(err)
		}
	}
	for id, n := range c.nodes {
		c.eventually(10*time.Second, fmt.Sprintf("node %d to converge", id), func() bool {
			got, err := n.State(ctx, ReadOptions{})
			if err != nil || !sameData(got, want) {
				return false
			}
			return sameData(c.lis[id].state(), want)
		})
	}
	return want
}

// sameData compares two states, ignoring Index.
func sameData(a, b State) bool {
	a.Index, b.Index = 0, 0
	ea, err1 := model.Marshal(&a)
	eb, err2 := model.Marshal(&b)
	return err1 == nil && err2 == nil && string(ea) == string(eb)
}

func svcKey(name string) model.ServiceKey {
	return model.ServiceKey{Namespace: model.DefaultNamespace, Group: model.DefaultGroup, Name: name}
}

func persistent(svc string, ip string, port int) model.Instance {
	i := model.NewInstance(svcKey(svc), ip, port)
	i.Ephemeral = false
	return i
}

// settle proposes a test's setup write, trying again while it fails with
// ErrNoLeader for up to 20 s: with a short ProposeTimeout, an election
// under load (the race detector beside other packages' tests) must not
// fail the setup of a test about something else. The writes it is used
// for are idempotent.
func settle(t testing.TB, n *Node, cmd Command) Result {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := n.Propose(ctx, cmd)
		cancel()
		if err == nil {
			return res
		}
		if !errors.Is(err, ErrNoLeader) || time.Now().After(deadline) {
			t.Fatalf("propose %s: %v", cmd.Op, err)
		}
	}
}

func mustPropose(t testing.TB, n *Node, cmd Command) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := n.Propose(ctx, cmd)
	if err != nil {
		t.Fatalf("propose %s: %v", cmd.Op, err)
	}
	return res
}

// engineStacks returns the goroutines of a dump (runtime/pprof's, debug=2)
// that are in the state machine, Dragonboat's node, snapshot or recovery
// code, or Badger: what a stuck test wants to see.
func engineStacks(dump string) string {
	var keep []string
	for _, g := range strings.Split(dump, "\n\n") {
		for _, w := range []string{"raftstore.(*stateMachine)", "raftstore.(*Node)", "dragonboat/v4.(*node)", "internal/rsm", "snapshotWorker", "dgraph-io/badger/v4.", "cockroachdb/pebble", "raftstore.(*muxConn)", "raftstore.(*muxTransport)"} {
			if strings.Contains(g, w) {
				keep = append(keep, g)
				break
			}
		}
	}
	return strings.Join(keep, "\n\n")
}
