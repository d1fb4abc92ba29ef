package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/muster-io/muster/distro"
)

// acked returns how many pushes s has had acknowledged (gRPC and UDP).
func acked(s *Server) int64 {
	_, _, n := s.metrics.percentiles()
	return n
}

// TestNodeClusterFailover: the Node.js client on a 3-node cluster with
// authentication on (users made through n1, the clients authenticated by
// n2 and n3). A consumer that knows n1 and n2 subscribes through one of
// them; a provider that knows only n3 registers there. The node holding
// the consumer's UDP subscription is killed: the consumer's next poll
// fails over to the other, which subscribes it, and every later change
// made through n3 is pushed to it by the survivor and acknowledged.
func TestNodeClusterFailover(t *testing.T) {
	skipUnderRace(t)
	nodes := startCluster(t, 3, withAuth(testKey(t)))
	waitAdmin(t, nodes[0])
	tenants(t, nodes[0])
	for _, s := range nodes[1:] { // the users reach the other nodes
		login(t, s.HTTPAddr(), "alice", "a-pass")
	}

	provider := startNode(t, []string{nodes[2].HTTPAddr()}, "alice", "a-pass")
	provider.must(map[string]any{"op": "register", "service": "node-ha", "ip": "10.6.1.1", "port": 8080})
	consumer := startNode(t, []string{nodes[0].HTTPAddr(), nodes[1].HTTPAddr()}, "alice", "a-pass")
	consumer.must(map[string]any{"op": "subscribe", "service": "node-ha"})
	consumer.waitHosts("node-ha", 20*time.Second, "10.6.1.1:8080")

	// The node the consumer talks to: the one holding its subscription
	// (its first list call went to one of its two servers at random).
	victim := -1
	eventually(t, 10*time.Second, "the consumer's UDP subscription on n1 or n2", func() bool {
		for i, s := range nodes[:2] {
			if s.udp.count() > 0 {
				victim = i
				return true
			}
		}
		return false
	})
	survivor := nodes[1-victim]
	if survivor.udp.count() > 0 {
		// Its next poll went to the other server already: a failover still,
		// but the survivor needed none.
		t.Logf("the consumer is subscribed on both n1 and n2 before the kill")
	}

	// A push through n3 to the consumer while its node lives.
	before := acked(nodes[victim])
	provider.must(map[string]any{"op": "register", "service": "node-ha", "ip": "10.6.1.2", "port": 8080})
	consumer.waitHosts("node-ha", 20*time.Second, "10.6.1.1:8080", "10.6.1.2:8080")
	eventually(t, 10*time.Second, "the consumer acknowledges its node's push", func() bool {
		return acked(nodes[victim]) > before
	})

	nodes[victim].Kill()
	t.Logf("killed n%d; the consumer's polls move to n%d", victim+1, 2-victim)
	// The client polls every cacheMillis (10 s); a poll of the dead node
	// fails and the client asks its other server, which subscribes it.
	eventually(t, 45*time.Second, "the consumer subscribes through the survivor", func() bool {
		return survivor.udp.count() > 0
	})

	// Every change through n3 now reaches the consumer by the survivor's
	// pushes, each acknowledged.
	for _, step := range []struct {
		op   string
		ip   string
		want []string
	}{
		{"register", "10.6.1.3", []string{"10.6.1.1:8080", "10.6.1.2:8080", "10.6.1.3:8080"}},
		{"deregister", "10.6.1.1", []string{"10.6.1.2:8080", "10.6.1.3:8080"}},
		{"deregister", "10.6.1.2", []string{"10.6.1.3:8080"}},
	} {
		before := acked(survivor)
		provider.must(map[string]any{"op": step.op, "service": "node-ha", "ip": step.ip, "port": 8080})
		consumer.waitHosts("node-ha", 20*time.Second, step.want...)
		eventually(t, 10*time.Second, "the consumer acknowledges the survivor's push after "+step.op+" "+step.ip, func() bool {
			return acked(survivor) > before
		})
	}
	survivor.metrics.mu.Lock()
	failures := survivor.metrics.failures
	survivor.metrics.mu.Unlock()
	if failures != 0 {
		t.Fatalf("%d of the survivor's pushes were never acknowledged", failures)
	}
	// And the consumer's own reads work through the survivor.
	ev := consumer.must(map[string]any{"op": "list", "service": "node-ha"})
	if string(ev.Result) != `["10.6.1.3:8080"]` {
		t.Fatalf("the consumer lists %s after the failover", ev.Result)
	}
}

// TestNodeProviderFailover: a Node.js provider that knows n1 and n2
// registers an instance whose beats n1 or n2 owns (its lease runs there);
// that node is killed. The provider's beats fail over to the other node,
// the lease moves to a survivor, and the instance stays served, healthy,
// on n3 throughout: also once the survivors dropped the dead node's
// records, and after beats that only the survivor received.
func TestNodeProviderFailover(t *testing.T) {
	skipUnderRace(t)
	nodes := startCluster(t, 3)
	ip, victim := ownedIP(nodes, "10.6.2.", 8080)
	survivor, watcher := nodes[1-victim], nodes[2]
	provider := startNode(t, []string{nodes[0].HTTPAddr(), nodes[1].HTTPAddr()})
	provider.must(map[string]any{"op": "register", "service": "node-prov", "ip": ip, "port": 8080})
	eventually(t, 10*time.Second, "the instance on n3", func() bool { return len(served(t, watcher, "node-prov")) == 1 })

	// Watch the instance on n3 from the kill on.
	stop := watchHealthy(t, watcher, "node-prov")
	nodes[victim].Kill()
	beats := survivor.beats.Load()
	victimID := nodes[victim].cfg.NodeID
	waitRecordsDropped(t, watcher, victimID)
	// The client beats every 5 s, each time to one of its servers at
	// random: once the dead one fails, it asks the survivor.
	eventually(t, 60*time.Second, "two beats of the provider through the survivor", func() bool {
		return survivor.beats.Load() >= beats+2
	})
	if stop() {
		t.Fatal("the provider's instance was missing or unhealthy on n3 after its beat owner was killed")
	}
	if owner := watcher.Registry().Owner(ip, 8080); owner == victimID {
		t.Fatalf("the dead node %s still owns %s's beats", owner, ip)
	}
	hs := served(t, watcher, "node-prov")
	if len(hs) != 1 || !hs[0].Healthy {
		t.Fatalf("after the failover n3 serves %+v", hs)
	}
	// And a deregistration through the survivor reaches n3.
	provider.must(map[string]any{"op": "deregister", "service": "node-prov", "ip": ip, "port": 8080})
	eventually(t, 10*time.Second, "the deregistration on n3", func() bool { return len(served(t, watcher, "node-prov")) == 0 })
}

// ownedIP returns an IP of prefix whose beats at port n1 or n2 owns
// (rendezvous hashing over the three IDs: one of the first few addresses
// is), and that node's index.
func ownedIP(nodes []*Server, prefix string, port int) (string, int) {
	for i := 1; ; i++ {
		ip := prefix + strconv.Itoa(i)
		switch nodes[2].Registry().Owner(ip, port) {
		case nodes[0].cfg.NodeID:
			return ip, 0
		case nodes[1].cfg.NodeID:
			return ip, 1
		}
	}
}

// watchHealthy samples svc on s until the returned stop is called; stop
// reports whether it ever saw anything but one healthy instance.
func watchHealthy(t *testing.T, s *Server, svc string) (stop func() bool) {
	missing := make(chan bool, 1)
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // a failed test's watcher ends too
	go func() {
		gone := false
		for {
			select {
			case <-done:
				missing <- gone
				return
			case <-ctx.Done():
				return
			default:
			}
			if v, err := s.Registry().Query(ctx, mQuery(svc)); err == nil && (len(v.Instances) != 1 || !v.Instances[0].Healthy) {
				gone = true
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return func() bool {
		close(done)
		return <-missing
	}
}

// waitRecordsDropped waits until s holds no live Distro record of owner (a
// dead node's, after the orphan timeout: 2 s in Fast mode).
func waitRecordsDropped(t *testing.T, s *Server, owner string) {
	t.Helper()
	eventually(t, 10*time.Second, s.cfg.NodeID+" drops "+owner+"'s records", func() bool {
		held := false
		s.node.Replicator().Range(func(r distro.Record) bool {
			held = held || (r.Owner == owner && !r.Deleted)
			return !held
		})
		return !held
	})
}
