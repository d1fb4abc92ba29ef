package distro

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// quiesce settles every node and waits for the network until a round in which no replicator did
// anything and no message was sent (registrytest's Settle, for these tests).
func (c *cluster) quiesce() {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.net.WaitIdle(ctx); err != nil {
		c.t.Fatal(err)
	}
	last := c.net.TotalStats().Messages
	for range 100 {
		did := false
		for _, id := range c.sortedIDs() {
			d, err := c.nodes[id].r.Settle(ctx)
			if err != nil {
				c.t.Fatalf("%s: %v", id, err)
			}
			did = did || d
		}
		if err := c.net.WaitIdle(ctx); err != nil {
			c.t.Fatal(err)
		}
		now := c.net.TotalStats().Messages
		if !did && now == last {
			return
		}
		last = now
	}
	c.t.Fatal("not quiet after 100 rounds")
}

// TestSettle: Settle runs what is due at the clock's time and nothing before its time (a sync
// waits for its merge window, unlike Flush), reports whether the replicator did anything since
// the previous Settle, waits for its goroutines however slow they are, and fails with ErrClosed
// after Close (the cluster's cleanup checks that no goroutine is left).
func TestSettle(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, func(cfg *Config) {
		cfg.VerifyInterval = time.Hour // no verify round (its repair would send early)
		cfg.TombstoneTTL = 3 * time.Hour
	}, "a", "b")
	a, b := c.nodes["a"], c.nodes["b"]
	c.quiesce()
	for _, n := range []*node{a, b} {
		if did, err := n.r.Settle(ctx); did || err != nil {
			t.Fatalf("%s: Settle right after a quiet round: did %v, %v; want false, nil", n.id, did, err)
		}
	}

	msgs := c.net.TotalStats().Messages
	if _, err := a.r.Put(KindSession, "s", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if did, err := a.r.Settle(ctx); !did || err != nil {
		t.Fatalf("Settle after a Put (it woke the loop): did %v, %v; want true, nil", did, err)
	}
	c.clk.Advance(testConfig().SyncDelay - time.Millisecond)
	if did, err := a.r.Settle(ctx); did || err != nil {
		t.Fatalf("Settle before the merge window ends: did %v, %v; want false, nil", did, err)
	}
	if err := c.net.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if got := c.net.TotalStats().Messages; got != msgs {
		t.Fatalf("%d messages sent before the merge window ended", got-msgs)
	}
	if _, ok := b.store.get("s"); ok {
		t.Fatal("b applied the record before its merge window ended")
	}

	c.clk.Advance(time.Millisecond) // the sync is due now, on a's loop timer
	if did, err := a.r.Settle(ctx); !did || err != nil {
		t.Fatalf("Settle when the sync is due: did %v, %v; want true, nil", did, err)
	}
	if err := c.net.WaitIdle(ctx); err != nil { // the sync was handed to the network by Settle's return
		t.Fatal(err)
	}
	if _, ok := b.store.get("s"); !ok {
		t.Fatal("b has not applied the record after a's Settle and the network's WaitIdle")
	}
	c.quiesce()

	// A node joins; its startup load hands the Store what it loaded on the load's goroutine, and
	// that Store is slow (here: blocked until released). Settle waits for it.
	release := make(chan struct{})
	var once sync.Once
	let := func() { once.Do(func() { close(release) }) }
	t.Cleanup(let) // before the cluster's: a failed test must not leave the load stuck
	n := c.add("c")
	n.store.onApply = func(Record) { <-release }
	if did, err := n.r.Settle(ctx); did || err != nil {
		t.Fatalf("Settle before Start: did %v, %v; want false, nil", did, err)
	}
	c.setMembers("a", "b", "c")
	c.startNode("c")
	// Settle returns while the load waits for its peers (the network counts those requests); once
	// they are answered the load runs into the Store, and Settle can only wait for it.
	var err error
	for range 100 {
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, err = n.r.Settle(short)
		cancel()
		if err != nil {
			break
		}
		if err := c.net.WaitIdle(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "still running") {
		t.Fatalf("Settle while the load is stuck in the Store: %v; want the deadline, saying what runs", err)
	}
	if n.r.Ready() {
		t.Fatal("ready while the load is stuck in the Store")
	}
	let()
	if did, err := n.r.Settle(ctx); !did || err != nil {
		t.Fatalf("Settle after the Store let go: did %v, %v; want true, nil", did, err)
	}
	if !n.r.Ready() {
		t.Fatal("not ready right after Settle: it returned before the load ended")
	}
	if _, ok := n.store.get("s"); !ok {
		t.Fatal("the joined node's Store lacks the loaded record right after Settle")
	}
	c.quiesce()

	if err := a.r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.r.Settle(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Settle after Close: %v, want ErrClosed", err)
	}
}
