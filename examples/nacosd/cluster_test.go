package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	mmodel "github.com/muster-io/muster/model"
	"github.com/nacos-group/nacos-sdk-go/v2/model"
	"github.com/nacos-group/nacos-sdk-go/v2/vo"
)

// startCluster starts n nacosd nodes on loopback (real TCP transport,
// memberlist with its gossip key, Raft over the transport) and waits until
// every one serves. Each mod changes every node's configuration.
func startCluster(t *testing.T, n int, mods ...func(*Config)) []*Server {
	t.Helper()
	var peers []Peer
	for i := range n {
		peers = append(peers, Peer{ID: fmt.Sprintf("n%d", i+1), Addr: "127.0.0.1:" + strconv.Itoa(freeBase(t, true))})
	}
	nodes := make([]*Server, n)
	for i := range n {
		cfg := DefaultConfig()
		cfg.HTTPAddr, cfg.NodeID, cfg.Peers = peers[i].Addr, peers[i].ID, peers
		cfg.Secret = []byte("a test cluster's shared secret")
		cfg.Logger = testLogger(t).With("test-node", peers[i].ID)
		cfg.Fast = true
		for _, mod := range mods {
			mod(&cfg)
		}
		s, err := NewServer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make(chan error, n)
	for _, s := range nodes {
		go func() { errs <- s.Start(ctx) }()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, s := range nodes {
			wg.Add(1)
			go func() { defer wg.Done(); _ = s.Close() }()
		}
		wg.Wait()
	})
	for _, s := range nodes {
		if err := s.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return nodes
}

// TestClusterSubscribeAcrossNodes: a change made through one node reaches
// a subscriber connected to another within 100 ms.
func TestClusterSubscribeAcrossNodes(t *testing.T) {
	skipUnderRace(t)
	nodes := startCluster(t, 3)
	seed := newClient(t, nodes[2].HTTPAddr())
	register(t, seed, "xnode", "", "10.7.0.1", 80, 1) // pushes with no hosts are ignored by the client
	eventually(t, 5*time.Second, "the instance replicates", func() bool { return len(served(t, nodes[1], "xnode")) == 1 })

	sub := newClient(t, nodes[1].HTTPAddr())
	changed := make(chan int, 16)
	if err := sub.Subscribe(&vo.SubscribeParam{ServiceName: "xnode", SubscribeCallback: func(hs []model.Instance, err error) {
		changed <- len(hs)
	}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("no first callback")
	}
	pub := newClient(t, nodes[0].HTTPAddr())
	// A first change, not timed, opens the connections it needs (the
	// client's to n1, n1's transport connection to n2).
	register(t, pub, "xnode", "", "10.7.1.0", 80, 1)
	select {
	case <-changed:
	case <-time.After(3 * time.Second):
		t.Fatal("the warm-up change never reached the subscriber")
	}
	var took []time.Duration
	for i := range 5 {
		start := time.Now()
		register(t, pub, "xnode", "", "10.7.1."+strconv.Itoa(i+1), 80, 1)
		select {
		case n := <-changed:
			took = append(took, time.Since(start))
			if n != 2 {
				t.Errorf("callback %d has %d hosts, want 2", i, n)
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("change %d never reached the subscriber on another node", i)
		}
	}
	// The median, so that one change delayed by a loaded CI machine does
	// not fail the test; each one is logged.
	t.Logf("change through n1 to n2's subscriber's callback: %v", took)
	slices.Sort(took)
	switch med := took[len(took)/2]; {
	case med > time.Second:
		// Slower than Nacos's own 1 s sync delay: the immediate push path
		// is broken, not the machine slow.
		t.Fatalf("median time from a change through n1 to n2's subscriber's callback: %v (want ≤ 100 ms)", med)
	case med > 100*time.Millisecond:
		// Inconclusive: a loaded machine, not a broken path (the benchmark,
		// NACOSD_BENCH=1, measures push latency).
		t.Logf("median time from a change through n1 to n2's subscriber's callback: %v, over 100 ms: inconclusive under load", med)
	}
}

// TestClusterFailover: a node killed, its clients reconnect to another and
// re-register, and their instances stay served throughout.
func TestClusterFailover(t *testing.T) {
	skipUnderRace(t)
	nodes := startCluster(t, 3)
	var addrs []string
	for _, s := range nodes {
		addrs = append(addrs, s.HTTPAddr())
	}
	c := newClient(t, addrs...)
	register(t, c, "ha", "", "10.8.0.1", 80, 1)
	// Find the node the client is connected to.
	victim := -1
	eventually(t, 5*time.Second, "the client's connection is found", func() bool {
		for i, s := range nodes {
			if len(s.api.snapshot()) == 1 {
				victim = i
				return true
			}
		}
		return false
	})
	survivor := nodes[(victim+1)%3]
	eventually(t, 5*time.Second, "the instance replicates", func() bool { return len(served(t, survivor, "ha")) == 1 })

	// Watch the instance on a survivor from the moment of the kill.
	missing := make(chan time.Duration, 1)
	stop := make(chan struct{})
	go func() {
		var gone time.Time
		var worst time.Duration
		for {
			select {
			case <-stop:
				missing <- worst
				return
			default:
			}
			v, err := survivor.Registry().Query(context.Background(), mQuery("ha"))
			if err == nil && len(v.Instances) == 0 && gone.IsZero() {
				gone = time.Now()
			} else if err == nil && len(v.Instances) > 0 && !gone.IsZero() {
				worst = max(worst, time.Since(gone))
				gone = time.Time{}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	start := time.Now()
	nodes[victim].Kill()
	eventually(t, 20*time.Second, "the client reconnects to a survivor", func() bool {
		for i, s := range nodes {
			if i != victim && len(s.api.snapshot()) == 1 {
				return true
			}
		}
		return false
	})
	reconnect := time.Since(start)
	// Once the survivors drop the dead node's records (the orphan timeout,
	// 2 s in Fast mode), the instance must still be there, re-registered by
	// the client.
	victimID := nodes[victim].cfg.NodeID
	for i, s := range nodes {
		if i != victim {
			waitRecordsDropped(t, s, victimID)
		}
	}
	for i, s := range nodes {
		if i != victim {
			if n := len(served(t, s, "ha")); n != 1 {
				t.Fatalf("node %d serves %d instances of ha after failover", i+1, n)
			}
		}
	}
	close(stop)
	if worst := <-missing; worst > reconnect {
		t.Fatalf("the instance was missing for %v, longer than the client's reconnect (%v)", worst, reconnect)
	}
	t.Logf("client reconnected %v after the kill; instance never missing longer than that", reconnect)
	// And the client still works through its new node.
	hs, err := c.SelectAllInstances(vo.SelectAllInstancesParam{ServiceName: "ha"})
	if err != nil || len(hs) != 1 {
		t.Fatalf("after failover the client sees %v %v", hs, err)
	}
}

func mQuery(svc string) mmodel.Query {
	return mmodel.Query{Service: mmodel.ServiceKey{Name: svc}, IncludeDisabled: true}
}

// TestClusterGracefulShutdown: a node shut down gracefully tells its client
// to move (ConnectResetRequest); the client reconnects to another node and
// registers there, and its instance never leaves the survivors.
func TestClusterGracefulShutdown(t *testing.T) {
	skipUnderRace(t)
	nodes := startCluster(t, 3)
	var addrs []string
	for _, s := range nodes {
		addrs = append(addrs, s.HTTPAddr())
	}
	c := newClient(t, addrs...)
	register(t, c, "moved", "", "10.9.0.1", 80, 1)
	victim := -1
	eventually(t, 5*time.Second, "the client's connection is found", func() bool {
		for i, s := range nodes {
			if len(s.api.snapshot()) == 1 {
				victim = i
				return true
			}
		}
		return false
	})
	survivor := nodes[(victim+1)%3]
	eventually(t, 5*time.Second, "the instance replicates", func() bool { return len(served(t, survivor, "moved")) == 1 })
	missing := make(chan bool, 1)
	stop := make(chan struct{})
	go func() {
		gone := false
		for {
			select {
			case <-stop:
				missing <- gone
				return
			default:
			}
			if v, err := survivor.Registry().Query(context.Background(), mQuery("moved")); err == nil && len(v.Instances) == 0 {
				gone = true
			}
			time.Sleep(time.Millisecond)
		}
	}()
	if err := nodes[victim].Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the client is connected to a survivor", func() bool {
		for i, s := range nodes {
			if i != victim && len(s.api.snapshot()) == 1 {
				return true
			}
		}
		return false
	})
	close(stop)
	if <-missing {
		t.Fatal("the instance left the survivors during a graceful shutdown")
	}
	for i, s := range nodes {
		if i != victim && len(served(t, s, "moved")) != 1 {
			t.Fatalf("node %d does not serve the moved instance", i+1)
		}
	}
}
