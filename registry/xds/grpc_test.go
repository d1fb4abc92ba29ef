package xds_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
)

// These tests run gRPC-Go's own xDS client (resolver xds:///, its xDS
// client, cds/eds and ring-hash balancers) against the Server, making real
// RPCs to real gRPC backends on loopback.

var ctx = context.Background()

// chiSquare returns Pearson's statistic of got against the shares of
// weights over n calls, scaled for the ring: gRPC builds RING_HASH's ring
// of ringEntries points at hashed positions, so a backend's true share is
// its weight's share p plus the ring's own error, of variance about p/M per
// share (the arcs of p·M random points). Over n calls that adds n²p/M to
// the sampling variance np, and dividing by 1 + n/M brings the statistic
// back to χ² with len(weights)-1 degrees of freedom. Unscaled, a fair ring
// fails a p < 0.001 bound about once in fifty runs (CI saw χ² = 24.2 on
// 2,400 calls).
func chiSquare(got map[string]int, weights map[string]float64, n int) float64 {
	var total float64
	for _, w := range weights {
		total += w
	}
	var x2 float64
	for a, w := range weights {
		e := float64(n) * w / total
		d := float64(got[a]) - e
		x2 += d * d / e
	}
	return x2 / (1 + float64(n)/ringEntries)
}

// ringEntries is the ring size gRPC builds for the Clusters (resources.go's
// ringSize, which gRPC-Go caps at 4096).
const ringEntries = 4096

// chiSquareBound is P(χ² > 18.42) = 0.0001 for two degrees of freedom:
// calls drawn by the weights fail it once in ten thousand runs, while calls
// spread evenly (weights ignored) give a scaled χ² of about 500.
const chiSquareBound = 18.42

func TestGRPCCallsFollowWeights(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	x := startXDS(t, reg, "127.0.0.1:0")
	svc := model.ServiceKey{Name: "orders"}
	sess, err := reg.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	weights := map[string]float64{}
	for _, w := range []float64{1, 2, 5} {
		b := startBackend(t)
		if err := sess.Register(ctx, b.instance(svc, w)); err != nil {
			t.Fatal(err)
		}
		weights[b.Addr] = w
	}
	cc := dialXDS(t, x.Addr, "orders")
	all := map[string]bool{}
	for a := range weights {
		all[a] = true
	}
	awaitPicks(t, cc, 20*time.Second, 30, all, true, "every backend serves")

	const n = 2400
	got := spread(t, cc, n)
	x2 := chiSquare(got, weights, n)
	t.Logf("calls %v for weights %v: χ² = %.2f", got, weights, x2)
	if x2 > chiSquareBound {
		t.Fatalf("calls %v do not follow weights %v: χ² = %.2f > %.2f (p < 0.0001)", got, weights, x2, chiSquareBound)
	}

	// A weight changed in Muster (an operator's patch) moves the calls.
	var light string
	for a, w := range weights {
		if w == 1 {
			light = a
		}
	}
	var port int
	fmt.Sscanf(light[len("127.0.0.1:"):], "%d", &port)
	heavy := 30.0
	if err := reg.PatchInstance(ctx, model.InstancePatch{Key: model.InstanceKey{Service: svc, IP: "127.0.0.1", Port: port}, Weight: &heavy}); err != nil {
		t.Fatal(err)
	}
	weights[light] = heavy
	deadline := time.Now().Add(20 * time.Second) // real time
	for {
		got = spread(t, cc, n)
		if x2 = chiSquare(got, weights, n); x2 <= chiSquareBound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the patch, calls %v do not follow weights %v: χ² = %.2f", got, weights, x2)
		}
	}
	// The share's error is about 0.016 (sampling and ring together): 0.08 is
	// five of them, against 0.69 were the patch ignored (1/8 of the calls).
	if share := float64(got[light]) / n; math.Abs(share-30.0/37) > 0.08 {
		t.Fatalf("the patched backend took %.2f of the calls, want about %.2f", share, 30.0/37)
	}
}

func TestGRPCFollowsRegistrations(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	x := startXDS(t, reg, "127.0.0.1:0")
	svc := model.ServiceKey{Name: "orders"}
	sess, err := reg.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var bs []*backend
	for range 3 {
		b := startBackend(t)
		if err := sess.Register(ctx, b.instance(svc, 1)); err != nil {
			t.Fatal(err)
		}
		bs = append(bs, b)
	}
	cc := dialXDS(t, x.Addr, "orders")
	awaitPicks(t, cc, 20*time.Second, 30, set(bs[0].Addr, bs[1].Addr, bs[2].Addr), true, "every backend serves")

	// Deregistered: no new calls within 1 s.
	if err := sess.Deregister(ctx, bs[0].instance(svc, 1).Key()); err != nil {
		t.Fatal(err)
	}
	awaitPicks(t, cc, time.Second, 100, set(bs[1].Addr, bs[2].Addr), false, "a deregistered backend leaves the picks")

	// Unhealthy (1 of 2 healthy: above the threshold of 0, not protected):
	// UNHEALTHY in the assignment, no new calls within 1 s.
	sick := bs[1].instance(svc, 1)
	sick.Healthy = false
	if err := sess.Register(ctx, sick); err != nil {
		t.Fatal(err)
	}
	awaitPicks(t, cc, time.Second, 100, set(bs[2].Addr), false, "an unhealthy backend leaves the picks")

	// A new backend gets calls within 1 s.
	b3 := startBackend(t)
	if err := sess.Register(ctx, b3.instance(svc, 1)); err != nil {
		t.Fatal(err)
	}
	awaitPicks(t, cc, time.Second, 20, set(bs[2].Addr, b3.Addr), true, "a new backend joins the picks")

	// Healthy again: back in the picks.
	if err := sess.Register(ctx, bs[1].instance(svc, 1)); err != nil {
		t.Fatal(err)
	}
	awaitPicks(t, cc, time.Second, 30, set(bs[1].Addr, bs[2].Addr, b3.Addr), true, "a recovered backend joins the picks")

	// The session ends: its instances leave, and with them every pick;
	// a backend of another session takes the calls.
	other, err := reg.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b4 := startBackend(t)
	if err := other.Register(ctx, b4.instance(svc, 1)); err != nil {
		t.Fatal(err)
	}
	if err := sess.Close(); err != nil {
		t.Fatal(err)
	}
	awaitPicks(t, cc, time.Second, 100, set(b4.Addr), false, "a closed session's backends leave the picks")
}

// Protection: with a threshold of 0.5 and 1 of 3 really healthy, Muster
// serves every instance as healthy, and so does the assignment: gRPC keeps
// spreading calls over all three instead of piling them on the one.
func TestGRPCProtectedViewKeepsSpreading(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	x := startXDS(t, reg, "127.0.0.1:0")
	svc := model.ServiceKey{Name: "orders"}
	if err := reg.CreateService(ctx, model.Service{Key: svc, Ephemeral: true, ProtectThreshold: 0.5}); err != nil {
		t.Fatal(err)
	}
	sess, err := reg.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var bs []*backend
	for i := range 3 {
		b := startBackend(t)
		inst := b.instance(svc, 1)
		inst.Healthy = i == 0
		if err := sess.Register(ctx, inst); err != nil {
			t.Fatal(err)
		}
		bs = append(bs, b)
	}
	v, err := reg.Query(ctx, model.Query{Service: svc})
	if err != nil || !v.Protected {
		t.Fatalf("the view is not protected: %+v, %v", v, err)
	}
	cc := dialXDS(t, x.Addr, "orders")
	awaitPicks(t, cc, 20*time.Second, 30, set(bs[0].Addr, bs[1].Addr, bs[2].Addr), true, "a protected service's instances all serve")

	// A second healthy instance lifts protection (2 of 3 > 0.5): the one
	// left unhealthy is UNHEALTHY and leaves the picks.
	if err := sess.Register(ctx, bs[1].instance(svc, 1)); err != nil {
		t.Fatal(err)
	}
	awaitPicks(t, cc, time.Second, 100, set(bs[0].Addr, bs[1].Addr), false, "out of protection, the unhealthy instance leaves the picks")
}
