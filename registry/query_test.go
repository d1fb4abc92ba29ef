package registry_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
)

// TestProtection: 10 instances, threshold 0.5. Six unhealthy (4/10 ≤ 0.5):
// every instance is returned, flagged, served healthy, with the real health
// beside it, HealthyOnly or not. Four unhealthy (6/10 > 0.5): no
// protection, and HealthyOnly returns the six healthy ones.
func TestProtection(t *testing.T) {
	for _, healthyOnly := range []bool{false, true} {
		r := newReg(t)
		def := model.Service{Key: svcKey("p"), ProtectThreshold: 0.5,
			Clusters: []model.Cluster{{Name: model.DefaultCluster, HealthCheck: model.HealthCheck{Type: model.CheckNone}}}}
		if err := r.CreateService(ctx, def); err != nil {
			t.Fatal(err)
		}
		for i := range 10 {
			mustRegister(t, r, persistent("p", i))
		}
		setUnhealthy := func(n int) {
			for i := range 10 {
				if err := r.SetHealth(ctx, persistent("p", i).Key(), i >= n); err != nil {
					t.Fatal(err)
				}
			}
		}
		q := model.Query{Service: svcKey("p"), HealthyOnly: healthyOnly}

		setUnhealthy(6)
		v := query(t, r, q)
		if !v.Protected || len(v.Instances) != 10 || len(v.RealHealth) != 10 {
			t.Fatalf("healthyOnly=%v, 6 unhealthy: protected=%v, %d instances", healthyOnly, v.Protected, len(v.Instances))
		}
		sick := map[string]bool{}
		for i := range 6 {
			sick[persistent("p", i).IP] = true
		}
		for i := range v.Instances {
			if !v.Instances[i].Healthy {
				t.Fatalf("instance %d not served healthy under protection", i)
			}
			if want := !sick[v.Instances[i].IP]; v.RealHealthy(i) != want {
				t.Fatalf("%s: real health %v, want %v", v.Instances[i].IP, v.RealHealthy(i), want)
			}
		}
		if v.HealthyCount() != 4 {
			t.Fatalf("HealthyCount = %d", v.HealthyCount())
		}

		setUnhealthy(4)
		v = query(t, r, q)
		if v.Protected || v.RealHealth != nil {
			t.Fatalf("healthyOnly=%v, 4 unhealthy: protected", healthyOnly)
		}
		want := 10
		if healthyOnly {
			want = 6
		}
		if len(v.Instances) != want {
			t.Fatalf("healthyOnly=%v, 4 unhealthy: %d instances, want %d", healthyOnly, len(v.Instances), want)
		}
		for i := range v.Instances {
			if healthyOnly && !v.Instances[i].Healthy {
				t.Fatal("HealthyOnly returned an unhealthy instance")
			}
		}
	}
}

// TestQueryFilters: clusters, enabled and healthy filters, stable order,
// patches applied.
func TestQueryFilters(t *testing.T) {
	r := newReg(t)
	var insts []model.Instance
	for i := range 6 {
		in := inst("f", 5-i) // registered in reverse order
		in.Cluster = []string{"c1", "c2", "c3"}[i%3]
		in.Enabled = i != 1
		insts = append(insts, in)
	}
	mustRegister(t, r, insts...)
	v := all(t, r, "f")
	keys := make([]model.InstanceKey, len(v.Instances))
	for i := range v.Instances {
		keys[i] = v.Instances[i].Key()
		if v.Instances[i].Service != svcKey("f").WithDefaults() {
			t.Fatalf("view instance without its service key: %+v", v.Instances[i])
		}
	}
	if !slices.IsSortedFunc(keys, func(a, b model.InstanceKey) int { return a.Compare(b) }) {
		t.Fatalf("view not in key order: %v", keys)
	}
	if n := len(query(t, r, model.Query{Service: svcKey("f")}).Instances); n != 5 {
		t.Fatalf("disabled instance not left out by default: %d", n)
	}
	c := query(t, r, model.Query{Service: svcKey("f"), Clusters: []string{"c1", "c3"}, IncludeDisabled: true})
	for _, in := range c.Instances {
		if in.Cluster == "c2" {
			t.Fatal("cluster filter let c2 through")
		}
	}
	if len(c.Instances) != 4 {
		t.Fatalf("cluster filter: %d instances", len(c.Instances))
	}
	// Same query twice: the same shared view.
	c2 := query(t, r, model.Query{Service: svcKey("f"), Clusters: []string{"c1", "c3"}, IncludeDisabled: true})
	if c != c2 {
		t.Fatal("an unchanged service built a second view for the same query")
	}
	if v1, v2 := all(t, r, "f"), all(t, r, "f"); v1 != v2 {
		t.Fatal("an unchanged service built a second view")
	}
}

// TestQueryUnknownService: an empty view, revision 0.
func TestQueryUnknownService(t *testing.T) {
	r := newReg(t)
	v := all(t, r, "nothing")
	if v.Revision != 0 || len(v.Instances) != 0 || v.Service.Key.Name != "nothing" {
		t.Fatalf("view of an unknown service: %+v", v)
	}
}

// TestSelectOneWeights: 100,000 picks follow the weights (0.25, 0.5, 1,
// 2.25). The counts pass a chi-square test at p = 0.001 (3 degrees of
// freedom: statistic < 16.27); weight 0, disabled and unhealthy instances are
// never picked.
func TestSelectOneWeights(t *testing.T) {
	r := newReg(t)
	weights := []float64{0.25, 0.5, 1, 2.25}
	for i, w := range weights {
		in := inst("w", i)
		in.Weight = w
		mustRegister(t, r, in)
	}
	zero := inst("w", 10)
	zero.Weight = 0
	off := inst("w", 11)
	off.Enabled = false
	mustRegister(t, r, zero, off)

	const n = 100_000
	counts := map[string]int{}
	for range n {
		in, err := r.SelectOne(ctx, model.Query{Service: svcKey("w"), IncludeDisabled: true})
		if err != nil {
			t.Fatal(err)
		}
		counts[in.IP]++
	}
	if counts[zero.IP] != 0 || counts[off.IP] != 0 {
		t.Fatalf("picked a weight-0 or disabled instance: %v", counts)
	}
	sum := 0.0
	for _, w := range weights {
		sum += w
	}
	chi2 := 0.0
	for i, w := range weights {
		exp := n * w / sum
		d := float64(counts[inst("w", i).IP]) - exp
		chi2 += d * d / exp
	}
	if chi2 >= 16.27 {
		t.Fatalf("chi-square %.2f ≥ 16.27 (p < 0.001): counts %v (seed %d)", chi2, counts, r.Seed)
	}
	t.Logf("chi-square %.2f, counts %v", chi2, counts)

	// Nothing selectable.
	only := inst("none", 1)
	only.Weight = 0
	mustRegister(t, r, only)
	if _, err := r.SelectOne(ctx, model.Query{Service: svcKey("none")}); !errors.Is(err, registry.ErrNoInstance) {
		t.Fatalf("SelectOne with no candidate: %v", err)
	}
	if _, err := r.SelectOne(ctx, model.Query{Service: svcKey("missing")}); !errors.Is(err, registry.ErrNoInstance) {
		t.Fatalf("SelectOne of a missing service: %v", err)
	}
}

// TestPatches: an override wins at read time, survives re-registration, and
// is dropped PatchTTL after its instance is gone (kept if it comes back).
func TestPatches(t *testing.T) {
	r := newReg(t)
	s, _ := r.OpenSession(ctx, registry.SessionOptions{})
	in := inst("o", 1)
	in.Metadata = model.NewMetadata(map[string]string{"zone": "a", "v": "1"})
	mustRegister(t, s, in)
	w, off := 0.5, false
	if err := r.PatchInstance(ctx, model.InstancePatch{Key: in.Key(), Weight: &w, Metadata: model.NewMetadata(map[string]string{"zone": "b"})}); err != nil {
		t.Fatal(err)
	}
	if err := r.PatchInstance(ctx, model.InstancePatch{Key: in.Key(), Enabled: &off}); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		v := all(t, r, "o")
		if len(v.Instances) != 1 {
			t.Fatalf("%s: %d instances", when, len(v.Instances))
		}
		got := v.Instances[0]
		if got.Weight != 0.5 || got.Enabled || got.Metadata.Value("zone") != "b" || got.Metadata.Value("v") != in.Metadata.Value("v") {
			t.Fatalf("%s: patch not applied: %+v", when, got)
		}
	}
	check("patched")
	in.Metadata = in.Metadata.With("v", "2")
	mustRegister(t, s, in) // re-registration by the publisher
	check("re-registered")

	// Gone for less than PatchTTL: the patch waits for the instance.
	s.Close()
	r.Advance(59 * time.Second)
	s2, _ := r.OpenSession(ctx, registry.SessionOptions{})
	mustRegister(t, s2, in)
	check("back after 59 s")
	r.Advance(2 * time.Second) // the old countdown must not fire
	check("61 s after the first removal")

	// Gone for PatchTTL: the patch is dropped.
	s2.Close()
	r.Advance(60*time.Second + time.Millisecond)
	s3, _ := r.OpenSession(ctx, registry.SessionOptions{})
	mustRegister(t, s3, in)
	if got := all(t, r, "o").Instances[0]; got.Weight != 1 || !got.Enabled || got.Metadata.Value("zone") != "a" {
		t.Fatalf("patch survived 60 s without its instance: %+v", got)
	}

	if err := r.PatchInstance(ctx, model.InstancePatch{Key: inst("o", 99).Key(), Weight: &w}); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("patch of a missing instance: %v", err)
	}
	if err := r.PatchInstance(ctx, model.InstancePatch{Key: in.Key(), Weight: &w}); err != nil {
		t.Fatal(err)
	}
	if err := r.RemovePatch(ctx, in.Key()); err != nil {
		t.Fatal(err)
	}
	if got := all(t, r, "o").Instances[0]; got.Weight != 1 {
		t.Fatalf("RemovePatch left %v", got.Weight)
	}
}

// TestQuerySnapshotFreshness: queries answered without the lock (from the
// snapshot of the index) never miss a service added or removed before
// them.
func TestQuerySnapshotFreshness(t *testing.T) {
	r := newReg(t)
	mustRegister(t, r, inst("warm", 1))
	for range 200 { // enough queries to build the snapshot
		all(t, r, "warm")
	}
	for i := range 50 {
		name := fmt.Sprintf("new-%d", i)
		mustRegister(t, r, inst(name, 1))
		if v := all(t, r, name); len(v.Instances) != 1 {
			t.Fatalf("%s: query after register saw %d instances", name, len(v.Instances))
		}
		for range 100 {
			all(t, r, "warm")
		}
		if err := r.Deregister(ctx, inst(name, 1).Key()); err != nil {
			t.Fatal(err)
		}
		if v := all(t, r, name); len(v.Instances) != 0 {
			t.Fatalf("%s: query after deregister saw %d instances", name, len(v.Instances))
		}
		if v := all(t, r, "warm"); len(v.Instances) != 1 {
			t.Fatal("warm service lost")
		}
	}
}

func TestQueryEmptyClusterNameIsDefault(t *testing.T) {
	r := newReg(t)
	mustRegister(t, r, inst("c", 1))
	if v := query(t, r, model.Query{Service: svcKey("c"), Clusters: []string{""}}); len(v.Instances) != 1 {
		t.Fatalf("Clusters [\"\"]: %d instances, want 1", len(v.Instances))
	}
	w, err := r.Watch(ctx, model.Query{Service: svcKey("c"), Clusters: []string{""}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if u := next(t, w); len(u.View.Instances) != 1 {
		t.Fatalf("watch of Clusters [\"\"]: %d instances", len(u.View.Instances))
	}
}
