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

// BenchmarkRegister: registering a new ephemeral (beat) instance into a
// service that holds 100 to 200 instances. Each service is filled with 100
// instances outside the timer; then 100 new ones are timed.
func BenchmarkRegister(b *testing.B) {
	b.ReportAllocs()
	fill := benchInstances(model.ServiceKey{}, 100, 0)
	fresh := benchInstances(model.ServiceKey{}, 100, 100)
	var r *registrytest.Registry
	svcN := 0
	for i := 0; i < b.N; i++ {
		if i%100 == 0 {
			b.StopTimer()
			if i%50_000 == 0 { // bound the heap: a new registry now and then
				if r != nil {
					r.Close()
				}
				r = registrytest.New(b, registrytest.Options{})
			}
			svcN++
			key := model.ServiceKey{Name: "svc-" + strconv.Itoa(svcN)}
			for j := range fill {
				fill[j].Service = key
				fresh[j].Service = key
			}
			for _, in := range fill {
				if err := r.Register(ctx, in); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
		}
		if err := r.Register(ctx, fresh[i%100]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHeartbeat: a beat of an instance the registry holds, among
// 10,000 beat instances.
func BenchmarkHeartbeat(b *testing.B) {
	r := registrytest.New(b, registrytest.Options{})
	var insts []model.Instance
	for s := range 100 {
		insts = append(insts, benchInstances(model.ServiceKey{Name: "svc-" + strconv.Itoa(s)}, 100, s*100)...)
	}
	for _, in := range insts {
		if err := r.Register(ctx, in); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := r.Heartbeat(ctx, insts[i%len(insts)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkQuery: a query of an unchanged service of 100 instances.
func BenchmarkQuery(b *testing.B) {
	r := registrytest.New(b, registrytest.Options{})
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
	r := registrytest.New(b, registrytest.Options{})
	key := model.ServiceKey{Name: "orders"}
	for _, in := range benchInstances(key, 100, 0) {
		if err := r.Register(ctx, in); err != nil {
			b.Fatal(err)
		}
	}
	q := model.Query{Service: key}
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

// BenchmarkWatchFanout: 10,000 watchers of one service of 100 instances,
// each read by its own goroutine (as a server would, one per subscriber).
// One op is one change, timed until every watcher has returned it from Next.
func BenchmarkWatchFanout(b *testing.B) {
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
	var ws []*registry.Watcher
	for range watchers {
		w, err := r.Watch(ctx, model.Query{Service: key})
		if err != nil {
			b.Fatal(err)
		}
		ws = append(ws, w)
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
	change := func(i int) {
		in := insts[i%len(insts)]
		in.Weight = float64(1 + i%2)
		pending.Store(watchers)
		want.Store(^uint64(0)) // nobody counts until the revision is known
		if err := r.Register(ctx, in); err != nil {
			b.Fatal(err)
		}
		v, _ := r.Query(ctx, model.Query{Service: key})
		want.Store(v.Revision)
	}
	runtime.GC()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		change(i)
		<-reached
	}
	b.StopTimer()
	for _, w := range ws {
		w.Close()
	}
	wg.Wait()
}

// BenchmarkMemoryPerInstance: the heap held per instance with 1,000,000
// beat instances in 10,000 services, three short metadata entries each (one
// of them unique per instance), before and after every service's view has
// been built once.
func BenchmarkMemoryPerInstance(b *testing.B) {
	const services, perService = 10_000, 100
	for i := 0; i < b.N; i++ {
		r := registrytest.New(b, registrytest.Options{})
		keys := make([]model.ServiceKey, services)
		for s := range keys {
			keys[s] = model.ServiceKey{Name: "svc-" + strconv.Itoa(s)}
		}
		runtime.GC()
		var before, after, viewed runtime.MemStats
		runtime.ReadMemStats(&before)
		for s, key := range keys {
			for _, in := range benchInstances(key, perService, s*perService) {
				if err := r.Register(ctx, in); err != nil {
					b.Fatal(err)
				}
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
		n := float64(services * perService)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/instance")
		b.ReportMetric(float64(viewed.HeapAlloc-before.HeapAlloc)/n, "B/instance-viewed")
		runtime.KeepAlive(r)
		r.Close()
	}
}
