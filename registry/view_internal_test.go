package registry

import (
	"fmt"
	"slices"
	"testing"

	"github.com/muster-io/muster/model"
)

// viewInst is an instance of the table tests of view building: cluster,
// last octet of the IP, health, enabled.
type viewInst struct {
	cluster string
	ip      int
	healthy bool
	enabled bool
}

// viewCacheOf returns the view cache of a revision holding insts, in view
// order, of a service with threshold.
func viewCacheOf(threshold float64, insts ...viewInst) *viewCache {
	def := model.Service{Key: model.ServiceKey{Name: "svc"}.WithDefaults(), Ephemeral: true, ProtectThreshold: threshold}
	vc := &viewCache{rev: 7, def: def}
	for _, in := range insts {
		i := model.NewInstance(def.Key, fmt.Sprintf("10.0.0.%d", in.ip), 80)
		i.Cluster, i.Healthy, i.Enabled = in.cluster, in.healthy, in.enabled
		vc.all = append(vc.all, i)
	}
	return vc
}

// TestViewBuild: viewCache.build's filters and Nacos's protection rule,
// table by table, with no registry around it.
func TestViewBuild(t *testing.T) {
	const (
		up   = true
		down = false
		on   = true
		off  = false
	)
	a1, a2, a3 := viewInst{"A", 1, up, on}, viewInst{"A", 2, down, on}, viewInst{"A", 3, up, off}
	b1, b2 := viewInst{"B", 4, down, on}, viewInst{"B", 5, down, off}
	for _, tc := range []struct {
		name      string
		threshold float64
		insts     []viewInst
		q         model.Query
		want      []int  // last octets of the IPs served, in order
		served    []bool // served health; nil: the real health of each
		protected bool
	}{
		{name: "empty", insts: nil, want: nil},
		{name: "all healthy, no filter", insts: []viewInst{a1}, want: []int{1}},
		{name: "disabled left out by default", insts: []viewInst{a1, a3}, want: []int{1}},
		{name: "IncludeDisabled", insts: []viewInst{a1, a3}, q: model.Query{IncludeDisabled: true}, want: []int{1, 3}},
		{name: "HealthyOnly drops the unhealthy", insts: []viewInst{a1, a2}, q: model.Query{HealthyOnly: true}, want: []int{1}},
		{name: "unhealthy served unprotected above the threshold", insts: []viewInst{a1, a2}, threshold: 0.4, want: []int{1, 2}},
		{name: "cluster filter (its only instance down: protected)", insts: []viewInst{a1, a2, b1}, q: model.Query{Clusters: []string{"B"}}, want: []int{4}, served: []bool{up}, protected: true},
		{name: "two clusters", insts: []viewInst{a1, a2, b1}, q: model.Query{Clusters: []string{"A", "B"}}, want: []int{1, 2, 4}},
		// Protection: the healthy share of the cluster- and
		// enabled-filtered instances at or below the threshold.
		{name: "threshold 0: a sole unhealthy instance is protected", insts: []viewInst{a2}, want: []int{2}, served: []bool{up}, protected: true},
		{name: "share at the threshold protects", insts: []viewInst{a1, a2}, threshold: 0.5, want: []int{1, 2}, served: []bool{up, up}, protected: true},
		{name: "share above the threshold does not", insts: []viewInst{a1, a2}, threshold: 0.49, want: []int{1, 2}},
		{name: "HealthyOnly under protection returns every instance", insts: []viewInst{a1, a2}, threshold: 0.5, q: model.Query{HealthyOnly: true}, want: []int{1, 2}, served: []bool{up, up}, protected: true},
		{name: "disabled do not count toward the share", insts: []viewInst{a1, a2, a3}, threshold: 0.5, want: []int{1, 2}, served: []bool{up, up}, protected: true},
		{name: "disabled count with IncludeDisabled", insts: []viewInst{a1, a2, a3}, threshold: 0.5, q: model.Query{IncludeDisabled: true}, want: []int{1, 2, 3}},
		{name: "the cluster filter decides the share", insts: []viewInst{a1, b1}, threshold: 0.5, q: model.Query{Clusters: []string{"A"}}, want: []int{1}},
		{name: "a filtered cluster all down is protected", insts: []viewInst{a1, b1, b2}, q: model.Query{Clusters: []string{"B"}, IncludeDisabled: true}, want: []int{4, 5}, served: []bool{up, up}, protected: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vc := viewCacheOf(tc.threshold, tc.insts...)
			q := tc.q
			q.Service = vc.def.Key
			v := vc.build(&q)
			var got []int
			for _, in := range v.Instances {
				var d int
				fmt.Sscanf(in.IP, "10.0.0.%d", &d)
				got = append(got, d)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("served %v, want %v", got, tc.want)
			}
			if v.Protected != tc.protected {
				t.Fatalf("Protected = %v, want %v", v.Protected, tc.protected)
			}
			if v.Revision != vc.rev || v.Service.Key != vc.def.Key {
				t.Fatalf("revision %d, service %v", v.Revision, v.Service.Key)
			}
			for i, in := range v.Instances {
				real := vc.all[slices.IndexFunc(vc.all, func(x model.Instance) bool { return x.IP == in.IP })].Healthy
				want := real
				if tc.served != nil {
					want = tc.served[i]
				}
				if in.Healthy != want {
					t.Errorf("%s served healthy=%v, want %v", in.IP, in.Healthy, want)
				}
				if v.RealHealthy(i) != real {
					t.Errorf("%s RealHealthy=%v, want %v", in.IP, v.RealHealthy(i), real)
				}
			}
			if !tc.protected && v.RealHealth != nil {
				t.Fatalf("RealHealth set without protection: %v", v.RealHealth)
			}
		})
	}
}

// A view that filters nothing and serves nothing differently shares the
// revision's instances instead of copying them; any other does not.
func TestViewBuildShares(t *testing.T) {
	vc := viewCacheOf(0, viewInst{"A", 1, true, true}, viewInst{"A", 2, true, true})
	v := vc.build(&model.Query{Service: vc.def.Key})
	if &v.Instances[0] != &vc.all[0] {
		t.Fatal("an unfiltered view copied the instances")
	}
	vc = viewCacheOf(0, viewInst{"A", 1, true, true}, viewInst{"A", 2, false, true})
	v = vc.build(&model.Query{Service: vc.def.Key, HealthyOnly: true})
	if len(v.Instances) != 1 || &v.Instances[0] == &vc.all[0] {
		t.Fatalf("a filtered view shares the instances: %v", v.Instances)
	}
}
