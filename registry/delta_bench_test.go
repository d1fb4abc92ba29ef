package registry_test

import (
	"context"
	"flag"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/muster-io/muster/distro"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/transport"
)

// benchPair starts two registries, n1 and n2, over a MemNetwork on the real
// clock (static membership, SyncDelay 0), ready.
func benchPair(b *testing.B) (*transport.MemNetwork, *registry.Registry, *registry.Registry) {
	b.Helper()
	net := &transport.MemNetwork{}
	a, closeA := benchNode(b, net, "n1", "n1", "n2")
	peer, closePeer := benchNode(b, net, "n2", "n1", "n2")
	b.Cleanup(func() { closeA(); closePeer() })
	benchReady(b, a, peer)
	return net, a, peer
}

// benchNode starts the registry of node id, a member of a static cluster
// of ids over net (SyncDelay 0, the real clock), and returns it with the
// function that closes it and its transport (the caller calls it).
func benchNode(b *testing.B, net *transport.MemNetwork, id string, ids ...string) (*registry.Registry, func()) {
	b.Helper()
	var all []distro.Member
	for _, m := range ids {
		all = append(all, distro.Member{ID: m})
	}
	tr, err := net.Node(id)
	if err != nil {
		b.Fatal(err)
	}
	mem := distro.NewStatic(distro.Member{ID: id})
	mem.Set(all...)
	dc := distro.DefaultConfig()
	dc.Transport, dc.Membership, dc.SyncDelay = tr, mem, distro.NoSyncDelay
	dc.LoadTimeout = 100 * time.Millisecond
	cfg := registry.DefaultConfig()
	cfg.NodeID, cfg.Replicator, cfg.Transport, cfg.HealthChecks = id, registry.Distro(dc), tr, nil
	reg, err := registry.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := reg.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	return reg, func() { reg.Close(); tr.Close() }
}

// benchSettle returns once regs and net are idle: no message in flight, and
// nothing left to do on any node (as registrytest's Cluster.Settle), or
// fails after 60 s.
func benchSettle(b *testing.B, net *transport.MemNetwork, regs ...*registry.Registry) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	last := uint64(1<<64 - 1)
	for {
		if err := net.WaitIdle(ctx); err != nil {
			b.Fatal(err)
		}
		did := false
		for _, r := range regs {
			if err := r.Internals().Settle(ctx); err != nil {
				b.Fatal(err)
			}
			if s, ok := r.Internals().Replicator().(interface {
				Settle(context.Context) (bool, error)
			}); ok {
				d, err := s.Settle(ctx)
				if err != nil {
					b.Fatal(err)
				}
				did = did || d
			}
		}
		if err := net.WaitIdle(ctx); err != nil {
			b.Fatal(err)
		}
		now := uint64(net.TotalStats().Messages)
		if !did && now == last {
			return
		}
		last = now
	}
}

// benchReady waits for every registry of regs to be ready.
func benchReady(b *testing.B, regs ...*registry.Registry) {
	b.Helper()
	for _, r := range regs {
		if err := r.WaitReady(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

// watchUntil reads w until ok holds for a view, or fails after 10 s.
func watchUntil(b *testing.B, w *registry.Watcher, ok func(registry.Update) bool) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		u, err := w.Next(ctx)
		if err != nil {
			b.Fatalf("watch: %v", err)
		}
		if ok(u) {
			return
		}
	}
}

// BenchmarkSessionChange: the cost of one change to one instance of a
// session of 1, 100 or 1,000 instances, replicated to a second node: the
// owner encodes and sends it, the peer decodes and applies it, and a
// watcher on the peer is handed the view holding it. The session's
// instances are spread over services of 10 (a session multiplexes
// services), so that what grows is the session, not the view a watcher is
// handed. Each change waits for that view before the next (no merging), so
// ns/op is the whole chain for one change; B-wire/change is what crossed
// the network (both directions).
func BenchmarkSessionChange(b *testing.B) {
	for _, size := range []int{1, 100, 1000} {
		b.Run("instances="+strconv.Itoa(size), func(b *testing.B) {
			ctx := context.Background()
			net, a, peer := benchPair(b)
			sess, err := a.OpenSession(ctx, registry.SessionOptions{})
			if err != nil {
				b.Fatal(err)
			}
			var insts []model.Instance
			var ws []*registry.Watcher
			for s := 0; s*10 < size; s++ {
				svc := model.ServiceKey{Name: "change-" + strconv.Itoa(s)}
				part := benchInstances(svc, min(10, size-s*10), s*10)
				for _, in := range part {
					if err := sess.Register(ctx, in); err != nil {
						b.Fatal(err)
					}
				}
				insts = append(insts, part...)
				w, err := peer.Watch(ctx, model.Query{Service: svc})
				if err != nil {
					b.Fatal(err)
				}
				defer w.Close()
				watchUntil(b, w, func(u registry.Update) bool { return len(u.View.Instances) == len(part) })
				ws = append(ws, w)
			}
			net.ResetStats()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				j := i % size
				in := insts[j]
				in.Weight = float64(2 + (i/size)%5000) // a real change every time
				if err := sess.Register(ctx, in); err != nil {
					b.Fatal(err)
				}
				watchUntil(b, ws[j/10], func(u registry.Update) bool {
					for _, got := range u.View.Instances {
						if got.IP == in.IP && got.Weight == in.Weight {
							return true
						}
					}
					return false
				})
			}
			b.StopTimer()
			st := net.TotalStats()
			b.ReportMetric(float64(st.Bytes)/float64(b.N), "B-wire/change")
			b.ReportMetric(float64(st.Messages)/float64(b.N), "msgs/change")
		})
	}
}

// BenchmarkSessionVisibility: one session of 100 instances on n1 registers
// one more; the latency runs until a watcher on n2 is handed a view holding
// it (cross-node visibility, issue 15). Each iteration measures one
// registration; the instance is removed again off the clock.
func BenchmarkSessionVisibility(b *testing.B) {
	ctx := context.Background()
	_, a, peer := benchPair(b)
	svc := model.ServiceKey{Name: "visible"}
	sess, err := a.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, in := range benchInstances(svc, 100, 0) {
		if err := sess.Register(ctx, in); err != nil {
			b.Fatal(err)
		}
	}
	w, err := peer.Watch(ctx, model.Query{Service: svc})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	watchUntil(b, w, func(u registry.Update) bool { return len(u.View.Instances) == 100 })
	extra := benchInstances(svc, 1, 1<<20)[0]
	lat := make([]time.Duration, 0, b.N)
	var mu sync.Mutex
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if err := sess.Register(ctx, extra); err != nil {
			b.Fatal(err)
		}
		watchUntil(b, w, func(u registry.Update) bool { return len(u.View.Instances) == 101 })
		d := time.Since(start)
		b.StopTimer()
		mu.Lock()
		lat = append(lat, d)
		mu.Unlock()
		if err := sess.Deregister(ctx, extra.Key()); err != nil {
			b.Fatal(err)
		}
		watchUntil(b, w, func(u registry.Update) bool { return len(u.View.Instances) == 100 })
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Nanoseconds())/1e3, "p99-µs")
}

// BenchmarkIdenticalRegister: registering again the instance a session (or
// a beat publisher) already holds, unchanged (issue 15, goal 5: no
// revision, no wake-up, no record).
func BenchmarkIdenticalRegister(b *testing.B) {
	ctx := context.Background()
	for _, kind := range []string{"session", "beat"} {
		b.Run(kind, func(b *testing.B) {
			r := newBenchRegistry(b)
			in := benchInstances(model.ServiceKey{Name: "same"}, 1, 7)[0]
			register := r.Register
			if kind == "session" {
				sess, err := r.OpenSession(ctx, registry.SessionOptions{})
				if err != nil {
					b.Fatal(err)
				}
				register = sess.Register
			}
			if err := register(ctx, in); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := register(ctx, in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// clusterHeapProfile names a file to which BenchmarkClusterMemoryPerInstance
// writes a heap profile of both nodes at the point it measures them (the
// -memprofile of go test is taken after the nodes are closed).
var clusterHeapProfile = flag.String("cluster.heapprofile", "", "BenchmarkClusterMemoryPerInstance: write a heap profile of the loaded cluster to this file")

// clusterSessions is the number of sessions of 100 instances that
// BenchmarkClusterMemoryPerInstance registers: 10000 for issue 30.2's
// 1,000,000 instances (about 1.5 GB and minutes).
var clusterSessions = flag.Int("cluster.sessions", 1000, "BenchmarkClusterMemoryPerInstance: sessions of 100 instances")

// BenchmarkClusterMemoryPerInstance: the heap of a two-node cluster in one
// process per session instance, with 1,000 sessions of 100 instances on
// n1 (-cluster.sessions), in services of 1,000, replicated to n2 (issue 15: what the per-instance records cost in
// memory; issue 30.2: a node ≤ 500 B per instance). B/instance is both
// nodes together (owner and peer); peer-B/instance is n2's alone, measured
// once n1 is closed and collected (n2 holds distro's copy of every record
// and the registry's replica of every instance); owner-B/instance is the
// difference (n1 holds the sessions and distro's records of them). None
// of them holds a view: the peer is polled through Counts, not Query.
// peer-B/instance-viewed is n2's once every service's view has been built
// (a Query of each), as BenchmarkMemoryPerInstance's B/instance-viewed.
func BenchmarkClusterMemoryPerInstance(b *testing.B) {
	ctx := context.Background()
	sessions, per := *clusterSessions, 100
	services := max(sessions/10, 1) // of 1,000 instances each
	for i := 0; i < b.N; i++ {
		heap := func() uint64 {
			var m runtime.MemStats
			runtime.GC()
			runtime.GC()
			runtime.ReadMemStats(&m)
			return m.HeapAlloc
		}
		before := heap()
		net := &transport.MemNetwork{}
		// A b.Fatal closes the nodes still open; the holder's fields are
		// cleared as each closes, so that a closed n1 is garbage when the
		// peer is measured.
		open := &struct{ a, peer func() }{}
		b.Cleanup(func() {
			for _, c := range []func(){open.a, open.peer} {
				if c != nil {
					c()
				}
			}
		})
		a, closeA := benchNode(b, net, "n1", "n1", "n2")
		open.a = closeA
		peer, closePeer := benchNode(b, net, "n2", "n1", "n2")
		open.peer = closePeer
		benchReady(b, a, peer)
		for s := range sessions {
			sess, err := a.OpenSession(ctx, registry.SessionOptions{})
			if err != nil {
				b.Fatal(err)
			}
			for _, in := range benchInstances(model.ServiceKey{Name: "mem-" + strconv.Itoa(s%services)}, per, s*per) {
				if err := sess.Register(ctx, in); err != nil {
					b.Fatal(err)
				}
			}
		}
		peerHolds := func() int { return peer.Counts().Instances }
		wait := max(60*time.Second, time.Duration(sessions)*60*time.Millisecond) // 10 min at 1,000,000
		deadline := time.Now().Add(wait)
		for peerHolds() != sessions*per {
			if time.Now().After(deadline) {
				b.Fatalf("peer holds %d instances after %v", peerHolds(), wait)
			}
			time.Sleep(10 * time.Millisecond)
		}
		benchSettle(b, net, a, peer) // the owner's syncs acknowledged, its scheduler idle
		both := heap()
		if *clusterHeapProfile != "" {
			f, err := os.Create(*clusterHeapProfile)
			if err != nil {
				b.Fatal(err)
			}
			if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
				b.Fatal(err)
			}
			if err := f.Close(); err != nil {
				b.Fatal(err)
			}
		}
		net.Isolate("n1") // its Close ends its sessions: n2 must not hear of it
		open.a()          // n1 is garbage then: nothing here uses a or closeA again
		open.a = nil
		if n := peerHolds(); n != sessions*per { // n2 keeps its copies: its membership is static
			b.Fatalf("peer holds %d instances once the owner closed", n)
		}
		peerOnly := heap()
		for s := range services {
			if _, err := peer.Query(ctx, model.Query{Service: model.ServiceKey{Name: "mem-" + strconv.Itoa(s)}}); err != nil {
				b.Fatal(err)
			}
		}
		viewed := heap()
		open.peer()
		open.peer = nil
		b.ReportMetric(float64(both-before)/float64(sessions*per), "B/instance")
		b.ReportMetric(float64(peerOnly-before)/float64(sessions*per), "peer-B/instance")
		b.ReportMetric((float64(both)-float64(peerOnly))/float64(sessions*per), "owner-B/instance")
		b.ReportMetric(float64(viewed-before)/float64(sessions*per), "peer-B/instance-viewed")
	}
}
