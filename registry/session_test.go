package registry_test

import (
	"errors"
	"testing"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
)

// TestSessionCloseRemovesAllAtOnce: closing a session removes every instance
// it published, with one revision bump per affected service.
func TestSessionCloseRemovesAllAtOnce(t *testing.T) {
	r := newReg(t)
	s, err := r.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		mustRegister(t, s, inst("a", i), inst("b", i))
	}
	// several instances per service, and one with another port on the same IP
	other := inst("a", 0)
	other.Port = 9090
	mustRegister(t, s, other)
	mustRegister(t, r, inst("a", 100)) // a beat instance, not the session's

	before := all(t, r, "a").Revision
	beforeB := all(t, r, "b").Revision
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed")
	}
	va, vb := all(t, r, "a"), all(t, r, "b")
	if got := ips(va); len(got) != 1 || got[0] != inst("a", 100).IP {
		t.Fatalf("a after close: %v", got)
	}
	if len(vb.Instances) != 0 {
		t.Fatalf("b after close: %v", ips(vb))
	}
	// Revisions are unique across services, so one bump each means a's and
	// b's new revisions are the two handed out by the close.
	if lo, hi := min(va.Revision, vb.Revision), max(va.Revision, vb.Revision); hi-lo != 1 || lo <= max(before, beforeB) {
		t.Fatalf("revisions %d (was %d) and %d (was %d): want one bump each", va.Revision, before, vb.Revision, beforeB)
	}
	if err := s.Register(ctx, inst("a", 7)); !errors.Is(err, registry.ErrSessionClosed) {
		t.Fatalf("Register on a closed session: %v", err)
	}
	if err := s.KeepAlive(ctx); !errors.Is(err, registry.ErrSessionClosed) {
		t.Fatalf("KeepAlive on a closed session: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestSessionTTL: a lapsed keep-alive ends the session and removes all its
// instances; keep-alives in time keep it.
func TestSessionTTL(t *testing.T) {
	r := newReg(t)
	s, err := r.OpenSession(ctx, registry.SessionOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	mustRegister(t, s, inst("a", 1), inst("b", 1))
	for range 3 {
		r.Advance(9 * time.Second)
		if err := s.KeepAlive(ctx); err != nil {
			t.Fatalf("KeepAlive in time: %v", err)
		}
	}
	if len(all(t, r, "a").Instances) != 1 {
		t.Fatal("instance gone while kept alive")
	}
	r.Advance(10 * time.Second)
	select {
	case <-s.Done():
	default:
		t.Fatal("session did not end after its TTL")
	}
	if len(all(t, r, "a").Instances)+len(all(t, r, "b").Instances) != 0 {
		t.Fatal("instances survived the lapsed session")
	}
	if err := s.KeepAlive(ctx); !errors.Is(err, registry.ErrSessionClosed) {
		t.Fatalf("KeepAlive after lapse: %v", err)
	}
}

// TestSessionWithoutTTL lives until closed, whatever the clock does.
func TestSessionWithoutTTL(t *testing.T) {
	r := newReg(t)
	s, err := r.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mustRegister(t, s, inst("a", 1))
	r.Advance(time.Hour)
	if v := all(t, r, "a"); len(v.Instances) != 1 || !v.Instances[0].Healthy {
		t.Fatalf("session instance after an hour: %+v", v.Instances)
	}
	if err := s.Deregister(ctx, inst("a", 1).Key()); err != nil {
		t.Fatal(err)
	}
	if len(all(t, r, "a").Instances) != 0 {
		t.Fatal("Deregister on the session did not remove")
	}
}

// TestSharedKey: two publishers of one key. The instance stays while either
// publishes it, and the view shows it once.
func TestSharedKey(t *testing.T) {
	r := newReg(t)
	s1, _ := r.OpenSession(ctx, registry.SessionOptions{})
	s2, _ := r.OpenSession(ctx, registry.SessionOptions{})
	in := inst("a", 1)
	mustRegister(t, s1, in)
	mustRegister(t, s2, in)
	if n := len(all(t, r, "a").Instances); n != 1 {
		t.Fatalf("view holds %d copies", n)
	}
	s1.Close()
	if n := len(all(t, r, "a").Instances); n != 1 {
		t.Fatal("instance gone while the second session still publishes it")
	}
	s2.Close()
	if n := len(all(t, r, "a").Instances); n != 0 {
		t.Fatal("instance outlived both sessions")
	}
}

func TestSessionRejectsPersistent(t *testing.T) {
	r := newReg(t)
	s, _ := r.OpenSession(ctx, registry.SessionOptions{})
	if err := s.Register(ctx, persistent("a", 1)); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("persistent instance on a session: %v", err)
	}
	if _, err := r.OpenSession(ctx, registry.SessionOptions{TTL: -1}); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("negative TTL: %v", err)
	}
}

type zeroSource struct{}

func (zeroSource) Uint64() uint64 { return 0 }

// TestSessionIDsUniqueWithARepeatingSource: a random source that repeats
// itself still yields distinct session IDs.
func TestSessionIDsUniqueWithARepeatingSource(t *testing.T) {
	cfg := registry.DefaultConfig()
	cfg.Rand = zeroSource{} // registrytest would replace it: a plain registry
	reg, err := registry.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	var sessions []*registry.Session
	for range 5 {
		s, err := reg.OpenSession(ctx, registry.SessionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ids[s.ID()] = true
		sessions = append(sessions, s)
		_ = s.Register(ctx, inst("z", len(sessions)))
	}
	if len(ids) != 5 {
		t.Fatalf("ids %v", ids)
	}
	if err := reg.Internals().CheckConsistency(); err != nil {
		t.Fatal(err)
	}
	reg.Close()
	for _, s := range sessions {
		select {
		case <-s.Done():
		default:
			t.Fatal("a session is still open after Close")
		}
	}
}
