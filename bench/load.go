package main

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/muster-io/muster/model"
)

// instance returns instance number id of service svc: a distinct IP per id,
// port 8080, Nacos's defaults and three short metadata entries (one unique),
// as the registry's own benchmarks use.
func instance(svc model.ServiceKey, id int) model.Instance {
	in := model.NewInstance(svc, fmt.Sprintf("10.%d.%d.%d", id>>16&255, id>>8&255, id&255), 8080)
	in.Metadata = model.NewMetadata(map[string]string{
		"version": "1.4.2",
		"zone":    "zone-" + string(rune('a'+id%3)),
		"id":      "i-" + strconv.Itoa(id),
	})
	return in
}

// svcOf spreads instance ids over services svc-0 … svc-(n-1).
func svcOf(id, n int) model.ServiceKey {
	return model.ServiceKey{Name: "svc-" + strconv.Itoa(id%n)}
}

// etcdPrefix is the key prefix of a service in etcd: the layout a registry
// on etcd uses (one key per instance under its service, as
// go-micro/kratos/dubbo-go registries on etcd do).
func etcdPrefix(svc model.ServiceKey) string {
	svc = svc.WithDefaults()
	return "/registry/" + svc.Namespace + "/" + svc.Group + "/" + svc.Name + "/"
}

// etcdKV returns the key and the value etcd stores for in: the instance's
// JSON (about 230 bytes), the same content Muster holds.
func etcdKV(in model.Instance) (string, string) {
	b, err := json.Marshal(in)
	if err != nil {
		panic(err) // a model.Instance always encodes
	}
	return etcdPrefix(in.Service) + in.IP + ":" + strconv.Itoa(in.Port), string(b)
}

// closedLoop runs writers goroutines; each calls op(w, i) for i = 0, 1, …
// until it has done perWriter operations (0: no bound) or dur has passed
// (0: no bound). It returns the operations done and the time taken. The
// first error stops every writer.
func closedLoop(writers, perWriter int, dur time.Duration, op func(w, i int) error) (int, time.Duration, error) {
	var stop atomic.Bool
	var total atomic.Int64
	var errOnce sync.Once
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now() // real time
	if dur > 0 {
		t := time.AfterFunc(dur, func() { stop.Store(true) }) // real time
		defer t.Stop()
	}
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for i := 0; (perWriter == 0 || i < perWriter) && !stop.Load(); i++ {
				if err := op(w, i); err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("writer %d, op %d: %w", w, i, err) })
					stop.Store(true)
					break
				}
				n++
			}
			total.Add(int64(n))
		}()
	}
	wg.Wait()
	return int(total.Load()), time.Since(start), firstErr // real time
}

// waitFor polls cond every millisecond until it holds, fails, or timeout
// passes.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(time.Millisecond) // real time
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not reached within %v", what, timeout)
		case <-tick.C:
		}
	}
}

// timeFanout times changes changes, each until all watchers have it: for
// change ch it resets pending to watchers, calls prepare(ch) off the clock
// (it records what the watchers wait for and returns the write), then
// times the write until reached receives (the watcher that brings pending
// to 0 sends). A collection runs first, so no change pays for the set-up's
// garbage.
func timeFanout(changes, watchers int, pending *atomic.Int64, reached <-chan struct{}, prepare func(ch int) func() error) ([]time.Duration, error) {
	runtime.GC()
	var lat []time.Duration
	for ch := range changes {
		pending.Store(int64(watchers))
		write := prepare(ch)
		start := time.Now() // real time
		if err := write(); err != nil {
			return nil, err
		}
		select {
		case <-reached:
		case <-time.After(60 * time.Second): // real time
			return nil, fmt.Errorf("change %d: %d of %d watchers not notified within 60 s", ch, pending.Load(), watchers)
		}
		lat = append(lat, time.Since(start)) // real time
	}
	return lat, nil
}
