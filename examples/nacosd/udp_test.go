package main

import (
	"io"
	"net/http"
	"net/url"
	"strconv"
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
// set gets its answers, but subscribers only for services that exist, at
// most Config.UDPSubsPerIP of them, and they take places in the limiter
// gRPC subscriptions share; a gRPC client still subscribes afterwards.
func TestUDPSubscriptionsCapped(t *testing.T) {
	const perIP = 4
	s := startServer(t, func(c *Config) {
		c.UDPSubsPerIP = perIP
		c.MaxSubscriptions = perIP + 1 // room for one gRPC subscription
	})
	for i := range 200 { // services that do not exist: no subscriber at all
		v1List(t, s, "nope-"+strconv.Itoa(i), 40000+i)
	}
	if n, held := s.udp.count(), s.subs.n.Load(); n != 0 || held != 0 {
		t.Fatalf("after listing unknown services: %d UDP subscribers, %d subscriptions held; want 0", n, held)
	}

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
	s.udp.mu.Lock()
	for k, sb := range s.udp.subs {
		s.udp.dropLocked(k, sb)
	}
	left := len(s.udp.perIP)
	s.udp.mu.Unlock()
	if held := s.subs.n.Load(); left != 0 || held != 1 {
		t.Fatalf("after expiry: %d source IPs counted, %d subscriptions held; want 0 and 1 (gRPC's)", left, held)
	}
}
