package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
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
// default 1000); see README.md for the figures. NACOSD_BENCH_CPU and
// NACOSD_BENCH_HEAP name files for the server's CPU profile (of the whole
// run) and heap profile (once loaded, before the pushes). The client is the
// hand-written wireClient, lean where it can be without changing what the
// server receives (README.md, "Benchmark").
func TestBenchmark(t *testing.T) { benchmark(t, 1) }

// TestBenchmarkCluster is TestBenchmark on a 3-node cluster, each node a
// child process: the connections spread over the nodes (connection i on
// node i mod 3), and the changes are all made on the first node, so that
// two thirds of the pushes cross nodes.
func TestBenchmarkCluster(t *testing.T) { benchmark(t, 3) }

// benchNode is one server process of the benchmark.
type benchNode struct {
	addr, grpcAddr string
	cmd            *exec.Cmd
	ctl            io.WriteCloser // a line asks for the heap profile; EOF ends the server
}

func (n *benchNode) metrics() map[string]any {
	resp, err := http.Get("http://" + n.addr + "/nacos/v1/ns/operator/metrics?gc=true")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var m map[string]any
	if json.NewDecoder(resp.Body).Decode(&m) != nil {
		return nil
	}
	return m
}

// cpuOf returns the CPU time (user and system) process pid has used, or
// that of this process with pid 0, from /proc (Linux; USER_HZ 100).
func cpuOf(pid int) time.Duration {
	name := "/proc/self/stat"
	if pid != 0 {
		name = "/proc/" + strconv.Itoa(pid) + "/stat"
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return 0
	}
	_, rest, _ := strings.Cut(string(b), ") ") // past the command, which may hold spaces
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

func benchmark(t *testing.T, nodes int) {
	if os.Getenv("NACOSD_BENCH") == "" {
		t.Skip("set NACOSD_BENCH=1 to run the benchmark")
	}
	conns := 1000
	if v := os.Getenv("NACOSD_BENCH_CONNS"); v != "" {
		conns, _ = strconv.Atoi(v)
	}
	// The client (this process: 1,000 connections' worth of gRPC state)
	// collects less often, leaving more of the shared cores to the server.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	const perConn, services = 10, 100
	var peers []string
	for range nodes {
		peers = append(peers, "127.0.0.1:"+strconv.Itoa(freeBase(t, nodes > 1)))
	}
	srv := make([]*benchNode, nodes)
	for i := range nodes {
		n := &benchNode{addr: peers[i]}
		n.grpcAddr, _ = portAt(n.addr, 1000)
		n.cmd = exec.Command(os.Args[0], "-test.run=^TestBenchServer$")
		n.cmd.Env = append(os.Environ(), "NACOSD_BENCH_SERVER="+n.addr)
		if nodes > 1 {
			n.cmd.Env = append(n.cmd.Env, "NACOSD_BENCH_PEERS="+strings.Join(peers, ","), "NACOSD_BENCH_NODE="+strconv.Itoa(i))
			for _, k := range []string{"NACOSD_BENCH_CPU", "NACOSD_BENCH_HEAP"} {
				if f := os.Getenv(k); f != "" { // one profile per node
					n.cmd.Env = append(n.cmd.Env, k+"="+f+"."+strconv.Itoa(i))
				}
			}
		}
		n.cmd.Stderr = os.Stderr
		var err error
		if n.ctl, err = n.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		if err := n.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		srv[i] = n
	}
	defer func() {
		ending := time.Now()
		defer func() { t.Logf("servers ended in %v", time.Since(ending).Round(time.Millisecond)) }()
		for _, n := range srv {
			_ = n.ctl.Close() // the server writes its profiles and exits
		}
		for _, n := range srv {
			done := make(chan struct{})
			go func() { _ = n.cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = n.cmd.Process.Kill()
				<-done
			}
		}
	}()
	for _, n := range srv {
		eventually(t, 60*time.Second, "the server serves", func() bool { m := n.metrics(); return m != nil && m["status"] == "UP" })
	}
	heapOf := func() float64 {
		var sum float64
		for _, n := range srv {
			// Two collections (each request makes one): what sync.Pools
			// hold (gRPC's pooled buffers, up to 64 KiB each) survives
			// the first as their victim cache, and is gone after the
			// second; with one, the figure moved by ±2 KiB a connection
			// with what the pools happened to hold.
			n.metrics()
			sum += n.metrics()["heapInuseBytes"].(float64)
		}
		return sum
	}
	goroutines := func() float64 {
		var sum float64
		for _, n := range srv {
			sum += n.metrics()["goroutines"].(float64)
		}
		return sum
	}
	base := heapOf()

	svc := func(i int) string { return "bench-" + strconv.Itoa(i%services) }
	nodeOf := func(i int) int { return i % nodes }
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
			clients[i] = dialWire(t, srv[nodeOf(i)].grpcAddr, true)
		}()
	}
	wg.Wait()
	connected := time.Since(start)

	phase := func(name string) {
		for _, n := range srv {
			_, _ = io.WriteString(n.ctl, name+"\n")
		}
	}
	serverCPU := func() time.Duration {
		var sum time.Duration
		for _, n := range srv {
			sum += cpuOf(n.cmd.Process.Pid)
		}
		return sum
	}
	phase("register")
	srvCPU0, cliCPU0 := serverCPU(), cpuOf(0)
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
	srvRegCPU, cliRegCPU := serverCPU()-srvCPU0, cpuOf(0)-cliCPU0

	phase("subscribe")
	for i := range conns {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			for k := range 10 {
				p := clients[i].request(nil, "SubscribeServiceRequest", map[string]any{"serviceName": svc(i*3 + k), "subscribe": true, "clusters": ""})
				// The answer's ServiceInfo (100 instances) is not decoded:
				// the pushes are what is measured.
				if v, _ := topLevelValue(p.GetBody().GetValue(), "success"); string(v) != "true" {
					t.Errorf("subscribe: %s", p.GetBody().GetValue())
				}
			}
		}()
	}
	wg.Wait()
	full := heapOf()
	fullGoroutines := goroutines()
	if f := os.Getenv("NACOSD_BENCH_HEAP"); f != "" {
		phase("heap")
		for i := range srv {
			name := f
			if nodes > 1 {
				name += "." + strconv.Itoa(i)
			}
			eventually(t, 30*time.Second, "the heap profile is written", func() bool { st, err := os.Stat(name); return err == nil && st.Size() > 0 })
		}
	}
	phase("push")

	// Pushes: a publisher changes one service at a time; every subscriber
	// of it gets a push. Latency is from the change's request to receipt.
	pub := dialWire(t, srv[0].grpcAddr, true)
	var mu sync.Mutex
	lat := make([][]time.Duration, 2) // [0]: subscribers on the publisher's node; [1]: on another
	var changeAt time.Time
	for i, c := range clients {
		far := min(nodeOf(i), 1)
		go func() {
			for p := range c.in {
				if p.GetMetadata().GetType() == "NotifySubscriberRequest" {
					mu.Lock()
					lat[far] = append(lat[far], time.Since(changeAt))
					mu.Unlock()
				}
			}
		}()
	}
	const changes = 50
	expected := 0
	srvCPU0, cliCPU0 = serverCPU(), cpuOf(0)
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
			return len(lat[0])+len(lat[1]) >= want
		})
	}
	srvPushCPU, cliPushCPU := serverCPU()-srvCPU0, cpuOf(0)-cliCPU0
	mu.Lock()
	pct := func(l []time.Duration) (time.Duration, time.Duration) {
		slices.Sort(l)
		return l[len(l)/2], l[len(l)*99/100]
	}
	all := slices.Concat(lat[0], lat[1])
	p50, p99 := pct(all)
	n := len(all)
	var cross string
	if nodes > 1 {
		l50, l99 := pct(lat[0])
		r50, r99 := pct(lat[1])
		cross = fmt.Sprintf(" (same node: p50 %v, p99 %v; across nodes: p50 %v, p99 %v)",
			l50.Round(10*time.Microsecond), l99.Round(10*time.Microsecond), r50.Round(10*time.Microsecond), r99.Round(10*time.Microsecond))
	}
	mu.Unlock()

	perConnBytes := (full - base) / float64(conns)
	t.Logf("nodes: %d; connections: %d (set up in %v); instances: %d; subscriptions: %d; server goroutines: %v",
		nodes, conns, connected.Round(time.Millisecond), regs, conns*10, fullGoroutines)
	t.Logf("registrations: %d in %v = %.0f/s (64 in flight)", regs, regTime.Round(time.Millisecond), float64(regs)/regTime.Seconds())
	t.Logf("pushes: %d over %d changes; latency p50 %v, p99 %v%s", n, changes, p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond), cross)
	t.Logf("CPU a registration: server %.0f µs, client %.0f µs; a push delivered: server %.0f µs, client %.0f µs",
		float64(srvRegCPU.Microseconds())/float64(regs), float64(cliRegCPU.Microseconds())/float64(regs),
		float64(srvPushCPU.Microseconds())/float64(n), float64(cliPushCPU.Microseconds())/float64(n))
	t.Logf("server heap: %.1f MiB idle, %.1f MiB loaded: %.1f KiB per connection (with its 10 instances and 10 subscriptions)",
		base/(1<<20), full/(1<<20), perConnBytes/1024)
	phase("close") // the connections' instances leave: each a change pushed to its subscribers
	closing := time.Now()
	for _, c := range append(clients, pub) { // at once: a closing gRPC client waits for its transport, which the pushes keep busy
		wg.Add(1)
		go func() { defer wg.Done(); c.close() }()
	}
	wg.Wait()
	t.Logf("clients closed in %v", time.Since(closing).Round(time.Millisecond))
}

// TestBenchServer is the benchmark's server process. Its standard input
// names the benchmark's phases, a line each (register, subscribe, heap,
// push, close), and ends with it: the server then writes its CPU profile
// (NACOSD_BENCH_CPU, of the phase NACOSD_BENCH_PHASE or, without it, of
// the whole run) and ends. The heap phase writes the heap profile
// (NACOSD_BENCH_HEAP).
func TestBenchServer(t *testing.T) {
	addr := os.Getenv("NACOSD_BENCH_SERVER")
	if addr == "" {
		t.Skip("run by TestBenchmark")
	}
	cpuFile, cpuPhase := os.Getenv("NACOSD_BENCH_CPU"), os.Getenv("NACOSD_BENCH_PHASE")
	var cpuOut *os.File
	profile := func(on bool) {
		switch {
		case on && cpuOut == nil && cpuFile != "":
			var err error
			if cpuOut, err = os.Create(cpuFile); err != nil {
				t.Fatal(err)
			}
			if err := pprof.StartCPUProfile(cpuOut); err != nil {
				t.Fatal(err)
			}
		case !on && cpuOut != nil:
			pprof.StopCPUProfile()
			_ = cpuOut.Close()
			cpuOut, cpuFile = nil, "" // one profile
		}
	}
	profile(cpuPhase == "")
	defer profile(false)
	cfg := DefaultConfig()
	cfg.HTTPAddr = addr
	if p := os.Getenv("NACOSD_BENCH_PEERS"); p != "" {
		i, _ := strconv.Atoi(os.Getenv("NACOSD_BENCH_NODE"))
		for k, a := range strings.Split(p, ",") {
			cfg.Peers = append(cfg.Peers, Peer{ID: "n" + strconv.Itoa(k+1), Addr: a})
		}
		cfg.NodeID = cfg.Peers[i].ID
		cfg.Secret = []byte("the benchmark cluster's shared secret")
	}
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
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if cpuPhase != "" {
			profile(in.Text() == cpuPhase)
		}
		if f := os.Getenv("NACOSD_BENCH_HEAP"); f != "" && in.Text() == "heap" {
			runtime.GC()
			out, err := os.Create(f)
			if err != nil {
				t.Fatal(err)
			}
			_ = pprof.WriteHeapProfile(out)
			_ = out.Close()
		}
	}
	// No Close: the benchmark is over, and a cluster node's graceful
	// shutdown would wait for its peers.
}
