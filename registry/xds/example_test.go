package xds_test

import (
	"context"
	"fmt"
	"log"
	"net"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/xds"
)

// A registry's services served over ADS on loopback, read back by an xDS
// client: the ClusterLoadAssignment of "orders" carries Muster's weights
// (×100) and health. A gRPC client would dial xds:///orders with a
// bootstrap naming the same address (see examples/xds).
func Example() {
	ctx := context.Background()
	reg, err := registry.New(registry.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	if err := reg.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer reg.Close()

	cfg := xds.DefaultConfig()
	cfg.Source = reg
	srv, err := xds.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	gs := grpc.NewServer() // in production: grpc.Creds(mutual TLS)
	srv.Register(gs)
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()
	defer srv.Close()

	sess, err := reg.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sess.Close()
	for i, w := range []float64{1, 2.5} {
		inst := model.NewInstance(model.ServiceKey{Name: "orders"}, "10.0.0.1", 8080+i)
		inst.Weight = w
		if err := sess.Register(ctx, inst); err != nil {
			log.Fatal(err)
		}
	}

	// An incremental (delta) ADS client subscribing to the assignment.
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		log.Fatal(err)
	}
	err = stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNamesSubscribe: []string{"orders"}})
	if err != nil {
		log.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		log.Fatal(err)
	}
	var cla endpoint.ClusterLoadAssignment
	if err := proto.Unmarshal(resp.GetResources()[0].GetResource().GetValue(), &cla); err != nil {
		log.Fatal(err)
	}
	fmt.Println("cluster", cla.GetClusterName())
	for _, l := range cla.GetEndpoints() {
		fmt.Printf("locality %q, weight %d\n", l.GetLocality().GetZone(), l.GetLoadBalancingWeight().GetValue())
		for _, e := range l.GetLbEndpoints() {
			a := e.GetEndpoint().GetAddress().GetSocketAddress()
			fmt.Printf("  %s:%d weight %d %v\n", a.GetAddress(), a.GetPortValue(), e.GetLoadBalancingWeight().GetValue(), e.GetHealthStatus())
		}
	}
	// Output:
	// cluster orders
	// locality "DEFAULT", weight 350
	//   10.0.0.1:8080 weight 100 HEALTHY
	//   10.0.0.1:8081 weight 250 HEALTHY
}

// Name and ParseName: the xDS resource name of a service is its shortest
// unambiguous Nacos form; only that canonical form is served.
func ExampleName() {
	fmt.Println(xds.Name(model.ServiceKey{Name: "orders"}))
	fmt.Println(xds.Name(model.ServiceKey{Group: "shop", Name: "orders"}))
	fmt.Println(xds.Name(model.ServiceKey{Namespace: "dev", Group: "shop", Name: "orders"}))
	key, err := xds.ParseName("dev@@shop@@orders")
	fmt.Println(key.Namespace, key.Group, key.Name, err)
	_, err = xds.ParseName("DEFAULT_GROUP@@orders")
	fmt.Println(err)
	// Output:
	// orders
	// shop@@orders
	// dev@@shop@@orders
	// dev shop orders <nil>
	// model: invalid input: xds resource name "DEFAULT_GROUP@@orders": not canonical, use "orders"
}
