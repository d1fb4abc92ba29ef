package registry_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
)

// TestConcurrentUse runs registers, beats, sessions, patches, queries,
// selections and watches on shared services from many goroutines while the
// clock moves. Run with -race. At the end every watcher must have reached
// the final revision, and the index must agree with a query.
func TestConcurrentUse(t *testing.T) {
	r := newReg(t)
	services := []string{"s0", "s1", "s2"}
	c, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	type watched struct {
		w    *registry.Watcher
		svc  string
		last atomic.Uint64
	}
	var watchers []*watched
	for _, name := range services {
		for range 3 {
			w, err := r.Watch(c, model.Query{Service: svcKey(name)})
			if err != nil {
				t.Fatal(err)
			}
			ww := &watched{w: w, svc: name}
			watchers = append(watchers, ww)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					u, err := w.Next(c)
					if err != nil {
						return
					}
					if last := ww.last.Load(); u.Revision <= last && last != 0 {
						t.Errorf("watcher revision went from %d to %d", last, u.Revision)
					}
					ww.last.Store(u.Revision)
				}
			}()
		}
	}
	const workers, ops = 6, 400
	var writers sync.WaitGroup
	for g := range workers {
		writers.Add(1)
		go func() {
			defer writers.Done()
			sess, err := r.OpenSession(ctx, registry.SessionOptions{TTL: time.Minute})
			if err != nil {
				t.Error(err)
				return
			}
			for i := range ops {
				name := services[i%len(services)]
				in := model.NewInstance(svcKey(name), fmt.Sprintf("10.%d.%d.1", g, i%20), 8000+i%3)
				switch i % 7 {
				case 0, 1:
					_ = r.Register(ctx, in)
				case 2:
					_, _ = r.HeartbeatInstance(ctx, in)
				case 3:
					_ = sess.Register(ctx, in)
				case 4:
					_ = r.Deregister(ctx, in.Key())
				case 5:
					w := float64(i % 4)
					_ = r.PatchInstance(ctx, model.InstancePatch{Key: in.Key(), Weight: &w})
				case 6:
					_ = sess.KeepAlive(ctx)
				}
				if _, err := r.Query(ctx, model.Query{Service: svcKey(name), HealthyOnly: i%2 == 0}); err != nil {
					t.Error(err)
				}
				_, _ = r.SelectOne(ctx, model.Query{Service: svcKey(name), Clusters: []string{"DEFAULT"}})
			}
			if g%2 == 0 {
				sess.Close()
			}
		}()
	}
	writers.Add(1)
	go func() { // the clock moves while all this happens
		defer writers.Done()
		for range 20 {
			r.Clock.Advance(2 * time.Second)
		}
	}()
	writers.Wait()
	r.Settle()

	for _, name := range services {
		want := all(t, r, name)
		seen := map[model.InstanceKey]bool{}
		for _, in := range want.Instances {
			if seen[in.Key()] {
				t.Fatalf("%s: %s twice in one view", name, in.Key())
			}
			seen[in.Key()] = true
		}
	}
	// Every watcher reaches its service's final revision.
	deadline := time.Now().Add(10 * time.Second)
	for _, ww := range watchers {
		want := all(t, r, ww.svc).Revision
		for ww.last.Load() != want {
			if time.Now().After(deadline) {
				t.Fatalf("watcher of %s stuck at revision %d, want %d", ww.svc, ww.last.Load(), want)
			}
			runtime.Gosched()
		}
	}
	cancel()
	wg.Wait()
}
