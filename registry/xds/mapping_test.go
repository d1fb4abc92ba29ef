package xds_test

import (
	"slices"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
	"github.com/muster-io/muster/registry/xds"
)

// deltaAssignment subscribes a new delta stream to name's assignment and
// returns the first one that holds want endpoints.
func deltaAssignment(t *testing.T, addr, name string, want int) *endpoint.ClusterLoadAssignment {
	t.Helper()
	c := dialADS(t, addr, true)
	if err := c.delta.Send(&discovery.DeltaDiscoveryRequest{Node: testNode, TypeUrl: resource.EndpointType, ResourceNamesSubscribe: []string{name}}); err != nil {
		t.Fatal(err)
	}
	for {
		r, err := c.delta.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.delta.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()}); err != nil {
			t.Fatal(err)
		}
		for _, res := range r.GetResources() {
			var cla endpoint.ClusterLoadAssignment
			if err := proto.Unmarshal(res.GetResource().GetValue(), &cla); err != nil {
				t.Fatal(err)
			}
			if cla.GetClusterName() == name && len(ports(&cla)) == want {
				return &cla
			}
		}
	}
}

// The mapping of the package doc, read back from the wire: weights ×100
// (0 left out), health, localities from the Muster cluster or the
// LocalityKey metadata, the region, each locality weighted by the sum of
// its endpoints' weights.
func TestAssignmentMapping(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	x := startXDS(t, reg, "127.0.0.1:0", func(c *xds.Config) { c.LocalityKey, c.Region = "zone", "eu-1" })
	sess, err := reg.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc := model.ServiceKey{Name: "orders"}
	add := func(port int, weight float64, clusterName string, md map[string]string, healthy bool) {
		t.Helper()
		inst := model.NewInstance(svc, "127.0.0.1", port)
		inst.Weight, inst.Cluster, inst.Healthy = weight, clusterName, healthy
		if md != nil {
			inst.Metadata = model.NewMetadata(md)
		}
		if err := sess.Register(ctx, inst); err != nil {
			t.Fatal(err)
		}
	}
	add(1001, 2.5, "c1", nil, true)
	add(1002, 0, "c1", nil, true) // weight 0: never selected, left out
	add(1003, 1, "c2", map[string]string{"zone": "z9"}, false)
	add(1004, 1, "c1", nil, true)

	cla := deltaAssignment(t, x.Addr, "orders", 3)
	type ep struct {
		port, weight uint32
		health       core.HealthStatus
	}
	type loc struct {
		region, zone string
		weight       uint32
		eps          []ep
	}
	var got []loc
	for _, l := range cla.GetEndpoints() {
		g := loc{region: l.GetLocality().GetRegion(), zone: l.GetLocality().GetZone(), weight: l.GetLoadBalancingWeight().GetValue()}
		for _, e := range l.GetLbEndpoints() {
			if e.GetMetadata() != nil {
				t.Errorf("endpoint %v carries metadata outside protection", e)
			}
			g.eps = append(g.eps, ep{e.GetEndpoint().GetAddress().GetSocketAddress().GetPortValue(), e.GetLoadBalancingWeight().GetValue(), e.GetHealthStatus()})
		}
		slices.SortFunc(g.eps, func(a, b ep) int { return int(a.port) - int(b.port) })
		got = append(got, g)
	}
	want := []loc{
		{"eu-1", "c1", 350, []ep{{1001, 250, core.HealthStatus_HEALTHY}, {1004, 100, core.HealthStatus_HEALTHY}}},
		{"eu-1", "z9", 100, []ep{{1003, 100, core.HealthStatus_UNHEALTHY}}},
	}
	if !slices.EqualFunc(got, want, func(a, b loc) bool {
		return a.region == b.region && a.zone == b.zone && a.weight == b.weight && slices.Equal(a.eps, b.eps)
	}) {
		t.Fatalf("assignment\n got %+v\nwant %+v", got, want)
	}

	// The cluster asks for RING_HASH over EDS from ADS.
	c := dialADS(t, x.Addr, false)
	c.request(t, resource.ClusterType, []string{"orders"}, nil)
	r := c.recv(t)
	if len(r.GetResources()) != 1 {
		t.Fatalf("%d clusters", len(r.GetResources()))
	}
	var cl cluster.Cluster
	if err := proto.Unmarshal(r.GetResources()[0].GetValue(), &cl); err != nil {
		t.Fatal(err)
	}
	if cl.GetLbPolicy() != cluster.Cluster_RING_HASH || cl.GetType() != cluster.Cluster_EDS || cl.GetEdsClusterConfig().GetEdsConfig().GetAds() == nil {
		t.Fatalf("cluster %v", &cl)
	}
}

// Protection: every instance is served HEALTHY (so gRPC keeps spreading),
// and the really unhealthy ones say so in the "muster" metadata.
func TestProtectedAssignmentCarriesRealHealth(t *testing.T) {
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
	for i := range 3 {
		inst := model.NewInstance(svc, "127.0.0.1", 1001+i)
		inst.Healthy = i == 0
		if err := sess.Register(ctx, inst); err != nil {
			t.Fatal(err)
		}
	}
	cla := deltaAssignment(t, x.Addr, "orders", 3)
	for _, l := range cla.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			port := e.GetEndpoint().GetAddress().GetSocketAddress().GetPortValue()
			if e.GetHealthStatus() != core.HealthStatus_HEALTHY {
				t.Errorf("port %d served %v under protection, want HEALTHY", port, e.GetHealthStatus())
			}
			real, marked := e.GetMetadata().GetFilterMetadata()[xds.MetadataNamespace].GetFields()["real_healthy"]
			if port == 1001 && marked {
				t.Errorf("the healthy instance carries %v", real)
			}
			if port != 1001 && (!marked || real.GetBoolValue()) {
				t.Errorf("port %d, really unhealthy, carries %v", port, e.GetMetadata())
			}
		}
	}
}

// Wildcard: a request naming nothing (Envoy's legacy wildcard) gets the
// services other clients have named, never the registry's catalogue, and
// serves nothing more.
func TestWildcardSeesServedServicesOnly(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	x := startXDS(t, reg, "127.0.0.1:0")
	sess, err := reg.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	register(t, sess, "orders", 1001, 1)
	register(t, sess, "secret", 2001, 1)
	named := dialADS(t, x.Addr, false)
	named.request(t, resource.ClusterType, []string{"orders"}, nil)
	named.recv(t)

	wild := dialADS(t, x.Addr, false)
	wild.request(t, resource.ClusterType, nil, nil)
	r := wild.recv(t)
	var names []string
	for _, a := range r.GetResources() {
		var cl cluster.Cluster
		if err := proto.Unmarshal(a.GetValue(), &cl); err != nil {
			t.Fatal(err)
		}
		names = append(names, cl.GetName())
	}
	if !slices.Equal(names, []string{"orders"}) {
		t.Fatalf("a wildcard request got clusters %v, want [orders]", names)
	}
	if st := x.Stats(); st.Services != 1 {
		t.Fatalf("%d services served, want 1", st.Services)
	}
}
