package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	mmodel "github.com/muster-io/muster/model"
	v1clients "github.com/nacos-group/nacos-sdk-go/clients"
	v1naming "github.com/nacos-group/nacos-sdk-go/clients/naming_client"
	v1constant "github.com/nacos-group/nacos-sdk-go/common/constant"
	v1model "github.com/nacos-group/nacos-sdk-go/model"
	"github.com/nacos-group/nacos-sdk-go/v2/vo"
	v1vo "github.com/nacos-group/nacos-sdk-go/vo"
	"github.com/prometheus/common/expfmt"
	pmodel "github.com/prometheus/common/model"
)

// newV1Client returns a nacos-sdk-go v1.0.8 (HTTP) naming client. That
// version cannot be closed: its beat and poll goroutines run until the
// process ends, so tests give each client services of their own.
func newV1Client(t testing.TB, addr string) v1naming.INamingClient {
	t.Helper()
	skipUnderRace(t)
	dir := clientDir(t)
	c, err := v1clients.NewNamingClient(v1vo.NacosClientParam{
		ClientConfig: &v1constant.ClientConfig{
			TimeoutMs: 3000, NotLoadCacheAtStart: true, LogDir: dir, CacheDir: dir, LogLevel: "error",
		},
		ServerConfigs: []v1constant.ServerConfig{*v1constant.NewServerConfig("127.0.0.1", httpPort(t, addr))},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func v1Register(t testing.TB, c v1naming.INamingClient, svc, cluster, ip string, port uint64, weight float64, md map[string]string) {
	t.Helper()
	ok, err := c.RegisterInstance(v1vo.RegisterInstanceParam{ServiceName: svc, ClusterName: cluster, Ip: ip, Port: port,
		Weight: weight, Enable: true, Healthy: true, Ephemeral: true, Metadata: md})
	if err != nil || !ok {
		t.Fatalf("v1 register %s:%d: %v %v", ip, port, ok, err)
	}
}

func TestV1RegisterSelectDeregister(t *testing.T) {
	s := startServer(t, nil)
	c := newV1Client(t, s.HTTPAddr())
	v1Register(t, c, "v1-shop", "a", "10.1.0.1", 80, 1, nil)
	v1Register(t, c, "v1-shop", "a", "10.1.0.2", 80, 3, nil)
	v1Register(t, c, "v1-shop", "b", "10.1.0.3", 80, 1, nil)
	if n := len(served(t, s, "v1-shop")); n != 3 {
		t.Fatalf("server holds %d instances, want 3", n)
	}
	counts := map[string]int{}
	for range 400 {
		inst, err := c.SelectOneHealthyInstance(v1vo.SelectOneHealthInstanceParam{ServiceName: "v1-shop", Clusters: []string{"a"}})
		if err != nil {
			t.Fatal(err)
		}
		counts[inst.Ip]++
	}
	if counts["10.1.0.1"] < 60 || counts["10.1.0.1"] > 150 || counts["10.1.0.3"] != 0 {
		t.Fatalf("picks with weights 1:3 in cluster a: %v", counts)
	}
	hs, err := c.SelectAllInstances(v1vo.SelectAllInstancesParam{ServiceName: "v1-shop"})
	if err != nil || len(hs) != 3 {
		t.Fatalf("all instances: %v %v", hs, err)
	}
	healthy, err := c.SelectInstances(v1vo.SelectInstancesParam{ServiceName: "v1-shop", HealthyOnly: true, Clusters: []string{"b"}})
	if err != nil || len(healthy) != 1 || healthy[0].Ip != "10.1.0.3" {
		t.Fatalf("healthy in b: %v %v", healthy, err)
	}
	list, err := c.GetAllServicesInfo(v1vo.GetAllServiceInfoParam{PageNo: 1, PageSize: 10})
	if err != nil || list.Count != 1 || len(list.Doms) != 1 || list.Doms[0] != "v1-shop" {
		t.Fatalf("service list: %+v %v", list, err)
	}
	// The SDK beats each instance once as it registers it, from a goroutine
	// of its own. A beat that comes after the deregistration registers the
	// instance again (Nacos 1.x does the same with a beat's instance), so
	// wait for the three first beats (a loaded CI machine delayed one).
	eventually(t, 5*time.Second, "the SDK's first beat of each instance", func() bool { return s.beats.Load() >= 3 })
	ok, err := c.DeregisterInstance(v1vo.DeregisterInstanceParam{ServiceName: "v1-shop", Cluster: "a", Ip: "10.1.0.1", Port: 80, Ephemeral: true})
	if err != nil || !ok {
		t.Fatalf("deregister: %v %v", ok, err)
	}
	if n := len(served(t, s, "v1-shop")); n != 2 {
		t.Fatalf("after deregister the server holds %d, want 2", n)
	}
	// The client learns of it by UDP push (or its own poll).
	eventually(t, 5*time.Second, "the client's cache drops the deregistered instance", func() bool {
		hs, _ := c.SelectAllInstances(v1vo.SelectAllInstancesParam{ServiceName: "v1-shop"})
		return len(hs) == 2
	})
}

// udpState describes s's UDP pushes for a failure message: the
// subscribers' addresses, and pushes acknowledged and given up.
func udpState(s *Server) string {
	s.udp.mu.Lock()
	var addrs []string
	for _, sub := range s.udp.subs {
		addrs = append(addrs, sub.addr.String())
	}
	s.udp.mu.Unlock()
	s.metrics.mu.Lock()
	defer s.metrics.mu.Unlock()
	return fmt.Sprintf("UDP subscribers %v, pushes acknowledged %d, given up %d", addrs, s.metrics.pushes, s.metrics.failures)
}

// TestV1SubscribeUDPPush: a nacos-sdk-go v1 subscriber is told of a change
// by a UDP push, which it acknowledges.
func TestV1SubscribeUDPPush(t *testing.T) {
	s := startServer(t, nil)
	pub, sub := newV1Client(t, s.HTTPAddr()), newV1Client(t, s.HTTPAddr())
	v1Register(t, pub, "v1-watched", "", "10.2.0.1", 80, 1, nil)
	var mu sync.Mutex
	var last []v1model.SubscribeService
	changed := make(chan struct{}, 16)
	err := sub.Subscribe(&v1vo.SubscribeParam{ServiceName: "v1-watched", SubscribeCallback: func(ss []v1model.SubscribeService, err error) {
		mu.Lock()
		last = ss
		mu.Unlock()
		changed <- struct{}{}
	}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatalf("no first callback: %s", udpState(s))
	}
	eventually(t, 5*time.Second, "the subscriber is known to the UDP pusher", func() bool { return s.udp.count() == 1 })
	start := time.Now()
	v1Register(t, pub, "v1-watched", "", "10.2.0.2", 80, 1, nil)
	select {
	case <-changed:
		// The push usually lands within milliseconds, but a lost datagram
		// waits for the resend (UDPAckTimeout, 1 s) and a loaded machine
		// delays it: the time is reported, and what proves the push is its
		// acknowledgement, checked below (the client acknowledges only a
		// datagram it received).
		t.Logf("the change reached the callback after %v", time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatalf("the change never reached the callback: %s", udpState(s))
	}
	mu.Lock()
	n := len(last)
	mu.Unlock()
	if n != 2 {
		t.Fatalf("callback has %d instances, want 2", n)
	}
	eventually(t, 3*time.Second, "the UDP push is acknowledged", func() bool {
		_, _, pushes := s.metrics.percentiles()
		return pushes >= 1
	})
}

// TestV1KilledClientExpires: a 1.x client killed with SIGKILL stops beating;
// its instance turns unhealthy after the beat timeout and leaves after the
// delete timeout (shortened through the preserved metadata keys).
func TestV1KilledClientExpires(t *testing.T) {
	skipUnderRace(t) // the child drives an SDK
	s := startServer(t, nil)
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildV1Client$")
	cmd.Env = append(os.Environ(), "NACOSD_CHILD_V1_ADDR="+s.HTTPAddr())
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	eventually(t, 30*time.Second, "the child registers", func() bool { return len(served(t, s, "v1-child")) == 1 })
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the instance turns unhealthy", func() bool {
		in := served(t, s, "v1-child")
		return len(in) == 1 && !in[0].Healthy
	})
	eventually(t, 5*time.Second, "the instance leaves", func() bool { return len(served(t, s, "v1-child")) == 0 })
}

func TestChildV1Client(t *testing.T) {
	addr := os.Getenv("NACOSD_CHILD_V1_ADDR")
	if addr == "" {
		t.Skip("run by TestV1KilledClientExpires")
	}
	c := newV1Client(t, addr)
	v1Register(t, c, "v1-child", "", "10.3.0.1", 80, 1, map[string]string{
		mmodel.MetaHeartBeatInterval: "200", mmodel.MetaHeartBeatTimeout: "1000", mmodel.MetaIPDeleteTimeout: "2000",
	})
	select {}
}

// TestV2PersistentOverHTTP: the 2.x client sends persistent instances over
// HTTP; they stay when the client goes.
func TestV2PersistentOverHTTP(t *testing.T) {
	s := startServer(t, nil)
	c := newClient(t, s.HTTPAddr())
	ok, err := c.RegisterInstance(vo.RegisterInstanceParam{ServiceName: "db", Ip: "10.4.0.1", Port: 3306, Weight: 1,
		Enable: true, Healthy: true, Ephemeral: false})
	if err != nil || !ok {
		t.Fatalf("persistent register: %v %v", ok, err)
	}
	in := served(t, s, "db")
	if len(in) != 1 || in[0].Ephemeral {
		t.Fatalf("server holds %+v", in)
	}
	// An ephemeral registration into the persistent service is refused.
	if ok, err := c.RegisterInstance(vo.RegisterInstanceParam{ServiceName: "db", Ip: "10.4.0.2", Port: 3306, Weight: 1,
		Enable: true, Healthy: true, Ephemeral: true}); err == nil && ok {
		t.Fatal("an ephemeral instance was registered into a persistent service")
	}
	c.CloseClient()
	if len(served(t, s, "db")) != 1 {
		t.Fatal("a persistent instance left with its client")
	}
	ok, err = newClient(t, s.HTTPAddr()).DeregisterInstance(vo.DeregisterInstanceParam{ServiceName: "db", Ip: "10.4.0.1", Port: 3306, Ephemeral: false})
	if err != nil || !ok || len(served(t, s, "db")) != 0 {
		t.Fatalf("persistent deregister: %v %v, %d left", ok, err, len(served(t, s, "db")))
	}
}

// call makes one raw OpenAPI call and returns the status and body.
func call(t *testing.T, s *Server, method, path string, form url.Values) (int, string) {
	t.Helper()
	u := "http://" + s.HTTPAddr() + path
	var body io.Reader
	if method == http.MethodGet {
		u += "?" + form.Encode()
	} else {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func jsonOf(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("not JSON: %q", s)
	}
	return m
}

func TestOpenAPI(t *testing.T) {
	s := startServer(t, nil)
	must := func(method, path string, form url.Values, wantStatus int) string {
		t.Helper()
		st, body := call(t, s, method, path, form)
		if st != wantStatus {
			t.Fatalf("%s %s %v: status %d (%s), want %d", method, path, form, st, body, wantStatus)
		}
		return body
	}
	v := func(kv ...string) url.Values {
		u := url.Values{}
		for i := 0; i < len(kv); i += 2 {
			u.Set(kv[i], kv[i+1])
		}
		return u
	}
	// Services.
	must("POST", "/nacos/v1/ns/service", v("serviceName", "api", "protectThreshold", "0.5", "metadata", "team=x", "ephemeral", "true"), 200)
	must("POST", "/nacos/v1/ns/service", v("serviceName", "api"), 400) // exists
	got := jsonOf(t, must("GET", "/nacos/v1/ns/service", v("serviceName", "api"), 200))
	if got["protectThreshold"] != 0.5 || got["metadata"].(map[string]any)["team"] != "x" || got["groupName"] != "DEFAULT_GROUP" {
		t.Fatalf("service: %v", got)
	}
	must("PUT", "/nacos/v1/ns/service", v("serviceName", "api", "protectThreshold", "0.1"), 200)
	if got := jsonOf(t, must("GET", "/nacos/v1/ns/service", v("serviceName", "api"), 200)); got["protectThreshold"] != 0.1 {
		t.Fatalf("updated service: %v", got)
	}
	must("GET", "/nacos/v1/ns/service", v("serviceName", "nope"), 404)

	// Instances.
	must("POST", "/nacos/v1/ns/instance", v("serviceName", "api", "ip", "10.5.0.1", "port", "80", "weight", "2", "metadata", `{"a":"b"}`), 200)
	must("POST", "/nacos/v1/ns/instance", v("serviceName", "api", "ip", "10.5.0.1", "port", "0"), 400)
	must("POST", "/nacos/v1/ns/instance", v("serviceName", "api", "ip", "10.5.0.1", "port", "80", "clusterName", "c-1.x"), 400)
	must("POST", "/nacos/v1/ns/instance", v("serviceName", "api", "ip", "10.5.0.1", "port", "80", "weight", "x"), 400)
	inst := jsonOf(t, must("GET", "/nacos/v1/ns/instance", v("serviceName", "api", "ip", "10.5.0.1", "port", "80"), 200))
	if inst["weight"] != 2.0 || inst["metadata"].(map[string]any)["a"] != "b" || inst["clusterName"] != "DEFAULT" {
		t.Fatalf("instance: %v", inst)
	}
	must("PUT", "/nacos/v1/ns/instance", v("serviceName", "api", "ip", "10.5.0.1", "port", "80", "weight", "5"), 200)
	if inst := jsonOf(t, must("GET", "/nacos/v1/ns/instance", v("serviceName", "api", "ip", "10.5.0.1", "port", "80"), 200)); inst["weight"] != 5.0 {
		t.Fatalf("updated instance: %v", inst)
	}
	must("GET", "/nacos/v1/ns/instance", v("serviceName", "api", "ip", "10.5.0.9", "port", "80"), 404)
	list := jsonOf(t, must("GET", "/nacos/v1/ns/instance/list", v("serviceName", "DEFAULT_GROUP@@api", "clusters", ""), 200))
	if list["name"] != "DEFAULT_GROUP@@api" || len(list["hosts"].([]any)) != 1 || list["lastRefTime"].(float64) <= 0 {
		t.Fatalf("list: %v", list)
	}

	// Beats: a light beat of an unknown instance is 20404; a full one
	// registers it; a known one is 10200 with the interval.
	b := jsonOf(t, must("PUT", "/nacos/v1/ns/instance/beat", v("serviceName", "api", "ip", "10.5.0.7", "port", "80"), 200))
	if b["code"] != 20404.0 {
		t.Fatalf("light beat of an unknown instance: %v", b)
	}
	b = jsonOf(t, must("PUT", "/nacos/v1/ns/instance/beat", v("serviceName", "DEFAULT_GROUP@@api",
		"beat", `{"ip":"10.5.0.7","port":80,"weight":1,"serviceName":"DEFAULT_GROUP@@api","cluster":"DEFAULT"}`), 200))
	if b["code"] != 10200.0 || b["clientBeatInterval"] != 5000.0 {
		t.Fatalf("full beat: %v", b)
	}
	b = jsonOf(t, must("PUT", "/nacos/v1/ns/instance/beat", v("serviceName", "api", "ip", "10.5.0.7", "port", "80"), 200))
	if b["code"] != 10200.0 {
		t.Fatalf("light beat of a known instance: %v", b)
	}

	// Lists, catalog, metrics.
	must("POST", "/nacos/v1/ns/instance", v("serviceName", "other", "groupName", "g2", "ip", "10.5.0.1", "port", "80"), 200)
	sl := jsonOf(t, must("GET", "/nacos/v1/ns/service/list", v("pageNo", "1", "pageSize", "10"), 200))
	if sl["count"] != 1.0 || sl["doms"].([]any)[0] != "api" {
		t.Fatalf("service list of DEFAULT_GROUP: %v", sl)
	}
	cat := jsonOf(t, must("GET", "/nacos/v1/ns/catalog/services", v("pageNo", "1", "pageSize", "10", "serviceNameParam", "oth"), 200))
	if cat["count"] != 1.0 || cat["serviceList"].([]any)[0].(map[string]any)["groupName"] != "g2" {
		t.Fatalf("catalog: %v", cat)
	}
	m := jsonOf(t, must("GET", "/nacos/v1/ns/operator/metrics", nil, 200))
	if m["status"] != "UP" || m["serviceCount"] != 2.0 || m["instanceCount"] != 3.0 {
		t.Fatalf("metrics: %v", m)
	}
	// Prometheus, at /metrics and at Nacos's actuator path, parsed as a
	// Prometheus server would.
	for _, path := range []string{"/metrics", "/nacos/actuator/prometheus"} {
		p := expfmt.NewTextParser(pmodel.UTF8Validation)
		mfs, err := p.TextToMetricFamilies(strings.NewReader(must("GET", path, nil, 200)))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if g := mfs["muster_registry_instances"]; g == nil || g.GetMetric()[0].GetGauge().GetValue() != 3 {
			t.Fatalf("%s: muster_registry_instances = %v, want 3", path, g)
		}
		var writes float64
		for _, m := range mfs["muster_registry_writes_total"].GetMetric() {
			writes += m.GetCounter().GetValue()
		}
		if writes < 3 {
			t.Fatalf("%s: %v writes counted, want at least the 3 registrations", path, writes)
		}
	}

	// Deletes.
	must("DELETE", "/nacos/v1/ns/service", v("serviceName", "api"), 400) // has instances
	must("DELETE", "/nacos/v1/ns/instance", v("serviceName", "api", "ip", "10.5.0.1", "port", "80"), 200)
	must("DELETE", "/nacos/v1/ns/instance", v("serviceName", "api", "ip", "10.5.0.7", "port", "80"), 200)
	must("DELETE", "/nacos/v1/ns/service", v("serviceName", "api"), 200)
	must("GET", "/nacos/v1/ns/service", v("serviceName", "api"), 404)
}
