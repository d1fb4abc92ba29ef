package distro

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/muster-io/muster/distro/gossip"
	"github.com/muster-io/muster/transport"
)

// realNode is a node on real TCP and real memberlist over 127.0.0.1, on the real clock.
type realNode struct {
	id    string
	tcp   *transport.TCP
	ml    *gossip.Memberlist
	store *testStore
	r     *Replicator
}

// testGossipKey and testTransportSecret are the credentials of the test clusters on real sockets.
var (
	testGossipKey       = []byte("distro-test-gossip-key-32-bytes!")
	testTransportSecret = []byte("distro-test-transport-secret")
)

// fastMemberlist is a memberlist profile for tests: crash detection well under a second.
func fastMemberlist(id, tcpAddr string, seeds []string) gossip.Config {
	c := gossip.DefaultConfig()
	c.NodeID, c.BindAddr, c.BindPort, c.TransportAddr, c.Seeds = id, "127.0.0.1", 0, tcpAddr, seeds
	c.SecretKey = testGossipKey
	c.ProbeInterval, c.ProbeTimeout, c.SuspicionMult = 100*time.Millisecond, 50*time.Millisecond, 2
	c.GossipInterval, c.PushPullInterval, c.TCPTimeout, c.GossipToTheDeadTime = 20*time.Millisecond, time.Second, 200*time.Millisecond, time.Second
	c.RejoinInterval = 500 * time.Millisecond
	c.LeaveTimeout = 200 * time.Millisecond
	return c
}

// startRealNode starts a TCP transport, a memberlist joined to seeds and a replicator.
func startRealNode(tb testing.TB, id string, seeds []string, mod func(*Config)) *realNode {
	tb.Helper()
	return startRealNodeGossip(tb, id, seeds, mod, nil)
}

// startRealNodeGossip is startRealNode with gmod, if not nil, editing the
// memberlist's configuration.
func startRealNodeGossip(tb testing.TB, id string, seeds []string, mod func(*Config), gmod func(*gossip.Config)) *realNode {
	tb.Helper()
	n := &realNode{id: id, store: newTestStore(id)}
	var ml atomic.Pointer[gossip.Memberlist]
	tc := transport.DefaultTCPConfig()
	tc.NodeID, tc.ListenAddr, tc.Secret = id, "127.0.0.1:0", testTransportSecret
	tc.ReconnectMin, tc.ReconnectMax = 20*time.Millisecond, 200*time.Millisecond
	tc.Resolve = func(node string) (string, error) {
		if m := ml.Load(); m != nil {
			return m.Addr(node)
		}
		return "", ErrUnknownMember
	}
	tcp, err := transport.NewTCP(tc)
	if err != nil {
		tb.Fatal(err)
	}
	if err := tcp.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	n.tcp = tcp
	gc := fastMemberlist(id, tcp.Addr(), seeds)
	if gmod != nil {
		gmod(&gc)
	}
	m, err := gossip.New(gc)
	if err != nil {
		tb.Fatal(err)
	}
	ml.Store(m)
	if err := m.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	n.ml = m
	cfg := DefaultConfig()
	cfg.NodeID, cfg.Transport, cfg.Membership, cfg.Store = id, tcp, m, n.store
	cfg.SyncDelay = NoSyncDelay
	cfg.VerifyInterval = 200 * time.Millisecond
	cfg.OrphanTimeout = time.Second
	cfg.TombstoneTTL = 2 * time.Second
	cfg.LoadTimeout = 500 * time.Millisecond
	cfg.RequestTimeout = time.Second
	if mod != nil {
		mod(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	n.r = r
	n.store.r.Store(r)
	if err := r.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return n
}

// stop closes the node; crash skips memberlist's leave broadcast (peers must detect it).
func (n *realNode) stop(crash bool) {
	n.r.Close()
	if crash {
		_ = n.ml.Kill()
	} else {
		_ = n.ml.Close()
	}
	n.tcp.Close()
}

func pollUntil(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Three nodes on real TCP and memberlist: replication, then a node crashes, is detected dead, its
// beats are adopted and its sessions removed.
func TestRealTCPMemberlist(t *testing.T) {
	if testing.Short() {
		t.Skip("real sockets; skipped with -short")
	}
	defer goleak.VerifyNone(t)
	n1 := startRealNode(t, "n1", nil, nil)
	seeds := []string{n1.ml.BindAddr()}
	n2 := startRealNode(t, "n2", seeds, nil)
	n3 := startRealNode(t, "n3", seeds, nil)
	nodes := []*realNode{n1, n2, n3}
	defer func() {
		for _, n := range nodes {
			if n != nil {
				n.stop(false)
			}
		}
	}()
	pollUntil(t, 10*time.Second, "all see 3 members and ready", func() bool {
		for _, n := range nodes {
			if len(n.r.Members()) != 3 || !n.r.Ready() {
				return false
			}
		}
		return true
	})
	if _, err := n1.r.Put(KindSession, "s1", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	all := []string{"n1", "n2", "n3"}
	var beats []string
	for i := 0; i < 20; i++ {
		k := beatKeyOwnedBy(all, "n3", 40+i)
		beats = append(beats, k)
		if _, err := n3.r.Put(KindBeat, k, []byte("b")); err != nil {
			t.Fatal(err)
		}
	}
	n3.r.Put(KindSession, "s3", []byte("x"))
	pollUntil(t, 5*time.Second, "replicated", func() bool {
		_, a := n2.store.get("s1")
		_, b := n3.store.get("s1")
		_, c := n1.store.get("s3")
		_, d := n2.store.get(beats[19])
		return a && b && c && d
	})

	n3.stop(true)
	nodes[2] = nil
	pollUntil(t, 10*time.Second, "n3 detected dead", func() bool {
		return len(n1.r.Members()) == 2 && len(n2.r.Members()) == 2
	})
	pollUntil(t, 5*time.Second, "n3's beats adopted and its session removed", func() bool {
		for _, k := range beats {
			r1, _ := n1.r.Get(k)
			r2, _ := n2.r.Get(k)
			if r1.Owner == "n3" || r1.Owner != r2.Owner || r1.Revision != r2.Revision {
				return false
			}
		}
		_, a := n1.store.get("s3")
		_, b := n2.store.get("s3")
		return !a && !b
	})
	for _, n := range nodes[:2] {
		for _, k := range beats {
			if r, _ := n.r.Get(k); r.Owner != hrwOwner([]string{"n1", "n2"}, k) {
				t.Fatalf("%s: %s owned by %s", n.id, k, r.Owner)
			}
		}
	}
	fmt.Fprintln(t.Output(), "crash detected, beats adopted, sessions removed")
}
