package main

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	mmodel "github.com/muster-io/muster/model"
	"github.com/nacos-group/nacos-sdk-go/v2/model"
	"github.com/nacos-group/nacos-sdk-go/v2/vo"
)

// served returns the instances the server holds for a service of the
// default group and namespace, with their real health (not the health
// served under the protection threshold).
func served(t testing.TB, s *Server, svc string) []mmodel.Instance {
	t.Helper()
	v, err := s.Registry().Query(context.Background(), mmodel.Query{Service: mmodel.ServiceKey{Name: svc}, IncludeDisabled: true})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]mmodel.Instance, len(v.Instances))
	for i, in := range v.Instances {
		in.Healthy = v.RealHealthy(i)
		out[i] = in
	}
	return out
}

func TestRegisterDeregister(t *testing.T) {
	s := startServer(t, nil)
	a, b := newClient(t, s.HTTPAddr()), newClient(t, s.HTTPAddr())
	register(t, a, "orders", "", "10.0.0.1", 8080, 1)
	register(t, b, "orders", "", "10.0.0.2", 8080, 1)
	if n := len(served(t, s, "orders")); n != 2 {
		t.Fatalf("server holds %d instances, want 2", n)
	}
	reader := newClient(t, s.HTTPAddr())
	hosts, err := reader.SelectAllInstances(vo.SelectAllInstancesParam{ServiceName: "orders"})
	if err != nil || len(hosts) != 2 {
		t.Fatalf("SelectAllInstances: %v, %v", hosts, err)
	}
	h := hosts[0]
	if h.Ip != "10.0.0.1" || h.Port != 8080 || h.ClusterName != "DEFAULT" || h.ServiceName != "DEFAULT_GROUP@@orders" ||
		h.Metadata["k"] != "v" || !h.Healthy || !h.Enable || !h.Ephemeral || h.Weight != 1 {
		t.Fatalf("instance as the client sees it: %+v", h)
	}

	ok, err := a.DeregisterInstance(vo.DeregisterInstanceParam{ServiceName: "orders", Ip: "10.0.0.1", Port: 8080, Ephemeral: true})
	if err != nil || !ok {
		t.Fatalf("deregister: %v %v", ok, err)
	}
	if got := served(t, s, "orders"); len(got) != 1 || got[0].IP != "10.0.0.2" {
		t.Fatalf("after deregister the server holds %v", got)
	}
	// The reader's cache follows through the push.
	eventually(t, 2*time.Second, "the reader's cache drops the deregistered instance", func() bool {
		hs, _ := reader.SelectAllInstances(vo.SelectAllInstancesParam{ServiceName: "orders"})
		return len(hs) == 1 && hs[0].Ip == "10.0.0.2"
	})

	// A second registration on one connection replaces its instance of
	// the service, as in Nacos 2.x.
	register(t, b, "orders", "", "10.0.0.3", 8080, 1)
	if got := served(t, s, "orders"); len(got) != 1 || got[0].IP != "10.0.0.3" {
		t.Fatalf("after re-registration the server holds %v", got)
	}
	// Closing a client ends its connection: its instances leave.
	b.CloseClient()
	eventually(t, 5*time.Second, "a closed client's instances leave", func() bool { return len(served(t, s, "orders")) == 0 })
}

func TestRefusals(t *testing.T) {
	s := startServer(t, nil)
	c := newClient(t, s.HTTPAddr())
	for _, p := range []vo.RegisterInstanceParam{
		{ServiceName: "bad", Ip: "10.0.0.1", Port: 0, Weight: 1, Enable: true, Healthy: true, Ephemeral: true},
		{ServiceName: "bad", Ip: "10.0.0.1", Port: 80, Weight: 1, ClusterName: "c-1.x", Enable: true, Healthy: true, Ephemeral: true},
		{ServiceName: "bad", Ip: "not an ip", Port: 80, Weight: 1, Enable: true, Healthy: true, Ephemeral: true},
	} {
		if ok, err := c.RegisterInstance(p); err == nil && ok {
			t.Errorf("register %+v succeeded", p)
		}
	}
	if n := len(served(t, s, "bad")); n != 0 {
		t.Fatalf("refused registrations left %d instances", n)
	}
}

func TestSelectWeightsHealthyClusters(t *testing.T) {
	s := startServer(t, nil)
	c1, c2, c3 := newClient(t, s.HTTPAddr()), newClient(t, s.HTTPAddr()), newClient(t, s.HTTPAddr())
	register(t, c1, "pay", "east", "10.0.0.1", 80, 1)
	register(t, c2, "pay", "east", "10.0.0.2", 80, 3)
	ok, err := c3.RegisterInstance(vo.RegisterInstanceParam{ServiceName: "pay", ClusterName: "west", Ip: "10.0.0.3", Port: 80,
		Weight: 1, Enable: true, Healthy: false, Ephemeral: true})
	if err != nil || !ok {
		t.Fatal(err)
	}
	reader := newClient(t, s.HTTPAddr())
	counts := map[string]int{}
	for range 400 {
		inst, err := reader.SelectOneHealthyInstance(vo.SelectOneHealthInstanceParam{ServiceName: "pay", Clusters: []string{"east"}})
		if err != nil {
			t.Fatal(err)
		}
		counts[inst.Ip]++
	}
	// Weights 1:3: expect about 100:300; 60..150 for the light one is
	// far beyond 5 sigma of a fair draw.
	if counts["10.0.0.1"] < 60 || counts["10.0.0.1"] > 150 || counts["10.0.0.3"] != 0 {
		t.Fatalf("picks with weights 1:3 in cluster east: %v", counts)
	}
	healthy, err := reader.SelectInstances(vo.SelectInstancesParam{ServiceName: "pay", HealthyOnly: true})
	if err != nil || len(healthy) != 2 {
		t.Fatalf("healthy instances: %v %v", healthy, err)
	}
	west, err := reader.SelectAllInstances(vo.SelectAllInstancesParam{ServiceName: "pay", Clusters: []string{"west"}})
	// Alone in its cluster, the unhealthy instance reaches the protection
	// threshold (0 healthy ≤ threshold 0) and is served as healthy, as in
	// Nacos.
	if err != nil || len(west) != 1 || west[0].Ip != "10.0.0.3" {
		t.Fatalf("cluster west: %v %v", west, err)
	}
	both, err := reader.SelectAllInstances(vo.SelectAllInstancesParam{ServiceName: "pay", Clusters: []string{"east", "west"}})
	if err != nil || len(both) != 3 || both[2].Ip != "10.0.0.3" || both[2].Healthy {
		t.Fatalf("clusters east,west: %v %v", both, err)
	}
	list, err := reader.GetAllServicesInfo(vo.GetAllServiceInfoParam{PageNo: 1, PageSize: 10})
	if err != nil || list.Count != 1 || len(list.Doms) != 1 || list.Doms[0] != "pay" {
		t.Fatalf("service list: %+v %v", list, err)
	}
}

func TestBatchRegister(t *testing.T) {
	s := startServer(t, nil)
	c := newClient(t, s.HTTPAddr())
	batch := func(ips ...string) {
		t.Helper()
		var insts []vo.RegisterInstanceParam
		for _, ip := range ips {
			insts = append(insts, vo.RegisterInstanceParam{Ip: ip, Port: 80, Weight: 1, Enable: true, Healthy: true, Ephemeral: true})
		}
		ok, err := c.BatchRegisterInstance(vo.BatchRegisterInstanceParam{ServiceName: "batch", Instances: insts})
		if err != nil || !ok {
			t.Fatalf("batch register: %v %v", ok, err)
		}
	}
	batch("10.0.0.1", "10.0.0.2", "10.0.0.3")
	if n := len(served(t, s, "batch")); n != 3 {
		t.Fatalf("after a batch of 3 the server holds %d", n)
	}
	batch("10.0.0.2", "10.0.0.4")
	got := served(t, s, "batch")
	var ips []string
	for _, i := range got {
		ips = append(ips, i.IP)
	}
	if strings.Join(ips, ",") != "10.0.0.2,10.0.0.4" {
		t.Fatalf("a second batch replaces the first: server holds %v", ips)
	}
}

// TestSubscribePush: each change reaches the subscriber's callback (the
// median within 100 ms on loopback; over 100 ms is logged as inconclusive
// under load, over 1 s fails), and the subscriber ends with the newest list.
func TestSubscribePush(t *testing.T) {
	s := startServer(t, nil)
	pub, sub := newClient(t, s.HTTPAddr()), newClient(t, s.HTTPAddr())
	register(t, pub, "watched", "", "10.0.0.1", 80, 1) // a push with no hosts is ignored by the client

	var mu sync.Mutex
	var seen [][]model.Instance
	changed := make(chan struct{}, 16)
	err := sub.Subscribe(&vo.SubscribeParam{ServiceName: "watched", SubscribeCallback: func(hs []model.Instance, err error) {
		mu.Lock()
		seen = append(seen, hs)
		mu.Unlock()
		changed <- struct{}{}
	}})
	if err != nil {
		t.Fatal(err)
	}
	select { // the subscription's first answer
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("no first callback")
	}
	other := newClient(t, s.HTTPAddr())
	var took []time.Duration
	for i := range 5 {
		start := time.Now()
		// Each registration on one connection replaces the previous one.
		register(t, other, "watched", "", "10.0.1."+strconv.Itoa(i+1), 80, 1)
		select {
		case <-changed:
			took = append(took, time.Since(start))
		case <-time.After(2 * time.Second):
			t.Fatalf("change %d never reached the callback", i)
		}
	}
	t.Logf("change to callback: %v", took)
	slices.Sort(took)
	switch med := took[len(took)/2]; {
	case med > time.Second:
		// Slower than Nacos's own 1 s sync delay: the immediate push path
		// is broken, not the machine slow.
		t.Fatalf("median time from a change to the subscriber's callback: %v (want ≤ 100 ms)", med)
	case med > 100*time.Millisecond:
		// Inconclusive: a loaded machine, not a broken path (the benchmark,
		// NACOSD_BENCH=1, measures push latency).
		t.Logf("median time from a change to the subscriber's callback: %v, over 100 ms: inconclusive under load", med)
	}
	// The SDK may run callbacks out of order, and more than one per change
	// (the loop above may have counted a repeat for the last change's): the
	// last replacement must come among them, beside the first instance.
	final := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.ContainsFunc(seen, func(hs []model.Instance) bool {
			return len(hs) == 2 && slices.ContainsFunc(hs, func(h model.Instance) bool { return h.Ip == "10.0.1.5" }) &&
				slices.ContainsFunc(hs, func(h model.Instance) bool { return h.Ip == "10.0.0.1" })
		})
	}
	for deadline := time.Now().Add(5 * time.Second); !final(); {
		if time.Now().After(deadline) {
			mu.Lock()
			t.Fatalf("callbacks %v: none holds 10.0.0.1 and the last replacement 10.0.1.5", seen)
		}
		select {
		case <-changed:
		case <-time.After(50 * time.Millisecond):
		}
	}
	// What the subscriber's cache ends with is the newest list: a stale push
	// after the last one would leave another replacement there.
	eventually(t, 2*time.Second, "the subscriber's cache holds the newest list", func() bool {
		hs, err := sub.SelectAllInstances(vo.SelectAllInstancesParam{ServiceName: "watched"})
		if err != nil || len(hs) != 2 {
			return false
		}
		ips := []string{hs[0].Ip, hs[1].Ip}
		slices.Sort(ips)
		return ips[0] == "10.0.0.1" && ips[1] == "10.0.1.5"
	})
	eventually(t, 2*time.Second, "the server counts the acknowledged pushes", func() bool {
		_, _, n := s.metrics.percentiles()
		return n >= 5
	})
}

// TestKilledClientLeaves runs a client in a child process, kills it with
// SIGKILL, and checks that its instances leave when the connection drops.
func TestKilledClientLeaves(t *testing.T) {
	skipUnderRace(t) // the child drives an SDK
	s := startServer(t, nil)
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildClient$")
	cmd.Env = append(os.Environ(), "NACOSD_CHILD_ADDR="+s.HTTPAddr())
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	eventually(t, 30*time.Second, "the child registers", func() bool { return len(served(t, s, "child")) == 1 })
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	eventually(t, 5*time.Second, "a killed client's instance leaves", func() bool { return len(served(t, s, "child")) == 0 })
	t.Logf("the killed client's instance left %v after SIGKILL", time.Since(start))
}

// TestChildClient is the child of TestKilledClientLeaves.
func TestChildClient(t *testing.T) {
	addr := os.Getenv("NACOSD_CHILD_ADDR")
	if addr == "" {
		t.Skip("run by TestKilledClientLeaves")
	}
	c := newClient(t, addr)
	register(t, c, "child", "", "10.9.9.9", 80, 1)
	select {} // until killed
}

// TestGroupedNameRefused: a gRPC request for serviceName "x@@bad" in
// DEFAULT_GROUP is refused (Nacos's 400); over HTTP a grouped name whose
// group is not groupName is refused too. (Through nacos-sdk-go v2, and its
// redo of the refused name: TestGroupedNameSDK.)
func TestGroupedNameRefused(t *testing.T) {
	s := startServer(t, nil)
	w := dialWire(t, s.GRPCAddr(), true)
	var r response
	if typ := w.call("SubscribeServiceRequest", map[string]any{"serviceName": "x@@bad", "groupName": "DEFAULT_GROUP", "subscribe": true}, &r); typ != "ErrorResponse" || r.ErrorCode != codeInvalidParam {
		t.Fatalf("subscribe to x@@bad: %s %+v", typ, r)
	}
	st, body := call(t, s, "POST", "/nacos/v1/ns/instance", url.Values{"serviceName": {"x@@bad"}, "groupName": {"DEFAULT_GROUP"}, "ip": {"10.2.0.1"}, "port": {"80"}})
	if st != 400 {
		t.Fatalf("HTTP x@@bad in DEFAULT_GROUP: %d %s", st, body)
	}
	if st, body := call(t, s, "POST", "/nacos/v1/ns/instance", url.Values{"serviceName": {"G@@ok"}, "groupName": {"G"}, "ip": {"10.2.0.1"}, "port": {"80"}}); st != 200 {
		t.Fatalf("HTTP G@@ok in G (as the 1.x SDKs send it): %d %s", st, body)
	}
}
