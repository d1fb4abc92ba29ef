package distro

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/muster-io/muster/transport"
)

// tcpCluster is nodes on real TCP over loopback with Static membership, on the real clock.
type tcpCluster struct {
	mu    sync.Mutex
	addrs map[string]string
	nodes []*realNode
}

func (tc *tcpCluster) resolve(id string) (string, error) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if a, ok := tc.addrs[id]; ok {
		return a, nil
	}
	return "", ErrUnknownMember
}

// addTCPNode starts a TCP transport and a replicator (not started) with a Static membership.
func (tc *tcpCluster) addTCPNode(tb testing.TB, id string, mod func(*Config)) (*realNode, *Static) {
	tb.Helper()
	cfgT := transport.DefaultTCPConfig()
	cfgT.NodeID, cfgT.ListenAddr, cfgT.Resolve = id, "127.0.0.1:0", tc.resolve
	cfgT.Secret = []byte("muster-test-secret-0123456789")
	cfgT.ReconnectMin, cfgT.ReconnectMax = 10*time.Millisecond, 100*time.Millisecond
	tcp, err := transport.NewTCP(cfgT)
	if err != nil {
		tb.Fatal(err)
	}
	if err := tcp.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tc.mu.Lock()
	if tc.addrs == nil {
		tc.addrs = map[string]string{}
	}
	tc.addrs[id] = tcp.Addr()
	tc.mu.Unlock()
	mem := NewStatic(Member{ID: id, Addr: tcp.Addr()})
	n := &realNode{id: id, tcp: tcp, store: newTestStore(id)}
	cfg := DefaultConfig()
	cfg.NodeID, cfg.Transport, cfg.Membership, cfg.Store = id, tcp, mem, n.store
	cfg.SyncDelay = NoSyncDelay
	cfg.LoadTimeout = 200 * time.Millisecond // the cold start of the first nodes
	if mod != nil {
		mod(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	n.r = r
	n.store.r.Store(r)
	tc.nodes = append(tc.nodes, n)
	return n, mem
}

func (tc *tcpCluster) close() {
	for _, n := range tc.nodes {
		n.r.Close()
		n.tcp.Close()
	}
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// BenchmarkReplicationLatency: 3 nodes over real TCP on loopback, SyncDelay 0; Put on one node
// until both other stores have applied it. Each iteration measures 100 Puts.
func BenchmarkReplicationLatency(b *testing.B) {
	var tc tcpCluster
	defer tc.close()
	var mems []*Static
	var nodes []*realNode
	for _, id := range []string{"n1", "n2", "n3"} {
		n, m := tc.addTCPNode(b, id, nil)
		nodes, mems = append(nodes, n), append(mems, m)
	}
	all := make([]Member, 3)
	for i, n := range nodes {
		all[i] = Member{ID: n.id, Addr: n.tcp.Addr()}
	}
	for i, n := range nodes {
		mems[i].Set(all...)
		if err := n.r.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	for _, n := range nodes {
		if err := n.r.WaitReady(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	got := make(chan string, 1024)
	for _, n := range nodes[1:] {
		n.store.onApply = func(rec Record) { got <- rec.Key }
	}
	payload := make([]byte, 200)
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := 0; j < 100; j++ {
			key := fmt.Sprintf("s-%d-%d", i, j)
			start := time.Now()
			if _, err := nodes[0].r.Put(KindSession, key, payload); err != nil {
				b.Fatal(err)
			}
			for seen := 0; seen < 2; {
				select {
				case k := <-got:
					if k == key {
						seen++
					}
				case <-time.After(5 * time.Second):
					b.Fatal("not replicated within 5 s")
				}
			}
			lat = append(lat, time.Since(start))
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(percentile(lat, 0.50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(percentile(lat, 0.99).Microseconds())/1000, "p99-ms")
}

// fill installs n records in sync on every node (as after replication), without going through
// the network: half sessions owned round-robin by owners, half beats owned by their HRW owner.
func fill(nodes []*Replicator, owners []string, n int, payload []byte) {
	now := nodes[0].clk.Now()
	for _, r := range nodes {
		r.mu.Lock()
		for i := 0; i < n; i++ {
			key := fmt.Sprintf("10.%d.%d.%d:8080", i>>16, (i>>8)&255, i&255)
			kind, owner := KindSession, owners[i%len(owners)]
			if i%2 == 0 {
				kind, owner = KindBeat, hrwOwner(owners, key)
			}
			rec := Record{Key: key, Kind: kind, Owner: owner, Revision: uint64(1 + i%7), Payload: payload}
			r.tab.install(rec, now)
			r.tab.get(rec.Key).local = rec.Owner == r.self // as if this incarnation wrote its own
		}
		r.mu.Unlock()
	}
}

// BenchmarkVerifyRound: 100,000 records in sync across 3 nodes; one verify round (every node
// sends every peer its digest and gets the answer). bytes/round is per (node, peer) pair, both
// directions.
func BenchmarkVerifyRound(b *testing.B) {
	c := newCluster(b, func(cfg *Config) { cfg.Buckets = DefaultConfig().Buckets }, "a", "b", "c")
	var rs []*Replicator
	for _, id := range []string{"a", "b", "c"} {
		rs = append(rs, c.nodes[id].r)
	}
	fill(rs, []string{"a", "b", "c"}, 100_000, make([]byte, 100))
	cfg := testConfig()
	c.settle()
	c.net.ResetStats()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Rounds to different peers need not fall due at the same instant:
		// move the clock in small steps until all six have run.
		before := c.net.TotalStats().Messages
		deadline := time.Now().Add(10 * time.Second)
		step := cfg.VerifyInterval / 10
		for moved := time.Duration(0); c.net.TotalStats().Messages < before+12; { // 6 digests, 6 answers
			if time.Now().After(deadline) || moved > 2*cfg.VerifyInterval {
				b.Fatalf("verify round did not finish: %d messages", c.net.TotalStats().Messages-before)
			}
			if moved < cfg.VerifyInterval {
				c.clk.Advance(step)
				moved += step
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	b.StopTimer()
	st := c.net.TotalStats()
	if st.Messages != uint64(12*b.N) {
		b.Fatalf("%d messages in %d rounds, want %d: a repair happened, the nodes were not in sync", st.Messages, b.N, 12*b.N)
	}
	b.ReportMetric(float64(st.Bytes)/float64(6*b.N), "bytes/round")
}

// BenchmarkLoad: a node joins a 2-node cluster holding 100,000 records over real TCP and loads
// them (from both peers, merged); ms-to-ready is from Start to Ready.
func BenchmarkLoad(b *testing.B) {
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		var tc tcpCluster
		n1, m1 := tc.addTCPNode(b, "n1", nil)
		n2, m2 := tc.addTCPNode(b, "n2", nil)
		n3, m3 := tc.addTCPNode(b, "n3", nil)
		all := []Member{{ID: "n1"}, {ID: "n2"}, {ID: "n3"}}
		m1.Set(all[:2]...)
		m2.Set(all[:2]...)
		for _, n := range []*realNode{n1, n2} {
			n.r.Start(context.Background())
		}
		for _, n := range []*realNode{n1, n2} {
			n.r.WaitReady(context.Background())
		}
		fill([]*Replicator{n1.r, n2.r}, []string{"n1", "n2"}, 100_000, make([]byte, 100))
		m1.Set(all...)
		m2.Set(all...)
		m3.Set(all...)
		b.StartTimer()
		start := time.Now()
		n3.r.Start(context.Background())
		if err := n3.r.WaitReady(context.Background()); err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		b.StopTimer()
		total += took
		if got := len(held(n3.r)); got != 100_000 {
			b.Fatalf("loaded %d records, want 100000", got)
		}
		tc.close()
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-to-ready")
}

// BenchmarkPut is the cost the registry pays under its lock: version, table, digest and one
// sync task per peer (2 peers; the fake clock never moves, so nothing is sent).
func BenchmarkPut(b *testing.B) {
	c := newCluster(b, nil, "a", "b", "c")
	r := c.nodes["a"].r
	keys := make([]string, 4096)
	for i := range keys {
		keys[i] = fmt.Sprintf("session-%d", i)
	}
	payload := make([]byte, 200)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := r.Put(KindSession, keys[i%len(keys)], payload); err != nil {
			b.Fatal(err)
		}
	}
}
