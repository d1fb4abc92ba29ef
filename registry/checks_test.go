package registry_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/raftcp"
	"github.com/muster-io/muster/registry/registrytest"
)

// A persistent instance in a TCP-checked cluster goes unhealthy when its
// listener closes and healthy again when it reopens; a watcher sees both.
func TestActiveCheckFlipsPersistentInstance(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().(*net.TCPAddr)
	go acceptAll(l)

	cfg := registry.DefaultConfig() // active checks on
	reg := registrytest.New(t, registrytest.Options{Config: &cfg})
	in := model.NewInstance(svcKey("db"), "127.0.0.1", addr.Port)
	in.Ephemeral = false
	mustRegister(t, reg, in)
	w, err := reg.Watch(ctx, model.Query{Service: svcKey("db")})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	next := func() *model.ServiceView {
		t.Helper()
		u, err := w.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return u.View
	}
	if v := next(); len(v.Instances) != 1 || !v.Instances[0].Healthy {
		t.Fatalf("first view: %v", v.Instances)
	}

	healthy := func() bool {
		v, _ := reg.Query(ctx, model.Query{Service: svcKey("db")})
		return len(v.Instances) == 1 && v.RealHealthy(0)
	}
	reg.Advance(0)
	if !healthy() {
		t.Fatal("unhealthy while its listener accepts")
	}

	// The listener closes: connections are refused, a definite failure,
	// so the next check flips it.
	l.Close()
	for i := 0; healthy(); i++ {
		if i > 10 {
			t.Fatal("still healthy 10 checks after the listener closed")
		}
		reg.Advance(7 * time.Second)
	}
	if v := next(); v.RealHealthy(0) {
		t.Fatalf("the watcher did not see the instance go unhealthy")
	}

	// It reopens on the same port: healthy after 3 good checks.
	l2, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(addr.Port)))
	if err != nil {
		t.Skipf("port %d taken meanwhile: %v", addr.Port, err)
	}
	defer l2.Close()
	go acceptAll(l2)
	for i := 0; !healthy(); i++ {
		if i > 10 {
			t.Fatal("still unhealthy 10 checks after the listener reopened")
		}
		reg.Advance(7 * time.Second)
	}
	for {
		if v := next(); v.RealHealthy(0) {
			break
		}
	}
}

func acceptAll(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

// The node that probes an instance dies: another takes the target over from
// the stored state (no flip), and goes on probing it.
func TestActiveCheckHandover(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go acceptAll(l)
	defer l.Close()

	cfg := registry.DefaultConfig()
	if testing.Short() {
		t.Skip("starts Dragonboat")
	}
	opts := clusterOpts()
	opts.Config = &cfg
	opts.Raft = raftConfig()
	c := registrytest.NewCluster(t, opts)
	in := model.NewInstance(svcKey("db"), "127.0.0.1", l.Addr().(*net.TCPAddr).Port)
	in.Ephemeral = false
	mustRegister(t, c.Node(0), in)
	c.Advance(time.Second)

	prober := func() (*registrytest.Node, int) {
		var who *registrytest.Node
		count := 0
		for _, n := range c.Live() {
			if st, ok := n.Internals().CheckStatus(in.Key()); ok && st.Probed {
				who = n
				count++
			}
		}
		return who, count
	}
	owner, count := prober()
	if count != 1 {
		t.Fatalf("%d nodes probe the instance, want 1", count)
	}
	st, _ := owner.Internals().CheckStatus(in.Key())
	if st.Checks == 0 || !st.Healthy {
		t.Fatalf("owner %s: %+v", owner.ID, st)
	}
	c.Stop(c.Index(owner))
	next, count := prober()
	if count != 1 || next == owner {
		t.Fatalf("after the owner died: %d probers", count)
	}
	if st, _ := next.Internals().CheckStatus(in.Key()); !st.Healthy {
		t.Fatalf("the new owner took the target over unhealthy: %+v", st)
	}
	c.Advance(10 * time.Second)
	if st, _ := next.Internals().CheckStatus(in.Key()); st.Checks == 0 || !st.Healthy {
		t.Fatalf("the new owner does not probe: %+v", st)
	}
	l.Close()
	c.Eventually(30*time.Second, func() bool {
		for _, n := range c.Live() {
			v, _ := n.Query(ctx, model.Query{Service: svcKey("db")})
			if len(v.Instances) != 1 || v.RealHealthy(0) {
				return false
			}
		}
		return true
	}, "the instance did not turn unhealthy everywhere after its listener closed")
}

// A flip found while Raft has no quorum is written once it is back: retried,
// never lost.
func TestActiveCheckWriteRetriedWithoutQuorum(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go acceptAll(l)
	defer l.Close()
	if testing.Short() {
		t.Skip("starts Dragonboat")
	}
	cfg := registry.DefaultConfig()
	opts := clusterOpts()
	opts.Config = &cfg
	opts.Raft = raftConfig()
	opts.Raft.ProposeTimeout = 300 * time.Millisecond
	c := registrytest.NewCluster(t, opts)
	in := model.NewInstance(svcKey("db"), "127.0.0.1", l.Addr().(*net.TCPAddr).Port)
	in.Ephemeral = false
	mustRegister(t, c.Node(0), in)
	c.Advance(time.Second)
	var prober *registrytest.Node
	for _, n := range c.Live() {
		if st, ok := n.Internals().CheckStatus(in.Key()); ok && st.Probed {
			prober = n
		}
	}
	if prober == nil {
		t.Fatal("nobody probes the instance")
	}
	var others []int
	for i, n := range c.Nodes() {
		if n != prober {
			others = append(others, i)
		}
	}
	for _, i := range others {
		c.Stop(i)
	}
	l.Close()
	c.Advance(8 * time.Second) // the flip is found; its write fails: no leader
	if st, _ := prober.Internals().CheckStatus(in.Key()); st.Healthy {
		t.Fatalf("the check did not flip: %+v", st)
	}
	for _, i := range others {
		c.Restart(i)
	}
	c.AwaitReady()
	// The retries run on the fake clock, Raft on real time: move both.
	deadline := time.Now().Add(20 * time.Second)
	for {
		written := true
		for _, n := range c.Live() {
			v, err := n.Query(ctx, model.Query{Service: svcKey("db"), Linearizable: true})
			if err != nil { // no leader yet: a linearizable read fails
				written = false
				continue
			}
			if len(v.Instances) != 1 || v.RealHealthy(0) {
				written = false
			}
		}
		if written {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the flip was never written")
		}
		c.Advance(time.Second)
		time.Sleep(20 * time.Millisecond)
	}
}

// A change of the cluster's check config takes effect on the next check.
func TestActiveCheckConfigChange(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go acceptAll(l)
	defer l.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()

	cfg := registry.DefaultConfig()
	reg := registrytest.New(t, registrytest.Options{Config: &cfg})
	in := model.NewInstance(svcKey("db"), "127.0.0.1", l.Addr().(*net.TCPAddr).Port)
	in.Ephemeral = false
	mustRegister(t, reg, in)
	reg.Advance(0)
	st, ok := reg.Internals().CheckStatus(in.Key())
	if !ok || st.Type != model.CheckTCP || !st.Healthy || st.Checks == 0 {
		t.Fatalf("before the change: %+v", st)
	}
	// Check another port, where nothing listens: refused at the next check.
	def := model.Service{Key: svcKey("db"), Clusters: []model.Cluster{{
		Name: model.DefaultCluster, HealthCheck: model.HealthCheck{Type: model.CheckTCP, Port: closedPort},
	}}}
	if err := reg.UpdateService(ctx, def); err != nil {
		t.Fatal(err)
	}
	reg.Advance(st.NextDue.Sub(reg.Clock.Now()))
	st, _ = reg.Internals().CheckStatus(in.Key())
	if st.Healthy || st.Last.Healthy {
		t.Fatalf("the next check after the change did not use the new port: %+v", st)
	}
	// NONE: no more probes; the health is set by hand.
	def.Clusters[0].HealthCheck = model.HealthCheck{Type: model.CheckNone}
	if err := reg.UpdateService(ctx, def); err != nil {
		t.Fatal(err)
	}
	if st, ok := reg.Internals().CheckStatus(in.Key()); ok && st.Probed {
		t.Fatalf("still probed under NONE: %+v", st)
	}
	if err := reg.SetHealth(ctx, in.Key(), true); err != nil {
		t.Fatal(err)
	}
}

// With persistent data in Raft and no Distro, the Raft leader runs the
// checks, and a new leader takes them over.
func TestActiveCheckRaftLeaderProbes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Dragonboat")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go acceptAll(l)
	defer l.Close()

	clock := clockwork.NewFakeClockAt(registrytest.Epoch)
	dir := t.TempDir()
	members := map[uint64]string{}
	var held []net.Listener // held until all are chosen, so no port repeats
	for id := uint64(1); id <= 3; id++ {
		a, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		members[id] = a.Addr().String()
		held = append(held, a)
	}
	for _, a := range held {
		a.Close()
	}
	var regs []*registry.Registry
	var stores []*raftcp.Store
	defer func() {
		for _, r := range regs {
			if r != nil {
				r.Close()
			}
		}
	}()
	for id := uint64(1); id <= 3; id++ {
		cfg := registry.DefaultConfig()
		cfg.NodeID = fmt.Sprintf("n%d", id)
		cfg.Clock = clock
		rc := *raftConfig()
		rc.DeploymentID = 0x72656769 // not a registrytest cluster: set by hand
		rc.ReplicaID, rc.RaftAddress, rc.Dir, rc.InitialMembers = id, members[id], filepath.Join(dir, cfg.NodeID), members
		rc.Insecure = true // Dragonboat's own TCP transport on loopback
		cp := raftcp.New(rc)
		cfg.Store = cp.Open
		stores = append(stores, cp)
		reg, err := registry.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.Start(ctx); err != nil {
			t.Fatal(err)
		}
		regs = append(regs, reg)
	}
	for _, r := range regs {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := r.WaitReady(wctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	in := model.NewInstance(svcKey("db"), "127.0.0.1", l.Addr().(*net.TCPAddr).Port)
	in.Ephemeral = false
	mustRegister(t, regs[0], in)
	probers := func() []int {
		var out []int
		for i, r := range regs {
			if r == nil {
				continue
			}
			_ = r.Internals().Settle(ctx)
			if st, ok := r.Internals().CheckStatus(in.Key()); ok && st.Probed {
				out = append(out, i)
			}
		}
		return out
	}
	leader := -1
	deadline := time.Now().Add(10 * time.Second)
	for {
		p := probers()
		if len(p) == 1 && stores[p[0]].Node().IsLeader() {
			leader = p[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("probers %v; want the leader alone", p)
		}
		clock.Advance(time.Second)
		time.Sleep(10 * time.Millisecond)
	}
	regs[leader].Close()
	regs[leader] = nil
	deadline = time.Now().Add(20 * time.Second)
	for {
		p := probers()
		if len(p) == 1 && p[0] != leader && stores[p[0]].Node().IsLeader() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the leader stopped, probers %v", p)
		}
		clock.Advance(time.Second)
		time.Sleep(10 * time.Millisecond)
	}
}

// With Distro but no Raft, persistent data is not replicated: the node that
// holds a persistent instance probes it, whoever owns its address.
func TestActiveCheckDistroWithoutRaft(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go acceptAll(l)
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port

	cfg := registry.DefaultConfig()
	opts := clusterOpts()
	opts.Config = &cfg
	c := registrytest.NewCluster(t, opts)
	var holder *registrytest.Node
	for _, n := range c.Nodes() {
		if n.Owner("127.0.0.1", port) != n.ID {
			holder = n
			break
		}
	}
	in := model.NewInstance(svcKey("db"), "127.0.0.1", port)
	in.Ephemeral = false
	mustRegister(t, holder, in)
	c.Advance(time.Second)
	st, ok := holder.Internals().CheckStatus(in.Key())
	if !ok || !st.Probed || st.Checks == 0 {
		t.Fatalf("%s holds the instance but does not probe it: %+v (owner of the address: %s)", holder.ID, st, holder.Owner("127.0.0.1", port))
	}
	l.Close()
	c.Eventually(30*time.Second, func() bool {
		v, _ := holder.Query(ctx, model.Query{Service: svcKey("db")})
		return len(v.Instances) == 1 && !v.RealHealthy(0)
	}, "the instance did not turn unhealthy after its listener closed")
	// The cleanup checks that every node holds the same instances, which
	// unreplicated persistent data breaks by design.
	if err := holder.Deregister(ctx, in.Key()); err != nil {
		t.Fatal(err)
	}
}
