package registry_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
)

// TestBeatTimeline: healthy → unhealthy just after 15 s (watchers see it) →
// removed just after 30 s; a beat in between restores health.
func TestBeatTimeline(t *testing.T) {
	r := newReg(t)
	w, err := r.Watch(ctx, model.Query{Service: svcKey("orders")})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	next(t, w) // the empty view

	in := inst("orders", 1)
	mustRegister(t, r, in)
	u := nextMatching(t, w, func(u registry.Update) bool { return len(u.View.Instances) == 1 })
	if len(u.Delta.Added) != 1 || !u.View.Instances[0].Healthy {
		t.Fatalf("after register: %+v", u)
	}

	r.Advance(15*time.Second - time.Millisecond)
	if v := all(t, r, "orders"); !v.Instances[0].Healthy {
		t.Fatal("unhealthy before 15 s")
	}
	r.Advance(2 * time.Millisecond)
	if v := all(t, r, "orders"); !v.RealHealthy(0) {
		// the default protect threshold (0) serves an all-unhealthy
		// service as healthy, flagged, with the real health beside it
		if !v.Protected {
			t.Fatal("an all-unhealthy service is not flagged as protected")
		}
	} else {
		t.Fatal("still really healthy just after 15 s")
	}
	u = nextMatching(t, w, func(u registry.Update) bool { return u.View.Protected })
	if len(u.Delta.Updated) != 0 || u.View.RealHealth[0] {
		t.Fatalf("watcher update after 15 s: %+v", u)
	}

	// A beat restores health and pushes both deadlines out.
	interval, err := r.Heartbeat(ctx, in.Key())
	if err != nil || interval != 5*time.Second {
		t.Fatalf("Heartbeat = %v, %v", interval, err)
	}
	if v := all(t, r, "orders"); v.Protected || !v.Instances[0].Healthy {
		t.Fatalf("beat did not restore health: %+v", v)
	}
	r.Advance(15*time.Second - time.Millisecond)
	if v := all(t, r, "orders"); !v.Instances[0].Healthy {
		t.Fatal("unhealthy before 15 s after the beat")
	}
	r.Advance(2 * time.Millisecond)
	if v := all(t, r, "orders"); v.RealHealthy(0) {
		t.Fatal("healthy 15 s after the beat")
	}
	r.Advance(15*time.Second - 2*time.Millisecond) // 30 s - 1 ms after the beat
	if v := all(t, r, "orders"); len(v.Instances) != 1 {
		t.Fatal("removed before 30 s")
	}
	r.Advance(2 * time.Millisecond)
	if v := all(t, r, "orders"); len(v.Instances) != 0 {
		t.Fatalf("still there after 30 s: %v", ips(v))
	}
	u = nextMatching(t, w, func(u registry.Update) bool { return len(u.View.Instances) == 0 })
	if len(u.Delta.Removed) != 1 {
		t.Fatalf("removal delta: %+v", u.Delta)
	}
}

// TestBeatTimingsFromMetadata: the preserved metadata keys move both
// thresholds and the interval handed back.
func TestBeatTimingsFromMetadata(t *testing.T) {
	r := newReg(t)
	in := inst("orders", 1)
	in.Metadata = model.NewMetadata(map[string]string{
		model.MetaHeartBeatInterval: "1000",
		model.MetaHeartBeatTimeout:  "3000",
		model.MetaIPDeleteTimeout:   "6000",
	})
	mustRegister(t, r, in)
	if d, err := r.Heartbeat(ctx, in.Key()); err != nil || d != time.Second {
		t.Fatalf("Heartbeat = %v, %v; want 1s", d, err)
	}
	r.Advance(3*time.Second + time.Millisecond)
	if v := all(t, r, "orders"); v.RealHealthy(0) {
		t.Fatal("healthy after the 3 s timeout")
	}
	r.Advance(3 * time.Second)
	if v := all(t, r, "orders"); len(v.Instances) != 0 {
		t.Fatal("not deleted after the 6 s delete timeout")
	}
}

// TestBeatIntervalPerInstance: the interval handed back is each
// instance's own, for instances that share a publisher (one ip:port in two
// services) or their other timings, and follows a re-registration that
// changes it alone.
func TestBeatIntervalPerInstance(t *testing.T) {
	r := newReg(t)
	a, b, c := inst("orders", 1), inst("billing", 1), inst("orders", 2) // a and b: one ip:port
	b.Metadata = model.NewMetadata(map[string]string{model.MetaHeartBeatInterval: "2000"})
	mustRegister(t, r, a, b, c)
	beat := func(in model.Instance, want time.Duration) {
		t.Helper()
		if d, err := r.Heartbeat(ctx, in.Key()); err != nil || d != want {
			t.Fatalf("Heartbeat(%s) = %v, %v; want %v", in.Key(), d, err, want)
		}
		res, err := r.HeartbeatInstance(ctx, in)
		if err != nil || res.Registered || res.Interval != want {
			t.Fatalf("HeartbeatInstance(%s) = %+v, %v; want %v, not registered", in.Key(), res, err, want)
		}
	}
	beat(a, 5*time.Second)
	beat(b, 2*time.Second)
	beat(c, 5*time.Second)
	c.Metadata = model.NewMetadata(map[string]string{model.MetaHeartBeatInterval: "3000"})
	mustRegister(t, r, c)
	beat(c, 3*time.Second)
	beat(a, 5*time.Second)
	r.Advance(16 * time.Second) // the default timeouts: all three unhealthy, interval or not
	if v := all(t, r, "orders"); v.HealthyCount() != 0 || len(v.Instances) != 2 {
		t.Fatalf("after 16 s without beats: %+v", v.Instances)
	}
	beat(b, 2*time.Second) // revives it
	if err := r.Deregister(ctx, b.Key()); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Heartbeat(ctx, b.Key()); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("Heartbeat of a deregistered instance: %v, want ErrNotFound", err)
	}
	beat(a, 5*time.Second)
}

// TestHeartbeatReregisters: a light beat for an instance the registry does
// not hold fails with ErrNotFound; one that carries the instance registers
// it, as Nacos does.
func TestHeartbeatReregisters(t *testing.T) {
	r := newReg(t)
	in := inst("orders", 1)
	in.Metadata = model.NewMetadata(map[string]string{"v": "2"})
	if _, err := r.Heartbeat(ctx, in.Key()); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("light beat of an unknown instance: %v, want ErrNotFound", err)
	}
	res, err := r.HeartbeatInstance(ctx, in)
	if err != nil || !res.Registered || res.Interval != 5*time.Second {
		t.Fatalf("first beat = %+v, %v; want Registered, 5s", res, err)
	}
	v := all(t, r, "orders")
	if len(v.Instances) != 1 || v.Instances[0].Metadata.Value("v") != "2" {
		t.Fatalf("beat did not register: %+v", v.Instances)
	}
	if res, err := r.HeartbeatInstance(ctx, in); err != nil || res.Registered {
		t.Fatalf("beat of a held instance = %+v, %v; want a renewal", res, err)
	}
	// Expired, the instance is registered again by the next beat.
	r.Advance(31 * time.Second)
	if n := len(all(t, r, "orders").Instances); n != 0 {
		t.Fatalf("%d instances after 31 s without beats", n)
	}
	if res, err := r.HeartbeatInstance(ctx, in); err != nil || !res.Registered {
		t.Fatalf("beat after expiry = %+v, %v; want Registered", res, err)
	}
	bad := in
	bad.Ephemeral = false
	bad.IP = "10.9.9.9"
	if _, err := r.HeartbeatInstance(ctx, bad); !errors.Is(err, registry.ErrKindMismatch) {
		t.Fatalf("beat of a persistent instance: %v", err)
	}
	bad = in
	bad.IP = "not valid"
	if _, err := r.HeartbeatInstance(ctx, bad); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("beat of an invalid instance: %v", err)
	}
}

// TestDeregisterBeatInstance removes at once and is idempotent.
func TestDeregisterBeatInstance(t *testing.T) {
	r := newReg(t)
	a, b := inst("orders", 1), inst("orders", 2)
	mustRegister(t, r, a, b)
	if err := r.Deregister(ctx, a.Key()); err != nil {
		t.Fatal(err)
	}
	if err := r.Deregister(ctx, a.Key()); err != nil {
		t.Fatalf("second Deregister: %v", err)
	}
	if got := ips(all(t, r, "orders")); len(got) != 1 || got[0] != b.IP {
		t.Fatalf("after deregister: %v", got)
	}
	if res, err := r.HeartbeatInstance(ctx, a); err != nil || !res.Registered { // re-registers
		t.Fatalf("beat after deregister = %+v, %v; want Registered", res, err)
	}
	r.Advance(40 * time.Second)
	if got := all(t, r, "orders"); len(got.Instances) != 0 {
		t.Fatalf("leases did not expire: %v", ips(got))
	}
}

// TestBeatPublishersShareAnIP: beat publishers of several ports on one IP
// are kept apart; removing any of them (the newest, a middle one, the
// oldest) leaves the others registered and beating.
func TestBeatPublishersShareAnIP(t *testing.T) {
	r := newReg(t)
	byPort := map[int]model.Instance{}
	for _, p := range []int{8001, 8002, 8003, 8004} {
		in := model.NewInstance(svcKey("multi"), "10.7.7.7", p)
		byPort[p] = in
		mustRegister(t, r, in)
	}
	ports := func() []int {
		var out []int
		for _, in := range all(t, r, "multi").Instances {
			out = append(out, in.Port)
		}
		return out
	}
	for _, p := range []int{8004, 8002, 8001} {
		if err := r.Deregister(ctx, byPort[p].Key()); err != nil {
			t.Fatal(err)
		}
		delete(byPort, p)
		for _, in := range byPort {
			if _, err := r.Heartbeat(ctx, in.Key()); err != nil {
				t.Fatalf("after removing %d: beat of %d: %v", p, in.Port, err)
			}
		}
		if got := ports(); len(got) != len(byPort) {
			t.Fatalf("after removing %d: %v", p, got)
		}
	}
	for range 4 {
		r.Advance(10 * time.Second)
		if _, err := r.Heartbeat(ctx, byPort[8003].Key()); err != nil {
			t.Fatal(err)
		}
	}
	if v := all(t, r, "multi"); len(v.Instances) != 1 || v.Instances[0].Port != 8003 || !v.Instances[0].Healthy {
		t.Fatalf("survivor after 40 s of beats: %+v", v.Instances)
	}
}

// TestHeartbeatInstanceRegisteredForwarded: a beat sent to a node that does
// not own the instance's ip:port carries the owner's answer back, Registered
// included.
func TestHeartbeatInstanceRegisteredForwarded(t *testing.T) {
	c := registrytest.NewCluster(t, clusterOpts())
	in := ownedBy(t, c, c.Node(1).ID, "fwd")
	via := c.Node(0)
	res, err := via.HeartbeatInstance(ctx, in)
	if err != nil || !res.Registered || res.Interval != 5*time.Second {
		t.Fatalf("first forwarded beat = %+v, %v; want Registered, 5s", res, err)
	}
	res, err = via.HeartbeatInstance(ctx, in)
	if err != nil || res.Registered || res.Interval != 5*time.Second {
		t.Fatalf("second forwarded beat = %+v, %v; want a renewal, 5s", res, err)
	}
}

// TestDeleteTimeoutBelowBeatTimeout: Nacos accepts a delete timeout below the
// beat timeout; the instance then goes without turning unhealthy first.
func TestDeleteTimeoutBelowBeatTimeout(t *testing.T) {
	r := newReg(t)
	in := inst("s", 1)
	in.Metadata = model.NewMetadata(map[string]string{model.MetaIPDeleteTimeout: "10000"})
	mustRegister(t, r, in)
	r.Advance(10*time.Second - time.Millisecond)
	if v := all(t, r, "s"); len(v.Instances) != 1 || !v.RealHealthy(0) {
		t.Fatalf("before 10 s: %+v", v.Instances)
	}
	r.Advance(2 * time.Millisecond)
	if v := all(t, r, "s"); len(v.Instances) != 0 {
		t.Fatal("not deleted at 10 s")
	}
}

// TestSharedClockSettles: with a clock shared by two registries, Advance
// returns once this registry has handled what passed.
func TestSharedClockSettles(t *testing.T) {
	clock := clockwork.NewFakeClockAt(registrytest.Epoch)
	a := registrytest.New(t, registrytest.Options{Clock: clock})
	cfg := registry.DefaultConfig()
	cfg.NodeID = "b"
	cfg.SweepInterval = time.Hour
	registrytest.New(t, registrytest.Options{Clock: clock, Config: &cfg})
	for i := range 100 {
		mustRegister(t, a, inst("s", i))
		a.Advance(31 * time.Second)
		if v := all(t, a, "s"); len(v.Instances) != 0 {
			t.Fatalf("round %d: the instance is still there right after Advance(31s)", i)
		}
	}
}
