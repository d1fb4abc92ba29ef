package main

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// Pushes to 2.x subscribers. The subscriptions of one node that ask for the
// same thing (service, clusters, and the names the client echoes back) share
// one topic: one registry watch, one goroutine, and one encoding of each
// change, whose bytes every subscriber's NotifySubscriberRequest carries
// with only its requestId appended. A subscription holds no goroutine of
// its own: one runs while it has a push to deliver, and ends once the push
// is acknowledged (or given up) and no newer one is waiting.

// topicKey is what the subscriptions of a topic share: everything a push
// carries but its requestId.
type topicKey struct {
	svc       model.ServiceKey // with defaults: what is watched
	clusters  string           // as the client sent them (echoed)
	name      string           // the service name as the client sent it (echoed)
	namespace string           // as the client sent it (echoed)
}

// pushHub holds a node's topics.
type pushHub struct {
	s      *Server
	mu     sync.Mutex
	topics map[topicKey]*topic
}

func newPushHub(s *Server) *pushHub { return &pushHub{s: s, topics: map[topicKey]*topic{}} }

// topic is one watch and its subscribers.
type topic struct {
	hub    *pushHub
	key    topicKey
	w      *registry.Watcher
	cancel context.CancelFunc

	mu   sync.Mutex
	subs map[*subscription]struct{}
	cur  *model.ServiceView // the newest view (its push is not kept: the subscriptions hold it until delivered)
	gone bool               // out of hub.topics: no one joins it
	buf  []*subscription
}

// pushMsg is one change as every subscriber of a topic gets it.
type pushMsg struct {
	// body is the NotifySubscriberRequest body but its requestId and
	// closing brace: `{"module":…,"serviceInfo":{…}`.
	body []byte
}

// join adds sub to the topic of key, starting the topic's watch when there
// is none, and returns the view the subscription starts from and the
// lastRefTime to answer it with: every push sub gets later carries a newer
// view and a greater lastRefTime.
func (h *pushHub) join(ctx context.Context, key topicKey, q model.Query, sub *subscription) (*model.ServiceView, int64, error) {
	h.mu.Lock()
	t := h.topics[key]
	if t == nil {
		var err error
		if t, err = h.open(ctx, key, q); err != nil {
			h.mu.Unlock()
			return nil, 0, err
		}
		h.topics[key] = t
	}
	t.mu.Lock()
	h.mu.Unlock()
	t.subs[sub] = struct{}{}
	sub.topic = t
	v := t.cur
	ref := h.s.ref.next() // under t.mu: before the lastRefTime of any later push
	t.mu.Unlock()
	return v, ref, nil
}

// open starts the watch of a new topic; the caller holds h.mu.
func (h *pushHub) open(ctx context.Context, key topicKey, q model.Query) (*topic, error) {
	wctx, cancel := context.WithCancel(h.s.ctx)
	w, err := h.s.reg.Watch(wctx, q)
	if err != nil {
		cancel()
		return nil, err
	}
	u, err := w.Next(ctx) // the first view: at once
	if err != nil {
		cancel()
		w.Close()
		return nil, err
	}
	t := &topic{hub: h, key: key, w: w, cancel: cancel, subs: map[*subscription]struct{}{}, cur: u.View}
	h.s.goFunc(func() { t.run(wctx) })
	return t, nil
}

// leave takes sub out of its topic; the last one out ends the topic's
// watch.
func (h *pushHub) leave(sub *subscription) {
	t := sub.topic
	if t == nil {
		return
	}
	h.mu.Lock()
	t.mu.Lock()
	delete(t.subs, sub)
	last := len(t.subs) == 0 && !t.gone
	if last {
		t.gone = true
		if h.topics[t.key] == t {
			delete(h.topics, t.key)
		}
	}
	t.mu.Unlock()
	h.mu.Unlock()
	if last {
		t.cancel()
	}
}

// run hands every change of the watch to the topic's subscribers until the
// topic ends (its last subscriber left, or the server closes).
func (t *topic) run(ctx context.Context) {
	defer t.w.Close()
	defer t.retire()
	for {
		u, err := t.w.Next(ctx)
		if err != nil {
			return
		}
		t.mu.Lock()
		m := t.encode(u.View) // under mu: its lastRefTime follows every join's
		t.cur = u.View
		subs := t.buf[:0]
		for s := range t.subs {
			subs = append(subs, s)
		}
		t.mu.Unlock()
		for _, s := range subs {
			s.offer(m)
		}
		clear(subs)
		t.buf = subs[:0]
	}
}

// retire takes an ended topic out of the hub, so that a new subscription
// opens a new watch rather than join one that no longer delivers.
func (t *topic) retire() {
	t.hub.mu.Lock()
	t.mu.Lock()
	t.gone = true
	if t.hub.topics[t.key] == t {
		delete(t.hub.topics, t.key)
	}
	t.mu.Unlock()
	t.hub.mu.Unlock()
}

// encode builds the push of view v, with a fresh lastRefTime.
func (t *topic) encode(v *model.ServiceView) *pushMsg {
	k := &t.key
	b := make([]byte, 0, 256+len(v.Instances)*instanceJSONSize)
	b = append(b, `{"module":"naming","namespace":`...)
	b = appendJSONString(b, k.namespace)
	b = append(b, `,"serviceName":`...)
	b = appendJSONString(b, k.name)
	b = append(b, `,"groupName":`...)
	b = appendJSONString(b, k.svc.Group)
	b = append(b, `,"serviceInfo":`...)
	b = appendServiceInfo(b, v, k.name, k.svc.Group, k.clusters, t.hub.s.ref.next())
	return &pushMsg{body: b}
}

// message is the push to one subscriber: the Payload whose body is the
// shared body with the requestId appended, encoded around the shared
// bytes rather than copying them (pushCodec).
func (m *pushMsg) message(id string) any {
	tail := make([]byte, 0, 40)
	tail = append(tail, `,"requestId":`...)
	tail = strconv.AppendQuote(tail, id) // digits: no escaping needed
	tail = append(tail, '}')
	return newRawPayload("NotifySubscriberRequest", m.body, tail)
}

// rawPayload is a Payload{Metadata: {Type}, Body: Any{Value: body+tail}}
// in its wire encoding, in three parts, so that a body shared by many
// messages is sent as it is.
type rawPayload struct{ head, body, tail []byte }

// newRawPayload encodes the Payload of type typ around body and tail.
func newRawPayload(typ string, body, tail []byte) *rawPayload {
	n := len(body) + len(tail)
	meta := 0 // proto3 leaves out an empty string
	if typ != "" {
		meta = 1 + protowire.SizeBytes(len(typ)) // Metadata.type (3)
	}
	anyLen := 1 + protowire.SizeBytes(n) // Any.value (2)
	head := make([]byte, 0, 32+len(typ))
	head = protowire.AppendTag(head, 2, protowire.BytesType) // Payload.metadata
	head = protowire.AppendVarint(head, uint64(meta))
	if typ != "" {
		head = protowire.AppendTag(head, 3, protowire.BytesType)
		head = protowire.AppendString(head, typ)
	}
	head = protowire.AppendTag(head, 3, protowire.BytesType) // Payload.body
	head = protowire.AppendVarint(head, uint64(anyLen))
	head = protowire.AppendTag(head, 2, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(n))
	return &rawPayload{head: head, body: body, tail: tail}
}

// pushCodec is gRPC's proto codec, but for a rawPayload, which it sends
// as it is: a push's body, shared by every subscriber of its topic, is
// neither copied per subscriber nor marshalled again.
type pushCodec struct{ proto encoding.CodecV2 }

func newPushCodec() pushCodec { return pushCodec{encoding.GetCodecV2(grpcproto.Name)} }

func (c pushCodec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*rawPayload); ok {
		return mem.BufferSlice{mem.SliceBuffer(r.head), mem.SliceBuffer(r.body), mem.SliceBuffer(r.tail)}, nil
	}
	return c.proto.Marshal(v)
}

func (c pushCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

func (c pushCodec) Name() string { return c.proto.Name() }

// subscription is one SubscribeServiceRequest of a connection.
type subscription struct {
	c     *conn
	key   subKey
	topic *topic // set by join

	mu      sync.Mutex
	next    *pushMsg // the newest push not yet sent
	running bool     // a goroutine is delivering
	closed  bool
}

// offer makes m the subscription's next push, superseding one not yet
// sent, and starts a delivery when none is under way.
func (s *subscription) offer(m *pushMsg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.next = m
	if s.running {
		return
	}
	// A subscription joins its topic before its connection holds it: the
	// connection may be closing, and its Wait must not miss this
	// delivery. close sets c.closed before it waits.
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	s.running = true
	c.wg.Add(1)
	go s.deliver()
}

// close stops the subscription's pushes; a delivery under way ends at its
// next step.
func (s *subscription) close() {
	s.mu.Lock()
	s.closed = true
	s.next = nil
	s.mu.Unlock()
}

// take returns the push to send next, or nil (and the delivery ends).
func (s *subscription) take() *pushMsg {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.next
	s.next = nil
	if m == nil || s.closed {
		s.running = false
		return nil
	}
	return m
}

// deliver sends the subscription's pushes until none is waiting. A push is
// retried until the client acknowledges it, PushRetries times at most; a
// newer one that arrives meanwhile supersedes it.
func (s *subscription) deliver() {
	c := s.c
	cfg := &c.g.s.cfg
	defer c.wg.Done()
	var expiry *time.Timer // one for the delivery's pushes
	defer func() {
		if expiry != nil {
			expiry.Stop()
		}
	}()
	for m := s.take(); m != nil; m = s.take() {
		for attempt := 0; ; attempt++ {
			start := time.Now()
			if expiry == nil {
				expiry = time.NewTimer(cfg.PushTimeout)
			} else {
				expiry.Reset(cfg.PushTimeout) // no stale expiry is received after Reset (Go 1.23 timers)
			}
			_, err := c.callRaw(c.ctx, expiry.C, "NotifySubscriberRequest", m.message)
			if err == nil {
				c.g.s.metrics.push(time.Since(start))
				break
			}
			if c.ctx.Err() != nil {
				s.stop()
				return
			}
			c.g.s.metrics.pushFailed()
			c.log.Warn("push not acknowledged; retrying", "service", s.key.svc, "attempt", attempt+1, "err", err)
			if attempt+1 >= cfg.PushRetries {
				break // the next update, or the client's own query, brings it up to date
			}
			t := time.NewTimer(time.Duration(attempt+1) * 100 * time.Millisecond)
			select {
			case <-c.ctx.Done():
				t.Stop()
				s.stop()
				return
			case <-t.C:
			}
			s.mu.Lock()
			if s.closed {
				s.running = false
				s.mu.Unlock()
				return
			}
			if s.next != nil { // superseded
				m, s.next = s.next, nil
			}
			s.mu.Unlock()
		}
	}
}

// stop ends a delivery whose connection closed.
func (s *subscription) stop() {
	s.mu.Lock()
	s.running = false
	s.mu.Unlock()
}

// appendServiceInfo appends v as Nacos's ServiceInfo JSON, as
// json.Marshal(serviceInfo(v, name, group, clusters, ref)) would, without
// building the intermediate values.
func appendServiceInfo(b []byte, v *model.ServiceView, name, group, clusters string, ref int64) []byte {
	b = append(b, `{"name":`...)
	b = appendJSONString(b, name)
	b = append(b, `,"groupName":`...)
	b = appendJSONString(b, group)
	b = append(b, `,"clusters":`...)
	b = appendJSONString(b, clusters)
	b = append(b, `,"cacheMillis":10000,"hosts":[`...)
	for i, inst := range v.Instances {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendInstance(b, inst)
	}
	b = append(b, `],"lastRefTime":`...)
	b = strconv.AppendInt(b, ref, 10)
	b = append(b, `,"checksum":"`...)
	b = strconv.AppendUint(b, v.Revision, 10)
	b = append(b, `","allIPs":false,"reachProtectionThreshold":`...)
	b = strconv.AppendBool(b, v.Protected)
	return append(b, `,"valid":true}`...)
}

// instanceJSONSize is what a service's JSON buffer is first sized with,
// an instance (appendInstance writes about 330 bytes for one without
// metadata, so the buffer of a large service grows once). Sized at 384,
// the buffers grew no more, but the benchmark's server heap after
// subscribing grew by 1.7 KiB a connection (measured, not understood: no
// buffer is kept), so it stays at the size the pushes were measured with.
const instanceJSONSize = 320

// appendInstance appends inst as fromModel(inst, inst.Healthy) marshals.
func appendInstance(b []byte, inst model.Instance) []byte {
	n := fromModel(inst, inst.Healthy)
	b = append(b, `{"instanceId":`...)
	b = appendJSONString(b, n.InstanceID)
	b = append(b, `,"ip":`...)
	b = appendJSONString(b, n.IP)
	b = append(b, `,"port":`...)
	b = strconv.AppendInt(b, int64(n.Port), 10)
	b = append(b, `,"weight":`...)
	b = appendJSONFloat(b, n.Weight)
	b = append(b, `,"healthy":`...)
	b = strconv.AppendBool(b, n.Healthy)
	b = append(b, `,"enabled":`...)
	b = strconv.AppendBool(b, n.Enabled)
	b = append(b, `,"ephemeral":`...)
	b = strconv.AppendBool(b, n.Ephemeral)
	b = append(b, `,"clusterName":`...)
	b = appendJSONString(b, n.ClusterName)
	b = append(b, `,"serviceName":`...)
	b = appendJSONString(b, n.ServiceName)
	b = append(b, `,"metadata":`...)
	if len(n.Metadata) == 0 {
		b = append(b, "{}"...)
	} else {
		md, err := json.Marshal(n.Metadata) // sorted keys, as json.Marshal gives them
		if err != nil {                     // a map of strings always marshals
			panic(err)
		}
		b = append(b, md...)
	}
	b = append(b, `,"instanceHeartBeatInterval":`...)
	b = strconv.AppendInt(b, n.InstanceHeartBeatInterval, 10)
	b = append(b, `,"ipDeleteTimeout":`...)
	b = strconv.AppendInt(b, n.IPDeleteTimeout, 10)
	b = append(b, `,"instanceHeartBeatTimeOut":`...)
	b = strconv.AppendInt(b, n.InstanceHeartBeatTimeOut, 10)
	return append(b, '}')
}

// appendJSONString appends s as json.Marshal quotes it.
func appendJSONString(b []byte, s string) []byte {
	simple := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			simple = false
			break
		}
	}
	if simple {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	q, err := json.Marshal(s)
	if err != nil { // a string always marshals
		panic(err)
	}
	return append(b, q...)
}

// appendJSONFloat appends f as json.Marshal formats a float64.
func appendJSONFloat(b []byte, f float64) []byte {
	q, err := json.Marshal(f)
	if err != nil { // NaN or ±Inf: the registry refuses such weights
		panic(err)
	}
	return append(b, q...)
}
