package registry_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/raftstore"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
)

// raftCluster is a 3-node cluster whose persistent data lives in Raft
// (real Dragonboat and Badger on loopback, small RTT).
func raftCluster(t *testing.T) *registrytest.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts Dragonboat")
	}
	opts := clusterOpts()
	opts.Raft = raftConfig()
	return registrytest.NewCluster(t, opts)
}

// raftConfig is a raftstore configuration for tests: fast elections.
func raftConfig() *raftstore.Config {
	rc := raftstore.DefaultConfig()
	// DeploymentID left 0: registrytest gives the cluster one.
	rc.RTTMillisecond = 10
	rc.ElectionRTT = 10
	rc.HeartbeatRTT = 1
	rc.ProposeTimeout = 2 * time.Second
	rc.ReadTimeout = 2 * time.Second
	return &rc
}

func noneService(name string) model.Service {
	return model.Service{
		Key:      svcKey(name),
		Clusters: []model.Cluster{{Name: model.DefaultCluster, HealthCheck: model.HealthCheck{Type: model.CheckNone}}},
	}
}

func TestRaftPersistentDataOnEveryNode(t *testing.T) {
	c := raftCluster(t)
	a, b, cc := c.Node(0), c.Node(1), c.Node(2)
	if err := a.CreateService(ctx, noneService("db")); err != nil {
		t.Fatal(err)
	}
	w, err := cc.Watch(ctx, model.Query{Service: svcKey("db"), IncludeDisabled: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	mustRegister(t, b, persistent("db", 1), persistent("db", 2))
	// A linearizable query on another node sees a write acknowledged
	// elsewhere, at once.
	v, err := a.Query(ctx, model.Query{Service: svcKey("db"), Linearizable: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Instances) != 2 {
		t.Fatalf("linearizable query on n1 right after the write on n2: %v", ips(v))
	}
	c.WaitFor(5*time.Second, func() bool {
		for _, n := range c.Nodes() {
			if len(ipsOn(t, n, "db")) != 2 {
				return false
			}
		}
		return true
	}, "persistent instances not on every node")

	// The watcher on n3 sees them.
	for {
		u, err := w.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(u.View.Instances) == 2 {
			break
		}
	}

	// Manual health and patches go through Raft too.
	if err := cc.SetHealth(ctx, persistent("db", 1).Key(), false); err != nil {
		t.Fatal(err)
	}
	weight := 5.0
	if err := a.PatchInstance(ctx, model.InstancePatch{Key: persistent("db", 2).Key(), Weight: &weight}); err != nil {
		t.Fatal(err)
	}
	c.WaitFor(5*time.Second, func() bool {
		for _, n := range c.Nodes() {
			v, _ := n.Query(ctx, model.Query{Service: svcKey("db"), IncludeDisabled: true})
			if len(v.Instances) != 2 || v.RealHealthy(0) || v.Instances[1].Weight != 5 {
				return false
			}
		}
		return true
	}, "health and patch not on every node")

	// The state rules hold across nodes.
	if err := cc.Register(ctx, inst("db", 3)); !errors.Is(err, registry.ErrKindMismatch) {
		t.Fatalf("ephemeral into a persistent service: %v", err)
	}
	if err := b.CreateService(ctx, noneService("db")); !errors.Is(err, registry.ErrServiceExists) {
		t.Fatalf("create twice: %v", err)
	}
	if err := cc.DeleteService(ctx, svcKey("db")); !errors.Is(err, registry.ErrServiceNotEmpty) {
		t.Fatalf("delete a service with instances: %v", err)
	}
	for _, i := range []int{1, 2} {
		if err := cc.Deregister(ctx, persistent("db", i).Key()); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.DeleteService(ctx, svcKey("db")); err != nil {
		t.Fatal(err)
	}
	c.WaitFor(5*time.Second, func() bool {
		for _, n := range c.Nodes() {
			if _, err := n.GetService(ctx, svcKey("db")); !errors.Is(err, registry.ErrNotFound) {
				return false
			}
		}
		return true
	}, "deleted service still on some node")
}

func TestRaftRestartCatchesUp(t *testing.T) {
	c := raftCluster(t)
	mustRegister(t, c.Node(0), persistent("db", 1))
	c.Stop(2)
	mustRegister(t, c.Node(1), persistent("db", 2), persistent("db", 3))
	c.Restart(2)
	c.AwaitReady()
	// Ready means it has applied what was committed when it started.
	want := []string{persistent("db", 1).IP, persistent("db", 2).IP, persistent("db", 3).IP}
	slices.Sort(want)
	if got := ipsOn(t, c.Node(2), "db"); !slices.Equal(got, want) {
		t.Fatalf("restarted node serves %v, want %v", got, want)
	}
}

func TestRaftNoQuorum(t *testing.T) {
	c := raftCluster(t)
	mustRegister(t, c.Node(0), persistent("db", 1))
	c.WaitFor(5*time.Second, func() bool { return len(ipsOn(t, c.Node(2), "db")) == 1 }, "not replicated")
	c.Stop(0)
	c.Stop(1)
	n := c.Node(2)
	err := n.Register(ctx, persistent("db", 2))
	if !errors.Is(err, registry.ErrNoLeader) {
		t.Fatalf("write without quorum: %v, want ErrNoLeader", err)
	}
	for _, internal := range []string{"specified timeout", "too small", "dragonboat", "shard not"} {
		if strings.Contains(strings.ToLower(err.Error()), internal) {
			t.Fatalf("ErrNoLeader's message carries Dragonboat's words %q: %v", internal, err)
		}
	}
	// Local reads go on.
	if got := ipsOn(t, n, "db"); len(got) != 1 {
		t.Fatalf("local read without quorum: %v", got)
	}
	c.Restart(0)
	c.Restart(1)
	c.AwaitReady()
}

// Isolate cuts a node's Raft traffic with the rest: the isolated leader's
// node loses its quorum (ErrNoLeader), the others elect a new leader and
// go on writing, and after Heal the isolated node catches up.
func TestRaftIsolatedLeader(t *testing.T) {
	c := raftCluster(t)
	var leader *registrytest.Node
	c.WaitFor(10*time.Second, func() bool {
		for _, n := range c.Live() {
			if n.RaftNode().IsLeader() {
				leader = n
				return true
			}
		}
		return false
	}, "no Raft leader")
	c.Isolate(c.Index(leader))
	if err := leader.Register(ctx, persistent("db", 1)); !errors.Is(err, registry.ErrNoLeader) {
		t.Fatalf("write on the isolated leader's node: %v, want ErrNoLeader", err)
	}
	var other *registrytest.Node
	for _, n := range c.Live() {
		if n != leader {
			other = n
		}
	}
	mustRegister(t, other, persistent("db", 2))
	c.Heal()
	c.WaitFor(10*time.Second, func() bool {
		v, err := leader.Query(ctx, model.Query{Service: svcKey("db"), Linearizable: true})
		return err == nil && slices.Equal(ips(v), []string{persistent("db", 2).IP})
	}, "the isolated node did not catch up after the heal")
}

// The Raft replica is reachable for cluster operations, and reports the
// same leader on every node.
func TestRaftNodeInfo(t *testing.T) {
	c := raftCluster(t)
	var leaders []uint64
	for _, n := range c.Nodes() {
		info := n.RaftNode().Info()
		if !info.HasLeader || len(info.Members) != 3 {
			t.Fatalf("%s: %+v", n.ID, info)
		}
		leaders = append(leaders, info.LeaderID)
	}
	if leaders[0] != leaders[1] || leaders[1] != leaders[2] {
		t.Fatalf("nodes disagree on the leader: %v", leaders)
	}
}
