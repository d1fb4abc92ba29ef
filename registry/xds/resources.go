package xds

import (
	"cmp"
	"math"
	"slices"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	router "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/muster-io/muster/model"
)

// The resources of one service. A service's Listener, RouteConfiguration and
// Cluster depend on its name and the Config only: they are built once, when
// the first client asks for the service, and never change. Its
// ClusterLoadAssignment follows the service's view: it is the only resource
// a change of the service sends.

// weightScale turns Muster's weights (0–10000, two decimals in practice)
// into xDS's integer load_balancing_weight: 0.01 is 1.
const weightScale = 100

// ringSize is the ring the RING_HASH policy asks for: gRPC caps it at 4096
// by default (GRPC_RING_HASH_CAP), enough for a share within a few per cent
// of the weights' at a hundred endpoints.
const ringSize = 4096

// MetadataNamespace is the filter_metadata key of the endpoint metadata this
// package sets: under protection, an endpoint served as healthy whose real
// health is unhealthy carries {"real_healthy": false} there.
const MetadataNamespace = "muster"

func adsSource() *core.ConfigSource {
	return &core.ConfigSource{
		ResourceApiVersion:    core.ApiVersion_V3,
		ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}},
	}
}

// routerConfig configures the one HTTP filter of every listener: gRPC's xDS
// client requires the router as the last filter.
var routerConfig = mustAny(&router.Router{})

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err) // a static, valid message: cannot fail
	}
	return a
}

// buildListener returns the API listener of name: proxyless gRPC clients
// dialling xds:///name ask for it, and it points them at the route
// configuration of the same name, over ADS.
func buildListener(name string) *listener.Listener {
	manager := &hcm.HttpConnectionManager{
		StatPrefix: name,
		RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{
			ConfigSource:    adsSource(),
			RouteConfigName: name,
		}},
		HttpFilters: []*hcm.HttpFilter{{
			Name:       "envoy.filters.http.router",
			ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: routerConfig},
		}},
	}
	return &listener.Listener{
		Name:        name,
		ApiListener: &listener.ApiListener{ApiListener: mustAny(manager)},
	}
}

// buildRoute returns the route configuration of name: every request goes to
// the cluster of the same name. The virtual host matches any authority, so
// that a client's listener resource name template does not matter.
func buildRoute(name string) *route.RouteConfiguration {
	return &route.RouteConfiguration{
		Name: name,
		VirtualHosts: []*route.VirtualHost{{
			Name:    name,
			Domains: []string{"*"},
			Routes: []*route.Route{{
				Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
				Action: &route.Route_Route{Route: &route.RouteAction{
					ClusterSpecifier: &route.RouteAction_Cluster{Cluster: name},
				}},
			}},
		}},
	}
}

// buildCluster returns the EDS cluster of name, its endpoints in the
// ClusterLoadAssignment of the same name over ADS.
func buildCluster(name string, policy Policy) *cluster.Cluster {
	c := &cluster.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS},
		EdsClusterConfig: &cluster.Cluster_EdsClusterConfig{
			EdsConfig:   adsSource(),
			ServiceName: name,
		},
	}
	switch policy {
	case RoundRobin:
		c.LbPolicy = cluster.Cluster_ROUND_ROBIN
	default:
		// No hash policy on the route: each RPC gets a random hash (gRFC
		// A42), so a ring built from the endpoints' weights picks at random
		// by weight, as Nacos's clients do.
		c.LbPolicy = cluster.Cluster_RING_HASH
		c.LbConfig = &cluster.Cluster_RingHashLbConfig_{RingHashLbConfig: &cluster.Cluster_RingHashLbConfig{
			MinimumRingSize: wrapperspb.UInt64(ringSize),
			HashFunction:    cluster.Cluster_RingHashLbConfig_XX_HASH,
		}}
	}
	return c
}

// buildAssignment returns the ClusterLoadAssignment of name from view v:
//
//   - one LbEndpoint per instance with a positive weight (a weight of 0
//     means "never selected" in Muster; such instances are left out),
//     carrying its weight (×100, at least 1) as load_balancing_weight;
//   - health: the served health (Instance.Healthy) as HEALTHY or
//     UNHEALTHY. Outside protection it is the real health. Under
//     protection every instance is served as healthy, as Muster's own
//     queries serve it, so that clients keep spreading calls over all of
//     them; the really unhealthy ones carry {"real_healthy": false} in
//     the MetadataNamespace metadata;
//   - localities: the instances grouped by locality (locality gives an
//     instance's zone), each locality weighted by the sum of its
//     endpoints' weights, so that both gRPC's locality-weighted round robin
//     and its ring hash split calls in proportion to the weights.
//
// Disabled instances are not in v (the query leaves them out).
func buildAssignment(name string, v *model.ServiceView, locality func(*model.Instance) string, region string) *endpoint.ClusterLoadAssignment {
	type group struct {
		zone   string
		weight uint64
		eps    []*endpoint.LbEndpoint
	}
	weights := make([]uint64, len(v.Instances))
	var total uint64
	for i := range v.Instances {
		w := v.Instances[i].Weight
		if !(w > 0) {
			continue
		}
		weights[i] = max(1, uint64(math.Round(min(w, model.MaxWeight)*weightScale)))
		total += weights[i]
	}
	div := uint64(1)
	if total > math.MaxUint32 { // xDS bounds the sum of the weights of a priority
		div = total/math.MaxUint32 + 1
	}
	var groups []*group
	byZone := make(map[string]*group)
	for i := range v.Instances {
		if weights[i] == 0 {
			continue
		}
		inst := &v.Instances[i]
		zone := locality(inst)
		g := byZone[zone]
		if g == nil {
			g = &group{zone: zone}
			byZone[zone] = g
			groups = append(groups, g)
		}
		w := max(1, weights[i]/div)
		g.weight += w
		health := core.HealthStatus_UNHEALTHY
		if inst.Healthy {
			health = core.HealthStatus_HEALTHY
		}
		ep := &endpoint.LbEndpoint{
			HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
				Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
					Address:       inst.IP,
					PortSpecifier: &core.SocketAddress_PortValue{PortValue: uint32(inst.Port)},
				}}},
			}},
			HealthStatus:        health,
			LoadBalancingWeight: wrapperspb.UInt32(uint32(w)),
		}
		if v.Protected && !v.RealHealthy(i) {
			ep.Metadata = protectedMetadata
		}
		g.eps = append(g.eps, ep)
	}
	slices.SortFunc(groups, func(a, b *group) int { return cmp.Compare(a.zone, b.zone) })
	cla := &endpoint.ClusterLoadAssignment{ClusterName: name}
	for _, g := range groups {
		cla.Endpoints = append(cla.Endpoints, &endpoint.LocalityLbEndpoints{
			Locality:            &core.Locality{Region: region, Zone: g.zone},
			LbEndpoints:         g.eps,
			LoadBalancingWeight: wrapperspb.UInt32(uint32(min(g.weight, math.MaxUint32))),
		})
	}
	return cla
}

// protectedMetadata marks an endpoint served as healthy under protection
// whose real health is unhealthy. It is shared: resources are never
// modified once built.
var protectedMetadata = &core.Metadata{FilterMetadata: map[string]*structpb.Struct{
	MetadataNamespace: {Fields: map[string]*structpb.Value{"real_healthy": structpb.NewBoolValue(false)}},
}}
