package registry_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
)

// BenchmarkLimitCosts measures the heap one unit of each limit holds, at
// the largest names and metadata the default rules and limits allow (the
// worst case a hostile client can choose): an empty session, a beat
// instance (with its publisher and lease) in a service of 1,000, an empty
// service, a watcher of a service of its own. It reports B/unit; run it
// with -benchtime=1x.
//
//	go test -run '^$' -bench LimitCosts -benchtime=1x ./registry
func BenchmarkLimitCosts(b *testing.B) {
	const n = 10_000
	pad := func(prefix string, i, size int) string {
		s := fmt.Sprintf("%s%d-", prefix, i)
		return s + strings.Repeat("a", size-len(s))
	}
	// svc returns a service key of i at every name-length limit.
	svc := func(i int) model.ServiceKey {
		return model.ServiceKey{
			Namespace: pad("ns", i%10, model.MaxNamespaceLen),
			Group:     pad("g", i%10, model.MaxGroupLen),
			Name:      pad("s", i, model.MaxServiceNameLen),
		}
	}
	host := func(i int) string { // a DNS name of MaxHostLen bytes
		l := strings.Repeat("b", 63)
		h := fmt.Sprintf("h%08d.%s.%s.%s.", i, l, l, l)
		return h + strings.Repeat("c", model.MaxHostLen-len(h))
	}
	// maxMeta returns metadata of i at the default entry and size caps.
	maxMeta := func(i int) model.Metadata {
		d := registry.DefaultLimits()
		m := make(map[string]string, d.MaxMetadataEntries)
		per := d.MaxMetadataSize / d.MaxMetadataEntries // characters per entry
		for e := range d.MaxMetadataEntries {
			k := fmt.Sprintf("k%03d", e)
			v := fmt.Sprintf("%d", i)
			m[k] = v + strings.Repeat("v", per-len(k)-len(v))
		}
		return model.NewMetadata(m)
	}
	measure := func(b *testing.B, unit string, add func(r *registry.Registry, i int) error) {
		for b.Loop() {
			cfg := registry.DefaultConfig()
			cfg.HealthChecks = nil
			r, err := registry.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			if err := r.Start(ctx); err != nil {
				b.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for i := range n {
				if err := add(r, i); err != nil {
					b.Fatal(err)
				}
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/"+unit)
			runtime.KeepAlive(r)
			r.Close()
		}
	}
	b.Run("session", func(b *testing.B) {
		measure(b, "session", func(r *registry.Registry, i int) error {
			_, err := r.OpenSession(ctx, registry.SessionOptions{})
			return err
		})
	})
	b.Run("instance", func(b *testing.B) {
		measure(b, "instance", func(r *registry.Registry, i int) error {
			in := model.NewInstance(svc(i/1000), host(i), 8080)
			in.Cluster = pad("c", 0, model.MaxClusterLen)
			in.Metadata = maxMeta(i)
			return r.Register(ctx, in)
		})
	})
	b.Run("instance-short", func(b *testing.B) {
		measure(b, "instance", func(r *registry.Registry, i int) error {
			in := model.NewInstance(model.ServiceKey{Name: fmt.Sprintf("svc-%d", i/1000)}, fmt.Sprintf("10.0.%d.%d", i/250, i%250+1), 8080)
			in.Metadata = model.NewMetadata(map[string]string{"version": "1.4.2", "zone": "zone-a", "id": fmt.Sprint("i-", i)})
			return r.Register(ctx, in)
		})
	})
	b.Run("service", func(b *testing.B) {
		measure(b, "service", func(r *registry.Registry, i int) error {
			return r.CreateService(ctx, model.Service{Key: svc(i)})
		})
	})
	b.Run("watcher", func(b *testing.B) {
		measure(b, "watcher", func(r *registry.Registry, i int) error {
			_, err := r.Watch(ctx, model.Query{Service: svc(i)})
			return err
		})
	})
}
