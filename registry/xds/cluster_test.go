package xds_test

import (
	"testing"
	"time"

	"github.com/muster-io/muster/distro"
	musterports "github.com/muster-io/muster/internal/ports"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
)

// A 3-node Muster cluster: the gRPC client's xDS server runs on node 1, the
// backends register on nodes 2 and 3. Node 3 crashes: its sessions'
// instances leave node 1 after the orphan timeout, and the client's picks.
func TestGRPCClusterClientOnOneNodeWriterOnAnother(t *testing.T) {
	dc := distro.DefaultConfig()
	dc.SyncDelay = distro.NoSyncDelay // replicate each write at once, without moving the fake clock
	c := registrytest.NewCluster(t, registrytest.ClusterOptions{Nodes: 3, Distro: &dc})
	x := startXDS(t, c.Node(0), "127.0.0.1:0")
	svc := model.ServiceKey{Name: "orders"}

	writer, err := c.Node(2).OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b0, b1 := startBackend(t), startBackend(t)
	for _, b := range []*backend{b0, b1} {
		if err := writer.Register(ctx, b.instance(svc, 1)); err != nil {
			t.Fatal(err)
		}
	}
	survivor, err := c.Node(1).OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b2 := startBackend(t)
	if err := survivor.Register(ctx, b2.instance(svc, 1)); err != nil {
		t.Fatal(err)
	}
	c.Settle() // replicated to node 1
	if v, err := c.Node(0).Query(ctx, model.Query{Service: svc}); err != nil || len(v.Instances) != 3 {
		t.Fatalf("node 1 holds %+v, %v", v, err)
	}

	cc := dialXDS(t, x.Addr, "orders")
	awaitPicks(t, cc, 20*time.Second, 30, set(b0.Addr, b1.Addr, b2.Addr), true, "node 1's client reaches the backends registered on nodes 2 and 3")

	// A change made on node 3 reaches node 1's client.
	if err := writer.Deregister(ctx, b1.instance(svc, 1).Key()); err != nil {
		t.Fatal(err)
	}
	c.Settle()
	awaitPicks(t, cc, time.Second, 100, set(b0.Addr, b2.Addr), false, "a deregistration on node 3 leaves node 1's picks")

	// Node 3 crashes: its session's instance is orphaned and removed.
	c.Stop(2)
	c.Eventually(2*time.Minute, func() bool {
		v, err := c.Node(0).Query(ctx, model.Query{Service: svc})
		return err == nil && len(v.Instances) == 1
	}, "node 3's instances leave node 1")
	awaitPicks(t, cc, time.Second, 100, set(b2.Addr), false, "a crashed node's backends leave the picks")
}

// An xDS server restart: the client keeps serving from its last assignment
// while the server is down, reconnects, and follows changes again.
func TestGRPCServerRestart(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	// The server restarts on its address: a port outside the kernel's
	// ephemeral range, which no connection (the client's redials
	// included) takes as its source port meanwhile.
	addr, err := musterports.Loopback(false)
	if err != nil {
		t.Fatal(err)
	}
	x := startXDS(t, reg, addr)
	svc := model.ServiceKey{Name: "orders"}
	sess, err := reg.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b0, b1 := startBackend(t), startBackend(t)
	for _, b := range []*backend{b0, b1} {
		if err := sess.Register(ctx, b.instance(svc, 1)); err != nil {
			t.Fatal(err)
		}
	}
	cc := dialXDS(t, x.Addr, "orders")
	awaitPicks(t, cc, 20*time.Second, 30, set(b0.Addr, b1.Addr), true, "before the restart")

	x.Stop()
	// Down: the client goes on from its last assignment.
	got := spread(t, cc, 200)
	if got[b0.Addr] == 0 || got[b1.Addr] == 0 || len(got) != 2 {
		t.Fatalf("with the xDS server down, calls went to %v, want both backends", got)
	}
	// A change while the server is down reaches the client once it is back.
	b2 := startBackend(t)
	if err := sess.Register(ctx, b2.instance(svc, 1)); err != nil {
		t.Fatal(err)
	}
	if err := sess.Deregister(ctx, b0.instance(svc, 1).Key()); err != nil {
		t.Fatal(err)
	}
	x2 := startXDS(t, reg, x.Addr) // the same address, a new server
	// gRPC's xDS client reconnects with backoff (about 1 s, growing): a
	// generous deadline.
	awaitPicks(t, cc, 30*time.Second, 100, set(b1.Addr, b2.Addr), true, "after the restart, the client follows the registry again")
	if st := x2.Stats(); st.Streams != 1 || st.Services != 1 {
		t.Fatalf("the new server has %d streams and %d services, want 1 and 1", st.Streams, st.Services)
	}
}
