package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestBenchmark measures one nacosd node under N gRPC connections, each
// registering one instance in each of 10 services and subscribing to 10
// services: registrations per second, push latency (from the change's
// request to each subscriber's receipt) and the server's memory per
// connection. The server runs in a child process, so that its memory is
// its own. It runs only with NACOSD_BENCH=1 (NACOSD_BENCH_CONNS sets N,
// default 1000); see README.md for the figures.
func TestBenchmark(t *testing.T) {
	if os.Getenv("NACOSD_BENCH") == "" {
		t.Skip("set NACOSD_BENCH=1 to run the benchmark")
	}
	conns := 1000
	if v := os.Getenv("NACOSD_BENCH_CONNS"); v != "" {
		conns, _ = strconv.Atoi(v)
	}
	const perConn, services = 10, 100
	addr := "127.0.0.1:" + strconv.Itoa(freeBase(t, false))
	cmd := exec.Command(os.Args[0], "-test.run=^TestBenchServer$")
	cmd.Env = append(os.Environ(), "NACOSD_BENCH_SERVER="+addr)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	metrics := func() map[string]any {
		resp, err := http.Get("http://" + addr + "/nacos/v1/ns/operator/metrics?gc=true")
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return m
	}
	eventually(t, 30*time.Second, "the server starts", func() bool { return metrics() != nil })
	grpcAddr, _ := portAt(addr, 1000)
	base := metrics()

	svc := func(i int) string { return "bench-" + strconv.Itoa(i%services) }
	clients := make([]*wireClient, conns)
	start := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range conns {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			clients[i] = dialWire(t, grpcAddr, true)
		}()
	}
	wg.Wait()
	connected := time.Since(start)

	start = time.Now()
	for i := range conns {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			for k := range perConn {
				var r response
				ip := fmt.Sprintf("10.%d.%d.%d", i/65536, (i/256)%256, i%256)
				clients[i].call("InstanceRequest", map[string]any{"serviceName": svc(i + k*7), "type": "registerInstance", "instance": inst(ip, 8000+k)}, &r)
				if !r.Success {
					t.Errorf("register: %+v", r)
				}
			}
		}()
	}
	wg.Wait()
	regTime := time.Since(start)
	regs := conns * perConn

	for i := range conns {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			for k := range 10 {
				var r subscribeServiceResponse
				clients[i].call("SubscribeServiceRequest", map[string]any{"serviceName": svc(i*3 + k), "subscribe": true, "clusters": ""}, &r)
			}
		}()
	}
	wg.Wait()
	full := metrics()

	// Pushes: a publisher changes one service at a time; every subscriber
	// of it gets a push. Latency is from the change's request to receipt.
	pub := dialWire(t, grpcAddr, true)
	var mu sync.Mutex
	var lat []time.Duration
	var changeAt time.Time
	for _, c := range clients {
		go func() {
			for p := range c.in {
				if p.GetMetadata().GetType() == "NotifySubscriberRequest" {
					mu.Lock()
					lat = append(lat, time.Since(changeAt))
					mu.Unlock()
				}
			}
		}()
	}
	const changes = 50
	expected := 0
	for k := range changes {
		target := svc(k)
		subs := 0
		for i := range conns {
			for j := range 10 {
				if svc(i*3+j) == target {
					subs++
				}
			}
		}
		expected += subs
		mu.Lock()
		changeAt = time.Now()
		mu.Unlock()
		var r response
		pub.call("InstanceRequest", map[string]any{"serviceName": target, "type": "registerInstance", "instance": inst("10.250.0.1", 9000+k)}, &r)
		want := expected
		eventually(t, 30*time.Second, "every subscriber got the push", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(lat) >= want
		})
	}
	mu.Lock()
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	n := len(lat)
	mu.Unlock()

	heap := func(m map[string]any) float64 { return m["heapInuseBytes"].(float64) }
	perConnBytes := (heap(full) - heap(base)) / float64(conns)
	t.Logf("connections: %d (set up in %v); instances: %d; subscriptions: %d; server goroutines: %v",
		conns, connected.Round(time.Millisecond), regs, conns*10, full["goroutines"])
	t.Logf("registrations: %d in %v = %.0f/s (64 in flight)", regs, regTime.Round(time.Millisecond), float64(regs)/regTime.Seconds())
	t.Logf("pushes: %d over %d changes; latency p50 %v, p99 %v", n, changes, p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond))
	t.Logf("server heap: %.1f MiB idle, %.1f MiB loaded: %.1f KiB per connection (with its 10 instances and 10 subscriptions)",
		heap(base)/(1<<20), heap(full)/(1<<20), perConnBytes/1024)
	for _, c := range clients {
		c.close()
	}
	pub.close()
}

// TestBenchServer is TestBenchmark's server process.
func TestBenchServer(t *testing.T) {
	addr := os.Getenv("NACOSD_BENCH_SERVER")
	if addr == "" {
		t.Skip("run by TestBenchmark")
	}
	cfg := DefaultConfig()
	cfg.HTTPAddr = addr
	// Every client of the benchmark connects from 127.0.0.1: the
	// per-client limits, which would stop them, are off.
	cfg.Limits = ClientLimits{}
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f := os.Getenv("NACOSD_BENCH_HEAP"); f != "" { // a heap profile once loaded
		go func() {
			for range time.Tick(time.Second) {
				if s.subs.n.Load() >= 1000 {
					time.Sleep(2 * time.Second)
					runtime.GC()
					out, _ := os.Create(f)
					_ = pprof.WriteHeapProfile(out)
					_ = out.Close()
					return
				}
			}
		}()
	}
	select {}
}
