package registry_test

import (
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
)

// benchInstances returns n instances of svc with distinct IPs and three
// short metadata entries.
func benchInstances(svc model.ServiceKey, n, offset int) []model.Instance {
	out := make([]model.Instance, n)
	for i := range out {
		j := offset + i
		in := model.NewInstance(svc, fmt.Sprintf("10.%d.%d.%d", j>>16&255, j>>8&255, j&255), 8080)
		in.Metadata = model.NewMetadata(map[string]string{
			"version": "1.4.2",
			"zone":    "zone-" + string(rune('a'+j%3)),
			"id":      "i-" + strconv.Itoa(j),
		})
		out[i] = in
	}
	return out
}

// BenchmarkRegister: registering a new ephemeral instance into a service
// of 100 instances, in a registry holding 100,000: "session" through a
// session (Nacos 2.x's gRPC clients), "beat" on its own, kept alive by
// heartbeats (Nacos 1.x's clients: a beat publisher and a lease more). Each
// round times 100 registrations into one service (100 → 200 instances),
// then, off the clock, removes them again, so the registry stays the same
// size from round to round, as under steady churn.
func BenchmarkRegister(b *testing.B) {
	b.Run("session", func(b *testing.B) { benchRegister(b, true) })
	b.Run("beat", func(b *testing.B) { benchRegister(b, false) })
}

func benchRegister(b *testing.B, session bool) {
	const services = 1000
	r := newBenchRegistry(b)
	keys := make([]model.ServiceKey, services)
	for s := range keys {
		keys[s] = model.ServiceKey{Name: "svc-" + strconv.Itoa(s)}
		for _, in := range benchInstances(keys[s], 100, s*100) {
			if err := r.Register(ctx, in); err != nil {
				b.Fatal(err)
			}
		}
	}
	sess, err := r.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		b.Fatal(err)
	}
	register, deregister := r.Register, r.Deregister
	if session {
		register, deregister = sess.Register, sess.Deregister
	}
	fresh := benchInstances(model.ServiceKey{}, 100, 1<<22)
	round := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		j := i % 100
		if j == 0 {
			b.StopTimer()
			if i > 0 {
				for _, in := range fresh {
					if err := deregister(ctx, in.Key()); err != nil {
						b.Fatal(err)
					}
				}
				round++
			}
			for k := range fresh {
				fresh[k].Service = keys[round%services]
			}
			b.StartTimer()
		}
		if err := register(ctx, fresh[j]); err != nil {
			b.Fatal(err)
		}
	}
}

// newBenchRegistry returns a started registry on the real clock, as in
// production (the fake clock of registrytest takes a lock on every
// reading).
func newBenchRegistry(b *testing.B) *registry.Registry {
	b.Helper()
	r, err := registry.New(registry.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close() })
	return r
}

// BenchmarkHeartbeat: a beat of an instance the registry holds, among
// 10,000 beat instances.
func BenchmarkHeartbeat(b *testing.B) {
	r := newBenchRegistry(b)
	var insts []model.Instance
	for s := range 100 {
		insts = append(insts, benchInstances(model.ServiceKey{Name: "svc-" + strconv.Itoa(s)}, 100, s*100)...)
	}
	for _, in := range insts {
		if err := r.Register(ctx, in); err != nil {
			b.Fatal(err)
		}
	}
	keys := make([]model.InstanceKey, len(insts))
	for i := range insts {
		keys[i] = insts[i].Key()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := r.Heartbeat(ctx, keys[i%len(keys)]); err != nil {
			b.Fatal(err)
		}
	}
}

// benchQueryRegistry returns a registry holding one service of 100
// instances, and the query of it.
func benchQueryRegistry(b *testing.B) (*registry.Registry, model.Query) {
	r := newBenchRegistry(b)
	key := model.ServiceKey{Name: "orders"}
	for _, in := range benchInstances(key, 100, 0) {
		if err := r.Register(ctx, in); err != nil {
			b.Fatal(err)
		}
	}
	q := model.Query{Service: key}
	if v, err := r.Query(ctx, q); err != nil || len(v.Instances) != 100 {
		b.Fatal(err)
	}
	return r, q
}

// BenchmarkQuery: a query of an unchanged service of 100 instances.
func BenchmarkQuery(b *testing.B) {
	r, q := benchQueryRegistry(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := r.Query(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkQueryParallel: the same query from every core.
func BenchmarkQueryParallel(b *testing.B) {
	r, q := benchQueryRegistry(b)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := r.Query(ctx, q); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkWatchFanout: 10,000 watchers of one service of 100 instances;
// one op is one change, timed until it has reached every watcher: the
// newest view is in each watcher's slot and each has been signalled, so its
// Next returns the new view at once. Watchers are served in the order they
// were created, so the op ends when the last watcher, read by the benchmark,
// returns the change.
func BenchmarkWatchFanout(b *testing.B) {
	benchFanout(b, false)
}

// BenchmarkWatchFanoutReaders is BenchmarkWatchFanout with every watcher
// read by a goroutine of its own, as a server with one goroutine per
// subscriber would: the op ends when all 10,000 goroutines have woken and
// returned the change from Next. Waking 10,000 goroutines is most of the
// cost; compare BenchmarkGoroutineWake.
func BenchmarkWatchFanoutReaders(b *testing.B) {
	benchFanout(b, true)
}

func benchFanout(b *testing.B, readers bool) {
	const watchers = 10_000
	r := registrytest.New(b, registrytest.Options{})
	key := model.ServiceKey{Name: "orders"}
	insts := benchInstances(key, 100, 0)
	for _, in := range insts {
		if err := r.Register(ctx, in); err != nil {
			b.Fatal(err)
		}
	}
	var (
		want    atomic.Uint64 // the revision every watcher must reach
		pending atomic.Int64  // watchers that have not reached it yet
		reached = make(chan struct{}, 1)
		wg      sync.WaitGroup
	)
	ws := make([]*registry.Watcher, watchers)
	for i := range ws {
		w, err := r.Watch(ctx, model.Query{Service: key})
		if err != nil {
			b.Fatal(err)
		}
		ws[i] = w
		if _, err := w.Next(ctx); err != nil {
			b.Fatal(err)
		}
		if !readers {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var seen uint64
			for {
				u, err := w.Next(ctx)
				if err != nil {
					return
				}
				if target := want.Load(); seen < target && u.Revision >= target {
					if pending.Add(-1) == 0 {
						reached <- struct{}{}
					}
				}
				seen = u.Revision
			}
		}()
	}
	last := ws[len(ws)-1]
	change := func(i int) uint64 {
		in := insts[i%len(insts)]
		in.Weight = float64(2 + i/len(insts)%2) // a change every time (the same instance again changes nothing)
		pending.Store(watchers)
		want.Store(^uint64(0)) // nobody counts until the revision is known
		if err := r.Register(ctx, in); err != nil {
			b.Fatal(err)
		}
		v, _ := r.Query(ctx, model.Query{Service: key})
		want.Store(v.Revision)
		return v.Revision
	}
	runtime.GC()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rev := change(i)
		if readers {
			<-reached
			continue
		}
		for {
			u, err := last.Next(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if u.Revision >= rev {
				break
			}
		}
	}
	b.StopTimer()
	for _, w := range ws {
		w.Close()
	}
	wg.Wait()
}

// BenchmarkGoroutineWake is the floor under BenchmarkWatchFanoutReaders:
// waking 10,000 goroutines, each blocked on a channel of its own, and
// waiting until all have run. It involves no Muster code.
func BenchmarkGoroutineWake(b *testing.B) {
	const n = 10_000
	chans := make([]chan struct{}, n)
	var pending atomic.Int64
	done := make(chan struct{}, 1)
	for i := range chans {
		chans[i] = make(chan struct{}, 1)
		go func(c chan struct{}) {
			for range c {
				if pending.Add(-1) == 0 {
					done <- struct{}{}
				}
			}
		}(chans[i])
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pending.Store(n)
		for _, c := range chans {
			select {
			case c <- struct{}{}:
			default:
			}
		}
		<-done
	}
	b.StopTimer()
	for _, c := range chans {
		close(c)
	}
}

// BenchmarkMemoryPerInstance: the heap held per instance with 1,000,000
// instances in 10,000 services, three short metadata entries each (one of
// them unique per instance). "session" publishes them through 1,000
// sessions of 1,000 instances (Nacos 2.x's gRPC clients); "beat" registers
// each on its own, kept alive by heartbeats (Nacos 1.x's clients), which
// adds a publisher and a lease per ip:port. B/instance is measured after the
// registrations; B/instance-viewed after every service's view has been
// built once.
func BenchmarkMemoryPerInstance(b *testing.B) {
	b.Run("session", func(b *testing.B) { benchMemory(b, true) })
	b.Run("beat", func(b *testing.B) { benchMemory(b, false) })
}

func benchMemory(b *testing.B, sessions bool) {
	const services, perService, perSession = 10_000, 100, 1_000
	for i := 0; i < b.N; i++ {
		r := registrytest.New(b, registrytest.Options{})
		keys := make([]model.ServiceKey, services)
		for s := range keys {
			keys[s] = model.ServiceKey{Name: "svc-" + strconv.Itoa(s)}
		}
		runtime.GC()
		var before, after, viewed runtime.MemStats
		runtime.ReadMemStats(&before)
		var sess *registry.Session
		n := 0
		for s, key := range keys {
			for _, in := range benchInstances(key, perService, s*perService) {
				var err error
				if sessions {
					if n%perSession == 0 {
						if sess, err = r.OpenSession(ctx, registry.SessionOptions{}); err != nil {
							b.Fatal(err)
						}
					}
					err = sess.Register(ctx, in)
				} else {
					err = r.Register(ctx, in)
				}
				if err != nil {
					b.Fatal(err)
				}
				n++
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		for _, key := range keys {
			if _, err := r.Query(ctx, model.Query{Service: key}); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&viewed)
		// A watcher of each service, past its first update: what a
		// subscribed service holds beyond its view.
		watchers := make([]*registry.Watcher, len(keys))
		for s, key := range keys {
			w, err := r.Watch(ctx, model.Query{Service: key})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := w.Next(ctx); err != nil {
				b.Fatal(err)
			}
			watchers[s] = w
		}
		runtime.GC()
		var watched runtime.MemStats
		runtime.ReadMemStats(&watched)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "B/instance")
		b.ReportMetric(float64(viewed.HeapAlloc-before.HeapAlloc)/float64(n), "B/instance-viewed")
		b.ReportMetric(float64(watched.HeapAlloc-viewed.HeapAlloc)/float64(len(keys)), "B/watched-service")
		runtime.KeepAlive(watchers)
		runtime.KeepAlive(r)
		r.Close()
	}
}
