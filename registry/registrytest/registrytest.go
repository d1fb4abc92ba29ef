package registrytest

import (
	"context"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/muster-io/muster/registry"
)

// Epoch is the fake clock's start: a fixed time, so that runs repeat.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Options configures a test registry. The zero value is ready to use.
type Options struct {
	// Config is the registry configuration; nil means
	// registry.DefaultConfig() with the event journal on (HistoryEvents =
	// registry.DefaultHistoryEvents) and without active health checks
	// (HealthChecks nil, as in NewCluster), so that persistent instances in
	// a test make no real TCP, HTTP or MySQL probes; their health is what SetHealth
	// gives them. Pass a Config with HealthChecks set to probe for real. Its
	// Clock, Logger and Rand are replaced.
	Config *registry.Config
	// Seed seeds the registry's random source; 0 derives one from the
	// test's name. A failed test logs it, so the run can be replayed.
	Seed uint64
	// LogLevel is the lowest level logged to the test; default Warn.
	LogLevel slog.Level
	// Clock is shared with other registries of the test; nil means a new
	// fake clock at Epoch.
	Clock *clockwork.FakeClock
	// Step is the largest single move of the clock in Eventually; default
	// 500 ms.
	Step time.Duration
	// Parallel is for a test that calls t.Parallel: the leak check at
	// cleanup then counts only the goroutines descended from the test's own
	// (it may miss a leak whose creator has exited). By default every
	// goroutine started after New must be gone, as with goleak.
	Parallel bool
}

// Registry is a started registry on a fake clock.
type Registry struct {
	*registry.Registry
	// Clock is the registry's fake clock.
	Clock *clockwork.FakeClock
	// Seed is the seed of the registry's random source.
	Seed uint64

	t    testing.TB
	step time.Duration
}

// New returns a started registry. The test's cleanup checks the registry's
// index (Internals().CheckConsistency), closes it, and fails the test if a goroutine
// that the test started since New is still running (see the package doc:
// other tests running in parallel do not count).
func New(t testing.TB, opts Options) *Registry {
	t.Helper()
	leaks := newLeakCheck(opts.Parallel)
	cfg := registry.DefaultConfig()
	cfg.HealthChecks, cfg.HistoryEvents = nil, registry.DefaultHistoryEvents
	if opts.Config != nil {
		cfg = *opts.Config
	}
	clock := opts.Clock
	if clock == nil {
		clock = clockwork.NewFakeClockAt(Epoch)
	}
	seed := opts.Seed
	if seed == 0 {
		h := fnv.New64a()
		h.Write([]byte(t.Name()))
		seed = h.Sum64()
	}
	level := opts.LogLevel
	if level == 0 {
		level = slog.LevelWarn
	}
	cfg.Clock = clock
	cfg.Rand = rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: level}))

	reg, err := registry.New(cfg)
	if err != nil {
		t.Fatalf("registrytest: %v", err)
	}
	if err := reg.Start(context.Background()); err != nil {
		t.Fatalf("registrytest: start: %v", err)
	}
	if opts.Step <= 0 {
		opts.Step = 500 * time.Millisecond
	}
	r := &Registry{Registry: reg, Clock: clock, Seed: seed, t: t, step: opts.Step}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("registrytest: node %s ran with seed %d", cfg.NodeID, seed)
		}
		if err := reg.Internals().CheckConsistency(); err != nil {
			t.Errorf("registrytest: inconsistent index: %v", err)
		}
		if err := reg.Close(); err != nil {
			t.Errorf("registrytest: close: %v", err)
		}
		if err := leaks.find(leakWait); err != nil {
			t.Errorf("registrytest: leaked goroutines: %v", err)
		}
	})
	return r
}

// Advance moves the fake clock by d and waits until the registry has
// handled every deadline that passed and every watcher has been handed the
// newest view (see Settle).
func (r *Registry) Advance(d time.Duration) {
	r.t.Helper()
	r.Clock.Advance(d)
	r.Settle()
}

// Settle waits until the registry has handled every deadline that has
// passed on its clock (Internals().Settle) and every watcher has been handed the
// newest view (Internals().FlushWatchers): a Watcher's Next then returns at
// once with what changed. It works whoever moved the clock, and whatever
// else shares it.
func (r *Registry) Settle() {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Internals().Settle(ctx); err != nil {
		r.t.Fatalf("registrytest: the registry did not settle: %v", err)
	}
	if err := r.Internals().FlushWatchers(ctx); err != nil {
		r.t.Fatalf("registrytest: the watchers were not handed their views: %v", err)
	}
}

// Step advances the clock by one Options.Step and settles.
func (r *Registry) Step() {
	r.t.Helper()
	r.Advance(r.step)
}

// Eventually advances the clock in steps of Options.Step, settling after
// each, until cond holds, for at most limit of fake time, and fails the
// test otherwise. cond is checked first, before the clock moves, once the
// registry has settled: whenever cond is checked, and when Eventually
// returns, every watcher has been handed the newest view (see Settle).
func (r *Registry) Eventually(limit time.Duration, cond func() bool, format string, args ...any) {
	r.t.Helper()
	r.Settle()
	for waited := time.Duration(0); ; waited += r.step {
		if cond() {
			return
		}
		if waited >= limit {
			r.t.Fatalf("registrytest: after %v of fake time: "+format, append([]any{limit}, args...)...)
		}
		r.Advance(r.step)
	}
}

// WaitFor polls cond in real time, settling between polls, until it holds,
// and fails the test after timeout. It is for what runs on real time (a
// Raft replica, a real network); fake-clock behaviour uses Eventually.
func (r *Registry) WaitFor(timeout time.Duration, cond func() bool, format string, args ...any) {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			r.t.Fatalf("registrytest: after %v: "+format, append([]any{timeout}, args...)...)
		}
		r.Settle()
		time.Sleep(5 * time.Millisecond)
	}
}

// leakWait is how long the leak check waits for goroutines to exit.
const leakWait = 5 * time.Second
