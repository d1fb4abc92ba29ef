package distro_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/muster-io/muster/distro"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/transport"
)

// tcpRegistries starts three registries, n1–n3, over real TCP on loopback
// (static membership, SyncDelay 0), ready; done closes them.
func tcpRegistries(b *testing.B) (regs []*registry.Registry, done func()) {
	ctx := context.Background()
	var mu sync.Mutex
	addrs := map[string]string{}
	resolve := func(id string) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if a, ok := addrs[id]; ok {
			return a, nil
		}
		return "", distro.ErrUnknownMember
	}
	ids := []string{"n1", "n2", "n3"}
	var tcps []*transport.TCP
	var mems []*distro.Static
	done = func() {
		for _, r := range regs {
			r.Close()
		}
		for _, t := range tcps {
			t.Close()
		}
	}
	for _, id := range ids {
		tc := transport.DefaultTCPConfig()
		tc.NodeID, tc.ListenAddr, tc.Resolve = id, "127.0.0.1:0", resolve
		tc.Secret = []byte("muster-test-secret-0123456789")
		tcp, err := transport.NewTCP(tc)
		if err != nil {
			done()
			b.Fatal(err)
		}
		if err := tcp.Start(ctx); err != nil {
			done()
			b.Fatal(err)
		}
		tcps = append(tcps, tcp)
		mu.Lock()
		addrs[id] = tcp.Addr()
		mu.Unlock()
		mems = append(mems, distro.NewStatic(distro.Member{ID: id, Addr: tcp.Addr()}))
	}
	var all []distro.Member
	for i, id := range ids {
		all = append(all, distro.Member{ID: id, Addr: tcps[i].Addr()})
	}
	for i, id := range ids {
		mems[i].Set(all...)
		dc := distro.DefaultConfig()
		dc.Transport, dc.Membership, dc.SyncDelay = tcps[i], mems[i], distro.NoSyncDelay
		dc.LoadTimeout = 200 * time.Millisecond
		cfg := registry.DefaultConfig()
		cfg.NodeID, cfg.HealthChecks = id, nil
		cfg.Replicator, cfg.Transport = registry.Distro(dc), tcps[i]
		reg, err := registry.New(cfg)
		if err != nil {
			done()
			b.Fatal(err)
		}
		if err := reg.Start(ctx); err != nil {
			done()
			b.Fatal(err)
		}
		regs = append(regs, reg)
	}
	for _, r := range regs {
		if err := r.WaitReady(ctx); err != nil {
			done()
			b.Fatal(err)
		}
	}
	return regs, done
}

// BenchmarkRegistryReplicationLatency: three registries over real TCP on
// loopback (static membership, SyncDelay 0). A new session on n1 registers
// an instance; the latency runs until a watcher on n2 and one on n3 have both
// been handed a view holding it: what a subscriber on another node waits.
// Each iteration measures 100 registrations.
func BenchmarkRegistryReplicationLatency(b *testing.B) {
	ctx := context.Background()
	regs, done := tcpRegistries(b)
	defer done()
	svc := model.ServiceKey{Name: "bench"}
	// Watchers on n2 and n3 report every IP they are handed.
	seen := make(chan string, 4096)
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for _, r := range regs[1:] {
		w, err := r.Watch(wctx, model.Query{Service: svc})
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.Close()
			for {
				u, err := w.Next(wctx)
				if err != nil {
					return
				}
				for _, in := range u.Delta.Added {
					seen <- in.IP
				}
			}
		}()
	}
	var lat []time.Duration
	n := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for range 100 {
			n++
			in := model.NewInstance(svc, fmt.Sprintf("10.%d.%d.%d", n>>16&255, n>>8&255, n&255), 8080)
			// A session per client connection, each with its instance, as
			// Nacos 2.x clients have.
			sess, err := regs[0].OpenSession(ctx, registry.SessionOptions{})
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			if err := sess.Register(ctx, in); err != nil {
				b.Fatal(err)
			}
			for got := 0; got < 2; {
				select {
				case ip := <-seen:
					if ip == in.IP {
						got++
					}
				case <-time.After(5 * time.Second):
					b.Fatal("not seen by both watchers within 5 s")
				}
			}
			lat = append(lat, time.Since(start))
			b.StopTimer()
			_ = sess.Close()
			b.StartTimer()
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Microseconds())/1000, "p99-ms")
}

// BenchmarkRegistryReplicationLatencyBigSession: as
// BenchmarkRegistryReplicationLatency, but one session of 100 instances on
// n1 registers one more (issue 15: a Nacos 2.x connection, a host that
// multiplexes services over one session); the latency runs until watchers
// on n2 and n3 both hold it. The instance is removed again, and its removal
// seen by both, off the clock.
func BenchmarkRegistryReplicationLatencyBigSession(b *testing.B) {
	ctx := context.Background()
	regs, done := tcpRegistries(b)
	defer done()
	svc := model.ServiceKey{Name: "big"}
	sess, err := regs[0].OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 100 {
		in := model.NewInstance(svc, fmt.Sprintf("10.1.%d.%d", i>>8&255, i&255), 8080)
		in.Metadata = model.NewMetadata(map[string]string{"version": "1.4.2", "zone": "zone-a", "id": fmt.Sprint("i-", i)})
		if err := sess.Register(ctx, in); err != nil {
			b.Fatal(err)
		}
	}
	// Watchers on n2 and n3 report how many instances each view holds.
	sizes := make(chan int, 4096)
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for _, r := range regs[1:] {
		w, err := r.Watch(wctx, model.Query{Service: svc})
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.Close()
			for {
				u, err := w.Next(wctx)
				if err != nil {
					return
				}
				sizes <- len(u.View.Instances)
			}
		}()
	}
	await := func(n int) {
		for got := 0; got < 2; {
			select {
			case s := <-sizes:
				if s == n {
					got++
				}
			case <-time.After(10 * time.Second):
				b.Fatalf("a view of %d instances not seen by both watchers within 10 s", n)
			}
		}
	}
	await(100)
	extra := model.NewInstance(svc, "10.2.0.1", 8080)
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if err := sess.Register(ctx, extra); err != nil {
			b.Fatal(err)
		}
		await(101)
		lat = append(lat, time.Since(start))
		b.StopTimer()
		if err := sess.Deregister(ctx, extra.Key()); err != nil {
			b.Fatal(err)
		}
		await(100)
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Microseconds())/1000, "p99-ms")
}
