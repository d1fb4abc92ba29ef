package registry_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/muster-io/muster/distro"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
)

// clusterOpts is a 3-node cluster with immediate sync.
func clusterOpts() registrytest.ClusterOptions {
	dc := distro.DefaultConfig()
	dc.SyncDelay = 0
	return registrytest.ClusterOptions{Distro: &dc}
}

// ipsOn returns the IPs of svc's instances on node n, or nil if the node
// does not serve.
func ipsOn(t *testing.T, n *registrytest.Node, svc string) []string {
	t.Helper()
	v, err := n.Query(ctx, model.Query{Service: svcKey(svc), IncludeDisabled: true})
	if err != nil {
		t.Fatalf("%s: Query: %v", n.ID, err)
	}
	return ips(v)
}

// ownedBy returns a beat instance of svc whose ip:port node id owns.
func ownedBy(t *testing.T, c *registrytest.Cluster, id, svc string) model.Instance {
	t.Helper()
	for i := range 1000 {
		in := inst(svc, i)
		if c.Node(0).Replicator().Owner("b/"+model.Endpoint(in.IP, in.Port)) == id {
			return in
		}
	}
	t.Fatalf("no key owned by %s", id)
	return model.Instance{}
}

func TestClusterWritesVisibleEverywhere(t *testing.T) {
	c := registrytest.NewCluster(t, clusterOpts())
	a, b, cc := c.Node(0), c.Node(1), c.Node(2)

	sess, err := a.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mustRegister(t, sess, inst("orders", 1))
	beat := ownedBy(t, c, a.ID, "orders")
	mustRegister(t, b, beat) // forwarded to a, its owner
	c.Settle()

	want := []string{inst("orders", 1).IP, beat.IP}
	slices.Sort(want)
	for _, n := range c.Nodes() {
		if got := ipsOn(t, n, "orders"); !slices.Equal(got, want) {
			t.Fatalf("%s serves %v, want %v", n.ID, got, want)
		}
	}

	// Deregister on C of the beat instance owned by A: forwarded.
	if err := cc.Deregister(ctx, beat.Key()); err != nil {
		t.Fatal(err)
	}
	c.Settle()
	for _, n := range c.Nodes() {
		if got := ipsOn(t, n, "orders"); !slices.Equal(got, []string{inst("orders", 1).IP}) {
			t.Fatalf("%s serves %v after the deregistration", n.ID, got)
		}
	}
	if err := c.CheckConverged(); err != nil {
		t.Fatal(err)
	}
}

func TestClusterBeatsForwardedAndExpire(t *testing.T) {
	c := registrytest.NewCluster(t, clusterOpts())
	owner := c.Node(1)
	in := ownedBy(t, c, owner.ID, "pay")
	mustRegister(t, c.Node(0), in)
	c.Settle()
	// Beats through a non-owner keep it alive past 15 s.
	for range 4 {
		c.Advance(5 * time.Second)
		if _, err := c.Node(2).Heartbeat(ctx, in.Key()); err != nil {
			t.Fatalf("heartbeat through n3: %v", err)
		}
	}
	c.Settle()
	for _, n := range c.Nodes() {
		v, _ := n.Query(ctx, model.Query{Service: svcKey("pay")})
		if len(v.Instances) != 1 || !v.Instances[0].Healthy {
			t.Fatalf("%s: %v", n.ID, v.Instances)
		}
	}
	// No beats: unhealthy after 15 s, gone after 30 s, on every node.
	c.Advance(16 * time.Second)
	for _, n := range c.Nodes() {
		v, _ := n.Query(ctx, model.Query{Service: svcKey("pay"), IncludeDisabled: true})
		if len(v.Instances) != 1 || v.RealHealthy(0) {
			t.Fatalf("%s: want one unhealthy instance, got %v", n.ID, v.Instances)
		}
	}
	c.Advance(15 * time.Second)
	for _, n := range c.Nodes() {
		if got := ipsOn(t, n, "pay"); len(got) != 0 {
			t.Fatalf("%s still serves %v 31 s after the last beat", n.ID, got)
		}
	}
	if _, err := c.Node(2).Heartbeat(ctx, in.Key()); !isNotFound(err) {
		t.Fatalf("heartbeat of an expired instance through a non-owner: %v", err)
	}
}

func isNotFound(err error) bool { return errors.Is(err, registry.ErrNotFound) }
