package registry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/muster-io/muster/distro"
	"github.com/muster-io/muster/internal/testutil"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
	"github.com/muster-io/muster/transport"
)

// Issue 15: a session replicates as one record per instance (delta.go).
// These tests break the new path on purpose: lost, reordered and
// duplicated instance records, a peer that lacks the session's other
// records, a change racing a verify repair, a peer restarting mid-stream;
// and they check that an identical re-registration changes nothing.

// weightsOn returns the weight of each instance of svc that node n serves,
// by IP.
func weightsOn(t *testing.T, n *registrytest.Node, svc string) map[string]float64 {
	t.Helper()
	v, err := n.Query(ctx, model.Query{Service: svcKey(svc), IncludeDisabled: true})
	if err != nil {
		t.Fatalf("%s: Query: %v", n.ID, err)
	}
	out := map[string]float64{}
	for _, in := range v.Instances {
		out[in.IP] = in.Weight
	}
	return out
}

func weighted(svc string, i int, w float64) model.Instance {
	in := inst(svc, i)
	in.Weight = w
	return in
}

// noUpdate fails if w is handed an update before the registry's watchers
// are flushed.
func noUpdate(t *testing.T, r interface{ Internals() registry.Internals }, w *registry.Watcher) {
	t.Helper()
	if err := r.Internals().FlushWatchers(ctx); err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithTimeout(ctx, 0)
	defer cancel()
	if u, err := w.Next(c); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("watcher woken: %+v, %v", u.Delta, err)
	}
}

// TestIdenticalRegisterChangesNothing (standalone): registering the same
// instance again on its session, as a beat instance, or through a second
// session publishing the same key with the same data, moves no revision
// and wakes no watcher.
func TestIdenticalRegisterChangesNothing(t *testing.T) {
	r := newReg(t)
	sess, err := r.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := r.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, b := inst("same", 1), inst("same", 2)
	b.Metadata = model.NewMetadata(map[string]string{"k": "v"})
	mustRegister(t, sess, s)
	mustRegister(t, r, b)
	w, err := r.Watch(ctx, model.Query{Service: svcKey("same")})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	first := next(t, w)
	rev := all(t, r, "same").Revision
	for range 3 {
		mustRegister(t, sess, s) // the session again
		mustRegister(t, r, b)    // the beat instance again
		mustRegister(t, other, s)
	}
	if got := all(t, r, "same").Revision; got != rev {
		t.Fatalf("revision moved from %d to %d", rev, got)
	}
	noUpdate(t, r, w)
	// The beat re-registration renewed the lease: the instance outlives
	// its first deadline.
	r.Advance(10 * time.Second)
	mustRegister(t, r, b)
	r.Advance(10 * time.Second)
	if got := len(all(t, r, "same").Instances); got != 2 {
		t.Fatalf("%d instances after the renewed lease, want 2", got)
	}
	// A real change wakes the watcher, with exactly that change.
	s2 := s
	s2.Weight = 5
	mustRegister(t, sess, s2)
	u := next(t, w)
	if u.Revision <= first.Revision || len(u.Delta.Updated) != 1 || len(u.Delta.Added)+len(u.Delta.Removed) != 0 {
		t.Fatalf("update after a real change: revision %d (first %d), delta %+v", u.Revision, first.Revision, u.Delta)
	}
	// The second session's copy is not the one served (its ID may sort
	// either way); closing the first leaves the instance served.
	if err := sess.Close(); err != nil {
		t.Fatal(err)
	}
	if got := len(all(t, r, "same").Instances); got != 2 {
		t.Fatalf("%d instances after the first session closed, want 2", got)
	}
}

// TestIdenticalRegisterReplicatesNothing: in a cluster, the same
// re-registrations send nothing and write no record version; the peers'
// revisions stay.
func TestIdenticalRegisterReplicatesNothing(t *testing.T) {
	c := registrytest.NewCluster(t, clusterOpts())
	a := c.Node(0)
	sess, err := a.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := inst("same", 1)
	b := ownedBy(t, c, a.ID, "same")
	mustRegister(t, sess, s)
	mustRegister(t, a, b)
	c.Settle()
	revs := func() []uint64 {
		var out []uint64
		for _, n := range c.Nodes() {
			out = append(out, all1(t, n, "same").Revision)
		}
		return out
	}
	records := func() map[string]uint64 {
		out := map[string]uint64{}
		a.Replicator().Range(func(dr distro.Record) bool { out[dr.Key] = dr.Revision; return true })
		return out
	}
	before, beforeRecs := revs(), records()
	sent := c.Net.TotalStats().Messages
	w, err := c.Node(1).Watch(ctx, model.Query{Service: svcKey("same")})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	next(t, w)
	for range 3 {
		mustRegister(t, sess, s)
		mustRegister(t, a, b)
	}
	c.Settle()
	if got := c.Net.TotalStats().Messages; got != sent {
		t.Fatalf("%d messages sent for identical re-registrations", got-sent)
	}
	if got := revs(); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Fatalf("revisions moved: %v → %v", before, got)
	}
	if got := records(); fmt.Sprint(got) != fmt.Sprint(beforeRecs) {
		t.Fatalf("records moved: %v → %v", beforeRecs, got)
	}
	noUpdate(t, c.Node(1), w)
	// A second session publishing the same instance: its record travels
	// (it publishes the key now), but no service changes anywhere.
	other, err := a.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mustRegister(t, other, s)
	c.Settle()
	if got := revs(); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Fatalf("a second publisher of the same instance moved revisions: %v → %v", before, got)
	}
	noUpdate(t, c.Node(1), w)
	// With the first session gone, the second keeps it everywhere.
	if err := sess.Close(); err != nil {
		t.Fatal(err)
	}
	c.Settle()
	for _, n := range c.Nodes() {
		if got := weightsOn(t, n, "same"); len(got) != 2 {
			t.Fatalf("%s serves %v after the first session closed", n.ID, got)
		}
	}
}

// all1 is all for a cluster node.
func all1(t *testing.T, n *registrytest.Node, svc string) *model.ServiceView {
	t.Helper()
	v, err := n.Query(ctx, model.Query{Service: svcKey(svc), IncludeDisabled: true})
	if err != nil {
		t.Fatalf("%s: Query: %v", n.ID, err)
	}
	return v
}

// TestSessionChangeCostsOneRecord: a change to one instance of a session of
// 200 sends one small record, not the session.
func TestSessionChangeCostsOneRecord(t *testing.T) {
	c := registrytest.NewCluster(t, clusterOpts())
	a := c.Node(0)
	sess, err := a.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		mustRegister(t, sess, inst("big", i))
	}
	c.Settle()
	c.Net.ResetStats()
	mustRegister(t, sess, weighted("big", 7, 9))
	c.Settle()
	st := c.Net.TotalStats()
	if st.Messages != 4 || st.Bytes > 2*600 { // a request and its answer per peer
		t.Fatalf("one change sent %d messages, %d bytes", st.Messages, st.Bytes)
	}
	for _, n := range c.Nodes() {
		if got := weightsOn(t, n, "big"); len(got) != 200 || got[inst("big", 7).IP] != 9 {
			t.Fatalf("%s: %d instances, weight %v", n.ID, len(got), got[inst("big", 7).IP])
		}
	}
}

// TestSessionInstanceWithoutTheRest: a peer that missed everything else of
// a session (its other instances: it was cut off)
// applies a later change of one instance at once, on its own; verify then
// brings it the rest.
func TestSessionInstanceWithoutTheRest(t *testing.T) {
	c := registrytest.NewCluster(t, clusterOpts())
	a, lagging := c.Node(0), c.Node(2)
	sess, err := a.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// n3 is cut off while the session registers: what the owner sent went
	// to n2 only, and nothing is due to n3 when it comes back.
	c.Partition([]int{0, 1}, []int{2})
	for i := range 10 {
		mustRegister(t, sess, inst("rest", i))
	}
	c.Settle()
	c.Heal()
	if got := weightsOn(t, lagging, "rest"); len(got) != 0 {
		t.Fatalf("n3 serves %v before anything reached it", got)
	}
	// The next change of instance 5 goes out at once: n3 takes it without
	// the rest of the session.
	mustRegister(t, sess, weighted("rest", 5, 7))
	c.Settle()
	if got := weightsOn(t, lagging, "rest"); got[inst("rest", 5).IP] != 7 {
		t.Fatalf("n3 serves %v, want instance 5 at weight 7", got)
	}
	c.Eventually(2*distro.DefaultConfig().VerifyInterval+time.Second, func() bool {
		return len(weightsOn(t, lagging, "rest")) == 10
	}, "n3 never got the session's other instances")
	if err := c.CheckConverged(); err != nil {
		t.Fatal(err)
	}
}

// TestSessionInstanceFaults holds every message, then releases them in a
// random order, losing some and duplicating others (the originals delivered
// late), while the owner changes, adds and removes instances of a session
// and verify rounds run (their repairs race the changes). Weights only
// grow, so a peer that serves a lower weight than it served before has
// rolled back; one that serves an instance again after removing it, without
// a newer registration, has resurrected it. After the faults stop, all
// converge on the owner's state within two verify periods. Seeds 1–4, or
// MUSTER_SEEDS seeds from MUSTER_SEED (see internal/testutil).
func TestSessionInstanceFaults(t *testing.T) {
	testutil.Seeds(t, 1, 4, runSessionInstanceFaults)
}

func runSessionInstanceFaults(t *testing.T, seed uint64) {
	c, rng := seededCluster(t, seed, 15)
	t.Logf("seed %d", seed)
	a := c.Node(0)
	sess, err := a.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 12
	weight := 1.0
	cur := map[int]float64{} // the owner's state
	for i := range n {
		weight++
		mustRegister(t, sess, weighted("f", i, weight))
		cur[i] = weight
	}
	c.Settle()
	c.Net.SetManual(true)
	// seen[node][ip] is the highest weight the node served;
	// gone[node][ip] the weight it served when it last removed it.
	seen := []map[string]float64{{}, {}}
	gone := []map[string]float64{{}, {}}
	check := func() {
		for k, node := range c.Nodes()[1:] {
			got := weightsOn(t, node, "f")
			for ip, w := range got {
				if w < seen[k][ip] {
					t.Fatalf("%s rolled %s back from weight %v to %v", node.ID, ip, seen[k][ip], w)
				}
				if g, ok := gone[k][ip]; ok && w <= g {
					t.Fatalf("%s resurrected %s at weight %v (removed at %v)", node.ID, ip, w, g)
				}
				seen[k][ip] = w
				delete(gone[k], ip)
			}
			for ip, w := range seen[k] {
				if _, ok := got[ip]; !ok {
					gone[k][ip] = w
				}
			}
		}
	}
	for step := range 40 {
		i := rng.IntN(n)
		weight++
		switch _, held := cur[i]; {
		case held && rng.IntN(4) == 0:
			if err := sess.Deregister(ctx, inst("f", i).Key()); err != nil {
				t.Fatal(err)
			}
			delete(cur, i)
		default:
			mustRegister(t, sess, weighted("f", i, weight))
			cur[i] = weight
		}
		if step%10 == 9 {
			c.Advance(distro.DefaultConfig().VerifyInterval) // a verify round; its messages are held too
		} else {
			c.Settle()
		}
		for range rng.IntN(5) {
			p := c.Net.Pending()
			if len(p) == 0 {
				break
			}
			e := p[rng.IntN(len(p))]
			switch rng.IntN(4) {
			case 0:
				_ = c.Net.Drop(e.ID) // lost
			case 1:
				_ = c.Net.Duplicate(e.ID) // the original stays queued, delivered late
			default:
				_ = c.Net.Deliver(e.ID)
			}
			c.Settle()
			check()
		}
	}
	// The rest, in reverse order, each twice.
	p := c.Net.Pending()
	for k := len(p) - 1; k >= 0; k-- {
		_ = c.Net.Duplicate(p[k].ID)
		_ = c.Net.Deliver(p[k].ID)
		c.Settle()
		check()
	}
	c.Net.SetManual(false)
	for c.Net.DeliverAll() > 0 { // what the releases above sent, held too
		c.Settle()
		check()
	}
	want := map[string]float64{}
	for i, w := range cur {
		want[inst("f", i).IP] = w
	}
	c.Eventually(2*distro.DefaultConfig().VerifyInterval+time.Second, func() bool {
		check()
		for _, node := range c.Nodes() {
			if fmt.Sprint(weightsOn(t, node, "f")) != fmt.Sprint(want) {
				return false
			}
		}
		return true
	}, "the nodes did not converge on the owner's %v", want)
	if err := c.CheckConverged(); err != nil {
		t.Fatal(err)
	}
}

// TestSessionRestartMidStream: a peer crashes while a session's changes are
// on their way (some delivered, some not), and starts again empty while
// more changes happen: it loads the owner's records and serves the owner's
// state, and takes the changes after it.
func TestSessionRestartMidStream(t *testing.T) {
	c := registrytest.NewCluster(t, clusterOpts())
	a := c.Node(0)
	sess, err := a.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		mustRegister(t, sess, inst("rs", i))
	}
	c.Settle()
	c.Net.SetManual(true)
	for i := range 30 {
		mustRegister(t, sess, weighted("rs", i, float64(2+i)))
		if i%3 == 0 {
			_ = sess.Deregister(ctx, inst("rs", i).Key())
		}
	}
	c.Settle()
	p := c.Net.Pending()
	for _, e := range p[:len(p)/2] {
		_ = c.Net.Deliver(e.ID)
	}
	c.Settle()
	c.Stop(2) // mid-stream: the rest to it is lost
	c.Net.SetManual(false)
	c.Net.DeliverAll()
	for i := 30; i < 40; i++ {
		mustRegister(t, sess, inst("rs", i))
	}
	c.Settle()
	c.Restart(2)
	c.AwaitReady()
	for i := 40; i < 45; i++ {
		mustRegister(t, sess, inst("rs", i))
	}
	c.Settle()
	want := weightsOn(t, a, "rs")
	if len(want) != 30-10+15 {
		t.Fatalf("owner serves %d instances", len(want))
	}
	for _, n := range c.Nodes()[1:] {
		if got := weightsOn(t, n, "rs"); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s serves %v, owner %v", n.ID, got, want)
		}
	}
	if err := c.CheckConverged(); err != nil {
		t.Fatal(err)
	}
}

// TestSessionCloseRemovesEverywhere: closing a session of many instances
// removes each of them on every peer, and leaves tombstones (no instance
// record comes back from a late message).
func TestSessionCloseRemovesEverywhere(t *testing.T) {
	c := registrytest.NewCluster(t, clusterOpts())
	a := c.Node(0)
	sess, err := a.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		mustRegister(t, sess, inst("cl", i))
	}
	c.Net.SetManual(true)
	c.Settle()
	late := c.Net.Pending() // the registrations, held
	for _, e := range late {
		_ = c.Net.Duplicate(e.ID)
	}
	c.Settle()
	if err := sess.Close(); err != nil {
		t.Fatal(err)
	}
	c.Net.SetManual(false)
	c.Settle()
	c.Net.DeliverAll() // the originals, late: older than the tombstones
	c.Settle()
	for _, n := range c.Nodes() {
		if got := weightsOn(t, n, "cl"); len(got) != 0 {
			t.Fatalf("%s serves %d instances of a closed session", n.ID, len(got))
		}
	}
	live := 0
	a.Replicator().Range(func(dr distro.Record) bool {
		if !dr.Deleted {
			live++
		}
		return true
	})
	if live != 0 {
		t.Fatalf("%d live records after the session closed", live)
	}
}

// TestSessionInstanceChangeRacesRepair: a peer that missed a change of an
// instance is being repaired by verify when the owner changes the instance
// again. Whichever of the repair (the older version) and the sync (the
// newer) arrives first, the peer ends at the newer, and never serves the
// older after it.
func TestSessionInstanceChangeRacesRepair(t *testing.T) {
	const (
		kindSync   = 1 // distro's message kinds (distro/wire.go)
		kindVerify = 2
		kindRepair = 3
	)
	for _, syncFirst := range []bool{true, false} {
		t.Run(fmt.Sprint("syncFirst=", syncFirst), func(t *testing.T) {
			c := registrytest.NewCluster(t, clusterOpts())
			a, lagging := c.Node(0), c.Node(2)
			sess, err := a.OpenSession(ctx, registry.SessionOptions{})
			if err != nil {
				t.Fatal(err)
			}
			x := inst("race", 1)
			mustRegister(t, sess, weighted("race", 1, 1), inst("race", 2))
			c.Settle()
			// n3 misses weight 2.
			c.Partition([]int{0, 1}, []int{2})
			mustRegister(t, sess, weighted("race", 1, 2))
			c.Settle()
			c.Heal()
			if got := weightsOn(t, lagging, "race")[x.IP]; got != 1 {
				t.Fatalf("n3 serves weight %v before the repair, want 1", got)
			}
			c.Net.SetManual(true)
			deliver := func(kind transport.Kind, to string) int {
				n := 0
				for _, e := range c.Net.Pending() {
					if e.Kind == kind && e.To == to {
						_ = c.Net.Deliver(e.ID)
						n++
					}
				}
				c.Settle()
				return n
			}
			// A verify round: n1's digest reaches n3, whose answer makes n1
			// send a repair carrying weight 2, held.
			c.Advance(distro.DefaultConfig().VerifyInterval)
			if deliver(kindVerify, lagging.ID) == 0 {
				t.Fatal("no verify to n3")
			}
			repairs := 0
			for _, e := range c.Net.Pending() {
				if e.Kind == kindRepair && e.To == lagging.ID {
					repairs++
				}
			}
			if repairs == 0 {
				t.Fatal("no repair to n3")
			}
			// Meanwhile the owner moves the instance to weight 3.
			mustRegister(t, sess, weighted("race", 1, 3))
			c.Settle()
			if syncFirst {
				if deliver(kindSync, lagging.ID) == 0 {
					t.Fatal("no sync to n3")
				}
				if got := weightsOn(t, lagging, "race")[x.IP]; got != 3 {
					t.Fatalf("n3 serves weight %v after the sync, want 3", got)
				}
				deliver(kindRepair, lagging.ID)
			} else {
				deliver(kindRepair, lagging.ID)
				if got := weightsOn(t, lagging, "race")[x.IP]; got != 2 {
					t.Fatalf("n3 serves weight %v after the repair, want 2", got)
				}
				if deliver(kindSync, lagging.ID) == 0 {
					t.Fatal("no sync to n3")
				}
			}
			if got := weightsOn(t, lagging, "race")[x.IP]; got != 3 {
				t.Fatalf("n3 serves weight %v, want 3", got)
			}
			c.Net.SetManual(false)
			for c.Net.DeliverAll() > 0 {
				c.Settle()
			}
			c.Advance(2 * distro.DefaultConfig().VerifyInterval)
			for _, n := range c.Nodes() {
				if got := weightsOn(t, n, "race"); got[x.IP] != 3 || len(got) != 2 {
					t.Fatalf("%s serves %v", n.ID, got)
				}
			}
			if err := c.CheckConverged(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
