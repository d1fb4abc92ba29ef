package xds_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
	"github.com/muster-io/muster/registry/xds"
)

// These tests speak ADS directly, for what gRPC's client keeps to itself:
// which resources a change sends and to whom, the delta protocol, NACKs,
// a client that stops reading, and the limits.

func (a *ads) request(t testing.TB, typ string, names []string, last *discovery.DiscoveryResponse) {
	t.Helper()
	req := &discovery.DiscoveryRequest{TypeUrl: typ, ResourceNames: names, Node: testNode}
	if last != nil {
		req.VersionInfo, req.ResponseNonce = last.GetVersionInfo(), last.GetNonce()
	}
	if err := a.sotw.Send(req); err != nil {
		t.Fatal(err)
	}
}

func (a *ads) recv(t testing.TB) *discovery.DiscoveryResponse {
	t.Helper()
	r, err := a.sotw.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// assignments decodes the ClusterLoadAssignments of r.
func assignments(t testing.TB, resources []interface {
	GetValue() []byte
}) map[string]*endpoint.ClusterLoadAssignment {
	t.Helper()
	out := make(map[string]*endpoint.ClusterLoadAssignment)
	for _, any := range resources {
		var cla endpoint.ClusterLoadAssignment
		if err := proto.Unmarshal(any.GetValue(), &cla); err != nil {
			t.Fatal(err)
		}
		out[cla.GetClusterName()] = &cla
	}
	return out
}

func sotwCLAs(t testing.TB, r *discovery.DiscoveryResponse) map[string]*endpoint.ClusterLoadAssignment {
	t.Helper()
	if r.GetTypeUrl() != resource.EndpointType {
		t.Fatalf("got a %s response, want endpoints", r.GetTypeUrl())
	}
	var rs []interface{ GetValue() []byte }
	for _, a := range r.GetResources() {
		rs = append(rs, a)
	}
	return assignments(t, rs)
}

// ports returns the ports of cla's endpoints, with their weights.
func ports(cla *endpoint.ClusterLoadAssignment) map[uint32]uint32 {
	out := make(map[uint32]uint32)
	for _, l := range cla.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			out[e.GetEndpoint().GetAddress().GetSocketAddress().GetPortValue()] = e.GetLoadBalancingWeight().GetValue()
		}
	}
	return out
}

func register(t testing.TB, sess *registry.Session, svc string, port int, weight float64) {
	t.Helper()
	inst := model.NewInstance(model.ServiceKey{Name: svc}, "127.0.0.1", port)
	inst.Weight = weight
	if err := sess.Register(ctx, inst); err != nil {
		t.Fatal(err)
	}
}

func TestSotWChangeGoesToItsSubscribersOnly(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	x := startXDS(t, reg, "127.0.0.1:0")
	sess, err := reg.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	register(t, sess, "a", 1001, 1)
	register(t, sess, "b", 2001, 1)

	ca, cb := dialADS(t, x.Addr, false), dialADS(t, x.Addr, false)
	ca.request(t, resource.EndpointType, []string{"a"}, nil)
	cb.request(t, resource.EndpointType, []string{"b"}, nil)
	first := func(c *ads, name string) *discovery.DiscoveryResponse {
		// The first response may come before the service's first view is
		// published (empty); wait for the assignment, ACKing as a client does.
		for {
			r := c.recv(t)
			c.request(t, resource.EndpointType, []string{name}, r)
			if cla := sotwCLAs(t, r)[name]; cla != nil && len(ports(cla)) == 1 {
				return r
			}
		}
	}
	first(ca, "a")
	first(cb, "b")

	// A change of a: a's subscriber gets a's assignment, alone.
	register(t, sess, "a", 1002, 3)
	r := ca.recv(t)
	got := sotwCLAs(t, r)
	if len(got) != 1 || got["a"] == nil {
		t.Fatalf("a change of a sent %v", keys(got))
	}
	if p := ports(got["a"]); len(p) != 2 || p[1002] != 300 {
		t.Fatalf("a's assignment has endpoints %v, want 1001 and 1002 (weight 300)", p)
	}
	// b's subscriber got nothing: the next thing it receives is b's change.
	register(t, sess, "b", 2002, 1)
	got = sotwCLAs(t, cb.recv(t))
	if len(got) != 1 || got["b"] == nil || len(ports(got["b"])) != 2 {
		t.Fatalf("b's subscriber received %v first, want b's change alone", keys(got))
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

var testNode = &core.Node{Id: "muster-test-raw"}

func TestDeltaADS(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	x := startXDS(t, reg, "127.0.0.1:0")
	sess, err := reg.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	register(t, sess, "orders", 1001, 1)
	register(t, sess, "other", 3001, 1)

	c := dialADS(t, x.Addr, true)
	send := func(req *discovery.DeltaDiscoveryRequest) {
		t.Helper()
		req.Node = testNode
		if err := c.delta.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	recv := func() *discovery.DeltaDiscoveryResponse {
		t.Helper()
		r, err := c.delta.Recv()
		if err != nil {
			t.Fatal(err)
		}
		send(&discovery.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()}) // ACK
		return r
	}
	for _, typ := range []string{resource.ListenerType, resource.RouteType, resource.ClusterType, resource.EndpointType} {
		send(&discovery.DeltaDiscoveryRequest{TypeUrl: typ, ResourceNamesSubscribe: []string{"orders"}})
	}
	seen := map[string]bool{}
	var cla endpoint.ClusterLoadAssignment
	for len(seen) < 4 || len(ports(&cla)) != 1 {
		r := recv()
		for _, res := range r.GetResources() {
			if res.GetName() != "orders" {
				t.Fatalf("a %s response holds %q, not subscribed", r.GetTypeUrl(), res.GetName())
			}
			seen[r.GetTypeUrl()] = true
			if r.GetTypeUrl() == resource.EndpointType {
				if err := proto.Unmarshal(res.GetResource().GetValue(), &cla); err != nil {
					t.Fatal(err)
				}
			}
		}
	}

	// A change of orders: one delta response, orders' assignment alone; a
	// change of a service not subscribed sends nothing (the next response
	// is orders' next change).
	register(t, sess, "other", 3002, 1)
	register(t, sess, "orders", 1002, 2)
	r := recv()
	if r.GetTypeUrl() != resource.EndpointType || len(r.GetResources()) != 1 || r.GetResources()[0].GetName() != "orders" {
		t.Fatalf("a change of orders sent %s %v", r.GetTypeUrl(), r.GetResources())
	}
	if err := proto.Unmarshal(r.GetResources()[0].GetResource().GetValue(), &cla); err != nil {
		t.Fatal(err)
	}
	if p := ports(&cla); len(p) != 2 || p[1002] != 200 {
		t.Fatalf("orders' assignment has %v", p)
	}

	// Unsubscribing every type releases the service.
	for _, typ := range []string{resource.ListenerType, resource.RouteType, resource.ClusterType, resource.EndpointType} {
		send(&discovery.DeltaDiscoveryRequest{TypeUrl: typ, ResourceNamesUnsubscribe: []string{"orders"}})
	}
	waitFor(t, func() bool { return x.Stats().Services == 0 }, "the unsubscribed service is released")
	if st := x.Stats(); st.DeltaResponses == 0 || st.DeltaBytes == 0 {
		t.Fatalf("delta counters: %+v", st)
	}
}

// waitFor polls cond in real time, for what runs on real time (gRPC).
func waitFor(t testing.TB, cond func() bool, what string) {
	t.Helper()
	end := time.Now().Add(10 * time.Second) // real time
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(2 * time.Millisecond) // real time: polling gRPC's state
	}
}

// A NACK is counted, by type, and logged with the client's node, the type,
// the version it kept and its error.
func TestNACKsAreCountedAndLogged(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	var logs lockedBuffer
	x := startXDS(t, reg, "127.0.0.1:0", func(c *xds.Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	c := dialADS(t, x.Addr, false)
	c.request(t, resource.ClusterType, []string{"orders"}, nil)
	r := c.recv(t)
	nack := &discovery.DiscoveryRequest{
		TypeUrl: resource.ClusterType, ResourceNames: []string{"orders"}, ResponseNonce: r.GetNonce(),
		ErrorDetail: &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: "cluster orders: unsupported"},
	}
	if err := c.sotw.Send(nack); err != nil {
		t.Fatal(err)
	}
	// The count and the log line are written one after the other: wait for
	// both.
	waitFor(t, func() bool {
		return x.Stats().NACKs[resource.ClusterType] == 1 && strings.Contains(logs.String(), "rejected a response")
	}, "the NACK is counted and logged")
	line := logs.String()
	for _, want := range []string{"rejected a response", "node=" + testNode.GetId(), "type=" + resource.ClusterType, "cluster orders: unsupported"} {
		if !strings.Contains(line, want) {
			t.Fatalf("the NACK's log %q lacks %q", line, want)
		}
	}
	if n := len(x.Stats().NACKs); n != 1 {
		t.Fatalf("NACKs counted for %d types, want 1", n)
	}
}

// lockedBuffer is a bytes.Buffer for a logger written from gRPC's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A client that stops ACKing (or reading) holds at most one response per
// type: changes made meanwhile are not queued for it, and the others go on
// receiving theirs. When it ACKs at last, one response brings it the
// newest state.
func TestStalledClientHoldsOneResponse(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	x := startXDS(t, reg, "127.0.0.1:0")
	sess, err := reg.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	register(t, sess, "orders", 1000, 1)
	stalled, live := dialADS(t, x.Addr, false), dialADS(t, x.Addr, false)
	stalled.request(t, resource.EndpointType, []string{"orders"}, nil)
	live.request(t, resource.EndpointType, []string{"orders"}, nil)
	// The first response may be empty (sent before the service's first view
	// is published); a SotW server sends nothing more until it is ACKed, so
	// the client ACKs until it holds the assignment, then stops.
	var last *discovery.DiscoveryResponse
	for last == nil || len(ports(sotwCLAs(t, last)["orders"])) != 1 {
		if last != nil {
			stalled.request(t, resource.EndpointType, []string{"orders"}, last)
		}
		last = stalled.recv(t)
	}
	const changes = 50
	var lr *discovery.DiscoveryResponse
	for i := 1; i <= changes; i++ {
		register(t, sess, "orders", 1000+i, 1)
		if err := reg.Internals().FlushWatchers(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for lr == nil || len(ports(sotwCLAs(t, lr)["orders"])) != changes+1 {
		if lr != nil {
			live.request(t, resource.EndpointType, []string{"orders"}, lr)
		}
		lr = live.recv(t)
	}
	// The stalled client ACKs: exactly one response, with every change.
	stalled.request(t, resource.EndpointType, []string{"orders"}, last)
	r := stalled.recv(t)
	if n := len(ports(sotwCLAs(t, r)["orders"])); n != changes+1 {
		t.Fatalf("after its ACK the stalled client got %d endpoints, want %d", n, changes+1)
	}
}

// Attack: a client names more services than MaxServices. The server serves
// MaxServices of them, refuses the rest (no Muster watcher for them), and
// keeps serving.
func TestMaxServicesBoundsWatchers(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	x := startXDS(t, reg, "127.0.0.1:0", func(c *xds.Config) { c.MaxServices = 5 })
	c := dialADS(t, x.Addr, false)
	var names []string
	for i := range 50 {
		names = append(names, fmt.Sprintf("svc-%d", i))
	}
	c.request(t, resource.ClusterType, names, nil)
	r := c.recv(t)
	if n := len(r.GetResources()); n != 5 {
		t.Fatalf("%d clusters served, want 5", n)
	}
	if st := x.Stats(); st.Services != 5 || st.Refused != 45 {
		t.Fatalf("services %d, refused %d; want 5 and 45", st.Services, st.Refused)
	}
	if w := reg.Counts().Watchers; w > 5 {
		t.Fatalf("the registry holds %d watchers, want at most 5", w)
	}
}

// Attack: a delta client subscribes names without end. Past
// MaxNamesPerStream its stream is ended with ResourceExhausted.
func TestMaxNamesPerStreamEndsTheStream(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	x := startXDS(t, reg, "127.0.0.1:0", func(c *xds.Config) { c.MaxNamesPerStream = 10 })
	c := dialADS(t, x.Addr, true)
	for i := range 11 {
		err := c.delta.Send(&discovery.DeltaDiscoveryRequest{
			TypeUrl: resource.EndpointType, ResourceNamesSubscribe: []string{fmt.Sprintf("svc-%d", i)}, Node: testNode,
		})
		if err != nil {
			break
		}
	}
	for {
		_, err := c.delta.Recv()
		if err == nil {
			continue
		}
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("the stream ended with %v, want ResourceExhausted", err)
		}
		break
	}
	waitFor(t, func() bool { st := x.Stats(); return st.Streams == 0 && st.Services == 0 }, "the ended stream's services are released")
}

// Attack: names that are no canonical service are refused, not served and
// hold no watcher.
func TestInvalidNamesAreRefused(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	x := startXDS(t, reg, "127.0.0.1:0")
	c := dialADS(t, x.Addr, false)
	bad := []string{"DEFAULT_GROUP@@orders", "public@@DEFAULT_GROUP@@orders", "a@@b@@c@@d", "@@x", "bad ns@@g@@x", "/etc/passwd"}
	c.request(t, resource.ListenerType, bad, nil)
	if r := c.recv(t); len(r.GetResources()) != 0 {
		t.Fatalf("invalid names served %d listeners", len(r.GetResources()))
	}
	if st := x.Stats(); st.Services != 0 || st.Refused != uint64(len(bad)) {
		t.Fatalf("services %d, refused %d", st.Services, st.Refused)
	}
}

func TestCloseEndsStreams(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	x := startXDS(t, reg, "127.0.0.1:0")
	c := dialADS(t, x.Addr, false)
	c.request(t, resource.ClusterType, []string{"orders"}, nil)
	c.recv(t)
	if err := x.Server.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.sotw.Recv(); err == nil {
		t.Fatal("a stream outlived Close")
	}
	// New streams are refused. The refusal may end the stream before the
	// request is sent: gRPC's Send then answers io.EOF, and Recv the status.
	c2 := dialADS(t, x.Addr, false)
	req := &discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, ResourceNames: []string{"orders"}, Node: testNode}
	if err := c2.sotw.Send(req); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	if _, err := c2.sotw.Recv(); status.Code(err) != codes.Unavailable && !errors.Is(err, xds.ErrClosed) {
		t.Fatalf("a stream after Close: %v, want Unavailable", err)
	}
	// The ended streams released their services.
	waitFor(t, func() bool { st := x.Stats(); return st.Streams == 0 && st.Services == 0 }, "Close releases every stream and service")
}

// The same over delta xDS: a delta client that stops ACKing holds one
// response; its ACK brings one response with the newest assignment.
func TestStalledDeltaClientHoldsOneResponse(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	x := startXDS(t, reg, "127.0.0.1:0")
	sess, err := reg.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	register(t, sess, "orders", 1000, 1)
	stalled := dialADS(t, x.Addr, true)
	if err := stalled.delta.Send(&discovery.DeltaDiscoveryRequest{Node: testNode, TypeUrl: resource.EndpointType, ResourceNamesSubscribe: []string{"orders"}}); err != nil {
		t.Fatal(err)
	}
	endpoints := func(r *discovery.DeltaDiscoveryResponse) int {
		t.Helper()
		if len(r.GetResources()) != 1 {
			t.Fatalf("a delta response with %d resources, want 1", len(r.GetResources()))
		}
		var cla endpoint.ClusterLoadAssignment
		if err := proto.Unmarshal(r.GetResources()[0].GetResource().GetValue(), &cla); err != nil {
			t.Fatal(err)
		}
		return len(ports(&cla))
	}
	first, err := stalled.delta.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if n := endpoints(first); n != 1 {
		t.Fatalf("first assignment has %d endpoints, want 1", n)
	}
	// It stops ACKing; a live client follows 50 changes meanwhile.
	live := dialADS(t, x.Addr, true)
	if err := live.delta.Send(&discovery.DeltaDiscoveryRequest{Node: testNode, TypeUrl: resource.EndpointType, ResourceNamesSubscribe: []string{"orders"}}); err != nil {
		t.Fatal(err)
	}
	const changes = 50
	for i := 1; i <= changes; i++ {
		register(t, sess, "orders", 1000+i, 1)
		if err := reg.Internals().FlushWatchers(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for {
		r, err := live.delta.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if endpoints(r) == changes+1 {
			break
		}
		if err := live.delta.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.EndpointType, ResponseNonce: r.GetNonce()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := stalled.delta.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.EndpointType, ResponseNonce: first.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	r, err := stalled.delta.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if n := endpoints(r); n != changes+1 {
		t.Fatalf("after its ACK the stalled delta client got %d endpoints, want %d", n, changes+1)
	}
}
