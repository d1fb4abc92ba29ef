package distro

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/goleak"

	"github.com/muster-io/muster/distro/gossip"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/transport"
)

// nonMemberCount returns how many messages r refused because their sender was not a member.
func nonMemberCount(r *Replicator) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nonMember
}

// isNotMember reports whether err is a peer's ErrNotMember answer.
func isNotMember(err error) bool {
	var re *transport.RemoteError
	return errors.As(err, &re) && re.Msg == ErrNotMember.Error()
}

// rogueMessages are the four distro requests a non-member sends: a sync and a repair injecting a
// record it owns, a verify (to be answered with versions and renew its "records"), and a
// snapshot request (to read every record).
func rogueMessages(t *testing.T, owner string) map[transport.Kind][]byte {
	t.Helper()
	rec := wireRecord{Key: "10.66.0.1:80", Kind: uint8(KindBeat), Owner: owner, Revision: 99, Payload: []byte("fake")}
	enc := func(v any) []byte {
		b, err := model.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return map[transport.Kind][]byte{
		kindSync:     enc(syncMsg{Records: []wireRecord{rec}}),
		kindRepair:   enc(repairMsg{Records: []wireRecord{rec}}),
		kindVerify:   enc(verifyReq{Digest: make([]byte, 8*testConfig().Buckets)}),
		kindSnapshot: enc(snapReq{From: 0, Max: snapshotPage}),
	}
}

// Issue 12.5 on MemNetwork: a peer the transport authenticated (it is on the network under its
// own ID) but that is not a member gets every message refused: 0 records injected, 0 snapshot
// pages or verify answers served. Once it is a member, the same messages are served.
func TestNonMemberRefused(t *testing.T) {
	c := newCluster(t, nil, "a", "b")
	c.nodes["b"].r.Put(KindSession, "secret-session", []byte("payload"))
	c.eventually(time.Second, "replicated", c.converged)
	x, err := c.net.Node("x")
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	a := c.nodes["a"]
	served := 0
	for kind, body := range rogueMessages(t, "x") {
		resp, err := x.Request(context.Background(), "a", kind, body)
		if !isNotMember(err) {
			t.Errorf("kind %d from a non-member: answer %d bytes, err %v; want ErrNotMember", kind, len(resp), err)
		}
		if err == nil {
			served++
		}
	}
	if served != 0 {
		t.Fatalf("%d requests of a non-member served", served)
	}
	if n := nonMemberCount(a.r); n != 4 {
		t.Fatalf("refused %d messages, want 4", n)
	}
	if _, ok := a.r.Get("10.66.0.1:80"); ok {
		t.Fatal("a non-member's record installed")
	}
	if _, ok := a.store.get("10.66.0.1:80"); ok {
		t.Fatal("a non-member's record reached the store")
	}
	for i := 0; i < 60; i++ {
		if o := a.r.Owner(fmt.Sprintf("10.66.1.%d:80", i)); o == "x" {
			t.Fatal("HRW names a non-member")
		}
	}

	// The control: the same snapshot request from a member is served.
	c.setMembers("a", "b", "x")
	resp, err := x.Request(context.Background(), "a", kindSnapshot, rogueMessages(t, "x")[kindSnapshot])
	if err != nil {
		t.Fatalf("snapshot for a member: %v", err)
	}
	recs, _, err := decodeSnapResp(resp)
	if err != nil || len(recs) != 1 {
		t.Fatalf("snapshot for a member: %d records, %v", len(recs), err)
	}
	c.setMembers("a", "b")
	c.checkInvariants()
}

// The startup race: a node that has just joined asks its peers for snapshots before their
// membership lists it. They refuse (ErrNotMember); it keeps asking, within LoadTimeout, even
// after another peer answered, and loads everything once they list it.
func TestLoadRetriesPeersThatDoNotListItYet(t *testing.T) {
	c := newCluster(t, nil, "a", "b")
	c.mod = func(cfg *Config) { cfg.LoadTimeout = 30 * time.Second } // for c
	c.nodes["a"].r.Put(KindSession, "sa", []byte("x"))
	c.nodes["b"].r.Put(KindSession, "sb", []byte("y"))
	c.eventually(time.Second, "replicated", c.converged)
	c.net.Partition("a", "b") // only b holds b's next write: c must load it from b
	c.nodes["b"].r.Put(KindSession, "sb2", []byte("z"))

	n := c.add("c")
	n.mem.Set(Member{ID: "a"}, Member{ID: "b"}, Member{ID: "c"})
	c.nodes["a"].mem.Set(Member{ID: "a"}, Member{ID: "b"}, Member{ID: "c"}) // a lists c, b not yet
	c.startNode("c")
	c.eventually(2*time.Second, "b refused c", func() bool { return nonMemberCount(c.nodes["b"].r) > 0 })
	c.step(time.Second)
	c.settle()
	if n.r.Ready() {
		t.Fatal("c ready although b, reachable, refused it (it does not list c yet)")
	}
	c.nodes["b"].mem.Set(Member{ID: "a"}, Member{ID: "b"}, Member{ID: "c"})
	c.eventually(5*time.Second, "c ready", n.r.Ready)
	for _, k := range []string{"sa", "sb", "sb2"} {
		if _, ok := n.store.get(k); !ok {
			t.Fatalf("c did not load %s", k)
		}
	}
	c.net.Heal()
	c.eventually(5*time.Second, "converged", c.converged)
	c.checkInvariants()
}

// A joining node whose peers never list it becomes ready after LoadTimeout, as the first node
// would, instead of waiting for ever.
func TestLoadGivesUpOnRefusalsAfterLoadTimeout(t *testing.T) {
	c := newCluster(t, nil, "a")
	c.mod = func(cfg *Config) { cfg.LoadTimeout = 2 * time.Second }
	n := c.add("b")
	n.mem.Set(Member{ID: "a"}, Member{ID: "b"})
	c.startNode("b")
	c.eventually(5*time.Second, "b ready", n.r.Ready)
	if nonMemberCount(c.nodes["a"].r) < 2 {
		t.Fatalf("a refused b %d times: b did not retry", nonMemberCount(c.nodes["a"].r))
	}
}

// secureCluster starts three real nodes (gossip key, transport secret) on loopback.
func secureCluster(t *testing.T) []*realNode {
	t.Helper()
	return secureClusterGossip(t, nil)
}

// secureClusterGossip is secureCluster with gmod, if not nil, editing each
// memberlist's configuration.
func secureClusterGossip(t *testing.T, gmod func(*gossip.Config)) []*realNode {
	t.Helper()
	n1 := startRealNodeGossip(t, "n1", nil, nil, gmod)
	seeds := []string{n1.ml.BindAddr()}
	nodes := []*realNode{n1, startRealNodeGossip(t, "n2", seeds, nil, gmod), startRealNodeGossip(t, "n3", seeds, nil, gmod)}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.stop(false)
		}
	})
	pollUntil(t, 10*time.Second, "3 members everywhere, ready", func() bool {
		for _, n := range nodes {
			if len(n.r.Members()) != 3 || !n.r.Ready() {
				return false
			}
		}
		return true
	})
	return nodes
}

// Issue 12.5 on real sockets: a plain memberlist.Create on loopback, without the gossip key,
// joining a seed, is refused: it never becomes a member anywhere and owns no key. Then, with the
// transport secret (so it passes the transport's authentication) but still not a member, its
// sync, repair, verify and snapshot requests are all refused: 0 records injected, 0 pages served.
func TestRogueGossipJoinAndNonMemberRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("real sockets")
	}
	leaks := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, leaks) }) // runs last, after the nodes stop
	nodes := secureCluster(t)

	mc := memberlist.DefaultLocalConfig()
	mc.Name, mc.BindAddr, mc.BindPort = "rogue", "127.0.0.1", 0
	mc.ProbeInterval, mc.GossipInterval, mc.PushPullInterval = 100*time.Millisecond, 20*time.Millisecond, 200*time.Millisecond
	mc.Logger = log.New(io.Discard, "", 0)
	rogue, err := memberlist.Create(mc)
	if err != nil {
		t.Fatal(err)
	}
	defer rogue.Shutdown()
	if n, err := rogue.Join([]string{nodes[0].ml.BindAddr()}); err == nil {
		t.Fatalf("a node without the gossip key joined (contacted %d)", n)
	}
	// Watch for a while (several push-pull and gossip rounds): it must never appear.
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		for _, n := range nodes {
			for _, id := range n.r.Members() {
				if id == "rogue" {
					t.Fatalf("%s lists the rogue node as a member", n.id)
				}
			}
		}
		if rogue.NumMembers() != 1 {
			t.Fatalf("the rogue node sees %d members", rogue.NumMembers())
		}
	}
	for i := 0; i < 60; i++ {
		if o := nodes[1].r.Owner(fmt.Sprintf("10.66.2.%d:80", i)); o == "rogue" {
			t.Fatal("HRW names the rogue node")
		}
	}

	// The same attacker with the transport secret: authenticated as "rogue", not a member.
	tc := transport.DefaultTCPConfig()
	tc.NodeID, tc.ListenAddr, tc.Secret = "rogue", "127.0.0.1:0", testTransportSecret
	target := nodes[0].tcp.Addr()
	tc.Resolve = func(string) (string, error) { return target, nil }
	tcp, err := transport.NewTCP(tc)
	if err != nil {
		t.Fatal(err)
	}
	if err := tcp.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	before := nonMemberCount(nodes[0].r) // refusals of the cluster's own start-up race
	served := 0
	for kind, body := range rogueMessages(t, "rogue") {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		resp, err := tcp.Request(ctx, "n1", kind, body)
		cancel()
		if !isNotMember(err) {
			t.Errorf("kind %d from an authenticated non-member: answer %d bytes, err %v; want ErrNotMember", kind, len(resp), err)
		}
		if err == nil {
			served++
		}
	}
	if served != 0 {
		t.Fatalf("%d requests of a non-member served", served)
	}
	if n := nonMemberCount(nodes[0].r) - before; n != 4 {
		t.Fatalf("n1 refused %d of the rogue's messages, want 4", n)
	}
	for _, n := range nodes {
		n.store.mu.Lock()
		injected := len(n.store.recs)
		n.store.mu.Unlock()
		if _, ok := n.r.Get("10.66.0.1:80"); ok || injected != 0 {
			t.Fatalf("%s: a non-member's record installed (store holds %d records)", n.id, injected)
		}
	}
}

// With no BindAddr set, the gossip port is bound on loopback, never on a wildcard.
func TestMemberlistDefaultBindIsLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("real sockets")
	}
	c := gossip.DefaultConfig()
	c.NodeID, c.BindAddr, c.BindPort, c.SecretKey = "lo", "", 0, testGossipKey
	m, err := gossip.New(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	host, _, err := net.SplitHostPort(m.BindAddr())
	if err != nil || !net.ParseIP(host).IsLoopback() {
		t.Fatalf("bound %q, want a loopback address", m.BindAddr())
	}
	if !strings.HasPrefix(gossip.DefaultConfig().BindAddr, "127.") {
		t.Fatalf("gossip.DefaultConfig().BindAddr = %q", gossip.DefaultConfig().BindAddr)
	}
}

// Gossip key rotation on a running 3-node cluster on loopback: add the new key everywhere,
// switch every node to it, remove the old one. No member is ever lost (every membership change
// is watched), every record written before and during the rotation reaches every node, none is
// removed, and afterwards a node holding only the old key can no longer join while one with the
// new key can.
func TestMemberlistKeyRotation(t *testing.T) {
	if testing.Short() {
		t.Skip("real sockets")
	}
	leaks := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, leaks) })
	// Failure detection with room for a loaded machine (the race detector
	// beside other packages' tests): with the 50 ms probe timeout that the
	// other tests use, a member that was merely slow to answer was
	// declared dead, and this test, which fails on any lost member, failed
	// 7 of 8 runs at load average 15. Here a probe waits 200 ms, and a
	// suspect is declared dead after 800 ms (SuspicionMult 2: with three
	// members memberlist then waits for no confirmation, where 3 would
	// start the timer at its 7.2 s maximum). A member that cannot read the
	// others' gossip (a key wrongly rotated) is found within about 2.5 s
	// when unloaded: inside each step's watch.
	nodes := secureClusterGossip(t, func(c *gossip.Config) {
		c.ProbeInterval, c.ProbeTimeout, c.SuspicionMult = 400*time.Millisecond, 200*time.Millisecond, 2
	})
	const watchFor = 3 * time.Second
	var lostMu sync.Mutex
	var lost []string
	for _, n := range nodes {
		id := n.id
		cancel := n.ml.Subscribe(func(ms []Member) {
			if len(ms) < 3 {
				lostMu.Lock()
				lost = append(lost, fmt.Sprintf("%s saw %v", id, ms))
				lostMu.Unlock()
			}
		})
		t.Cleanup(cancel)
	}
	var keys []string
	write := func(step string) {
		t.Helper()
		for _, n := range nodes {
			k := "s-" + step + "-" + n.id
			if _, err := n.r.Put(KindSession, k, []byte(step)); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, k)
		}
		pollUntil(t, 5*time.Second, "records of step "+step+" everywhere", func() bool {
			for _, n := range nodes {
				for _, k := range keys {
					if r, ok := n.r.Get(k); !ok || r.Deleted {
						return false
					}
				}
			}
			return true
		})
	}
	// watch lets several probe and push-pull rounds run on the current keys.
	watch := func(step string) {
		t.Helper()
		for end := time.Now().Add(watchFor); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			for _, n := range nodes {
				if len(n.r.Members()) != 3 {
					t.Fatalf("after %s: %s lost a member: %v", step, n.id, n.r.Members())
				}
			}
		}
	}
	oldKey, newKey := testGossipKey, []byte("distro-test-gossip-key-rotated!!")
	write("before")
	for _, n := range nodes {
		if err := n.ml.AddKey(newKey); err != nil {
			t.Fatal(err)
		}
	}
	watch("add")
	write("added")
	for _, n := range nodes {
		if err := n.ml.UseKey(newKey); err != nil {
			t.Fatal(err)
		}
	}
	watch("use")
	write("switched")
	for _, n := range nodes {
		if err := n.ml.RemoveKey(oldKey); err != nil {
			t.Fatal(err)
		}
		if ks := n.ml.Keys(); len(ks) != 1 || !bytes.Equal(ks[0], newKey) {
			t.Fatalf("%s keyring after the rotation: %d keys", n.id, len(ks))
		}
	}
	watch("remove")
	write("removed")
	lostMu.Lock()
	if len(lost) > 0 {
		t.Fatalf("members lost during the rotation: %v", lost)
	}
	lostMu.Unlock()
	for _, n := range nodes {
		for _, k := range keys {
			n.store.mu.Lock()
			for _, rec := range n.store.applied[k] {
				if rec.Deleted {
					t.Errorf("%s: %s removed during the rotation", n.id, k)
				}
			}
			n.store.mu.Unlock()
		}
	}

	join := func(id string, key []byte) *gossip.Memberlist {
		c := fastMemberlist(id, "", []string{nodes[0].ml.BindAddr()})
		c.SecretKey, c.RejoinInterval = key, 0
		m, err := gossip.New(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	if old := join("old-key", oldKey); len(old.Members()) != 1 {
		t.Fatalf("a node with the removed key joined: %v", old.Members())
	}
	if fresh := join("new-key", newKey); len(fresh.Members()) < 2 {
		t.Fatalf("a node with the new key did not join: %v", fresh.Members())
	}
}

// Key rotation calls check their input and state.
func TestMemberlistKeyRotationErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("real sockets")
	}
	c := fastMemberlist("kr", "", nil)
	m, err := gossip.New(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.AddKey(testGossipKey); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("AddKey before Start: %v", err)
	}
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := m.AddKey([]byte("short")); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("AddKey of 5 bytes: %v", err)
	}
	if err := m.UseKey([]byte("not-in-the-ring!")); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("UseKey of an unknown key: %v", err)
	}
	if err := m.RemoveKey(testGossipKey); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("RemoveKey of the key in use: %v", err)
	}
	m.Close()
	if err := m.AddKey(testGossipKey); !errors.Is(err, ErrClosed) {
		t.Fatalf("AddKey after Close: %v", err)
	}

	ic := fastMemberlist("insecure", "", nil)
	ic.SecretKey, ic.Insecure = nil, true
	im, err := gossip.New(ic)
	if err != nil {
		t.Fatal(err)
	}
	if err := im.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	if err := im.AddKey(testGossipKey); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("AddKey on an Insecure node: %v", err)
	}
}
