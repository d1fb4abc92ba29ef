package node_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/muster-io/muster/distro/gossip"
	"github.com/muster-io/muster/distro/membership"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/transport"
	"go.uber.org/goleak"
)

// Attack (issue 26, item 1): a process holding the gossip key but not the
// transport secret joins memberlist, with a transport of its own (another
// secret). Gossip lists it, but it never proves its ID over the transport:
// it is no member for the registry, owns none of 60 beat keys on either
// member, and every one of the 60 beats on the members succeeds (before:
// it owned 23 of 60 and those failed).
func TestGossipKeyWithoutTransportSecretOwnsNothing(t *testing.T) {
	defer goleak.VerifyNone(t)
	nodes := startCluster(t, 2)
	defer func() {
		for _, nd := range nodes {
			_ = nd.Close()
		}
	}()
	ctx := context.Background()
	rcfg := transport.DefaultTCPConfig()
	rcfg.NodeID, rcfg.Secret = "rogue", []byte("not the cluster's transport secret")
	rt, err := transport.NewTCP(rcfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	mc := gossip.DefaultConfig()
	mc.NodeID, mc.BindPort, mc.SecretKey = "rogue", 0, gossipKey
	mc.TransportAddr, mc.Seeds = rt.Addr(), []string{nodes[0].GossipAddr()}
	mc.ProbeInterval, mc.ProbeTimeout, mc.GossipInterval, mc.PushPullInterval = 200*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond, time.Second
	rogue, err := gossip.New(mc)
	if err != nil {
		t.Fatal(err)
	}
	if err := rogue.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer rogue.Close()
	for _, nd := range nodes {
		waitFor(t, 10*time.Second, func() bool {
			return slices.Contains(nd.Membership().(*membership.Proven).Unproven(), "rogue")
		}, nd.ID()+" gossip lists the rogue")
	}
	for _, nd := range nodes {
		if slices.ContainsFunc(nd.Membership().Members(), func(m membership.Member) bool { return m.ID == "rogue" }) {
			t.Fatalf("%s counts the rogue as a member", nd.ID())
		}
		if slices.Contains(nd.Replicator().Members(), "rogue") {
			t.Fatalf("%s's replicator counts the rogue", nd.ID())
		}
	}
	svc := model.ServiceKey{Group: "g", Name: "beats"}
	ok := 0
	for i := range 60 {
		nd := nodes[i%2]
		inst := model.NewInstance(svc, fmt.Sprintf("10.0.%d.%d", i/200, i%200+1), 8080)
		for _, on := range nodes {
			if owner := on.Registry().Owner(inst.IP, inst.Port); owner != "n1" && owner != "n2" {
				t.Fatalf("%s: beat key %d is owned by %q", on.ID(), i, owner)
			}
		}
		bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := nd.Registry().HeartbeatInstance(bctx, inst)
		cancel()
		if err != nil {
			t.Errorf("beat %d on %s: %v", i, nd.ID(), err)
			continue
		}
		ok++
	}
	if ok != 60 {
		t.Fatalf("%d of 60 beats succeeded", ok)
	}
	// The members still count each other (polled: under load memberlist's
	// short test timings may suspect a member for a moment).
	for _, nd := range nodes {
		waitFor(t, 10*time.Second, func() bool {
			ms := nd.Membership().Members()
			return len(ms) == 2 && !slices.ContainsFunc(ms, func(m membership.Member) bool { return m.ID == "rogue" })
		}, nd.ID()+" counts both members and not the rogue")
	}
}
