package registry_test

import (
	"slices"
	"testing"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
)

// kinds lists the kinds and reasons of events, as "kind/reason".
func kinds(evs []registry.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Kind.String() + "/" + e.Reason
	}
	return out
}

// A beat instance's life, told by Explain: registered, a missed beat, a
// beat that revives it, then the lease running out. It stays explained
// once gone.
func TestExplainBeatInstance(t *testing.T) {
	r := newReg(t)
	in := inst("s", 1)
	mustRegister(t, r, in)
	if ex := r.Explain(in.Key()); !ex.Present || !slices.Equal(ex.Publishers, []string{"10.0.0.2:8080"}) || ex.Instance.IP != in.IP {
		t.Fatalf("while registered: %+v", ex)
	}
	r.Advance(16 * time.Second) // unhealthy after 15 s without a beat
	if _, err := r.Heartbeat(ctx, in.Key()); err != nil {
		t.Fatal(err)
	}
	r.Advance(16 * time.Second)
	r.Advance(15 * time.Second) // deleted after 30 s without a beat
	ex := r.Explain(in.Key())
	want := []string{"registered/", "unhealthy/beat missed", "healthy/beat resumed", "unhealthy/beat missed", "removed/lease expired"}
	if ex.Present || !slices.Equal(kinds(ex.Events), want) {
		t.Fatalf("after the lease ran out: present %v, events %v; want %v", ex.Present, kinds(ex.Events), want)
	}
	for i, e := range ex.Events {
		if e.Publisher != "10.0.0.2:8080" || e.Node != "local" || e.Key != in.Key().WithDefaults() {
			t.Fatalf("event %d: %+v", i, e)
		}
		if i > 0 && (e.At.Before(ex.Events[i-1].At) || e.Seq <= ex.Events[i-1].Seq) {
			t.Fatalf("event %d (%v, seq %d) before the one before it (%v)", i, e.At, e.Seq, ex.Events[i-1])
		}
	}
}

// A session's instance: updated, then removed when the session closes; a
// persistent one: stored, patched, health set by hand, deleted.
func TestExplainSessionAndPersistent(t *testing.T) {
	r := newReg(t)
	sess, err := r.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	in := inst("s", 1)
	if err := sess.Register(ctx, in); err != nil {
		t.Fatal(err)
	}
	in.Weight = 5
	if err := sess.Register(ctx, in); err != nil {
		t.Fatal(err)
	}
	if err := sess.Register(ctx, in); err != nil { // identical: no event
		t.Fatal(err)
	}
	if err := sess.Close(); err != nil {
		t.Fatal(err)
	}
	ex := r.Explain(in.Key())
	if want := []string{"registered/", "updated/", "removed/session closed"}; !slices.Equal(kinds(ex.Events), want) || ex.Events[0].Publisher != sess.ID() {
		t.Fatalf("session instance: %v (publisher %q); want %v by %s", kinds(ex.Events), ex.Events[0].Publisher, want, sess.ID())
	}

	svc := model.Service{Key: svcKey("p"), Clusters: []model.Cluster{{Name: model.DefaultCluster, HealthCheck: model.HealthCheck{Type: model.CheckNone}}}}
	if err := r.CreateService(ctx, svc); err != nil {
		t.Fatal(err)
	}
	p := persistent("p", 1)
	three := 3.0
	mustRegister(t, r, p)
	if err := r.PatchInstance(ctx, model.InstancePatch{Key: p.Key(), Weight: &three}); err != nil {
		t.Fatal(err)
	}
	if err := r.SetHealth(ctx, p.Key(), false); err != nil {
		t.Fatal(err)
	}
	if err := r.Deregister(ctx, p.Key()); err != nil {
		t.Fatal(err)
	}
	ex = r.Explain(p.Key())
	if want := []string{"registered/", "patched/", "unhealthy/manual", "removed/deleted"}; !slices.Equal(kinds(ex.Events), want) {
		t.Fatalf("persistent instance: %v; want %v", kinds(ex.Events), want)
	}
}

// On a peer, a replicated instance's events name the owner node and the
// session; its removal says the owner removed it.
func TestExplainReplicated(t *testing.T) {
	c := registrytest.NewCluster(t, clusterOpts())
	owner, peer := c.Node(0), c.Node(1)
	sess, err := owner.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	in := inst("r", 1)
	if err := sess.Register(ctx, in); err != nil {
		t.Fatal(err)
	}
	c.Settle()
	if err := sess.Deregister(ctx, in.Key()); err != nil {
		t.Fatal(err)
	}
	c.Settle()
	ex := peer.Explain(in.Key())
	if want := []string{"registered/", "removed/removed by its owner"}; !slices.Equal(kinds(ex.Events), want) {
		t.Fatalf("on the peer: %v; want %v", kinds(ex.Events), want)
	}
	for _, e := range ex.Events {
		if e.Node != owner.ID || e.Publisher != sess.ID() {
			t.Fatalf("on the peer, %+v: want node %s, publisher %s", e, owner.ID, sess.ID())
		}
	}
	if got := kinds(owner.Explain(in.Key()).Events); !slices.Equal(got, []string{"registered/", "removed/deregistered"}) {
		t.Fatalf("on the owner: %v", got)
	}
}

// The journal is bounded: an instance whose events the ring has turned
// over has none left, and a registry with HistoryEvents 0 keeps none.
func TestExplainBounded(t *testing.T) {
	small := registry.DefaultConfig()
	small.HealthChecks, small.HistoryEvents = nil, 4
	r := registrytest.New(t, registrytest.Options{Config: &small})
	first := inst("b", 0)
	mustRegister(t, r, first)
	for i := 1; i <= 4; i++ {
		mustRegister(t, r, inst("b", i))
	}
	if evs := r.Explain(first.Key()).Events; len(evs) != 0 {
		t.Fatalf("the ring of 4 still holds %v", evs)
	}
	if evs := r.Explain(inst("b", 4).Key()).Events; len(evs) != 1 {
		t.Fatalf("the latest instance has %v", evs)
	}
	none := registry.DefaultConfig()
	none.HealthChecks, none.HistoryEvents = nil, 0
	off := registrytest.New(t, registrytest.Options{Config: &none})
	mustRegister(t, off, first)
	if evs := off.Explain(first.Key()).Events; len(evs) != 0 || !off.Explain(first.Key()).Present {
		t.Fatalf("with the journal off: %+v", off.Explain(first.Key()))
	}
}
