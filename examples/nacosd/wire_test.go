package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	anypb "github.com/golang/protobuf/ptypes/any"
	"github.com/muster-io/muster/model"
	pb "github.com/nacos-group/nacos-sdk-go/v2/api/grpc"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// wireClient speaks the 2.x protocol by hand: the tests that run under the
// race detector, and those that need a client that misbehaves.
type wireClient struct {
	t      testing.TB
	cc     *grpc.ClientConn
	req    pb.RequestClient
	stream pb.BiRequestStream_RequestBiStreamClient
	cancel context.CancelFunc
	in     chan *pb.Payload // server requests arriving on the stream
	ack    atomic.Bool      // answer server requests
}

func dialWire(t testing.TB, grpcAddr string, setup bool) *wireClient {
	t.Helper()
	var body map[string]any
	if setup {
		body = map[string]any{"clientVersion": "wire-test", "labels": map[string]string{"source": "sdk"}}
	}
	return dialWireSetup(t, grpcAddr, body)
}

// dialWireSetup connects; with a setup body, it opens the stream with it.
func dialWireSetup(t testing.TB, grpcAddr string, setupBody map[string]any) *wireClient {
	t.Helper()
	return dialWireOpts(t, grpcAddr, setupBody, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// dialWireOpts is dialWireSetup with the dial options given (a source
// address, TLS).
func dialWireOpts(t testing.TB, grpcAddr string, setupBody map[string]any, opts ...grpc.DialOption) *wireClient {
	t.Helper()
	w, err := tryDialWire(t, grpcAddr, setupBody, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// tryDialWire is dialWireOpts returning the error of the dial, the
// ServerCheckRequest or the stream's opening (a refused connection).
func tryDialWire(t testing.TB, grpcAddr string, setupBody map[string]any, opts ...grpc.DialOption) (*wireClient, error) {
	t.Helper()
	setup := setupBody != nil
	// The flow-control windows of nacos-sdk-go v2 (10 MiB, static: its
	// defaults, common/remote/rpc/grpc_client.go): a static window sends no
	// BDP pings, as grpc-go's dynamic one does whenever data arrives.
	opts = append([]grpc.DialOption{grpc.WithInitialWindowSize(10 << 20), grpc.WithInitialConnWindowSize(10 << 20)}, opts...)
	cc, err := grpc.Dial(grpcAddr, opts...)
	if err != nil {
		return nil, err
	}
	w := &wireClient{t: t, cc: cc, req: pb.NewRequestClient(cc), in: make(chan *pb.Payload, 64)}
	w.ack.Store(true)
	t.Cleanup(w.close)
	if !setup {
		return w, nil
	}
	var check struct {
		response
		ConnectionID string `json:"connectionId"`
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	p, err := w.req.Request(cctx, wirePayload("ServerCheckRequest", map[string]any{}))
	ccancel()
	if err != nil {
		w.close()
		return nil, err
	}
	if err := json.Unmarshal(p.GetBody().GetValue(), &check); err != nil || !check.Success || check.ConnectionID == "" {
		w.close()
		return nil, fmt.Errorf("server check: %+v %v", check, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	if w.stream, err = pb.NewBiRequestStreamClient(cc).RequestBiStream(ctx); err != nil {
		w.close()
		return nil, err
	}
	if err := w.stream.Send(wirePayload("ConnectionSetupRequest", setupBody)); err != nil {
		w.close()
		return nil, err
	}
	go func() {
		for {
			p, err := w.stream.Recv()
			if err != nil {
				close(w.in)
				return
			}
			w.in <- p
			if w.ack.Load() {
				var r struct {
					RequestID string `json:"requestId"`
				}
				// Only the requestId is read (a push carries a whole
				// ServiceInfo, which this client has no use for): the
				// acknowledgement is what a decoding client sends.
				if raw, ok := topLevelValue(p.GetBody().GetValue(), "requestId"); !ok || json.Unmarshal(raw, &r.RequestID) != nil {
					_ = json.Unmarshal(p.GetBody().GetValue(), &r)
				}
				typ := map[string]string{"NotifySubscriberRequest": "NotifySubscriberResponse", "ClientDetectionRequest": "ClientDetectionResponse",
					"ConnectResetRequest": "ConnectResetResponse"}[p.GetMetadata().GetType()]
				_ = w.stream.Send(wirePayload(typ, response{ResultCode: 200, Success: true, RequestID: r.RequestID}))
			}
		}
	}()
	// The stream's setup is asynchronous: wait until unary calls are tied
	// to it.
	eventually(t, 2*time.Second, "the connection is registered", func() bool {
		var r response
		w.call("HealthCheckRequest", map[string]any{}, &r)
		return r.Success
	})
	return w, nil
}

func wirePayload(typ string, body any) *pb.Payload {
	b, _ := json.Marshal(body)
	return &pb.Payload{Metadata: &pb.Metadata{Type: typ, ClientIp: "127.0.0.1"}, Body: &anypb.Any{Value: b}}
}

// call makes a unary request and decodes the answer into out; it returns
// the answer's type.
func (w *wireClient) call(typ string, body map[string]any, out any) string {
	w.t.Helper()
	return w.callWith(nil, typ, body, out)
}

// callWith is call with request headers (where the 2.x SDK puts its
// accessToken).
func (w *wireClient) callWith(headers map[string]string, typ string, body map[string]any, out any) string {
	w.t.Helper()
	p := w.request(headers, typ, body)
	if err := json.Unmarshal(p.GetBody().GetValue(), out); err != nil {
		w.t.Fatalf("%s answer: %v", typ, err)
	}
	return p.GetMetadata().GetType()
}

// request makes a unary request and returns the answer.
func (w *wireClient) request(headers map[string]string, typ string, body map[string]any) *pb.Payload {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	pl := wirePayload(typ, body)
	pl.Metadata.Headers = headers
	p, err := w.req.Request(ctx, pl)
	if err != nil {
		w.t.Fatalf("%s: %v", typ, err)
	}
	return p
}

func (w *wireClient) close() {
	if w.cancel != nil {
		w.cancel()
	}
	_ = w.cc.Close()
}

// next returns the next server request of type typ on the stream.
func (w *wireClient) next(typ string, within time.Duration) *pb.Payload {
	w.t.Helper()
	deadline := time.After(within)
	for {
		select {
		case p, ok := <-w.in:
			if !ok {
				w.t.Fatalf("stream closed while waiting for %s", typ)
			}
			if p.GetMetadata().GetType() == typ {
				return p
			}
		case <-deadline:
			w.t.Fatalf("no %s within %v", typ, within)
		}
	}
}

func inst(ip string, port int) map[string]any {
	return map[string]any{"ip": ip, "port": port, "weight": 1, "healthy": true, "enabled": true, "ephemeral": true, "clusterName": ""}
}

// TestWire drives the protocol by hand: registration, the refusal of an
// unknown connection, subscription and acknowledged pushes, and the
// session's end with the connection. No goroutine outlives the server.
func TestWire(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := startServer(t, nil)

	// A unary request on a connection without a stream: 301, which makes
	// a client switch servers.
	stray := dialWire(t, s.GRPCAddr(), false)
	var r response
	if typ := stray.call("InstanceRequest", map[string]any{"serviceName": "w", "type": "registerInstance", "instance": inst("10.0.0.1", 80)}, &r); typ != "ErrorResponse" || r.ErrorCode != 301 {
		t.Fatalf("request of an unknown connection: %s %+v", typ, r)
	}

	pub := dialWire(t, s.GRPCAddr(), true)
	if typ := pub.call("InstanceRequest", map[string]any{"namespace": "public", "serviceName": "w", "groupName": "DEFAULT_GROUP",
		"type": "registerInstance", "instance": inst("10.0.0.1", 80)}, &r); typ != "InstanceResponse" || !r.Success {
		t.Fatalf("register: %s %+v", typ, r)
	}
	if typ := pub.call("InstanceRequest", map[string]any{"serviceName": "w", "type": "registerInstance", "instance": inst("10.0.0.1", 0)}, &r); typ != "ErrorResponse" || r.ErrorCode != 400 {
		t.Fatalf("port 0: %s %+v", typ, r)
	}
	if typ := pub.call("NoSuchRequest", map[string]any{}, &r); typ != "ErrorResponse" || r.Success {
		t.Fatalf("unknown type: %s %+v", typ, r)
	}

	sub := dialWire(t, s.GRPCAddr(), true)
	var sr subscribeServiceResponse
	if typ := sub.call("SubscribeServiceRequest", map[string]any{"namespace": "public", "serviceName": "w", "groupName": "DEFAULT_GROUP",
		"subscribe": true, "clusters": ""}, &sr); typ != "SubscribeServiceResponse" || !sr.Success || len(sr.ServiceInfo.Hosts) != 1 || sr.ServiceInfo.Name != "w" {
		t.Fatalf("subscribe: %s %+v", typ, sr)
	}
	first := sr.ServiceInfo.LastRefTime

	// Batch: the connection's instances of w become exactly the batch.
	if typ := pub.call("BatchInstanceRequest", map[string]any{"serviceName": "w", "type": "batchRegisterInstance",
		"instances": []any{inst("10.0.0.2", 80), inst("10.0.0.3", 80)}}, &r); typ != "BatchInstanceResponse" || !r.Success {
		t.Fatalf("batch: %s %+v", typ, r)
	}
	var push struct {
		ServiceInfo nServiceInfo `json:"serviceInfo"`
	}
	if err := json.Unmarshal(sub.next("NotifySubscriberRequest", 2*time.Second).GetBody().GetValue(), &push); err != nil {
		t.Fatal(err)
	}
	if n := len(push.ServiceInfo.Hosts); n != 2 || push.ServiceInfo.LastRefTime <= first {
		t.Fatalf("push after the batch: %d hosts, lastRefTime %d after %d (the batch is one step: never 3 hosts)", n, push.ServiceInfo.LastRefTime, first)
	}
	eventually(t, 2*time.Second, "the push is acknowledged", func() bool {
		_, _, n := s.metrics.percentiles()
		return n >= 1
	})

	var q struct {
		response
		ServiceInfo nServiceInfo `json:"serviceInfo"`
	}
	if typ := sub.call("ServiceQueryRequest", map[string]any{"serviceName": "w", "cluster": "", "healthyOnly": true}, &q); typ != "QueryServiceResponse" || len(q.ServiceInfo.Hosts) != 2 {
		t.Fatalf("query: %s %+v", typ, q)
	}
	var l struct {
		response
		Count        int      `json:"count"`
		ServiceNames []string `json:"serviceNames"`
	}
	if typ := sub.call("ServiceListRequest", map[string]any{"groupName": "DEFAULT_GROUP", "pageNo": 1, "pageSize": 10}, &l); typ != "ServiceListResponse" || l.Count != 1 || l.ServiceNames[0] != "w" {
		t.Fatalf("list: %s %+v", typ, l)
	}

	// The publisher's connection ends: its instances leave, and the
	// subscriber is told. (A push with no hosts is what Nacos sends too;
	// the SDK ignores it unless UpdateCacheWhenEmpty.)
	pub.close()
	eventually(t, 2*time.Second, "the closed connection's instances leave", func() bool { return len(served(t, s, "w")) == 0 })
	if err := json.Unmarshal(sub.next("NotifySubscriberRequest", 2*time.Second).GetBody().GetValue(), &push); err != nil {
		t.Fatal(err)
	}
	if len(push.ServiceInfo.Hosts) != 0 {
		t.Fatalf("push after the publisher left: %+v", push.ServiceInfo.Hosts)
	}

	// Graceful shutdown: every client is told to reconnect elsewhere.
	go func() { _ = s.Close() }()
	sub.next("ConnectResetRequest", 3*time.Second)
	sub.close()
	stray.close()
	_ = s.Close()
}

// TestWireSilentClientDropped: a client that stops answering is sent a
// ClientDetectionRequest once idle, and dropped, with its instances, when
// it does not answer.
func TestWireSilentClientDropped(t *testing.T) {
	s := startServer(t, func(c *Config) { c.IdleTimeout, c.DetectTimeout = 200*time.Millisecond, 200*time.Millisecond })
	w := dialWire(t, s.GRPCAddr(), true)
	var r response
	w.call("InstanceRequest", map[string]any{"serviceName": "silent", "type": "registerInstance", "instance": inst("10.0.0.1", 80)}, &r)
	if !r.Success {
		t.Fatalf("register: %+v", r)
	}
	w.ack.Store(false) // from now on the client reads but never answers
	w.next("ClientDetectionRequest", 2*time.Second)
	eventually(t, 3*time.Second, "the silent client's instances leave", func() bool { return len(served(t, s, "silent")) == 0 })
}

// TestClusterWire: a 3-node cluster driven by hand-written clients: a
// registration on n1 is pushed to a subscriber on n2, and when the nodes
// close, no goroutine of theirs (transport, memberlist, Distro, Raft,
// health checks, gRPC, UDP) is left. It runs under -race too.
func TestClusterWire(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	nodes := startCluster(t, 3)
	sub := dialWire(t, nodes[1].GRPCAddr(), true)
	var sr subscribeServiceResponse
	sub.call("SubscribeServiceRequest", map[string]any{"serviceName": "cw", "subscribe": true, "clusters": ""}, &sr)
	if !sr.Success {
		t.Fatalf("subscribe: %+v", sr)
	}
	pub := dialWire(t, nodes[0].GRPCAddr(), true)
	var r response
	pub.call("InstanceRequest", map[string]any{"serviceName": "cw", "type": "registerInstance", "instance": inst("10.0.0.1", 80)}, &r)
	if !r.Success {
		t.Fatalf("register: %+v", r)
	}
	var push struct {
		ServiceInfo nServiceInfo `json:"serviceInfo"`
	}
	if err := json.Unmarshal(sub.next("NotifySubscriberRequest", 5*time.Second).GetBody().GetValue(), &push); err != nil {
		t.Fatal(err)
	}
	if len(push.ServiceInfo.Hosts) != 1 {
		t.Fatalf("push on n2 of a registration on n1: %+v", push.ServiceInfo)
	}
	pub.close()
	sub.close()
	var wg sync.WaitGroup
	for _, s := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); _ = s.Close() }()
	}
	wg.Wait()
}

// topLevelValue returns the raw JSON value of key in the object b, found by
// walking the object's top level: nested objects and arrays are skipped by
// their brackets (strings inside them respected), not decoded. It reports
// false when b is not an object or the key is not at its top level (a key
// written with escapes is not recognised). The load-generating client
// reads a push's requestId with it: json.Unmarshal would scan and decode
// the whole ServiceInfo (about 30 KB in the benchmark) to find it.
func topLevelValue(b []byte, key string) ([]byte, bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	i++
	for {
		i = skipSpace(b, i)
		if i >= len(b) || b[i] != '"' {
			return nil, false
		}
		end, ok := skipJSONValue(b, i)
		if !ok {
			return nil, false
		}
		k := b[i+1 : end-1]
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return nil, false
		}
		i = skipSpace(b, i+1)
		end, ok = skipJSONValue(b, i)
		if !ok {
			return nil, false
		}
		if string(k) == key {
			return b[i:end], true
		}
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ',' {
			return nil, false
		}
		i++
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipJSONValue returns the end of the value starting at b[i].
func skipJSONValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		for i++; ; {
			q := bytes.IndexByte(b[i:], '"')
			if q < 0 {
				return 0, false
			}
			i += q
			esc := 0 // the backslashes before it: an odd number escapes it
			for k := i - 1; b[k] == '\\'; k-- {
				esc++
			}
			if esc%2 == 0 {
				return i + 1, true
			}
			i++
		}
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1, true
				}
			case '"':
				end, ok := skipJSONValue(b, i)
				if !ok {
					return 0, false
				}
				i = end - 1
			}
		}
		return 0, false
	default: // a number, true, false or null
		start := i
		for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\t' && b[i] != '\n' && b[i] != '\r' {
			i++
		}
		return i, i > start
	}
}

// TestTopLevelValue checks the load client's key lookup against
// encoding/json: nested keys of the same name, brackets and escaped quotes
// inside strings, and the value of every top-level key.
func TestTopLevelValue(t *testing.T) {
	for _, in := range []string{
		`{"requestId":"7"}`,
		` { "a" : {"requestId":"nested","b":["]","}",{"requestId":"x"}]} , "s":"q\"{[","n":-1.5e3,"t":true,"z":null,"requestId" : "12" } `,
		`{"module":"naming","serviceInfo":{"hosts":[{"metadata":{"k":"v\"}]}\\"}}],"name":"requestId"},"requestId":"99"}`,
		`{"requestId":"a\u0041b"}`,
	} {
		var want map[string]json.RawMessage
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		for k, v := range want {
			got, ok := topLevelValue([]byte(in), k)
			if !ok || string(got) != string(v) {
				t.Errorf("%s: %q is %q, %v; want %q", in, k, got, ok, v)
			}
		}
		if _, ok := topLevelValue([]byte(in), "absent"); ok {
			t.Errorf("%s: an absent key found", in)
		}
	}
	for _, bad := range []string{``, `[]`, `{"a":`, `{"a":"x`, `{"a":{"b":1`, `{"a" "b"}`, `{"b":1 "a":2}`} {
		if v, ok := topLevelValue([]byte(bad), "a"); ok {
			t.Errorf("%q: found %q", bad, v)
		}
	}
}

// BenchmarkTopLevelValue: the load client's requestId lookup in a push of
// 100 instances (the benchmark's), against json.Unmarshal's.
func BenchmarkTopLevelValue(b *testing.B) {
	svc := model.ServiceKey{Namespace: "public", Group: model.DefaultGroup, Name: "bench-1"}
	v := &model.ServiceView{Revision: 7}
	for i := range 100 {
		in := model.NewInstance(svc, fmt.Sprintf("10.0.%d.%d", i/256, i%256), 8000)
		in.Weight, in.Healthy, in.Enabled, in.Ephemeral = 1, true, true, true
		v.Instances = append(v.Instances, in)
	}
	body := appendServiceInfo([]byte(`{"module":"naming","serviceInfo":`), v, "bench-1", model.DefaultGroup, "", 1)
	body = append(body, `,"requestId":"12345"}`...)
	b.Run("topLevelValue", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if r, ok := topLevelValue(body, "requestId"); !ok || string(r) != `"12345"` {
				b.Fatal(string(r))
			}
		}
	})
	b.Run("json.Unmarshal", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var r struct {
				RequestID string `json:"requestId"`
			}
			if err := json.Unmarshal(body, &r); err != nil || r.RequestID != "12345" {
				b.Fatal(err)
			}
		}
	})
}
