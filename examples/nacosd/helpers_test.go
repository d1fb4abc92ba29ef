package main

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nacos-group/nacos-sdk-go/v2/clients"
	"github.com/nacos-group/nacos-sdk-go/v2/clients/naming_client"
	"github.com/nacos-group/nacos-sdk-go/v2/common/constant"
	"github.com/nacos-group/nacos-sdk-go/v2/vo"

	"github.com/muster-io/muster/internal/testutil"
)

// portsFree reports whether nothing listens on 127.0.0.1 at each port (TCP,
// and UDP for the gossip port).
func portsFree(base int, cluster bool) bool {
	deltas := []int{0, 1000}
	if cluster {
		deltas = append(deltas, -1000, 1001)
	}
	var open []interface{ Close() error }
	defer func() {
		for _, c := range open {
			_ = c.Close()
		}
	}()
	for _, d := range deltas {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(base+d)))
		if err != nil {
			return false
		}
		open = append(open, l)
		if d == 1001 {
			u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(base+d)))
			if err != nil {
				return false
			}
			open = append(open, u)
		}
	}
	return true
}

var portMu sync.Mutex
var portUsed = map[int]bool{}

// freeBase returns an HTTP port whose companions (gRPC at +1000, and in a
// cluster the transport at −1000 and gossip at +1001) are free.
func freeBase(t testing.TB, cluster bool) int {
	t.Helper()
	portMu.Lock()
	defer portMu.Unlock()
	for range 1000 {
		// All four in 20000–30000: below the kernel's ephemeral range
		// (Linux's starts at 32768), so no connection takes one as its
		// source port while a restarted server is down (see the main
		// module's internal/ports), and below Kubernetes' NodePorts.
		p := 21000 + rand.IntN(8000-1)
		if portUsed[p] || portUsed[p+1000] || portUsed[p-1000] || portUsed[p+1001] {
			continue
		}
		if portsFree(p, cluster) {
			for _, d := range []int{0, 1000, -1000, 1001} {
				portUsed[p+d] = true
			}
			return p
		}
	}
	t.Fatal("no free ports on 127.0.0.1")
	return 0
}

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("NACOSD_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// startServer starts a standalone nacosd on loopback and closes it at
// cleanup.
func startServer(t testing.TB, mod func(*Config)) *Server {
	t.Helper()
	cfg := DefaultConfig()
	cfg.HTTPAddr = "127.0.0.1:" + strconv.Itoa(freeBase(t, false))
	cfg.Logger = testLogger(t)
	cfg.Fast = true
	if mod != nil {
		mod(&cfg)
	}
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func httpPort(t testing.TB, addr string) uint64 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.ParseUint(p, 10, 64)
	return n
}

// newClient returns a nacos-sdk-go/v2 naming client of the given servers
// (HTTP addresses), closed at cleanup.
func newClient(t testing.TB, addrs ...string) naming_client.INamingClient {
	t.Helper()
	return newClientWith(t, nil, addrs...)
}

// newClientWith is newClient with more client options (credentials, TLS).
func newClientWith(t testing.TB, opts []constant.ClientOption, addrs ...string) naming_client.INamingClient {
	t.Helper()
	skipUnderRace(t)
	var sc []constant.ServerConfig
	for _, a := range addrs {
		sc = append(sc, *constant.NewServerConfig("127.0.0.1", httpPort(t, a)))
	}
	dir := clientDir(t)
	cc := constant.NewClientConfig(append([]constant.ClientOption{
		constant.WithNamespaceId(""),
		constant.WithTimeoutMs(3000),
		constant.WithNotLoadCacheAtStart(true),
		constant.WithLogDir(dir), constant.WithCacheDir(dir),
		constant.WithLogLevel("error"),
	}, opts...)...)
	c, err := clients.NewNamingClient(vo.NacosClientParam{ClientConfig: cc, ServerConfigs: sc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseClient)
	return c
}

// eventually polls cond every 5 ms until it holds or the deadline passes.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// register registers an ephemeral instance with the v2 client, failing the
// test on error.
func register(t testing.TB, c naming_client.INamingClient, svc, cluster, ip string, port uint64, weight float64) {
	t.Helper()
	okk, err := c.RegisterInstance(vo.RegisterInstanceParam{
		ServiceName: svc, ClusterName: cluster, Ip: ip, Port: port, Weight: weight,
		Enable: true, Healthy: true, Ephemeral: true, Metadata: map[string]string{"k": "v"},
	})
	if err != nil || !okk {
		t.Fatalf("register %s %s:%d: %v %v", svc, ip, port, okk, err)
	}
}

// clientsDir holds the clients' logs and caches. The SDKs keep writing to
// them after they close (v1.0.8 clients cannot be closed at all), so it is
// removed when the test binary ends, not when a test does.
var clientsDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "nacosd-clients-")
	if err != nil {
		panic(err)
	}
	clientsDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// clientDir returns a new directory for one client's logs and cache.
func clientDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp(clientsDir, "client-")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// skipUnderRace skips tests that drive the real SDKs under the race
// detector: the Nacos SDKs race with themselves (nacos-sdk-go/v2 v2.3.2's
// RpcClient reads rpcClientStatus without synchronisation while its
// reconnect goroutine swaps it), so under -race the wire-level tests
// (wire_test.go) exercise the server instead.
func skipUnderRace(t testing.TB) {
	t.Helper()
	if testutil.Race {
		t.Skip("the Nacos SDKs have data races of their own; wire_test.go covers the server under -race")
	}
}
