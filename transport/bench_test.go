package transport

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// benchPair starts two TCP nodes on loopback; a has a connection to b.
func benchPair(b *testing.B) (Transport, Transport) {
	b.Helper()
	c := newTCPCluster(nil, 0, nil)
	b.Cleanup(c.CloseAll)
	mk := func(id string) Transport {
		cfg := DefaultTCPConfig()
		cfg.NodeID = id
		cfg.Secret = testSecret
		cfg.Resolve = c.resolve
		n, err := NewTCP(cfg)
		if err != nil {
			b.Fatal(err)
		}
		if err := n.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		c.mu.Lock()
		c.addrs[id] = n.Addr()
		c.nodes = append(c.nodes, n)
		c.mu.Unlock()
		return n
	}
	return mk("a"), mk("b")
}

func benchSerial(b *testing.B, from, to Transport) {
	to.Handle(1, func(_ context.Context, _ string, body []byte) ([]byte, error) { return body, nil })
	ctx := context.Background()
	body := make([]byte, 128)
	if _, err := from.Request(ctx, to.LocalID(), 1, body); err != nil { // connect
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if _, err := from.Request(ctx, to.LocalID(), 1, body); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(pct(0.50), "p50-us")
	b.ReportMetric(pct(0.99), "p99-us")
}

// BenchmarkTCPRequest measures one round trip of a 128-byte request and
// response on loopback, one at a time.
func BenchmarkTCPRequest(b *testing.B) {
	from, to := benchPair(b)
	benchSerial(b, from, to)
}

// BenchmarkTCPParallel measures request throughput over one multiplexed
// connection with many concurrent callers.
func BenchmarkTCPParallel(b *testing.B) {
	from, to := benchPair(b)
	to.Handle(1, func(_ context.Context, _ string, body []byte) ([]byte, error) { return body, nil })
	ctx := context.Background()
	body := make([]byte, 128)
	if _, err := from.Request(ctx, "b", 1, body); err != nil {
		b.Fatal(err)
	}
	b.SetParallelism(16)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := from.Request(ctx, "b", 1, body); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
}

// BenchmarkTCPSend measures one-way throughput: b.N 128-byte messages sent
// and handled, at most 4096 outstanding (the receiver drops one-way
// messages beyond MaxInflight+MaxQueued, so an unbounded burst would lose
// some).
func BenchmarkTCPSend(b *testing.B) {
	from, to := benchPair(b)
	window := make(chan struct{}, 4096)
	var got atomic.Int64
	done := make(chan struct{})
	target := int64(b.N)
	to.Handle(1, func(context.Context, string, []byte) ([]byte, error) {
		<-window
		if got.Add(1) == target {
			close(done)
		}
		return nil, nil
	})
	to.Handle(2, func(context.Context, string, []byte) ([]byte, error) { return nil, nil })
	ctx := context.Background()
	if _, err := from.Request(ctx, "b", 2, nil); err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 128)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		window <- struct{}{}
		if err := from.Send(ctx, "b", 1, body); err != nil {
			b.Fatal(err)
		}
	}
	<-done
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msg/s")
}

// BenchmarkMemRequest measures one round trip through a MemNetwork.
func BenchmarkMemRequest(b *testing.B) {
	var n MemNetwork
	from, err := n.Node("a")
	if err != nil {
		b.Fatal(err)
	}
	to, _ := n.Node("b")
	b.Cleanup(func() { _ = from.Close(); _ = to.Close() })
	benchSerial(b, from, to)
}
