// Command xds runs a Muster node with its xDS server, three real gRPC
// backends and a proxyless gRPC client that dials xds:///orders, and
// prints where the client's calls go as Muster's weights, health and
// registrations change. Everything listens on loopback; it exits by itself.
//
//	cd examples/xds && go run .
package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	grpcxds "google.golang.org/grpc/xds" // gRPC-Go's xDS resolver and balancers

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/xds"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	ctx := context.Background()

	// A Muster node.
	reg, err := registry.New(registry.DefaultConfig())
	if err != nil {
		return err
	}
	if err := reg.Start(ctx); err != nil {
		return err
	}
	defer reg.Close()

	// Its xDS server, on a gRPC server of the host's own, on loopback.
	// A deployment serves the ADS port over TLS (grpc.Creds) to its
	// clients only; see the README's xDS section.
	cfg := xds.DefaultConfig()
	cfg.Source = reg
	xs, err := xds.New(cfg)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	gs := grpc.NewServer()
	xs.Register(gs)
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()
	defer xs.Close() // before gs.Stop: it ends the streams
	fmt.Println("xDS server (ADS) on", lis.Addr())

	// Three real gRPC backends (the standard health service), registered
	// in Muster as instances of "orders" with weights 1, 2 and 5.
	orders := model.ServiceKey{Name: "orders"}
	sess, err := reg.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		return err
	}
	defer sess.Close()
	var backends []*backend
	for i, w := range []float64{1, 2, 5} {
		b, err := startBackend(fmt.Sprintf("b%d", i+1))
		if err != nil {
			return err
		}
		defer b.stop()
		b.inst = model.NewInstance(orders, "127.0.0.1", b.port)
		b.inst.Weight = w
		if err := sess.Register(ctx, b.inst); err != nil {
			return err
		}
		backends = append(backends, b)
	}
	b1, b2, b3 := backends[0], backends[1], backends[2]

	// The proxyless client. Deployed, it reads the same JSON from the file
	// named by GRPC_XDS_BOOTSTRAP and dials with grpc.NewClient alone; here
	// the server's port is chosen at run time, so the bootstrap is handed
	// to gRPC's xDS resolver directly.
	bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": "examples-xds-client"}
	}`, lis.Addr())
	resolver, err := grpcxds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		return err
	}
	cc, err := grpc.NewClient("xds:///orders",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithResolvers(resolver))
	if err != nil {
		return err
	}
	defer cc.Close()
	c := &client{cc: cc, names: map[string]string{}}
	for _, b := range backends {
		c.names[b.addr] = b.name
	}

	// Each step changes Muster, then makes rounds of 400 calls until the
	// client has followed (the round's picks satisfy the step's check).
	steps := []struct {
		what   string
		change func() error
		done   func(map[string]int) bool
	}{{
		what:   "weights b1:b2:b3 = 1:2:5",
		change: func() error { return nil },
		done:   func(n map[string]int) bool { return n["b1"] > 0 && n["b2"] > 0 && n["b3"] > 0 },
	}, {
		what:   "b1's weight 1 → 10 (now 10:2:5)",
		change: func() error { b1.inst.Weight = 10; return sess.Register(ctx, b1.inst) },
		done:   func(n map[string]int) bool { return n["b1"] > n["b3"]+n["b2"] },
	}, {
		what:   "b3 unhealthy (served as UNHEALTHY: no calls)",
		change: func() error { b3.inst.Healthy = false; return sess.Register(ctx, b3.inst) },
		done:   func(n map[string]int) bool { return n["b3"] == 0 },
	}, {
		what:   "b2 deregistered",
		change: func() error { return sess.Deregister(ctx, b2.inst.Key()) },
		done:   func(n map[string]int) bool { return n["b2"] == 0 && n["b3"] == 0 },
	}, {
		what:   "b3 healthy again (now b1:b3 = 10:5)",
		change: func() error { b3.inst.Healthy = true; return sess.Register(ctx, b3.inst) },
		done:   func(n map[string]int) bool { return n["b2"] == 0 && n["b3"] > 0 },
	}}
	for _, st := range steps {
		if err := st.change(); err != nil {
			return err
		}
		n, rounds, err := c.until(ctx, 400, 20*time.Second, st.done)
		if err != nil {
			return fmt.Errorf("%s: %w", st.what, err)
		}
		fmt.Printf("%-48s 400 calls: %s (followed after %d round(s))\n", st.what+":", format(n), rounds)
	}
	s := xs.Stats()
	var nacks uint64
	for _, n := range s.NACKs {
		nacks += n
	}
	fmt.Printf("xDS server: %d stream(s), %d service(s), %d assignment(s) published, %d response(s), %d NACK(s)\n",
		s.Streams, s.Services, s.Changes, s.SotWResponses+s.DeltaResponses, nacks)
	if nacks > 0 {
		return fmt.Errorf("the client rejected %d response(s)", nacks)
	}
	return nil
}

// backend is a real gRPC server on loopback.
type backend struct {
	name, addr string
	port       int
	gs         *grpc.Server
	inst       model.Instance
}

func startBackend(name string) (*backend, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go func() { _ = gs.Serve(lis) }()
	return &backend{name: name, addr: lis.Addr().String(), port: lis.Addr().(*net.TCPAddr).Port, gs: gs}, nil
}

func (b *backend) stop() { b.gs.Stop() }

// client makes health checks through the xDS channel and tells which
// backend answered from the peer address.
type client struct {
	cc    *grpc.ClientConn
	names map[string]string // address → backend name
}

// until makes rounds of n calls until done accepts a round, or fails once
// the deadline has passed.
func (c *client) until(ctx context.Context, n int, deadline time.Duration, done func(map[string]int) bool) (map[string]int, int, error) {
	end := time.Now().Add(deadline)
	hc := healthpb.NewHealthClient(c.cc)
	for rounds := 1; ; rounds++ {
		got := map[string]int{}
		for range n {
			var p peer.Peer
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := hc.Check(cctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p), grpc.WaitForReady(true))
			cancel()
			if err != nil {
				return nil, rounds, err
			}
			got[c.names[p.Addr.String()]]++
		}
		if done(got) {
			return got, rounds, nil
		}
		if time.Now().After(end) {
			return got, rounds, fmt.Errorf("the client did not follow within %v (last round %s)", deadline, format(got))
		}
	}
}

func format(n map[string]int) string {
	var parts []string
	for _, name := range []string{"b1", "b2", "b3"} {
		parts = append(parts, fmt.Sprintf("%s %3d", name, n[name]))
	}
	return strings.Join(parts, ", ")
}
