package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nacos-group/nacos-sdk-go/v2/model"
	"github.com/nacos-group/nacos-sdk-go/v2/vo"
)

// v1List lists svc as a 1.x client that wants UDP pushes at udpPort.
func v1List(t testing.TB, s *Server, svc string, udpPort int) {
	t.Helper()
	resp, err := http.Get("http://" + s.HTTPAddr() + "/nacos/v1/ns/instance/list?serviceName=" + url.QueryEscape(svc) + "&udpPort=" + strconv.Itoa(udpPort))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("list %s: %s: %s", svc, resp.Status, b)
	}
}

// TestUDPSubscriptionsCapped: one host listing many services with udpPort
// set gets its answers, but subscribers, also for services that do not exist yet, at
// most Config.UDPSubsPerIP of them, and they take places in the limiter
// gRPC subscriptions share; a gRPC client still subscribes afterwards.
func TestUDPSubscriptionsCapped(t *testing.T) {
	const perIP = 4
	s := startServer(t, func(c *Config) {
		c.UDPSubsPerIP = perIP
		c.MaxSubscriptions = perIP + 1 // room for one gRPC subscription
	})
	for i := range 200 { // services that do not exist (yet): subscribed, up to the cap
		v1List(t, s, "nope-"+strconv.Itoa(i), 40000+i)
	}
	if n, held := s.udp.count(), s.subs.n.Load(); n != perIP || held != perIP {
		t.Fatalf("after listing unknown services: %d UDP subscribers, %d subscriptions held; want %d", n, held, perIP)
	}
	dropUDP(s)

	pub := newClient(t, s.HTTPAddr())
	for i := range 10 {
		register(t, pub, "udp-"+strconv.Itoa(i), "", "10.3.0.1", 80, 1)
	}
	register(t, pub, "grpc-watched", "", "10.3.0.2", 80, 1)
	for round := range 3 { // renewals do not count twice
		for i := range 10 {
			for port := range 5 { // nor do other ports of the same host escape the cap
				v1List(t, s, "udp-"+strconv.Itoa(i), 41000+port)
			}
		}
		if n, held := s.udp.count(), s.subs.n.Load(); n != perIP || held != perIP {
			t.Fatalf("round %d: %d UDP subscribers, %d subscriptions held; want %d", round, n, held, perIP)
		}
	}

	sub := newClient(t, s.HTTPAddr())
	got := make(chan []model.Instance, 16)
	err := sub.Subscribe(&vo.SubscribeParam{ServiceName: "grpc-watched", SubscribeCallback: func(hs []model.Instance, err error) {
		got <- hs
	}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case hs := <-got:
		if len(hs) != 1 {
			t.Fatalf("gRPC subscriber got %v, want one instance", hs)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the gRPC subscription never answered")
	}
	eventually(t, 5*time.Second, "the gRPC subscription holds the last place", func() bool {
		return s.subs.n.Load() == perIP+1
	})

	// Expired subscribers give their places back.
	left := dropUDP(s)
	if held := s.subs.n.Load(); left != 0 || held != 1 {
		t.Fatalf("after expiry: %d source IPs counted, %d subscriptions held; want 0 and 1 (gRPC's)", left, held)
	}
}

// dropUDP expires every UDP subscriber, and returns how many source IPs
// are still counted.
func dropUDP(s *Server) int {
	s.udp.mu.Lock()
	defer s.udp.mu.Unlock()
	for k, sb := range s.udp.subs {
		s.udp.dropLocked(k, sb)
	}
	return len(s.udp.perIP)
}

// TestUDPNoStaleResend: a subscriber that does not acknowledge is resent
// the push of an instance; once the instance leaves and the subscriber has
// been given the newer list, no packet with the instance reaches it again
// (the Node.js client applies any push it gets, older or not). A numeric
// acknowledgement ends the resends.
func TestUDPNoStaleResend(t *testing.T) {
	s := startServer(t, func(c *Config) { c.UDPAckTimeout = 100 * time.Millisecond; c.UDPPushRetries = 10 })
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	port := pc.LocalAddr().(*net.UDPAddr).Port
	v1List(t, s, "stale", port)
	form := url.Values{"serviceName": {"stale"}, "ip": {"10.5.0.1"}, "port": {"80"}}
	if st, body := call(t, s, "POST", "/nacos/v1/ns/instance", form); st != 200 {
		t.Fatalf("register: %d %s", st, body)
	}
	buf := make([]byte, 64<<10)
	read := func(d time.Duration) (string, bool) {
		_ = pc.SetReadDeadline(time.Now().Add(d))
		n, _, err := pc.ReadFrom(buf)
		if err != nil {
			return "", false
		}
		return string(buf[:n]), true
	}
	if msg, ok := read(5 * time.Second); !ok || !strings.Contains(msg, "10.5.0.1") {
		t.Fatalf("no push of the new instance: %q", msg)
	}
	// Unacknowledged, it is resent; now it leaves and the client lists.
	if st, body := call(t, s, "DELETE", "/nacos/v1/ns/instance", form); st != 200 {
		t.Fatalf("deregister: %d %s", st, body)
	}
	v1List(t, s, "stale", port)
	// The client now holds the list without the instance. A packet with it
	// may have been sent (and buffered here) before; after that, none.
	var stale int
	var sawEmpty bool
	for {
		msg, ok := read(time.Second) // ten resends' worth of the old push
		if !ok {
			break
		}
		if strings.Contains(msg, "10.5.0.1") {
			stale++
			continue
		}
		sawEmpty = true
		var p struct {
			LastRefTime int64 `json:"lastRefTime"`
		}
		_ = json.Unmarshal([]byte(msg), &p)
		ack, _ := json.Marshal(map[string]any{"type": "push-ack", "lastRefTime": p.LastRefTime, "data": ""}) // a number, as Node.js sends it
		if _, err := pc.WriteTo(ack, s.udp.conn.LocalAddr()); err != nil {
			t.Fatal(err)
		}
	}
	if stale > 1 {
		t.Fatalf("the older push was resent %d times after the client had the newer list", stale)
	}
	if !sawEmpty {
		t.Fatal("the removal was never pushed")
	}
	eventually(t, 5*time.Second, "the numeric acknowledgement is counted", func() bool {
		_, _, n := s.metrics.percentiles()
		return n >= 1
	})
}
