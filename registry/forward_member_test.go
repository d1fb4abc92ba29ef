package registry_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/muster-io/muster/distro"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
	"github.com/muster-io/muster/transport"
)

// TestForwardRefusesNonMembers: a peer on the transport that is not a
// member of the cluster sends forwarded writes straight to the owner of
// their ip:port, as a member would: a register of a fake instance and a
// deregister of a real one. The owner refuses both with ErrNotMember and
// applies neither, on any node.
func TestForwardRefusesNonMembers(t *testing.T) {
	c := registrytest.NewCluster(t, clusterOpts())
	rogue, err := c.Net.Node("rogue")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rogue.Close() })

	real := ownedBy(t, c, "n1", "orders")
	mustRegister(t, c.Node(1), real) // forwarded by a member: applied
	c.Settle()
	fake := real
	fake.IP = ""
	for i := range 1000 { // a fake instance that n1 owns too
		if in := inst("orders", 500+i); c.Node(0).Owner(in.IP, in.Port) == "n1" {
			fake = in
			break
		}
	}
	if fake.IP == "" {
		t.Fatal("no second address owned by n1")
	}

	for name, body := range map[string][]byte{
		"register":   registry.ForwardRegister(fake),
		"deregister": registry.ForwardDeregister(real.Key()),
	} {
		out, err := rogue.Request(ctx, "n1", registry.KindForward, body)
		if err == nil {
			err = registry.ForwardResult("n1", out)
		}
		if !errors.Is(err, registry.ErrNotMember) {
			t.Errorf("forwarded %s from a non-member: %v, want ErrNotMember", name, err)
		}
	}
	c.Settle()
	for _, n := range c.Nodes() {
		if got := ipsOn(t, n, "orders"); !slices.Equal(got, []string{real.IP}) {
			t.Fatalf("%s holds %v after the non-member's writes, want only the real %s", n.ID, got, real.IP)
		}
	}

	// The same requests from a member are served: the refusal is about the
	// sender, not the request.
	out, err := c.Node(2).Transport.Request(ctx, "n1", registry.KindForward, registry.ForwardRegister(fake))
	if err == nil {
		err = registry.ForwardResult("n1", out)
	}
	if err != nil {
		t.Fatalf("forwarded register from member n3: %v", err)
	}
	c.Settle()
	if got := ipsOn(t, c.Node(0), "orders"); len(got) != 2 {
		t.Fatalf("n1 holds %v after a member's forwarded register, want 2 instances", got)
	}
}

// TestLeaseHandoverRefusesNonMembers: a peer on the transport that is not a
// member hands n1 the "lease" of a fake instance whose key n1 owns, as a
// member leaving the key would. n1 refuses it and no node serves the fake;
// the same handover from a member is taken.
func TestLeaseHandoverRefusesNonMembers(t *testing.T) {
	c := registrytest.NewCluster(t, clusterOpts())
	rogue, err := c.Net.Node("rogue")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rogue.Close() })
	fake := ownedBy(t, c, "n1", "orders")

	out, err := rogue.Request(ctx, "n1", registry.KindLeases, registry.LeaseHandoff(fake, 0))
	if err == nil {
		err = registry.ForwardResult("n1", out)
	}
	if !errors.Is(err, registry.ErrNotMember) {
		t.Fatalf("lease handover from a non-member: %v, want ErrNotMember", err)
	}
	c.Settle()
	for _, n := range c.Nodes() {
		if got := ipsOn(t, n, "orders"); len(got) != 0 {
			t.Fatalf("%s holds %v after the non-member's handover, want nothing", n.ID, got)
		}
	}

	out, err = c.Node(2).Transport.Request(ctx, "n1", registry.KindLeases, registry.LeaseHandoff(fake, 0))
	if err == nil {
		err = registry.ForwardResult("n1", out)
	}
	if err != nil {
		t.Fatalf("lease handover from member n3: %v", err)
	}
	c.Settle()
	if got := ipsOn(t, c.Node(0), "orders"); !slices.Equal(got, []string{fake.IP}) {
		t.Fatalf("n1 holds %v after a member's handover, want %s", got, fake.IP)
	}
}

// handlerKinds are the transport kinds the registry handles in a cluster.
var handlerKinds = map[string]transport.Kind{"forward": registry.KindForward, "leases": registry.KindLeases}

// TestCloseRemovesHandlers: once a node's registry is closed, a peer's
// forwarded write and handed lease reach no handler on its transport
// (transport.ErrNoHandler), though the transport itself is still open.
func TestCloseRemovesHandlers(t *testing.T) {
	c := registrytest.NewCluster(t, clusterOpts())
	real := ownedBy(t, c, "n1", "orders")
	for name, kind := range handlerKinds {
		// A body no handler accepts: answered (with a refusal), not applied.
		if _, err := c.Node(1).Transport.Request(ctx, "n1", kind, []byte{0}); errors.Is(err, transport.ErrNoHandler) {
			t.Fatalf("%s before Close: %v, want a handler", name, err)
		}
	}
	if err := c.Node(0).Registry.Close(); err != nil {
		t.Fatal(err)
	}
	for name, kind := range handlerKinds {
		if _, err := c.Node(1).Transport.Request(ctx, "n1", kind, []byte{0}); !errors.Is(err, transport.ErrNoHandler) {
			t.Errorf("%s after Close: %v, want transport.ErrNoHandler", name, err)
		}
	}
	// A write forwarded to the closed owner is one the caller may retry.
	if err := c.Node(1).Register(ctx, real); !errors.Is(err, registry.ErrUnavailable) {
		t.Errorf("a write forwarded to the closed owner: %v, want ErrUnavailable", err)
	}
	c.Stop(0) // a second Close, then the transports
}

// blockingStore's Start waits until release is closed.
type blockingStore struct{ entered, release chan struct{} }

func (s blockingStore) Start(ctx context.Context) error {
	close(s.entered)
	<-s.release
	return nil
}
func (blockingStore) WaitReady(context.Context) error { return nil }
func (blockingStore) Barrier(context.Context) error   { return nil }
func (blockingStore) IsLeader() bool                  { return true }
func (blockingStore) Propose(context.Context, model.Command) (error, error) {
	return nil, registry.ErrClosed
}
func (blockingStore) Close() error { return nil }

// TestCloseDuringStart: a Close while Start waits for a slow store leaves
// no handler behind: Start gives up with ErrClosed instead of installing
// them after Close has run.
func TestCloseDuringStart(t *testing.T) {
	net := &transport.MemNetwork{}
	tr, err := net.Node("a")
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	peer, err := net.Node("b")
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	dc := distro.DefaultConfig()
	dc.Transport, dc.Membership = tr, distro.NewStatic(distro.Member{ID: "a"})
	store := blockingStore{entered: make(chan struct{}), release: make(chan struct{})}
	cfg := registry.DefaultConfig()
	cfg.HealthChecks, cfg.NodeID, cfg.Replicator, cfg.Transport = nil, "a", registry.Distro(dc), tr
	cfg.Store = func(registry.Env, registry.StoreFeed) (registry.Store, error) { return store, nil }
	r, err := registry.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- r.Start(context.Background()) }()
	<-store.entered
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	close(store.release)
	if err := <-started; !errors.Is(err, registry.ErrClosed) {
		t.Errorf("Start after a Close during it: %v, want ErrClosed", err)
	}
	for name, kind := range handlerKinds {
		if _, err := peer.Request(ctx, "a", kind, []byte{0}); !errors.Is(err, transport.ErrNoHandler) {
			t.Errorf("%s after Close: %v, want transport.ErrNoHandler", name, err)
		}
	}
}
