package main

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/golang/protobuf/proto"
	anypb "github.com/golang/protobuf/ptypes/any"
	"github.com/muster-io/muster/model"
	pb "github.com/nacos-group/nacos-sdk-go/v2/api/grpc"
	"go.uber.org/goleak"
)

// pushView is a view with what the hand-written encoder must get right:
// escaping, metadata, fractional and integral weights, clusters,
// protection.
func pushView() *model.ServiceView {
	svc := model.ServiceKey{Namespace: "public", Group: "g<&>", Name: "svc \"q\" é\u2028"}
	a := model.NewInstance(svc, "10.0.0.1", 80)
	a.Weight, a.Healthy, a.Enabled, a.Ephemeral = 0.25, true, true, true
	a.Metadata = model.NewMetadata(map[string]string{"zone": "a<b>", "env": "prod", "k\"": "\x01"})
	b := model.NewInstance(svc, "10.0.0.2", 8080)
	b.Cluster = "EAST"
	b.Weight, b.Healthy, b.Enabled = 3, false, false
	big := model.NewInstance(svc, "10.0.0.3", 1)
	big.Weight = 1e21 // json.Marshal's exponent form
	return &model.ServiceView{Revision: 42, Protected: true, Instances: []model.Instance{a, b, big}}
}

// TestPushEncoding: the hand-built JSON of a push and of a subscription's
// answer is byte for byte what json.Marshal makes of the structs every
// other answer uses.
func TestPushEncoding(t *testing.T) {
	for _, v := range []*model.ServiceView{pushView(), {Revision: 1}} {
		want, err := json.Marshal(serviceInfo(v, "svc \"q\" é\u2028", "g<&>", "EAST,\tWEST", 1234))
		if err != nil {
			t.Fatal(err)
		}
		if got := appendServiceInfo(nil, v, "svc \"q\" é\u2028", "g<&>", "EAST,\tWEST", 1234); !bytes.Equal(got, want) {
			t.Fatalf("serviceInfo:\n got %s\nwant %s", got, want)
		}

		p := subscribeAnswer("r-7", v, "n", "DEFAULT_GROUP", "", 99)
		want, _ = json.Marshal(subscribeServiceResponse{ok("r-7"), serviceInfo(v, "n", "DEFAULT_GROUP", "", 99)})
		if got := p.GetBody().GetValue(); p.GetMetadata().GetType() != "SubscribeServiceResponse" || !bytes.Equal(got, want) {
			t.Fatalf("subscribe answer %s:\n got %s\nwant %s", p.GetMetadata().GetType(), got, want)
		}
	}
}

// TestOKPayload: the hand-built answer to a registration is json.Marshal's.
func TestOKPayload(t *testing.T) {
	for _, id := range []string{"", "17", "a\"b<\\>\u2028é\x01"} {
		want, _ := json.Marshal(ok(id))
		if p := okPayload("InstanceResponse", id); p.GetMetadata().GetType() != "InstanceResponse" || !bytes.Equal(p.GetBody().GetValue(), want) {
			t.Errorf("%q:\n got %s %s\nwant %s", id, p.GetMetadata().GetType(), p.GetBody().GetValue(), want)
		}
	}
}

// TestRawPayload: a push sent in parts is the wire encoding of the
// Payload it stands for, and the codec sends it unchanged.
func TestRawPayload(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 300) // lengths past one varint byte
	for _, typ := range []string{"NotifySubscriberRequest", ""} {
		r := newRawPayload(typ, body, []byte(`,"requestId":"12345"}`))
		want, err := proto.Marshal(&pb.Payload{
			Metadata: &pb.Metadata{Type: typ},
			Body:     &anypb.Any{Value: slices.Concat(body, []byte(`,"requestId":"12345"}`))}})
		if err != nil {
			t.Fatal(err)
		}
		out, err := newPushCodec().Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := out.Materialize(); !bytes.Equal(got, want) {
			t.Fatalf("%q: rawPayload encodes as\n %x\nwant\n %x", typ, got, want)
		}
		var back pb.Payload
		if err := newPushCodec().Unmarshal(out, &back); err != nil || back.GetMetadata().GetType() != typ || len(back.GetBody().GetValue()) != 321 {
			t.Fatalf("%q: decoded %v %v", typ, &back, err)
		}
	}
	// Any other message goes through the proto codec.
	p := &pb.Payload{Metadata: &pb.Metadata{Type: "T", ClientIp: "1.2.3.4"}}
	out, err := newPushCodec().Marshal(p)
	if want, _ := proto.Marshal(p); err != nil || !bytes.Equal(out.Materialize(), want) {
		t.Fatalf("proto message: %x %v, want %x", out.Materialize(), err, want)
	}
}

// TestTopicShared: subscribers of one service on a node share one registry
// watch, each gets every push (one encoding, its own requestId) with a
// lastRefTime past its subscription's; the watch ends with the last
// subscriber, and no delivery goroutine outlives the server.
func TestTopicShared(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := startServer(t, nil)
	pub := dialWire(t, s.GRPCAddr(), true)
	var r response
	pub.call("InstanceRequest", map[string]any{"serviceName": "ts", "type": "registerInstance", "instance": inst("10.0.0.1", 80)}, &r)
	if !r.Success {
		t.Fatalf("register: %+v", r)
	}
	subs := []*wireClient{dialWire(t, s.GRPCAddr(), true), dialWire(t, s.GRPCAddr(), true), dialWire(t, s.GRPCAddr(), true)}
	refs := make([]int64, len(subs))
	for i, sub := range subs {
		var sr subscribeServiceResponse
		sub.call("SubscribeServiceRequest", map[string]any{"serviceName": "ts", "subscribe": true, "clusters": ""}, &sr)
		if !sr.Success || len(sr.ServiceInfo.Hosts) != 1 {
			t.Fatalf("subscribe %d: %+v", i, sr)
		}
		refs[i] = sr.ServiceInfo.LastRefTime
	}
	if n := s.reg.Counts().Watchers; n != 1 {
		t.Fatalf("%d registry watchers for 3 subscriptions of one service, want 1", n)
	}
	if n := s.subs.n.Load(); n != 3 {
		t.Fatalf("subscribeCount %d, want 3", n)
	}

	pub.call("InstanceRequest", map[string]any{"serviceName": "ts", "type": "registerInstance", "instance": inst("10.0.0.2", 80)}, &r)
	var bodies [][]byte
	for i, sub := range subs {
		b := sub.next("NotifySubscriberRequest", 5*time.Second).GetBody().GetValue()
		var push struct {
			RequestID   string       `json:"requestId"`
			ServiceName string       `json:"serviceName"`
			ServiceInfo nServiceInfo `json:"serviceInfo"`
		}
		if err := json.Unmarshal(b, &push); err != nil {
			t.Fatal(err)
		}
		if push.ServiceName != "ts" || len(push.ServiceInfo.Hosts) != 1 || push.ServiceInfo.Hosts[0].IP != "10.0.0.2" || push.ServiceInfo.LastRefTime <= refs[i] {
			t.Fatalf("push %d: %+v (subscribed at lastRefTime %d)", i, push, refs[i])
		}
		if push.RequestID == "" {
			t.Fatalf("push %d has no requestId", i)
		}
		bodies = append(bodies, b[:bytes.LastIndex(b, []byte(`,"requestId"`))])
	}
	if !bytes.Equal(bodies[0], bodies[1]) || !bytes.Equal(bodies[0], bodies[2]) {
		t.Fatalf("subscribers of one topic got different pushes:\n%s\n%s", bodies[0], bodies[2])
	}
	eventually(t, 5*time.Second, "the pushes are acknowledged", func() bool { _, _, n := s.metrics.percentiles(); return n >= 3 })

	// Unsubscribing keeps the watch while a subscriber is left; the last
	// one ends it.
	for i, sub := range subs {
		var sr subscribeServiceResponse
		sub.call("SubscribeServiceRequest", map[string]any{"serviceName": "ts", "subscribe": false, "clusters": ""}, &sr)
		if !sr.Success {
			t.Fatalf("unsubscribe %d: %+v", i, sr)
		}
		want := 1
		if i == len(subs)-1 {
			want = 0
		}
		eventually(t, 5*time.Second, "the watch follows the subscribers", func() bool { return s.reg.Counts().Watchers == want })
	}
	if n := s.subs.n.Load(); n != 0 {
		t.Fatalf("subscribeCount %d after unsubscribing, want 0", n)
	}
	for _, c := range append(subs, pub) {
		c.close()
	}
	_ = s.Close()
}

// TestPushRetry: a push the client does not acknowledge is sent again,
// PushRetries times in all, with the same lastRefTime and a new requestId
// each time, and then given up; a change that comes while a push is being
// retried supersedes it: the retries carry the newer view.
func TestPushRetry(t *testing.T) {
	s := startServer(t, func(c *Config) { c.PushTimeout, c.PushRetries = 300*time.Millisecond, 3 })
	pub := dialWire(t, s.GRPCAddr(), true)
	register := func(ip string) {
		t.Helper()
		var r response
		pub.call("InstanceRequest", map[string]any{"serviceName": "rt", "type": "registerInstance", "instance": inst(ip, 80)}, &r)
		if !r.Success {
			t.Fatalf("register %s: %+v", ip, r)
		}
	}
	register("10.0.0.1")
	sub := dialWire(t, s.GRPCAddr(), true)
	var sr subscribeServiceResponse
	sub.call("SubscribeServiceRequest", map[string]any{"serviceName": "rt", "subscribe": true, "clusters": ""}, &sr)
	if !sr.Success {
		t.Fatalf("subscribe: %+v", sr)
	}
	sub.ack.Store(false)
	type push struct {
		RequestID   string       `json:"requestId"`
		ServiceInfo nServiceInfo `json:"serviceInfo"`
	}
	// pushes collects the pushes that arrive until none has for quiet.
	pushes := func(first *push, quiet time.Duration) []push {
		t.Helper()
		got := []push{}
		if first != nil {
			got = append(got, *first)
		}
		for {
			select {
			case p := <-sub.in:
				var x push
				if err := json.Unmarshal(p.GetBody().GetValue(), &x); err != nil {
					t.Fatal(err)
				}
				got = append(got, x)
			case <-time.After(quiet):
				return got
			}
		}
	}
	ip := func(p push) string {
		if len(p.ServiceInfo.Hosts) != 1 {
			return ""
		}
		return p.ServiceInfo.Hosts[0].IP
	}

	register("10.0.0.2")
	got := pushes(nil, 2*time.Second)
	if len(got) != 3 {
		t.Fatalf("%d pushes of an unacknowledged change, want 3 (PushRetries): %+v", len(got), got)
	}
	for i, p := range got {
		if ip(p) != "10.0.0.2" || p.ServiceInfo.LastRefTime != got[0].ServiceInfo.LastRefTime || (i > 0 && p.RequestID == got[i-1].RequestID) {
			t.Fatalf("attempt %d: %+v (first %+v): want the same change and lastRefTime, a new requestId", i+1, p, got[0])
		}
	}

	register("10.0.0.3")
	var first push
	if err := json.Unmarshal(sub.next("NotifySubscriberRequest", 5*time.Second).GetBody().GetValue(), &first); err != nil {
		t.Fatal(err)
	}
	register("10.0.0.4") // while the push of 10.0.0.3 waits for its answer
	got = pushes(&first, 2*time.Second)
	if len(got) != 3 || ip(got[0]) != "10.0.0.3" || ip(got[1]) != "10.0.0.4" || ip(got[2]) != "10.0.0.4" ||
		got[1].ServiceInfo.LastRefTime <= got[0].ServiceInfo.LastRefTime {
		t.Fatalf("pushes %+v: want 10.0.0.3 once, then its retries superseded by 10.0.0.4 with a newer lastRefTime", got)
	}

	sub.ack.Store(true)
	register("10.0.0.5")
	if got = pushes(nil, time.Second); len(got) != 1 || ip(got[0]) != "10.0.0.5" {
		t.Fatalf("an acknowledged push: %+v, want 10.0.0.5 once", got)
	}
}
