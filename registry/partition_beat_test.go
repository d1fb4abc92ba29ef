package registry_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/muster-io/muster/distro"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
	"github.com/muster-io/muster/transport"
)

// TestClusterHealedOwnerTakesNewestLease: a beat instance owned by n1 (HRW
// over all three) is registered through n2; n1 is cut off, and the client
// keeps beating through n2 every 5 s, which the majority side's owner takes.
// n1, alone, sees no beat: its copy turns unhealthy at 15 s and expires at
// 30 s. When the partition heals, n1 owns the key again and must take over
// the majority's live lease, not its own lapsed one: the instance stays
// served and healthy everywhere, and light beats keep succeeding.
func TestClusterHealedOwnerTakesNewestLease(t *testing.T) {
	for _, cut := range []time.Duration{20 * time.Second, 40 * time.Second} {
		t.Run(fmt.Sprintf("partition=%v", cut), func(t *testing.T) {
			c := registrytest.NewCluster(t, registrytest.ClusterOptions{LogLevel: logLevel})
			n1, n2 := c.Node(0), c.Node(1)
			beat := ownedBy(t, c, n1.ID, "pb")
			mustRegister(t, n2, beat)
			c.Advance(2 * time.Second) // past SyncDelay: every node holds the record

			c.Partition([]int{0}, []int{1, 2})
			lightBeat := func(when string) {
				t.Helper()
				if _, err := n2.Heartbeat(ctx, beat.Key()); err != nil {
					t.Fatalf("%s: light beat through %s: %v", when, n2.ID, err)
				}
			}
			for waited := time.Duration(0); waited < cut; waited += 5 * time.Second {
				c.Advance(5 * time.Second)
				lightBeat(fmt.Sprintf("%v into the partition", waited+5*time.Second))
			}
			c.Heal() // the client's last beat was just now

			// The client goes on beating every 5 s; for 40 s every node serves
			// the instance, healthy, at every step.
			const step = 500 * time.Millisecond
			for since := step; since <= 40*time.Second; since += step {
				c.Advance(step)
				for _, n := range c.Live() {
					v, err := n.Query(ctx, model.Query{Service: svcKey("pb"), IncludeDisabled: true})
					if err != nil {
						t.Fatalf("%v after the heal: %s: Query: %v", since, n.ID, err)
					}
					if len(v.Instances) != 1 || !v.RealHealthy(0) {
						t.Fatalf("%v after the heal: %s serves %v, want the instance, healthy", since, n.ID, v.Instances)
					}
				}
				if since%(5*time.Second) == 0 {
					lightBeat(fmt.Sprintf("%v after the heal", since))
				}
			}
			if o := n2.Owner(beat.IP, beat.Port); o != n1.ID {
				t.Fatalf("after the heal %s owns the key, want %s", o, n1.ID)
			}
		})
	}
}

// TestClusterLateLeaseHandoverNoResurrection: the lease the majority side
// hands back to the returning owner at the heal is held on the network
// while the client deregisters through the owner; delivered afterwards, it
// must not bring the instance back (its last beat is older than the
// deregistration), whether the owner still held a copy (20 s partition) or
// had expired its own (40 s).
func TestClusterLateLeaseHandoverNoResurrection(t *testing.T) {
	for _, cut := range []time.Duration{20 * time.Second, 40 * time.Second} {
		t.Run(fmt.Sprintf("partition=%v", cut), func(t *testing.T) {
			c := registrytest.NewCluster(t, registrytest.ClusterOptions{LogLevel: logLevel})
			n1, n2 := c.Node(0), c.Node(1)
			beat := ownedBy(t, c, n1.ID, "pd")
			mustRegister(t, n2, beat)
			c.Advance(2 * time.Second)
			c.Partition([]int{0}, []int{1, 2})
			for waited := time.Duration(0); waited < cut; waited += 5 * time.Second {
				c.Advance(5 * time.Second)
				if _, err := n2.Heartbeat(ctx, beat.Key()); err != nil {
					t.Fatalf("light beat through %s: %v", n2.ID, err)
				}
			}

			c.Net.SetManual(true)
			c.Heal()
			var handovers []transport.Envelope
			for _, e := range c.Net.Pending() {
				if e.Kind == registry.KindLeases {
					handovers = append(handovers, e)
				}
			}
			if len(handovers) == 0 {
				t.Fatalf("no lease handover at the heal; pending: %v", c.Net.Pending())
			}
			if err := n1.Deregister(ctx, beat.Key()); err != nil {
				t.Fatalf("deregister through the owner: %v", err)
			}
			for _, e := range handovers {
				if err := c.Net.Deliver(e.ID); err != nil {
					t.Fatalf("delivering the handover: %v", err)
				}
			}
			c.Net.SetManual(false)
			c.Net.DeliverAll()
			// The owner never serves it again; after two verify periods, no
			// node does.
			verify := distro.DefaultConfig().VerifyInterval
			for since := time.Duration(0); since < 4*verify; since += 500 * time.Millisecond {
				c.Advance(500 * time.Millisecond)
				for _, n := range c.Live() {
					if n != n1 && since < 2*verify {
						continue
					}
					if got := ipsOn(t, n, "pd"); len(got) != 0 {
						t.Fatalf("%v after its deregistration, %s serves %v", since, n.ID, got)
					}
				}
			}
		})
	}
}

// TestClusterLeaseHandoverRetriedUntilMember: membership views change on
// each node in its own time. At the heal the majority side sees n1 return
// before n1 counts them as members again, so n1 refuses their lease
// handover (ErrNotMember). The handover is retried, and taken once n1's view
// catches up: the instance the client kept beating on the majority side
// stays served and healthy everywhere, as when the views change together.
func TestClusterLeaseHandoverRetriedUntilMember(t *testing.T) {
	c := registrytest.NewCluster(t, registrytest.ClusterOptions{LogLevel: logLevel})
	n1, n2 := c.Node(0), c.Node(1)
	beat := ownedBy(t, c, n1.ID, "pr")
	mustRegister(t, n2, beat)
	c.Advance(2 * time.Second)
	c.Partition([]int{0}, []int{1, 2})
	for range 8 { // 40 s: n1's own copy has expired
		c.Advance(5 * time.Second)
		if _, err := n2.Heartbeat(ctx, beat.Key()); err != nil {
			t.Fatalf("light beat through %s: %v", n2.ID, err)
		}
	}

	// The network heals, and the majority's views take n1 back; n1's view
	// still holds only itself.
	c.Net.SetManual(true)
	c.Net.Heal()
	all := []distro.Member{{ID: n1.ID}, {ID: n2.ID}, {ID: c.Node(2).ID}}
	c.Node(1).Membership.Set(all...)
	c.Node(2).Membership.Set(all...)
	var last uint64
	nextHandover := func(what string) []transport.Envelope {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			var hs []transport.Envelope
			for _, e := range c.Net.Pending() {
				if e.Kind == registry.KindLeases && e.To == n1.ID && e.ID > last {
					hs = append(hs, e)
				}
			}
			if len(hs) > 0 {
				last = hs[len(hs)-1].ID
				return hs
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s lease handover to %s; pending: %v", what, n1.ID, c.Net.Pending())
			}
			time.Sleep(time.Millisecond)
		}
	}
	for _, e := range nextHandover("first") { // refused: n1 does not count the sender yet
		if err := c.Net.Deliver(e.ID); err != nil {
			t.Fatal(err)
		}
	}
	retried := nextHandover("retried")
	n1.Membership.Set(all...) // n1's view catches up
	for _, e := range retried {
		if err := c.Net.Deliver(e.ID); err != nil {
			t.Fatal(err)
		}
	}
	c.Net.SetManual(false)
	c.Net.DeliverAll()
	c.Heal()

	const step = 500 * time.Millisecond
	for since := step; since <= 20*time.Second; since += step {
		c.Advance(step)
		for _, n := range c.Live() {
			v, err := n.Query(ctx, model.Query{Service: svcKey("pr"), IncludeDisabled: true})
			if err != nil {
				t.Fatalf("%v after the heal: %s: Query: %v", since, n.ID, err)
			}
			if len(v.Instances) != 1 || !v.RealHealthy(0) {
				t.Fatalf("%v after the heal: %s serves %v, want the instance, healthy", since, n.ID, v.Instances)
			}
		}
		if since%(5*time.Second) == 0 {
			if _, err := n2.Heartbeat(ctx, beat.Key()); err != nil {
				t.Fatalf("%v after the heal: light beat: %v", since, err)
			}
		}
	}
}
