package xds_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	grpcxds "google.golang.org/grpc/xds" // gRPC-Go's own xDS resolver and balancers
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry/xds"
)

// xdsServer is a Server on a real gRPC server on loopback.
type xdsServer struct {
	*xds.Server
	Addr string
	gs   *grpc.Server
	done chan struct{}
}

// startXDS serves src over ADS on addr ("127.0.0.1:0" for a free port).
func startXDS(t testing.TB, src xds.Source, addr string, edit ...func(*xds.Config)) *xdsServer {
	t.Helper()
	cfg := xds.DefaultConfig()
	cfg.Source = src
	for _, e := range edit {
		e(&cfg)
	}
	srv, err := xds.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	srv.Register(gs)
	x := &xdsServer{Server: srv, Addr: lis.Addr().String(), gs: gs, done: make(chan struct{})}
	go func() {
		defer close(x.done)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(x.Stop)
	return x
}

// Stop closes the Server, then the gRPC server, and waits for both.
func (x *xdsServer) Stop() {
	_ = x.Server.Close()
	x.gs.Stop()
	<-x.done
}

// bootstrap is a gRPC xDS bootstrap naming the server at addr.
func bootstrap(addr string) []byte {
	return fmt.Appendf(nil, `{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": "muster-test-client"}
	}`, addr)
}

// dialXDS returns a gRPC channel to xds:///name whose xDS client (gRPC's
// own, with a pool of its own) talks to the server at addr.
func dialXDS(t testing.TB, addr, name string) *grpc.ClientConn {
	t.Helper()
	res, err := grpcxds.NewXDSResolverWithConfigForTesting(bootstrap(addr))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("xds:///"+name,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithResolvers(res))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// whoMethod is the one method backends serve: it answers with nothing, and
// the caller learns which backend served it from the peer address.
const whoMethod = "/muster.xdstest.Backend/Who"

// backend is a real gRPC server on loopback.
type backend struct {
	Addr string
	Port int
	gs   *grpc.Server
	done chan struct{}
}

func startBackend(t testing.TB) *backend {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		var in emptypb.Empty
		if err := ss.RecvMsg(&in); err != nil {
			return err
		}
		return ss.SendMsg(&emptypb.Empty{})
	}))
	b := &backend{Addr: lis.Addr().String(), Port: lis.Addr().(*net.TCPAddr).Port, gs: gs, done: make(chan struct{})}
	go func() {
		defer close(b.done)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-b.done
	})
	return b
}

// instance is the Muster instance of b in svc.
func (b *backend) instance(svc model.ServiceKey, weight float64) model.Instance {
	inst := model.NewInstance(svc, "127.0.0.1", b.Port)
	inst.Weight = weight
	return inst
}

// call makes one RPC on cc and returns the address of the backend that
// served it.
func call(ctx context.Context, cc *grpc.ClientConn) (string, error) {
	var p peer.Peer
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := cc.Invoke(ctx, whoMethod, &emptypb.Empty{}, &emptypb.Empty{}, grpc.Peer(&p), grpc.WaitForReady(true)); err != nil {
		return "", err
	}
	return p.Addr.String(), nil
}

// spread makes n calls and counts them by backend address.
func spread(t testing.TB, cc *grpc.ClientConn, n int) map[string]int {
	t.Helper()
	got := make(map[string]int)
	for range n {
		a, err := call(context.Background(), cc)
		if err != nil {
			t.Fatalf("call: %v", err)
		}
		got[a]++
	}
	return got
}

// awaitPicks asserts that the client follows a change made just before it
// is called, within deadline: no call started more than deadline after the
// call to awaitPicks goes to a backend outside want, and, when all is set,
// calls started after it reach every backend of want. It makes calls until
// window of them in a row went to want (covering all of want, when all is
// set). A call that returns late does not fail the test: on a loaded
// machine, calls may be slow to make, and only when each started counts.
func awaitPicks(t testing.TB, cc *grpc.ClientConn, deadline time.Duration, window int, want map[string]bool, all bool, what string) {
	t.Helper()
	late := time.Now().Add(deadline) // real time: gRPC runs on it
	giveUp := late.Add(time.Minute)  // real time
	var run, lateGood int
	seen, lateSeen := make(map[string]bool), make(map[string]bool)
	for {
		started := time.Now() // real time
		a, err := call(context.Background(), cc)
		if err != nil {
			t.Fatalf("%s: call: %v", what, err)
		}
		isLate := started.After(late)
		if !want[a] {
			if isLate {
				t.Fatalf("%s: a call started more than %v after the change went to %s (want %v)", what, deadline, a, want)
			}
			run, seen = 0, make(map[string]bool)
			continue
		}
		run++
		seen[a] = true
		if run >= window && (!all || len(seen) == len(want)) {
			return
		}
		if isLate {
			lateGood++
			lateSeen[a] = true
			// 10 windows of calls, all started after the deadline, that
			// still miss a backend of want: it gets no calls.
			if all && lateGood >= 10*window && len(lateSeen) < len(want) {
				t.Fatalf("%s: %d calls started more than %v after the change reached only %v of %v", what, lateGood, deadline, lateSeen, want)
			}
		}
		if started.After(giveUp) {
			t.Fatalf("%s: no run of %d good calls %v after the deadline (%d in a row, seen %v)", what, window, time.Minute, run, seen)
		}
	}
}

func set(addrs ...string) map[string]bool {
	m := make(map[string]bool)
	for _, a := range addrs {
		m[a] = true
	}
	return m
}

// ads is a raw ADS stream, for what gRPC's client does not show: the bytes,
// the delta protocol, a client that stalls or NACKs.
type ads struct {
	cc    *grpc.ClientConn
	sotw  discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	delta discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	stop  context.CancelFunc
}

func dialADS(t testing.TB, addr string, delta bool) *ads {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	// A deadline turns a stream that waits for a response that never comes
	// into a failure rather than a hung test.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // real time
	a := &ads{cc: cc, stop: cancel}
	c := discovery.NewAggregatedDiscoveryServiceClient(cc)
	if delta {
		a.delta, err = c.DeltaAggregatedResources(ctx)
	} else {
		a.sotw, err = c.StreamAggregatedResources(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}

func (a *ads) Close() {
	a.stop()
	_ = a.cc.Close()
}
