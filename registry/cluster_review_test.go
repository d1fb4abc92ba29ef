package registry_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
)

// TestClusterFastRestartBeatWrites: a node restarts under the same ID before
// the membership notices (a fast crash-restart). Until it has loaded, it
// refuses beat writes (ErrNotReady): it does not know yet the record its
// previous run left for an ip:port it owns, and a write would start a second
// history of it. Once loaded, it takes over the old record (its lease
// continued: the old instance expires) and the new write, and every node
// agrees. (Found by review: the write used to be taken and the two
// histories never reconciled.)
func TestClusterFastRestartBeatWrites(t *testing.T) {
	c := registrytest.NewCluster(t, clusterOpts())
	old := ownedBy(t, c, c.Node(2).ID, "old")
	mustRegister(t, c.Node(0), old) // forwarded to n3, its owner
	c.Settle()

	// Crash n3 without telling the others (their membership still lists it),
	// and restart it with its load held.
	n := c.Node(2)
	if err := n.Registry.Close(); err != nil {
		t.Fatal(err)
	}
	_ = n.Transport.Close()
	n.Registry = nil
	c.Net.SetManual(true)
	c.Restart(2)
	n = c.Node(2)
	if n.Ready() {
		t.Fatal("ready before loading")
	}
	// A client registers another instance on the same ip:port (another
	// service) through the restarting owner.
	fresh := old
	fresh.Service = svcKey("new")
	fresh.ID = ""
	fresh = model.NewInstance(fresh.Service, old.IP, old.Port)
	if err := n.Register(ctx, fresh); !errors.Is(err, registry.ErrNotReady) {
		t.Fatalf("beat write to an owner still loading: %v, want ErrNotReady", err)
	}
	c.Net.SetManual(false)
	c.Net.DeliverAll()
	c.AwaitReady()
	mustRegister(t, n, fresh) // the client retries once the owner is ready
	c.Settle()

	// Keep "new" alive through its owner for 40 s; "old" is never beaten.
	for range 8 {
		c.Advance(5 * time.Second)
		if _, err := n.Heartbeat(ctx, fresh.Key()); err != nil {
			t.Fatalf("beat of the new instance: %v", err)
		}
	}
	var bad []string
	for _, m := range c.Live() {
		if got := ipsOn(t, m, "new"); !slices.Equal(got, []string{fresh.IP}) {
			bad = append(bad, m.ID+" serves new="+join(got))
		}
		if got := ipsOn(t, m, "old"); len(got) != 0 {
			bad = append(bad, m.ID+" still serves old="+join(got)+" 40 s after its last beat")
		}
	}
	if len(bad) > 0 {
		t.Fatalf("after a restart with a write before the load:\n%s", join(bad))
	}
}

func join(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += "; "
		}
		out += x
	}
	return "[" + out + "]"
}

// TestClusterDeregisterThroughLaggingNode: a node that has not yet received
// an instance's record (the 1 s sync merge window) still removes it: a
// Deregister of a service it does not know goes to the owner. (Found by
// review: it used to answer nil and do nothing.)
func TestClusterDeregisterThroughLaggingNode(t *testing.T) {
	opts := clusterOpts()
	opts.Distro.SyncDelay = time.Second // the default
	c := registrytest.NewCluster(t, opts)
	in := ownedBy(t, c, c.Node(1).ID, "lag")
	mustRegister(t, c.Node(0), in) // forwarded to n2; n3 gets it within 1 s
	if err := c.Node(2).Deregister(ctx, in.Key()); err != nil {
		t.Fatalf("deregister through n3: %v", err)
	}
	c.Advance(2 * time.Second)
	for _, n := range c.Nodes() {
		if got := ipsOn(t, n, "lag"); len(got) != 0 {
			t.Errorf("%s still serves %v after a successful Deregister", n.ID, got)
		}
	}
}
