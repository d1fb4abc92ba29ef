package registrytest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/muster-io/muster/distro"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry/registrytest"
	"github.com/muster-io/muster/transport"
)

// recorder is a testing.TB whose cleanups and errors the test inspects.
type recorder struct {
	*testing.T
	cleanups []func()
	errors   []string
}

func (r *recorder) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }
func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, format)
}
func (r *recorder) runCleanups() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

// TestLeakCheck: a goroutine left running when the test ends fails it.
func TestLeakCheck(t *testing.T) {
	rec := &recorder{T: t}
	reg := registrytest.New(rec, registrytest.Options{})
	_ = reg.Register(context.Background(), model.NewInstance(model.ServiceKey{Name: "a"}, "10.0.0.1", 1))
	stop := make(chan struct{})
	go func() { <-stop }() // the leak
	rec.runCleanups()
	close(stop)
	if len(rec.errors) == 0 || !strings.Contains(strings.Join(rec.errors, " "), "leaked") {
		t.Fatalf("leaked goroutine not reported: %v", rec.errors)
	}
}

// TestCleanupCloses: the registry is closed at the end of the test, with no
// goroutine left.
func TestCleanupCloses(t *testing.T) {
	rec := &recorder{T: t}
	reg := registrytest.New(rec, registrytest.Options{})
	rec.runCleanups()
	if len(rec.errors) != 0 {
		t.Fatalf("clean registry reported: %v", rec.errors)
	}
	if reg.Ready() {
		t.Fatal("registry still running after cleanup")
	}
}

// TestAdvanceSettles: after Advance returns, the expiry it caused is visible.
func TestAdvanceSettles(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	ctx := context.Background()
	for i := range 100 {
		in := model.NewInstance(model.ServiceKey{Name: "a"}, "10.0.0.1", 1000+i)
		if err := reg.Register(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	for range 5 {
		reg.Advance(31 * time.Second)
		v, _ := reg.Query(ctx, model.Query{Service: model.ServiceKey{Name: "a"}})
		if len(v.Instances) != 0 {
			t.Fatalf("%d instances left right after Advance", len(v.Instances))
		}
		in := model.NewInstance(model.ServiceKey{Name: "a"}, "10.0.0.1", 1000)
		_ = reg.Register(ctx, in)
	}
}

// A test of a three-node cluster: an instance registered on one node is
// served by every node, survives a partition on the side of its client, and
// the nodes agree again after the heal (checked by the harness at cleanup).
func TestClusterExample(t *testing.T) {
	ctx := context.Background()
	c := registrytest.NewCluster(t, registrytest.ClusterOptions{})
	inst := model.NewInstance(model.ServiceKey{Name: "orders"}, "10.0.0.1", 8080)
	if _, err := c.Node(0).HeartbeatInstance(ctx, inst); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Second) // past the 1 s sync merge window
	for _, n := range c.Nodes() {
		v, err := n.Query(ctx, model.Query{Service: inst.Service})
		if err != nil || len(v.Instances) != 1 {
			t.Fatalf("%s: %v %v", n.ID, v, err)
		}
	}
	c.Isolate(2)
	for range 6 { // the client keeps beating through n1
		c.Advance(5 * time.Second)
		if _, err := c.Node(0).HeartbeatInstance(ctx, inst); err != nil {
			t.Fatal(err)
		}
	}
	c.Heal()
}

// TestSettleWaitsForSlowHandler: Settle returns only once a handler that is
// slow to run (a starved goroutine, here one that sleeps) has finished and
// what it set off has spread: the write it makes is on every node.
func TestSettleWaitsForSlowHandler(t *testing.T) {
	dc := distro.DefaultConfig()
	dc.SyncDelay = distro.NoSyncDelay
	c := registrytest.NewCluster(t, registrytest.ClusterOptions{Distro: &dc})
	in := model.NewInstance(model.ServiceKey{Name: "slow"}, "10.0.0.9", 80)
	const kindSlow transport.Kind = 200
	c.Node(1).Transport.Handle(kindSlow, func(ctx context.Context, _ string, _ []byte) ([]byte, error) {
		time.Sleep(30 * time.Millisecond) // the fault: a handler that gets no CPU for a while
		return nil, c.Node(1).Register(ctx, in)
	})
	if err := c.Node(0).Transport.Send(context.Background(), c.Node(1).ID, kindSlow, nil); err != nil {
		t.Fatal(err)
	}
	c.Settle()
	for _, n := range c.Live() {
		v, err := n.Query(context.Background(), model.Query{Service: in.Service})
		if err != nil || len(v.Instances) != 1 {
			t.Fatalf("%s right after Settle: %v, %v; want the instance the slow handler registered", n.ID, v, err)
		}
	}
}
