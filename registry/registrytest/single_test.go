package registrytest_test

import (
	"context"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
)

// Eventually moves the fake clock in steps until the condition holds: a
// beat instance turns unhealthy 15 s after its last beat, found within a
// step of that.
func TestEventually(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.New(t, registrytest.Options{Step: time.Second})
	inst := model.NewInstance(model.ServiceKey{Name: "orders"}, "10.0.0.1", 8080)
	if err := reg.Register(ctx, inst); err != nil {
		t.Fatal(err)
	}
	reg.Eventually(time.Minute, func() bool {
		v, err := reg.Query(ctx, model.Query{Service: inst.Service})
		return err == nil && len(v.Instances) == 1 && !v.RealHealthy(0)
	}, "the instance never turned unhealthy")
	if took := reg.Clock.Since(registrytest.Epoch); took < 15*time.Second || took > 16*time.Second {
		t.Fatalf("unhealthy after %v of fake time, want 15–16 s", took)
	}
}

// Step moves the clock by Options.Step, settled, for a single registry and
// a cluster alike.
func TestStep(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{Step: 3 * time.Second})
	reg.Step()
	reg.Step()
	if got := reg.Clock.Since(registrytest.Epoch); got != 6*time.Second {
		t.Fatalf("two steps of 3s moved the clock by %v", got)
	}
	c := registrytest.NewCluster(t, registrytest.ClusterOptions{Nodes: 2, Step: time.Second})
	before := c.Clock.Now()
	c.Step()
	if got := c.Clock.Since(before); got != time.Second {
		t.Fatalf("a cluster step of 1s moved the clock by %v", got)
	}
}

// Eventually fails the test when the condition never holds in its limit.
func TestEventuallyFails(t *testing.T) {
	rec := &fatalRecorder{recorder: recorder{T: t}}
	reg := registrytest.New(rec, registrytest.Options{})
	done := make(chan struct{})
	go func() { // Fatalf ends the goroutine, as it ends a test's
		defer close(done)
		reg.Eventually(2*time.Second, func() bool { return false }, "never")
	}()
	<-done
	rec.runCleanups()
	if !rec.fatal.Load() {
		t.Fatal("Eventually returned for a condition that never held")
	}
	if got := reg.Clock.Since(registrytest.Epoch); got != 2*time.Second {
		t.Fatalf("Eventually moved the clock by %v, want its limit 2s", got)
	}
}

// After Settle (and Advance), every watcher has been handed the newest
// view: Next returns it at once, even with a context that has ended.
func TestSettleHandsWatchersTheNewestView(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.New(t, registrytest.Options{})
	svc := model.ServiceKey{Name: "orders"}
	var ws []*registry.Watcher
	for range 4 {
		w, err := reg.Watch(ctx, model.Query{Service: svc})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		ws = append(ws, w)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	for _, w := range ws {
		if _, err := w.Next(ended); err != nil { // the first view, empty
			t.Fatal(err)
		}
	}
	for i := range 100 {
		if err := reg.Register(ctx, model.NewInstance(svc, "10.0.0.1", 1000+i)); err != nil {
			t.Fatal(err)
		}
		reg.Settle()
		for k, w := range ws {
			u, err := w.Next(ended)
			if err != nil {
				t.Fatalf("round %d, watcher %d: no view handed over after Settle: %v", i, k, err)
			}
			if len(u.View.Instances) != i+1 {
				t.Fatalf("round %d, watcher %d: %d instances, want %d", i, k, len(u.View.Instances), i+1)
			}
		}
	}
	// Advance settles too: the expiry 30 s after the last beat reaches
	// every watcher.
	reg.Advance(31 * time.Second)
	for k, w := range ws {
		u, err := w.Next(ended)
		if err != nil || len(u.View.Instances) != 0 {
			t.Fatalf("watcher %d after the expiry: %v, %v", k, u.View, err)
		}
	}
	// So does Eventually, even when cond holds at once.
	if err := reg.Register(ctx, model.NewInstance(svc, "10.0.0.2", 80)); err != nil {
		t.Fatal(err)
	}
	reg.Eventually(time.Second, func() bool { return true }, "never")
	for k, w := range ws {
		if u, err := w.Next(ended); err != nil || len(u.View.Instances) != 1 {
			t.Fatalf("watcher %d after Eventually: %v, %v", k, u.View, err)
		}
	}
}

// registrytest.New leaves active health checks off: a persistent instance
// with a TCP check is never dialled.
func TestNewHasNoActiveChecks(t *testing.T) {
	ctx := context.Background()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var dials atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			dials.Add(1)
			c.Close()
		}
	}()
	reg := registrytest.New(t, registrytest.Options{})
	svc := model.ServiceKey{Name: "db"}
	if err := reg.CreateService(ctx, model.Service{Key: svc, Clusters: []model.Cluster{{
		Name: model.DefaultCluster, HealthCheck: model.HealthCheck{Type: model.CheckTCP},
	}}}); err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().(*net.TCPAddr)
	in := model.NewInstance(svc, "127.0.0.1", addr.Port)
	in.Ephemeral = false
	if err := reg.Register(ctx, in); err != nil {
		t.Fatal(err)
	}
	reg.Advance(30 * time.Second)
	if st, ok := reg.Internals().CheckStatus(in.Key()); ok {
		t.Fatalf("checks configured: %+v", st)
	}
	if n := dials.Load(); n != 0 {
		t.Fatalf("the instance's address was dialled %d times", n)
	}
}

// The leak check allows t.Parallel: a goroutine another test leaves
// running while this one ends is not this test's leak.
func TestLeakCheckAllowsParallel(t *testing.T) {
	stop := make(chan struct{})
	started := make(chan struct{})
	t.Run("group", func(t *testing.T) {
		t.Run("other", func(t *testing.T) {
			t.Parallel()
			go func() { <-stop }() // still running when "mine" ends
			close(started)
		})
		t.Run("mine", func(t *testing.T) {
			t.Parallel()
			rec := &recorder{T: t}
			reg := registrytest.New(rec, registrytest.Options{Parallel: true})
			<-started
			_ = reg.Register(context.Background(), model.NewInstance(model.ServiceKey{Name: "a"}, "10.0.0.1", 1))
			rec.runCleanups()
			if len(rec.errors) > 0 {
				t.Fatalf("another test's goroutine reported as a leak: %v", rec.errors)
			}
		})
	})
	close(stop)
}

// The default leak check is strict: a goroutine started after New and left
// running is a leak, whoever started it.
func TestLeakCheckStrictByDefault(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	rec := &recorder{T: t}
	registrytest.New(rec, registrytest.Options{})
	done := make(chan struct{})
	go func() { // its creator exits at once: the descent rule cannot see it
		go func() { <-stop }()
		close(done)
	}()
	<-done
	rec.runCleanups()
	if len(rec.errors) == 0 {
		t.Fatal("a goroutine left running was not reported as a leak")
	}
}

// fatalRecorder also catches Fatalf, ending the calling goroutine.
type fatalRecorder struct {
	recorder
	fatal atomic.Bool
}

func (r *fatalRecorder) Cleanup(f func()) { r.recorder.Cleanup(f) }
func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.fatal.Store(true)
	if !strings.Contains(format, "registrytest") {
		r.T.Errorf("unexpected failure: "+format, args...)
	}
	runtime.Goexit()
}
