package registrytest_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/muster-io/muster/distro"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
)

// TestSettleWaitsForStarvedLoop: Settle returns only once each replicator's
// loop has run what its clock made due, however long the loop waits for a
// CPU. Each write's merge window (SyncDelay) ends with a bare Clock.Advance,
// so the sync is due only on the sender's loop timer, with no message in
// flight; one P and goroutines that spin (the fault: the machine is busy)
// keep that loop off the CPU for a scheduler time slice at a time. Right
// after Settle, every node must serve the instance.
func TestSettleWaitsForStarvedLoop(t *testing.T) {
	const hogs = 4
	dc := distro.DefaultConfig()
	c := registrytest.NewCluster(t, registrytest.ClusterOptions{Distro: &dc})
	ctx := context.Background()
	// A session with many instances: its record, synced whole, takes its sender a while to
	// encode, which the busy CPU stretches.
	sess, err := c.Node(0).OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bulk := model.ServiceKey{Name: "bulk"}
	for i := range 1000 { // MaxInstancesPerSession
		if err := sess.Register(ctx, model.NewInstance(bulk, fmt.Sprintf("10.1.%d.%d", i/250, i%250), 80)); err != nil {
			t.Fatal(err)
		}
	}
	c.Advance(dc.SyncDelay)

	prev := runtime.GOMAXPROCS(1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range hogs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for i := 0; i < 1e5; i++ { // spin without blocking
				}
			}
		}()
	}
	t.Cleanup(func() { // before the cluster's checks
		close(stop)
		wg.Wait()
		runtime.GOMAXPROCS(prev)
	})

	svc := model.ServiceKey{Name: "starved"}
	for i := range 4 {
		in := model.NewInstance(svc, fmt.Sprintf("10.0.7.%d", i), 80)
		if err := sess.Deregister(ctx, model.NewInstance(bulk, fmt.Sprintf("10.1.%d.%d", i/250, i%250), 80).Key()); err != nil {
			t.Fatal(err)
		}
		if err := sess.Register(ctx, in); err != nil {
			t.Fatal(err)
		}
		c.Settle()
		c.Clock.Advance(dc.SyncDelay) // the sync is due now, on the loop's timer
		c.Settle()
		for _, n := range c.Live() {
			v, err := n.Query(ctx, model.Query{Service: svc})
			if err != nil || len(v.Instances) != i+1 {
				t.Fatalf("write %d: %s right after Settle serves %d instances (%v), want %d", i, n.ID, len(v.Instances), err, i+1)
			}
		}
	}
}

// TestWriteThenSettleOnPeers: with the default ClusterOptions, a write
// followed by Settle, and by Advance and Eventually, is on every peer and
// in every peer's watcher at once, without the test moving the clock by
// distro's SyncDelay: each watcher's Next, with a context that has already
// ended, returns the update that holds the write. Without the default (a
// 1 s merge window), the write is still on its node after Settle.
func TestWriteThenSettleOnPeers(t *testing.T) {
	c := registrytest.NewCluster(t, registrytest.ClusterOptions{})
	ctx := context.Background()
	done, cancel := context.WithCancel(ctx)
	cancel()
	svc := model.ServiceKey{Name: "settled"}
	var ws []*registry.Watcher
	for _, n := range c.Live() {
		w, err := n.Watch(ctx, model.Query{Service: svc})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Close)
		if _, err := w.Next(ctx); err != nil { // the first, empty view
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	sess, err := c.Node(0).OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// want checks that every node serves n instances and that every
	// watcher has been handed them, without waiting.
	want := func(how string, n int) {
		t.Helper()
		for i, node := range c.Live() {
			v, err := node.Query(ctx, model.Query{Service: svc})
			if err != nil {
				t.Fatalf("after %s: %s: %v", how, node.ID, err)
			}
			if len(v.Instances) != n {
				t.Fatalf("after %s: %s serves %d instances, want %d", how, node.ID, len(v.Instances), n)
			}
			u, err := ws[i].Next(done)
			if err != nil {
				t.Fatalf("after %s: %s's watcher has no update at once: %v", how, node.ID, err)
			}
			if len(u.View.Instances) != n {
				t.Fatalf("after %s: %s's watcher has %d instances, want %d", how, node.ID, len(u.View.Instances), n)
			}
		}
	}
	steps := []struct {
		how  string
		wait func()
	}{
		{"Settle", c.Settle},
		{"Advance(1ms)", func() { c.Advance(time.Millisecond) }},
		{"Eventually", func() { c.Eventually(time.Second, func() bool { return true }, "never") }},
	}
	for i, s := range steps {
		in := model.NewInstance(svc, fmt.Sprintf("10.0.8.%d", i+1), 80)
		if err := sess.Register(ctx, in); err != nil {
			t.Fatal(err)
		}
		s.wait()
		want(s.how, i+1)
	}
}

// TestMergeWindowHoldsWritesPastSettle: a test that sets a SyncDelay gets
// it: the write stays on its node after Settle and reaches the peers once
// Advance has moved the clock by SyncDelay.
func TestMergeWindowHoldsWritesPastSettle(t *testing.T) {
	dc := distro.DefaultConfig()
	c := registrytest.NewCluster(t, registrytest.ClusterOptions{Distro: &dc})
	ctx := context.Background()
	in := model.NewInstance(model.ServiceKey{Name: "held"}, "10.0.9.1", 80)
	sess, err := c.Node(0).OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.Register(ctx, in); err != nil {
		t.Fatal(err)
	}
	serves := func(n *registrytest.Node) bool {
		v, err := n.Query(ctx, model.Query{Service: in.Service})
		return err == nil && len(v.Instances) == 1
	}
	c.Settle()
	if serves(c.Node(1)) {
		t.Fatalf("n2 serves the write before SyncDelay (%v) has passed", dc.SyncDelay)
	}
	c.Advance(dc.SyncDelay)
	for _, n := range c.Live() {
		if !serves(n) {
			t.Fatalf("%s does not serve the write after SyncDelay", n.ID)
		}
	}
}
