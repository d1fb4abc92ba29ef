package registry_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/muster-io/muster/distro"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/node"
	"go.uber.org/goleak"
)

// realNode is a registry on real TCP and real memberlist over 127.0.0.1,
// on the real clock, assembled by registry/node.
type realNode struct {
	id  string
	n   *node.Node
	reg *registry.Registry
}

func startReal(t *testing.T, id string, seeds []string) *realNode {
	t.Helper()
	cfg := node.DefaultConfig()
	cfg.NodeID, cfg.Seeds = id, seeds
	cfg.Secret = []byte("muster-test-secret-0123456789")
	cfg.GossipKey = []byte("registry-test-gossip-key-32byte!")
	tm := node.Fast()
	tm.ProbeInterval, tm.ProbeTimeout, tm.GossipInterval = 100*time.Millisecond, 50*time.Millisecond, 20*time.Millisecond
	tm.PushPull, tm.GossipTCPTimeout, tm.GossipDead = time.Second, 200*time.Millisecond, time.Second
	tm.Rejoin, tm.Leave = 500*time.Millisecond, 200*time.Millisecond
	tm.SyncDelay, tm.Verify, tm.Orphan, tm.Tombstone = distro.NoSyncDelay, 200*time.Millisecond, time.Second, 2*time.Second
	tm.Load = 500 * time.Millisecond
	cfg.Timings = tm
	cfg.Registry.HealthChecks = nil
	n, err := node.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &realNode{id: id, n: n, reg: n.Registry()}
}

func (n *realNode) stop() { _ = n.n.Close() }

func poll(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func realIPs(n *realNode, svc string) []string {
	v, err := n.reg.Query(ctx, model.Query{Service: svcKey(svc), IncludeDisabled: true})
	if err != nil {
		return nil
	}
	return ips(v)
}

// The three-node scenario over real TCP (with the shared-secret handshake)
// and real memberlist: writes on one node seen on all, a beat write forwarded
// to its owner, a node stopped and removed from the membership, its sessions'
// instances gone from the survivors, its beat instances adopted.
func TestRealCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("real sockets")
	}
	defer goleak.VerifyNone(t)
	n1 := startReal(t, "n1", nil)
	seeds := []string{n1.n.GossipAddr()}
	n2 := startReal(t, "n2", seeds)
	n3 := startReal(t, "n3", seeds)
	nodes := []*realNode{n1, n2, n3}
	defer func() {
		for _, n := range nodes {
			if n != nil {
				n.stop()
			}
		}
	}()
	poll(t, 10*time.Second, "3 members, all ready", func() bool {
		for _, n := range nodes {
			if len(n.reg.Internals().Replicator().Members()) != 3 || !n.reg.Ready() {
				return false
			}
		}
		return true
	})

	sess, err := n1.reg.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mustRegister(t, sess, inst("s", 1), inst("s", 2))
	var beats []model.Instance
	for i := range 6 {
		beats = append(beats, inst("b", i))
	}
	mustRegister(t, n2.reg, beats...) // most are forwarded to their owners
	wantB := ips(&model.ServiceView{Instances: beats})
	slices.Sort(wantB)
	poll(t, 5*time.Second, "every node serves every instance", func() bool {
		for _, n := range nodes {
			if len(realIPs(n, "s")) != 2 || !slices.Equal(realIPs(n, "b"), wantB) {
				return false
			}
		}
		return true
	})
	// Deregister on n3 of a beat instance n1 owns: forwarded.
	var ownedBy1 model.Instance
	for _, b := range beats {
		if n3.reg.Internals().Replicator().Owner("b/"+model.Endpoint(b.IP, b.Port)) == "n1" {
			ownedBy1 = b
		}
	}
	if ownedBy1.IP != "" {
		if err := n3.reg.Deregister(ctx, ownedBy1.Key()); err != nil {
			t.Fatal(err)
		}
		wantB = slices.DeleteFunc(wantB, func(ip string) bool { return ip == ownedBy1.IP })
		poll(t, 5*time.Second, "the forwarded deregistration everywhere", func() bool {
			for _, n := range nodes {
				if !slices.Equal(realIPs(n, "b"), wantB) {
					return false
				}
			}
			return true
		})
	}

	// n1 stops: the survivors drop it from the membership, remove its
	// sessions' instances after OrphanTimeout, and adopt its beat instances,
	// which live on while their clients beat through n3.
	n1.stop()
	nodes[0] = nil
	survivors := []*realNode{n2, n3}
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, ip := range wantB {
			for _, b := range beats {
				if b.IP == ip {
					if _, err := n3.reg.HeartbeatInstance(ctx, b); err != nil {
						t.Logf("beat %s: %v", ip, err) // ownership may be moving
					}
				}
			}
		}
		done := true
		for _, n := range survivors {
			if len(n.reg.Internals().Replicator().Members()) != 2 || len(realIPs(n, "s")) != 0 || !slices.Equal(realIPs(n, "b"), wantB) {
				done = false
			}
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("survivors did not settle: n2 %v %v, n3 %v %v", realIPs(n2, "s"), realIPs(n2, "b"), realIPs(n3, "s"), realIPs(n3, "b"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
