package registry_test

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/muster-io/muster/distro"
	"github.com/muster-io/muster/internal/testutil"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
)

// clusterOpts is a 3-node cluster with immediate sync.
// seededCluster is a cluster of clusterOpts whose randomness comes from seed, and a test's own
// random stream from seed and stream.
func seededCluster(t *testing.T, seed, stream uint64) (*registrytest.Cluster, *rand.Rand) {
	opts := clusterOpts()
	opts.Seed = seed
	return registrytest.NewCluster(t, opts), rand.New(rand.NewPCG(seed, stream))
}

func clusterOpts() registrytest.ClusterOptions {
	dc := distro.DefaultConfig()
	dc.SyncDelay = distro.NoSyncDelay
	return registrytest.ClusterOptions{Distro: &dc, LogLevel: logLevel}
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
		if c.Node(0).Owner(in.IP, in.Port) == id {
			return in
		}
	}
	t.Fatalf("no key owned by %s", id)
	return model.Instance{}
}

// Owner names the same node on every node, spreads addresses over all of
// them, and is the replicator's owner of the beat record.
func TestOwner(t *testing.T) {
	c := registrytest.NewCluster(t, clusterOpts())
	seen := map[string]int{}
	for i := range 60 {
		in := inst("owner", i)
		o := c.Node(0).Owner(in.IP, in.Port)
		for _, n := range c.Nodes() {
			if got := n.Owner(in.IP, in.Port); got != o {
				t.Fatalf("%s: Owner(%s) = %s, node-0 says %s", n.ID, in.IP, got, o)
			}
		}
		if r := c.Node(1).Replicator().Owner("b/" + model.Endpoint(in.IP, in.Port)); r != o {
			t.Fatalf("Owner(%s) = %s, the replicator says %s", in.IP, o, r)
		}
		seen[o]++
	}
	if len(seen) != 3 {
		t.Fatalf("60 addresses owned by %v, want all 3 nodes", seen)
	}
	if o := registrytest.New(t, registrytest.Options{}).Owner("10.0.0.1", 80); o != "local" {
		t.Fatalf("standalone Owner = %q, want the node itself (local)", o)
	}
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
	expectBeatExpiry(t, c, "pay")
	if _, err := c.Node(2).Heartbeat(ctx, in.Key()); !isNotFound(err) {
		t.Fatalf("heartbeat of an expired instance through a non-owner: %v", err)
	}
}

func isNotFound(err error) bool { return errors.Is(err, registry.ErrNotFound) }

// TestClusterPartitionHeal: {A} | {B, C} for 60 s of fake time with writes
// on both sides, then heal: every node converges within two verify periods,
// no live instance is lost, no deleted one comes back.
func TestClusterPartitionHeal(t *testing.T) {
	c := registrytest.NewCluster(t, clusterOpts())
	a, b := c.Node(0), c.Node(1)

	// Beat clients, each beating through a "home" node on its side.
	type client struct {
		inst model.Instance
		home *registrytest.Node
		gone bool // deregistered: must not come back
	}
	var clients []*client
	for i := range 12 {
		home := a
		if i%2 == 1 {
			home = b
		}
		clients = append(clients, &client{inst: inst("p", i), home: home})
	}
	beatAll := func() {
		t.Helper()
		for _, cl := range clients {
			if cl.gone {
				continue
			}
			if _, err := cl.home.HeartbeatInstance(ctx, cl.inst); err != nil {
				t.Fatalf("beat %s via %s: %v", cl.inst.IP, cl.home.ID, err)
			}
		}
	}
	beatAll()
	sa, _ := a.OpenSession(ctx, registry.SessionOptions{})
	sb, _ := b.OpenSession(ctx, registry.SessionOptions{})
	mustRegister(t, sa, inst("s", 1), inst("s", 2))
	mustRegister(t, sb, inst("s", 3), inst("s", 4))
	c.Settle()

	c.Partition([]int{0}, []int{1, 2})
	for sec := 0; sec < 60; sec += 5 {
		beatAll()
		switch sec {
		case 10: // writes on both sides
			mustRegister(t, sa, inst("s", 5))
			mustRegister(t, sb, inst("s", 6))
			if err := sa.Deregister(ctx, inst("s", 1).Key()); err != nil {
				t.Fatal(err)
			}
			if err := sb.Deregister(ctx, inst("s", 3).Key()); err != nil {
				t.Fatal(err)
			}
		case 20:
			for _, i := range []int{2, 3} {
				cl := clients[i]
				if err := cl.home.Deregister(ctx, cl.inst.Key()); err != nil {
					t.Fatal(err)
				}
				cl.gone = true
			}
		}
		c.Advance(5 * time.Second)
	}
	c.Heal()
	// Two verify periods, the clients still beating.
	verify := distro.DefaultConfig().VerifyInterval
	for waited := time.Duration(0); waited < 2*verify; waited += 5 * time.Second {
		beatAll()
		c.Advance(5 * time.Second)
	}

	var wantP []string
	for _, cl := range clients {
		if !cl.gone {
			wantP = append(wantP, cl.inst.IP)
		}
	}
	slices.Sort(wantP)
	wantS := []string{inst("s", 2).IP, inst("s", 4).IP, inst("s", 5).IP, inst("s", 6).IP}
	slices.Sort(wantS)
	for _, n := range c.Nodes() {
		if got := ipsOn(t, n, "p"); !slices.Equal(got, wantP) {
			t.Errorf("%s serves beat instances %v, want %v", n.ID, got, wantP)
		}
		if got := ipsOn(t, n, "s"); !slices.Equal(got, wantS) {
			t.Errorf("%s serves session instances %v, want %v", n.ID, got, wantS)
		}
	}
	if err := c.CheckConverged(); err != nil {
		t.Fatal(err)
	}
}

// TestClusterOwnerDies: the sessions of a dead node leave the survivors
// within OrphanTimeout + one verify period; its beat instances live on under
// their new owner, and expire on time once their beats stop.
func TestClusterOwnerDies(t *testing.T) {
	c := registrytest.NewCluster(t, clusterOpts())
	a := c.Node(0)
	sess, _ := a.OpenSession(ctx, registry.SessionOptions{})
	mustRegister(t, sess, inst("s", 1), inst("s", 2))
	beat := ownedBy(t, c, a.ID, "b")
	mustRegister(t, c.Node(1), beat)
	c.Settle()
	c.Advance(3 * time.Second) // the last beat is 3 s old when the owner dies

	c.Stop(0)
	dc := distro.DefaultConfig()
	limit := dc.OrphanTimeout + dc.VerifyInterval
	survivors := c.Live()
	c.Eventually(limit, func() bool {
		for _, n := range survivors {
			if len(ipsOn(t, n, "s")) != 0 {
				return false
			}
		}
		return true
	}, "the dead node's session instances are still served")

	// The beat instance moved to a survivor and expired there: it was last
	// beaten before the owner died, 30 s ago by now.
	c.Settle()
	for _, n := range survivors {
		if got := ipsOn(t, n, "b"); len(got) != 0 {
			t.Fatalf("%s still serves %v, 30 s after its last beat", n.ID, got)
		}
	}
}

// TestClusterAdoptedBeatLives: a beat instance whose owner died keeps
// living under its new owner while its client beats through any node.
func TestClusterAdoptedBeatLives(t *testing.T) {
	c := registrytest.NewCluster(t, clusterOpts())
	a := c.Node(0)
	beat := ownedBy(t, c, a.ID, "b")
	mustRegister(t, c.Node(1), beat)
	c.Settle()
	c.Stop(0)
	for range 12 { // a minute of beats through n3
		c.Advance(5 * time.Second)
		if _, err := c.Node(2).Heartbeat(ctx, beat.Key()); err != nil {
			t.Fatalf("beat after the owner died: %v", err)
		}
	}
	newOwner := c.Node(1).Replicator().Owner("b/" + model.Endpoint(beat.IP, beat.Port))
	if newOwner == a.ID {
		t.Fatalf("the dead node still owns the key")
	}
	for _, n := range c.Live() {
		v, _ := n.Query(ctx, model.Query{Service: svcKey("b")})
		if len(v.Instances) != 1 || !v.Instances[0].Healthy {
			t.Fatalf("%s: %v", n.ID, v.Instances)
		}
	}
	// Beats stop: unhealthy after 15 s, gone after 30 s, everywhere.
	expectBeatExpiry(t, c, "b")
}

// TestClusterRestartLoads: a restarted node is not ready, and serves
// nothing, until it has loaded from its peers; then it holds everything.
func TestClusterRestartLoads(t *testing.T) {
	c := registrytest.NewCluster(t, clusterOpts())
	sess, _ := c.Node(0).OpenSession(ctx, registry.SessionOptions{})
	for i := range 20 {
		mustRegister(t, sess, inst("s", i))
		mustRegister(t, c.Node(1), inst("b", i))
	}
	c.Settle()
	c.Stop(2)
	// Hold the load: every message to the restarted node waits.
	c.Net.SetManual(true)
	c.Restart(2)
	n := c.Node(2)
	if n.Ready() {
		t.Fatal("ready before loading")
	}
	if _, err := n.Query(ctx, model.Query{Service: svcKey("s")}); !errors.Is(err, registry.ErrNotReady) {
		t.Fatalf("query before the load: %v, want ErrNotReady", err)
	}
	if _, err := n.Watch(ctx, model.Query{Service: svcKey("s")}); !errors.Is(err, registry.ErrNotReady) {
		t.Fatalf("watch before the load: %v, want ErrNotReady", err)
	}
	c.Net.SetManual(false)
	c.Net.DeliverAll()
	c.AwaitReady()
	if got := ipsOn(t, n, "s"); len(got) != 20 {
		t.Fatalf("restarted node serves %d session instances, want 20", len(got))
	}
	if got := ipsOn(t, n, "b"); len(got) != 20 {
		t.Fatalf("restarted node serves %d beat instances, want 20", len(got))
	}
}

// logLevel is the cluster tests' log level (MUSTER_TEST_DEBUG=1: debug).
var logLevel = func() slog.Level {
	if os.Getenv("MUSTER_TEST_DEBUG") != "" {
		return slog.LevelDebug
	}
	return slog.LevelWarn
}()

// TestClusterReorderDuplicate holds every message, then delivers them in a
// random order, duplicating many and delivering the originals late: no
// node's state ever moves backwards, and all converge on the owner's. It
// runs seeds 1–5, or MUSTER_SEEDS seeds from MUSTER_SEED (see
// internal/testutil); a failure names the seed that replays it.
func TestClusterReorderDuplicate(t *testing.T) {
	testutil.Seeds(t, 1, 5, runReorderDuplicate)
}

func runReorderDuplicate(t *testing.T, seed uint64) {
	c, rng := seededCluster(t, seed, 99)
	a := c.Node(0)
	sess, _ := a.OpenSession(ctx, registry.SessionOptions{})
	c.Net.SetManual(true)

	// The owner's history, one step per write.
	var history [][]string
	seen := make([]uint64, 2)
	cur := map[string]bool{}
	snap := func() {
		var s []string
		for ip := range cur {
			s = append(s, ip)
		}
		slices.Sort(s)
		history = append(history, s)
	}
	for i := range 12 {
		in := inst("rd", i%5)
		if cur[in.IP] && rng.IntN(2) == 0 {
			_ = sess.Deregister(ctx, in.Key())
			delete(cur, in.IP)
		} else {
			mustRegister(t, sess, in)
			cur[in.IP] = true
		}
		snap()
		// Release some held messages, in a random order, with duplicates.
		for range rng.IntN(4) {
			p := c.Net.Pending()
			if len(p) == 0 {
				break
			}
			e := p[rng.IntN(len(p))]
			if rng.IntN(2) == 0 {
				_ = c.Net.Duplicate(e.ID) // the original stays queued, delivered late
			} else {
				_ = c.Net.Deliver(e.ID)
			}
		}
		c.Settle()
		// Every other node holds the session's record at a revision
		// never lower than before, and serves one of the owner's past
		// states.
		for i, n := range c.Nodes()[1:] {
			if rec, ok := n.Replicator().Get("s/" + sess.ID()); ok {
				if rec.Revision < seen[i] {
					t.Fatalf("%s moved back from revision %d to %d", n.ID, seen[i], rec.Revision)
				}
				seen[i] = rec.Revision
			}
			got := ipsOn(t, n, "rd")
			at := slices.IndexFunc(history, func(h []string) bool { return slices.Equal(h, got) })
			if len(got) > 0 && at < 0 {
				t.Fatalf("%s serves %v, never a state of the owner: %v", n.ID, got, history)
			}
		}
	}
	// Release the rest in reverse order, each twice.
	p := c.Net.Pending()
	for i := len(p) - 1; i >= 0; i-- {
		_ = c.Net.Duplicate(p[i].ID)
		_ = c.Net.Deliver(p[i].ID)
	}
	c.Net.SetManual(false)
	c.Net.DeliverAll()
	c.Advance(2 * distro.DefaultConfig().VerifyInterval)
	want := history[len(history)-1]
	for _, n := range c.Nodes() {
		if got := ipsOn(t, n, "rd"); !slices.Equal(got, want) {
			t.Fatalf("%s serves %v, the owner's last state is %v", n.ID, got, want)
		}
	}
}

// A watcher on one node sees the changes made on another, with typed deltas.
func TestClusterWatchAcrossNodes(t *testing.T) {
	c := registrytest.NewCluster(t, clusterOpts())
	w, err := c.Node(2).Watch(ctx, model.Query{Service: svcKey("w")})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	sess, _ := c.Node(0).OpenSession(ctx, registry.SessionOptions{})
	mustRegister(t, sess, inst("w", 1))
	c.Settle()
	var added int
	for added == 0 {
		u, err := w.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		added += len(u.Delta.Added)
	}
	_ = sess.Close()
	c.Settle()
	for {
		u, err := w.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(u.Delta.Removed) == 1 && len(u.View.Instances) == 0 {
			break
		}
	}
}

// A beat write whose owner cannot be reached fails at once with
// ErrUnavailable (the membership has not declared the owner dead yet), and
// works again once the link is back.
func TestClusterForwardToUnreachableOwner(t *testing.T) {
	c := registrytest.NewCluster(t, clusterOpts())
	in := ownedBy(t, c, c.Node(1).ID, "u")
	c.Net.Partition(c.Node(0).ID, c.Node(1).ID) // the network only: membership still lists n2
	if err := c.Node(0).Register(ctx, in); !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("register through a node cut off from the owner: %v, want ErrUnavailable", err)
	}
	c.Net.Heal()
	mustRegister(t, c.Node(0), in)
	c.Settle()
	if got := ipsOn(t, c.Node(2), "u"); len(got) != 1 {
		t.Fatalf("n3 serves %v", got)
	}
}

// With ServeBeforeReady, a loading node answers queries from what it has.
func TestClusterServeBeforeReady(t *testing.T) {
	opts := clusterOpts()
	cfg := registry.DefaultConfig()
	cfg.HealthChecks = nil
	cfg.ServeBeforeReady = true
	opts.Config = &cfg
	c := registrytest.NewCluster(t, opts)
	mustRegister(t, c.Node(0), inst("e", 1))
	c.Settle()
	c.Stop(2)
	c.Net.SetManual(true)
	c.Restart(2)
	n := c.Node(2)
	if n.Ready() {
		t.Fatal("ready before loading")
	}
	if _, err := n.Query(ctx, model.Query{Service: svcKey("e")}); err != nil {
		t.Fatalf("query while loading with ServeBeforeReady: %v", err)
	}
	c.Net.SetManual(false)
	c.Net.DeliverAll()
	c.AwaitReady()
	if got := ipsOn(t, n, "e"); len(got) != 1 {
		t.Fatalf("after the load: %v", got)
	}
}

// While ownership moves (the owner's view of the membership differs from the
// forwarder's), a forwarded write is retried with backoff, a bounded number
// of times: it succeeds once the views agree, and fails with ErrUnavailable
// if they never do.
func TestClusterForwardWhileOwnershipMoves(t *testing.T) {
	c := registrytest.NewCluster(t, clusterOpts())
	a, b := c.Node(0), c.Node(1)
	// A key that b owns in the real membership, but that a phantom member
	// "n9" would own: b, believing n9 alive, answers "not owner".
	var in model.Instance
	for i := range 1000 {
		cand := inst("m", i)
		key := "b/" + model.Endpoint(cand.IP, cand.Port)
		if a.Replicator().Owner(key) != b.ID {
			continue
		}
		b.Membership.Add(distro.Member{ID: "n9"})
		phantom := b.Replicator().Owner(key) == "n9"
		b.Membership.Remove("n9")
		if phantom {
			in = cand
			break
		}
	}
	if in.IP == "" {
		t.Fatal("no suitable key")
	}
	register := func(in model.Instance) <-chan error {
		done := make(chan error, 1)
		go func() { done <- a.Register(ctx, in) }()
		return done
	}

	// The views agree again while a backs off: the write goes through.
	b.Membership.Add(distro.Member{ID: "n9"})
	answers := c.Net.Stats(b.ID, a.ID).Messages
	done := register(in)
	deadline := time.Now().Add(5 * time.Second)
	for c.Net.Stats(b.ID, a.ID).Messages == answers { // b's "not owner" answer
		if time.Now().After(deadline) {
			t.Fatal("the first attempt never got an answer")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("returned after the first attempt (%v); it should back off and retry", err)
	default:
	}
	b.Membership.Remove("n9")
	if err := advanceUntil(c, done); err != nil {
		t.Fatalf("register while ownership moved: %v", err)
	}
	c.Settle()
	if got := ipsOn(t, b, "m"); len(got) != 1 {
		t.Fatalf("the owner serves %v", got)
	}

	// The views never agree: ErrUnavailable after ForwardAttempts tries.
	b.Membership.Add(distro.Member{ID: "n9"})
	in2 := in
	in2.Service = svcKey("m2")
	if err := advanceUntil(c, register(in2)); !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("register while the views disagree: %v, want ErrUnavailable", err)
	}
	b.Membership.Remove("n9")
}

// advanceUntil moves the fake clock a second at a time until done yields:
// the call it waits for backs off on the registry's clock.
func advanceUntil(c *registrytest.Cluster, done <-chan error) error {
	for {
		select {
		case err := <-done:
			return err
		case <-time.After(time.Millisecond):
			c.Clock.Advance(time.Second)
		}
	}
}

// A node that shuts down gracefully hands its sessions over: their
// instances leave every other node at once, not after OrphanTimeout. A
// crashed one cannot: its sessions' instances stay until then.
func TestClusterShutdownHandsOver(t *testing.T) {
	c := registrytest.NewCluster(t, clusterOpts())
	for _, i := range []int{0, 1} {
		sess, err := c.Node(i).OpenSession(ctx, registry.SessionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		mustRegister(t, sess, inst(fmt.Sprint("h", i), 1))
	}
	c.Settle()
	c.Shutdown(0)
	if got := ipsOn(t, c.Node(2), "h0"); len(got) != 0 {
		t.Fatalf("after a graceful shutdown, n3 still serves %v", got)
	}
	c.Stop(1)
	if got := ipsOn(t, c.Node(2), "h1"); len(got) != 1 {
		t.Fatalf("right after a crash, n3 serves %v; the instance should stay until OrphanTimeout", got)
	}
	c.Advance(distro.DefaultConfig().OrphanTimeout + distro.DefaultConfig().VerifyInterval)
	if got := ipsOn(t, c.Node(2), "h1"); len(got) != 0 {
		t.Fatalf("after OrphanTimeout, n3 still serves %v", got)
	}
}

// expectBeatExpiry checks that svc's one beat instance, beaten last just
// now, turns unhealthy on every live node after 15 s and is gone after 30 s.
func expectBeatExpiry(t *testing.T, c *registrytest.Cluster, svc string) {
	t.Helper()
	c.Advance(16 * time.Second)
	for _, n := range c.Live() {
		v, _ := n.Query(ctx, model.Query{Service: svcKey(svc), IncludeDisabled: true})
		if len(v.Instances) != 1 || v.RealHealthy(0) {
			t.Fatalf("%s: want one unhealthy instance, got %v", n.ID, v.Instances)
		}
	}
	c.Advance(15 * time.Second)
	for _, n := range c.Live() {
		if got := ipsOn(t, n, svc); len(got) != 0 {
			t.Fatalf("%s still serves %v 31 s after the last beat", n.ID, got)
		}
	}
}

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

// TestClusterNoHandover: HandoverTimeout NoHandover turns the handover
// off: a node that shuts down gracefully leaves its sessions' instances on
// the others until OrphanTimeout, as a crashed one does. (Zero is the
// default 2 s: TestClusterShutdownHandsOver.)
func TestClusterNoHandover(t *testing.T) {
	opts := clusterOpts()
	cfg := registry.DefaultConfig()
	cfg.HealthChecks, cfg.HandoverTimeout = nil, registry.NoHandover
	opts.Config = &cfg
	c := registrytest.NewCluster(t, opts)
	sess, err := c.Node(0).OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mustRegister(t, sess, inst("h0", 1))
	c.Settle()
	c.Shutdown(0)
	if got := ipsOn(t, c.Node(2), "h0"); len(got) != 1 {
		t.Fatalf("without handover, n3 serves %v right after the shutdown; want the instance until OrphanTimeout", got)
	}
}
