package registrytest_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"

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
