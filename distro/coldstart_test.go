package distro

import (
	"testing"
	"time"
)

// A cold cluster, every node starting empty at once, is ready as soon as
// every node has heard from every peer that it is loading too, not after
// LoadTimeout.
func TestColdClusterReadyBeforeLoadTimeout(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // newCluster's clock
	c := newCluster(t, func(cfg *Config) { cfg.LoadTimeout, cfg.ColdStartMembers = time.Minute, 3 }, "a", "b", "c")
	if took := c.clk.Since(start); took >= time.Second {
		t.Fatalf("a cold 3-node cluster took %v of fake time to be ready, want well under LoadTimeout (1m)", took)
	}
	c.nodes["a"].r.Put(KindSession, "s", []byte("x"))
	c.eventually(time.Second, "replicated", c.converged)
}

// A node restarting next to a peer that is loading too does not take that
// for a cold cluster while another peer, which holds state, cannot be
// reached: it waits for that peer (or LoadTimeout), and loads its records.
func TestRestartWaitsForUnreachablePeerDespiteLoadingPeer(t *testing.T) {
	c := newCluster(t, nil, "a", "b", "c")
	for i := range 20 {
		c.nodes["b"].r.Put(KindSession, "b"+string(rune('a'+i)), []byte("payload"))
	}
	c.eventually(time.Second, "replicated", c.converged)

	c.mod = func(cfg *Config) { cfg.LoadTimeout, cfg.ColdStartMembers = time.Minute, 3 }
	c.stop("a")
	c.stop("c")
	na, nc := c.add("a"), c.add("c")
	c.setMembers("a", "b", "c")
	c.net.Isolate("b") // the only node with state is unreachable
	c.startNode("a")
	c.startNode("c")
	for range 20 {
		c.step(100 * time.Millisecond)
	}
	c.settle()
	if na.r.Ready() || nc.r.Ready() {
		t.Fatalf("ready (a %v, c %v) while the peer holding state was unreachable and the other loading", na.r.Ready(), nc.r.Ready())
	}
	c.net.Heal()
	c.eventually(5*time.Second, "a and c ready", func() bool { return na.r.Ready() && nc.r.Ready() })
	for _, n := range []*node{na, nc} {
		n.store.mu.Lock()
		got := len(n.store.recs)
		n.store.mu.Unlock()
		if got != 20 {
			t.Fatalf("%s holds %d of b's 20 records after the load", n.id, got)
		}
	}
}

// TestColdStartWaitsForExpectedMembers: a and c restart together, and
// their memberships (gossip still converging: the join went through each
// other only) do not list b yet, which holds every record. Each sees its
// only peer loading, but a cluster of three is expected: neither takes that
// for a cold cluster, and both load b's records once gossip reports it.
func TestColdStartWaitsForExpectedMembers(t *testing.T) {
	c := newCluster(t, nil, "a", "b", "c")
	for i := range 20 {
		c.nodes["b"].r.Put(KindSession, "b"+string(rune('a'+i)), []byte("payload"))
	}
	c.eventually(time.Second, "replicated", c.converged)

	c.mod = func(cfg *Config) { cfg.LoadTimeout, cfg.ColdStartMembers = time.Minute, 3 }
	c.stop("a")
	c.stop("c")
	na, nc := c.add("a"), c.add("c")
	na.mem.Set(Member{ID: "a"}, Member{ID: "c"})
	nc.mem.Set(Member{ID: "a"}, Member{ID: "c"})
	c.startNode("a")
	c.startNode("c")
	for range 5 { // 500 ms of fake time: well within gossip convergence
		c.step(100 * time.Millisecond)
	}
	c.settle()
	if na.r.Ready() || nc.r.Ready() {
		t.Fatalf("ready (a %v, c %v) with two of three expected members in view, both loading", na.r.Ready(), nc.r.Ready())
	}
	c.setMembers("a", "b", "c") // gossip reports b
	c.eventually(5*time.Second, "a and c ready", func() bool { return na.r.Ready() && nc.r.Ready() })
	for _, n := range []*node{na, nc} {
		n.store.mu.Lock()
		got := len(n.store.recs)
		n.store.mu.Unlock()
		if got != 20 {
			t.Fatalf("%s holds %d of b's 20 records after the load", n.id, got)
		}
	}
}
