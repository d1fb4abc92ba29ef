package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	anypb "github.com/golang/protobuf/ptypes/any"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	pb "github.com/nacos-group/nacos-sdk-go/v2/api/grpc"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// The Nacos 2.x gRPC protocol: a unary Request service and a
// bidirectional BiRequestStream, both carrying Payloads whose
// metadata.type names the JSON body's class.
//
// A client first calls ServerCheckRequest (unary), then opens the stream and
// sends ConnectionSetupRequest on it. It never sends its connection ID on
// unary calls, so a unary request is tied to its connection by the remote
// address of the HTTP/2 connection that carries both. Each connection is a
// registry Session: its instances leave when the stream ends.

// response is the common part of every Nacos response.
type response struct {
	ResultCode int    `json:"resultCode"`
	ErrorCode  int    `json:"errorCode"`
	Success    bool   `json:"success"`
	Message    string `json:"message,omitempty"`
	RequestID  string `json:"requestId"`
}

func ok(id string) response { return response{ResultCode: codeOK, Success: true, RequestID: id} }

func failed(id string, code int, msg string) response {
	return response{ResultCode: codeFail, ErrorCode: code, Message: msg, RequestID: id}
}

// nRequest holds the fields of every request nacosd reads; each request
// type uses some of them.
type nRequest struct {
	RequestID   string      `json:"requestId"`
	Namespace   string      `json:"namespace"`
	ServiceName string      `json:"serviceName"`
	GroupName   string      `json:"groupName"`
	Type        string      `json:"type"`
	Instance    nInstance   `json:"instance"`
	Instances   []nInstance `json:"instances"`
	PageNo      int         `json:"pageNo"`
	PageSize    int         `json:"pageSize"`
	Subscribe   bool        `json:"subscribe"`
	Clusters    string      `json:"clusters"`
	Cluster     string      `json:"cluster"`
	HealthyOnly bool        `json:"healthyOnly"`
}

func payload(typ string, body any) *pb.Payload {
	b, err := json.Marshal(body)
	if err != nil { // our own types always marshal
		panic(err)
	}
	return &pb.Payload{Metadata: &pb.Metadata{Type: typ}, Body: &anypb.Any{Value: b}}
}

// okPayload is payload(typ, ok(id)), its JSON written by hand: the answer
// to every registration.
func okPayload(typ, id string) *pb.Payload {
	b := make([]byte, 0, 64+len(id))
	b = append(b, `{"resultCode":200,"errorCode":0,"success":true,"requestId":`...)
	b = appendJSONString(b, id)
	b = append(b, '}')
	return &pb.Payload{Metadata: &pb.Metadata{Type: typ}, Body: &anypb.Any{Value: b}}
}

func errorPayload(id string, code int, msg string) *pb.Payload {
	return payload("ErrorResponse", failed(id, code, msg))
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// grpcAPI serves both services.
type grpcAPI struct {
	s   *Server
	log *slog.Logger

	mu      sync.Mutex
	conns   map[string]*conn  // by the peer address of the HTTP/2 connection
	checked map[string]string // peer address → connection ID handed out by ServerCheck
	closing bool
	seq     atomic.Uint64

	jobs chan unaryJob // to the request workers
}

// unaryJob is a unary request handed to a request worker: dec reads its
// Payload.
type unaryJob struct {
	ctx  context.Context
	dec  func(any) error
	done chan<- unaryResult
}

type unaryResult struct {
	p   any // *pb.Payload or *rawPayload
	err error
}

// requestWorkers is how many goroutines serve unary requests (see
// requestDesc).
const requestWorkers = 16

func newGRPCAPI(s *Server) *grpcAPI {
	return &grpcAPI{s: s, log: s.log.With("api", "grpc"), conns: map[string]*conn{}, checked: map[string]string{}, jobs: make(chan unaryJob)}
}

// requestDesc is the unary service (the SDK's Request service, method
// "request") with its own handler. gRPC runs each request on a new
// goroutine, whose small stack reading the message and serving it (the
// JSON decoding, the registry's update) grow by copying, twice or more:
// 10-15 % of the server's CPU for a registration. The handler hands the
// request, its reading included, to one of the long-lived request workers
// instead, whose stacks have grown already; when none is free, it serves
// it on its own goroutine, as gRPC's generated handler does.
var requestDesc = grpc.ServiceDesc{
	ServiceName: "Request",
	HandlerType: (*pb.RequestServer)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "request", Handler: handleRequest}},
	Streams:     []grpc.StreamDesc{},
	Metadata:    "nacos_grpc_service.proto",
}

func handleRequest(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	g := srv.(*grpcAPI)
	if interceptor != nil { // none is installed; as the generated handler does
		in := new(pb.Payload)
		if err := dec(in); err != nil {
			return nil, err
		}
		info := &grpc.UnaryServerInfo{Server: srv, FullMethod: "/Request/request"}
		return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) { return g.Request(ctx, req.(*pb.Payload)) })
	}
	done := make(chan unaryResult, 1)
	select {
	case g.jobs <- unaryJob{ctx, dec, done}:
		r := <-done
		return r.p, r.err
	default:
		return decodeAndServe(g, ctx, dec)
	}
}

// decodeAndServe reads a request with dec and serves it. The answer
// comes back in its wire encoding (a rawPayload, which the codec sends as
// it is), encoded here rather than on gRPC's goroutine.
func decodeAndServe(g *grpcAPI, ctx context.Context, dec func(any) error) (any, error) {
	in := new(pb.Payload)
	if err := dec(in); err != nil {
		return nil, err
	}
	out, err := g.Request(ctx, in)
	if err != nil || out == nil {
		return nil, err
	}
	if m, b := out.GetMetadata(), out.GetBody(); m.GetClientIp() == "" && len(m.GetHeaders()) == 0 && b.GetTypeUrl() == "" {
		return newRawPayload(m.GetType(), b.GetValue(), nil), nil // what every answer holds
	}
	return out, nil
}

// serveRequests is a request worker: it serves the requests handed to it
// until ctx ends.
func (g *grpcAPI) serveRequests(ctx context.Context) {
	for {
		select {
		case j := <-g.jobs:
			p, err := decodeAndServe(g, j.ctx, j.dec)
			j.done <- unaryResult{p, err}
		case <-ctx.Done():
			return
		}
	}
}

// Request serves one request of the unary service.
func (g *grpcAPI) Request(ctx context.Context, p *pb.Payload) (*pb.Payload, error) {
	typ := p.GetMetadata().GetType()
	var req nRequest
	if err := json.Unmarshal(p.GetBody().GetValue(), &req); err != nil {
		return errorPayload("", codeInvalidParam, "malformed body of "+typ+": "+err.Error()), nil
	}
	addr := peerAddr(ctx)
	if typ == "ServerCheckRequest" {
		if err := g.s.limits.connRefused(addr); err != nil {
			return nil, status.Error(codes.ResourceExhausted, err.Error())
		}
		return g.serverCheck(addr, req.RequestID)
	}
	g.mu.Lock()
	c := g.conns[addr]
	g.mu.Unlock()
	if c == nil {
		return errorPayload(req.RequestID, codeUnregister, "Connection is unregistered."), nil
	}
	c.touch()
	if err := g.s.limits.allowConn(c.rate, addr); err != nil {
		return errorPayload(req.RequestID, codeOverThreshold, err.Error()), nil
	}
	if refused := g.authorize(ctx, c, typ, p, &req); refused != nil {
		return refused, nil
	}
	switch typ {
	case "HealthCheckRequest":
		g.mu.Lock()
		closing := g.closing
		g.mu.Unlock()
		if closing {
			// A client told to reconnect first checks whether its server
			// still answers, and stays if it does.
			return nil, status.Error(codes.Unavailable, "nacosd is shutting down")
		}
		return okPayload("HealthCheckResponse", req.RequestID), nil
	case "InstanceRequest":
		return c.instance(ctx, &req, p.GetMetadata().GetClientIp(), true), nil
	case "PersistentInstanceRequest":
		return c.instance(ctx, &req, p.GetMetadata().GetClientIp(), false), nil
	case "BatchInstanceRequest":
		return c.batch(ctx, &req), nil
	case "ServiceQueryRequest":
		return c.query(ctx, &req), nil
	case "SubscribeServiceRequest":
		return c.subscribe(ctx, &req), nil
	case "ServiceListRequest":
		return c.list(ctx, &req), nil
	default:
		return errorPayload(req.RequestID, codeNoHandler, "RequestHandler Not Found: nacosd does not serve "+typ), nil
	}
}

// namingWrites and namingReads are the request types that act on naming
// data, and need a permission when authentication is on.
var (
	namingWrites = map[string]bool{"InstanceRequest": true, "PersistentInstanceRequest": true, "BatchInstanceRequest": true}
	namingReads  = map[string]bool{"ServiceQueryRequest": true, "SubscribeServiceRequest": true, "ServiceListRequest": true}
)

// authorize refuses a naming request whose service name holds "@@" (the
// group is given apart over gRPC, and Nacos refuses it rather than read a
// group out of the name; see naming.go) or that its sender may not make. It
// returns the refusal, or nil.
func (g *grpcAPI) authorize(ctx context.Context, c *conn, typ string, p *pb.Payload, req *nRequest) *pb.Payload {
	write, read := namingWrites[typ], namingReads[typ]
	if !write && !read {
		return nil
	}
	if typ != "ServiceListRequest" {
		if refused := c.checkServiceName(typ, req); refused != nil {
			return refused
		}
	}
	group := req.GroupName
	if group == "" && typ != "ServiceListRequest" {
		group = model.DefaultGroup
	}
	err := g.s.allowGRPC(ctx, p.GetMetadata().GetHeaders(), req.Namespace, group, req.ServiceName, write)
	if err == nil {
		return nil
	}
	code, msg := errCode(err)
	g.log.Info("request denied", "type", typ, "namespace", clip(req.Namespace), "service", clip(req.ServiceName), "err", err)
	return errorPayload(req.RequestID, code, msg)
}

func (g *grpcAPI) serverCheck(addr, reqID string) (*pb.Payload, error) {
	g.mu.Lock()
	closing := g.closing
	g.mu.Unlock()
	if closing {
		// An error, not a 3xx code: the client then tries another server
		// at once rather than wait for this one.
		return nil, status.Error(codes.Unavailable, "nacosd is shutting down")
	}
	type serverCheckResponse struct {
		response
		ConnectionID string `json:"connectionId"`
	}
	if !g.s.reg.Ready() {
		r := failed(reqID, codeNotReady, "nacosd is loading its data from its peers")
		return payload("ServerCheckResponse", serverCheckResponse{response: r}), nil
	}
	id := fmt.Sprintf("%d_%s_%d", time.Now().UnixMilli(), addr, g.seq.Add(1))
	g.mu.Lock()
	g.checked[addr] = id
	g.mu.Unlock()
	return payload("ServerCheckResponse", serverCheckResponse{response: ok(reqID), ConnectionID: id}), nil
}

// RequestBiStream serves one client connection's stream: a Session for its
// lifetime.
func (g *grpcAPI) RequestBiStream(stream pb.BiRequestStream_RequestBiStreamServer) error {
	ctx := stream.Context()
	addr := peerAddr(ctx)
	if err := g.s.limits.connRefused(addr); err != nil {
		return status.Error(codes.ResourceExhausted, err.Error())
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	if t := first.GetMetadata().GetType(); t != "ConnectionSetupRequest" {
		return status.Errorf(codes.FailedPrecondition, "the first message of a stream must be ConnectionSetupRequest, not %q", t)
	}
	setup, err := decodeSetup(first.GetBody().GetValue())
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "malformed ConnectionSetupRequest: %v", err)
	}
	clientIP := first.GetMetadata().GetClientIp()
	sess, err := g.s.reg.OpenSession(ctx, registry.SessionOptions{Labels: sessionLabels(&setup, clientIP)})
	if errors.Is(err, model.ErrInvalid) {
		// The labels are the client's own: labels the registry refuses (too
		// many, control characters) do not cost it its connection. The
		// registry's error is bounded (it quotes at most 64 bytes).
		g.log.Warn("connection labels refused; the session goes without", "clientIp", clip(clientIP), "labels", len(setup.Labels), "err", err)
		sess, err = g.s.reg.OpenSession(ctx, registry.SessionOptions{})
	}
	if err != nil {
		return status.Errorf(codes.Unavailable, "cannot open a session: %v", err)
	}
	setup.Labels = nil // what was accepted is the session's: sess.Labels()
	c := newConn(g, stream, addr, clientIP, &setup, sess)

	g.mu.Lock()
	if g.closing {
		g.mu.Unlock()
		_ = sess.Close()
		return status.Error(codes.Unavailable, "nacosd is shutting down")
	}
	if id, ok := g.checked[addr]; ok {
		c.id = id
		delete(g.checked, addr)
	}
	c.log = c.log.With("conn", c.id) // before unary requests can see c
	old := g.conns[addr]
	g.conns[addr] = c
	g.mu.Unlock()
	if old != nil {
		old.kill()
	}
	c.log.Info("connection set up", "clientIp", c.clientIP, "version", c.version, "labels", c.nlabels)

	recvErr := make(chan error, 1)
	go func() { // ends when the stream does: the handler's return ends its context
		for {
			p, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			c.touch()
			c.onResponse(p)
		}
	}()
	select {
	case err = <-recvErr:
	case <-c.ctx.Done():
		err = c.ctx.Err()
	}
	g.mu.Lock()
	if g.conns[addr] == c {
		delete(g.conns, addr)
	}
	// After a ConnectResetRequest the client moves to another node and
	// registers there again; its session here stays until the registry
	// closes (after a grace period), so that its instances never leave in
	// between.
	handover := g.closing && len(g.s.cfg.Peers) > 1
	g.mu.Unlock()
	c.close(!handover)
	c.log.Info("connection closed", "reason", err, "sessionKept", handover)
	return nil
}

// drain waits until every connection has ended, or ctx ends.
func (g *grpcAPI) drain(ctx context.Context) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for len(g.snapshot()) > 0 {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// snapshot returns the live connections.
func (g *grpcAPI) snapshot() []*conn {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]*conn, 0, len(g.conns))
	for _, c := range g.conns {
		out = append(out, c)
	}
	return out
}

// detect sends ClientDetectionRequest to connections idle for longer than
// idle, and drops those that do not answer within timeout. It runs until
// ctx ends.
func (g *grpcAPI) detect(ctx context.Context, idle, timeout time.Duration) {
	t := time.NewTicker(max(idle/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, c := range g.snapshot() {
			if time.Since(time.UnixMilli(c.lastActive.Load())) < idle {
				continue
			}
			g.s.goFunc(func() { // counted: detect itself is, so this Add precedes the Wait
				rctx, cancel := context.WithTimeout(ctx, timeout)
				defer cancel()
				if _, err := c.call(rctx, "ClientDetectionRequest", map[string]any{"module": "internal"}); err != nil && ctx.Err() == nil {
					c.log.Warn("client does not answer ClientDetectionRequest; closing its connection", "err", err)
					c.kill()
				}
			})
		}
	}
}

// reset tells every client to reconnect elsewhere (ConnectResetRequest) and
// waits for their answers, at most until ctx ends. New connections are
// refused from then on.
func (g *grpcAPI) reset(ctx context.Context) {
	g.mu.Lock()
	g.closing = true
	g.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range g.snapshot() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = c.call(ctx, "ConnectResetRequest", map[string]any{"module": "internal", "serverIp": "", "serverPort": ""})
		}()
	}
	wg.Wait()
}

// killAll ends every connection.
func (g *grpcAPI) killAll() {
	for _, c := range g.snapshot() {
		c.kill()
	}
}

// maxSetupBody bounds the ConnectionSetupRequest body whose labels are
// read. gRPC's MaxRecvMsgSize (10 MiB, see Server.Start) applies to every
// message of a connection, batch registrations included, so it cannot be
// lowered for this one; a larger setup body is still accepted, but its
// labels are skipped unread (the registry would refuse them anyway: a label
// set holds at most Limits.MaxMetadataSize characters, 1024 by default,
// HardMaxMetadataSize 64 Ki at most).
const maxSetupBody = 64 << 10

// maxStreamsPerConn is the most gRPC streams a connection may have open at
// once (see Server.Start): with MaxRecvMsgSize, it bounds the request bytes
// one connection can make the server hold.
const maxStreamsPerConn = 128

// setupRequest is what nacosd reads of a ConnectionSetupRequest: the
// other fields a client may put in the body are skipped, not kept.
type setupRequest struct {
	ClientVersion string            `json:"clientVersion"`
	Tenant        string            `json:"tenant"`
	Labels        map[string]string `json:"labels"`
}

// decodeSetup decodes a ConnectionSetupRequest body; past maxSetupBody
// without its labels, which are then never built.
func decodeSetup(body []byte) (setupRequest, error) {
	var setup setupRequest
	if len(body) <= maxSetupBody {
		err := json.Unmarshal(body, &setup)
		return setup, err
	}
	var lite struct {
		ClientVersion string `json:"clientVersion"`
		Tenant        string `json:"tenant"`
	}
	err := json.Unmarshal(body, &lite)
	setup.ClientVersion, setup.Tenant = lite.ClientVersion, lite.Tenant
	return setup, err
}

// maxClip is how much of a client-given string (its IP, its SDK version) a
// connection keeps and logs.
const maxClip = 128

// clip cuts s to maxClip bytes, on a rune boundary.
func clip(s string) string {
	if len(s) <= maxClip {
		return s
	}
	i := maxClip
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

// sessionLabels are the labels of a connection's session: the client's
// own (Nacos's SDKs send "source", "module", "AppName" among them), its IP
// and its SDK version, as Nacos keeps them in a connection's meta.
func sessionLabels(setup *setupRequest, clientIP string) map[string]string {
	labels := make(map[string]string, len(setup.Labels)+2)
	for k, v := range setup.Labels {
		labels[k] = v
	}
	if clientIP != "" {
		labels["clientIp"] = clientIP
	}
	if setup.ClientVersion != "" {
		labels["clientVersion"] = setup.ClientVersion
	}
	return labels
}

// conn is one client connection.
type conn struct {
	g        *grpcAPI
	id       string
	addr     string
	clientIP string
	version  string
	nlabels  int // its session's labels, logged
	log      *slog.Logger
	stream   pb.BiRequestStream_RequestBiStreamServer
	sess     *registry.Session

	ctx    context.Context
	cancel context.CancelFunc

	lastActive atomic.Int64 // Unix ms
	sendMu     sync.Mutex
	reqSeq     atomic.Uint64

	mu      sync.Mutex
	pending map[string]chan answer
	subs    map[subKey]*subscription
	closed  bool

	rate   *rate.Limiter                   // its requests a second (limits.go)
	instMu sync.Mutex                      // orders its registrations, for insts and ninst
	insts  map[model.ServiceKey][]instAddr // sorted, distinct
	ninst  int                             // the instances of insts, accounted to its source IP
	wg     sync.WaitGroup
}

// instAddr is an instance key without its service: a connection's
// instances are kept by service.
type instAddr struct {
	cluster, ip string
	port        int
}

func addrOf(k model.InstanceKey) instAddr { return instAddr{k.Cluster, k.IP, k.Port} }

func (a instAddr) compare(b instAddr) int {
	if c := strings.Compare(a.cluster, b.cluster); c != 0 {
		return c
	}
	if c := strings.Compare(a.ip, b.ip); c != 0 {
		return c
	}
	return cmp.Compare(a.port, b.port)
}

type subKey struct {
	svc      model.ServiceKey
	clusters string
}

func newConn(g *grpcAPI, stream pb.BiRequestStream_RequestBiStreamServer, addr, clientIP string, setup *setupRequest, sess *registry.Session) *conn {
	ctx, cancel := context.WithCancel(context.Background())
	c := &conn{
		g: g, id: fmt.Sprintf("%d_%s_%d", time.Now().UnixMilli(), addr, g.seq.Add(1)), addr: addr,
		clientIP: clip(clientIP), version: clip(setup.ClientVersion), nlabels: len(sess.Labels()),
		log: g.log, stream: stream, sess: sess, ctx: ctx, cancel: cancel,
		pending: map[string]chan answer{},
		subs:    map[subKey]*subscription{},
		rate:    g.s.limits.newConnRate(), insts: map[model.ServiceKey][]instAddr{},
	}
	c.touch()
	return c
}

func (c *conn) touch() { c.lastActive.Store(time.Now().UnixMilli()) }

// kill ends the connection from the server's side.
func (c *conn) kill() { c.cancel() }

// close ends the subscriptions and, with endSession, the session (its
// instances leave), and waits for its deliveries (push.go).
func (c *conn) close(endSession bool) {
	c.cancel()
	c.mu.Lock()
	c.closed = true
	subs := c.subs
	c.subs = map[subKey]*subscription{}
	c.mu.Unlock()
	for _, s := range subs {
		c.unsubscribe(s)
	}
	if endSession {
		_ = c.sess.Close()
	}
	c.wg.Wait()
	c.instMu.Lock()
	c.g.s.limits.addInstances(c.addr, -c.ninst)
	c.ninst, c.insts = 0, nil
	c.instMu.Unlock()
}

// send writes one message, a *pb.Payload or a *rawPayload, to the stream
// (gRPC streams take one writer at a time).
func (c *conn) send(m any) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	return c.stream.SendMsg(m)
}

// call sends a server request on the stream and waits for the client's
// response with the same requestId.
func (c *conn) call(ctx context.Context, typ string, body map[string]any) (*pb.Payload, error) {
	return c.callRaw(ctx, nil, typ, func(id string) any {
		body["requestId"] = id
		return payload(typ, body)
	})
}

// callRaw is call with the message (a *pb.Payload or a *rawPayload) built
// by msg from the requestId; it also gives up when expired delivers (a
// timer a delivery reuses for each push, where a context with a deadline
// would cost a timer, a context and its registration with c.ctx each).
func (c *conn) callRaw(ctx context.Context, expired <-chan time.Time, typ string, msg func(id string) any) (*pb.Payload, error) {
	id := strconv.FormatUint(c.reqSeq.Add(1), 10)
	ch := make(chan answer, 1)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errors.New("connection closed")
	}
	c.pending[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}()
	if err := c.send(msg(id)); err != nil {
		return nil, err
	}
	select {
	case a := <-ch:
		if r := &a.r; r.ResultCode != codeOK && !r.Success {
			return nil, fmt.Errorf("client answered %s with code %d: %s", a.p.GetMetadata().GetType(), r.ErrorCode, r.Message)
		}
		return a.p, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("no answer to %s: %w", typ, ctx.Err())
	case <-expired:
		return nil, fmt.Errorf("no answer to %s: %w", typ, context.DeadlineExceeded)
	case <-c.ctx.Done():
		return nil, errors.New("connection closed")
	}
}

// answer is a client's response to a server request, decoded once.
type answer struct {
	p *pb.Payload
	r response
}

// onResponse routes a client's response to the call waiting for it.
func (c *conn) onResponse(p *pb.Payload) {
	var a answer
	if err := json.Unmarshal(p.GetBody().GetValue(), &a.r); err != nil {
		c.log.Warn("malformed message on the stream", "type", p.GetMetadata().GetType(), "err", err)
		return
	}
	a.p = p
	c.mu.Lock()
	ch := c.pending[a.r.RequestID]
	c.mu.Unlock()
	if ch != nil {
		select {
		case ch <- a:
		default:
		}
	}
}

// instance serves InstanceRequest (ephemeral, on the connection's session)
// and PersistentInstanceRequest.
func (c *conn) instance(ctx context.Context, req *nRequest, clientIP string, ephemeral bool) *pb.Payload {
	typ := "InstanceResponse"
	svc := serviceKey(req.Namespace, req.GroupName, req.ServiceName)
	inst := toModel(svc, req.Instance)
	inst.Ephemeral = ephemeral
	var err error
	switch req.Type {
	case "registerInstance":
		if err = checkPort(inst.Port); err != nil {
			break
		}
		if ephemeral {
			err = c.replace(ctx, svc, []model.Instance{inst})
		} else {
			err = c.g.s.reg.Register(ctx, inst)
		}
	case "deregisterInstance":
		if ephemeral {
			err = c.deregister(ctx, inst.Key())
		} else {
			err = c.g.s.reg.Deregister(ctx, inst.Key())
		}
	default:
		err = fmt.Errorf("%w: unknown request type %q (registerInstance or deregisterInstance)", model.ErrInvalid, req.Type)
	}
	if err != nil {
		code, msg := errCode(err)
		c.log.Info("instance request refused", "type", req.Type, "service", svc, "err", err)
		return errorPayload(req.RequestID, code, msg)
	}
	return okPayload(typ, req.RequestID)
}

// batch serves BatchInstanceRequest: the connection's instances of the
// service become exactly the batch.
func (c *conn) batch(ctx context.Context, req *nRequest) *pb.Payload {
	svc := serviceKey(req.Namespace, req.GroupName, req.ServiceName)
	var err error
	switch req.Type {
	case "batchRegisterInstance":
		insts := make([]model.Instance, 0, len(req.Instances))
		for _, in := range req.Instances {
			inst := toModel(svc, in)
			inst.Ephemeral = true
			if err = checkPort(inst.Port); err != nil {
				break
			}
			insts = append(insts, inst)
		}
		if err == nil {
			err = c.replace(ctx, svc, insts)
		}
	case "batchDeregisterInstance":
		for _, in := range req.Instances {
			if err = c.deregister(ctx, toModel(svc, in).Key()); err != nil {
				break
			}
		}
	default:
		err = fmt.Errorf("%w: unknown batch type %q", model.ErrInvalid, req.Type)
	}
	if err != nil {
		code, msg := errCode(err)
		c.log.Info("batch request refused", "service", svc, "err", err)
		return errorPayload(req.RequestID, code, msg)
	}
	return okPayload("BatchInstanceResponse", req.RequestID)
}

// replace makes insts the connection's instances of svc, as Nacos 2.x
// does for a registration (one publication per connection and service), in
// one step: subscribers never see a mix of the old and the new set.
// Its instances count against the per-client limits (limits.go).
func (c *conn) replace(ctx context.Context, svc model.ServiceKey, insts []model.Instance) error {
	svc = svc.WithDefaults()
	next := make([]instAddr, 0, len(insts))
	for _, in := range insts {
		next = append(next, addrOf(in.WithDefaults().Key()))
	}
	slices.SortFunc(next, instAddr.compare)
	next = slices.Compact(next)
	c.instMu.Lock()
	defer c.instMu.Unlock()
	if c.insts == nil {
		return errors.New("connection closed")
	}
	delta := len(next) - len(c.insts[svc])
	if err := c.g.s.limits.reserveInstances(c.addr, c.ninst, delta); err != nil {
		return err
	}
	if err := c.sess.ReplaceService(ctx, svc, insts); err != nil {
		c.g.s.limits.addInstances(c.addr, -delta)
		return err
	}
	c.ninst += delta
	if len(next) == 0 {
		delete(c.insts, svc)
	} else {
		c.insts[svc] = next
	}
	return nil
}

func (c *conn) deregister(ctx context.Context, key model.InstanceKey) error {
	key = key.WithDefaults()
	c.instMu.Lock()
	defer c.instMu.Unlock()
	if err := c.sess.Deregister(ctx, key); err != nil {
		return err
	}
	set := c.insts[key.Service]
	if i, ok := slices.BinarySearchFunc(set, addrOf(key), instAddr.compare); ok {
		set = slices.Delete(set, i, i+1)
		c.ninst--
		c.g.s.limits.addInstances(c.addr, -1)
		if len(set) == 0 {
			delete(c.insts, key.Service)
		} else {
			c.insts[key.Service] = set
		}
	}
	return nil
}

func (c *conn) query(ctx context.Context, req *nRequest) *pb.Payload {
	svc := serviceKey(req.Namespace, req.GroupName, req.ServiceName)
	q := model.Query{Service: svc, Clusters: splitClusters(req.Cluster), HealthyOnly: req.HealthyOnly}
	v, err := c.g.s.reg.Query(ctx, q)
	if err != nil {
		code, msg := errCode(err)
		return errorPayload(req.RequestID, code, msg)
	}
	type queryServiceResponse struct {
		response
		ServiceInfo nServiceInfo `json:"serviceInfo"`
	}
	si := serviceInfo(v, req.ServiceName, svc.Group, req.Cluster, c.g.s.ref.next())
	return payload("QueryServiceResponse", queryServiceResponse{ok(req.RequestID), si})
}

func (c *conn) list(ctx context.Context, req *nRequest) *pb.Payload {
	type serviceListResponse struct {
		response
		Count        int      `json:"count"`
		ServiceNames []string `json:"serviceNames"`
	}
	group := req.GroupName
	if group == "" {
		group = model.DefaultGroup
	}
	l, err := c.g.s.reg.ListServices(ctx, registry.ListOptions{Namespace: namespaceOf(req.Namespace), Group: group, Page: req.PageNo, PageSize: req.PageSize})
	if err != nil {
		code, msg := errCode(err)
		r := failed(req.RequestID, code, msg)
		return payload("ServiceListResponse", serviceListResponse{response: r, ServiceNames: []string{}})
	}
	names := make([]string, 0, len(l.Services))
	for _, s := range l.Services {
		names = append(names, s.Key.Name)
	}
	return payload("ServiceListResponse", serviceListResponse{ok(req.RequestID), l.Total, names})
}

type subscribeServiceResponse struct {
	response
	ServiceInfo nServiceInfo `json:"serviceInfo"`
}

// subscribe serves SubscribeServiceRequest: the subscription joins its
// topic (push.go), and every change is pushed to the client
// (NotifySubscriberRequest). The answer carries the view the subscription
// starts from, so the first push is the first change.
func (c *conn) subscribe(ctx context.Context, req *nRequest) *pb.Payload {
	svc := serviceKey(req.Namespace, req.GroupName, req.ServiceName).WithDefaults()
	key := subKey{svc: svc, clusters: req.Clusters}
	fail := func(err error) *pb.Payload {
		code, msg := errCode(err)
		return payload("SubscribeServiceResponse", subscribeServiceResponse{response: failed(req.RequestID, code, msg)})
	}
	if !req.Subscribe {
		c.mu.Lock()
		s := c.subs[key]
		delete(c.subs, key)
		c.mu.Unlock()
		if s != nil {
			c.unsubscribe(s)
		}
		return payload("SubscribeServiceResponse", subscribeServiceResponse{response: ok(req.RequestID)})
	}
	q := model.Query{Service: svc, Clusters: splitClusters(req.Clusters)}
	if err := q.Validate(); err != nil {
		return fail(err)
	}
	c.mu.Lock()
	existing := c.subs[key]
	have := len(c.subs)
	c.mu.Unlock()
	if existing != nil {
		v, err := c.g.s.reg.Query(ctx, q)
		if err != nil {
			return fail(err)
		}
		si := serviceInfo(v, req.ServiceName, svc.Group, req.Clusters, c.g.s.ref.next())
		return payload("SubscribeServiceResponse", subscribeServiceResponse{ok(req.RequestID), si})
	}
	if err := c.g.s.limits.checkSubs(c.addr, have); err != nil {
		return fail(err)
	}
	if err := c.g.s.subs.acquire(); err != nil {
		return fail(err)
	}
	s := &subscription{c: c, key: key}
	tk := topicKey{svc: svc, clusters: req.Clusters, name: req.ServiceName, namespace: req.Namespace}
	v, ref, err := c.g.s.hub.join(ctx, tk, q, s)
	if err != nil {
		c.g.s.subs.release()
		return fail(err)
	}
	c.mu.Lock()
	if lim := c.g.s.cfg.Limits.SubsPerConn; lim > 0 && len(c.subs) >= lim && c.subs[key] == nil {
		// Another subscription of this connection took the last place
		// meanwhile.
		c.mu.Unlock()
		c.unsubscribe(s)
		return fail(c.g.s.limits.checkSubs(c.addr, lim))
	}
	if c.closed || c.subs[key] != nil {
		c.mu.Unlock()
		c.unsubscribe(s)
	} else {
		c.subs[key] = s
		c.mu.Unlock()
	}
	return subscribeAnswer(req.RequestID, v, req.ServiceName, svc.Group, req.Clusters, ref)
}

// unsubscribe ends s, which is out of c.subs, and gives back its place.
func (c *conn) unsubscribe(s *subscription) {
	s.close()
	c.g.s.hub.leave(s)
	c.g.s.subs.release()
}

// subscribeAnswer is the SubscribeServiceResponse of a new subscription.
func subscribeAnswer(reqID string, v *model.ServiceView, name, group, clusters string, ref int64) *pb.Payload {
	b := make([]byte, 0, 256+len(v.Instances)*instanceJSONSize)
	b = append(b, `{"resultCode":200,"errorCode":0,"success":true,"requestId":`...)
	b = appendJSONString(b, reqID)
	b = append(b, `,"serviceInfo":`...)
	b = appendServiceInfo(b, v, name, group, clusters, ref)
	b = append(b, '}')
	return &pb.Payload{Metadata: &pb.Metadata{Type: "SubscribeServiceResponse"}, Body: &anypb.Any{Value: b}}
}
