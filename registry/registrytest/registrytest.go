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
	"go.uber.org/goleak"
)

// Epoch is the fake clock's start: a fixed time, so that runs repeat.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Options configures a test registry. The zero value is ready to use.
type Options struct {
	// Config is the registry configuration; zero means
	// registry.DefaultConfig(). Its Clock, Logger and Rand are replaced.
	Config *registry.Config
	// Seed seeds the registry's random source; 0 derives one from the
	// test's name. A failed test logs it, so the run can be replayed.
	Seed uint64
	// LogLevel is the lowest level logged to the test; default Warn.
	LogLevel slog.Level
	// Clock is shared with other registries of the test; nil means a new
	// fake clock at Epoch.
	Clock *clockwork.FakeClock
}

// Registry is a started registry on a fake clock.
type Registry struct {
	*registry.Registry
	// Clock is the registry's fake clock.
	Clock *clockwork.FakeClock
	// Seed is the seed of the registry's random source.
	Seed uint64

	t testing.TB
}

// New returns a started registry. The test's cleanup checks the registry's
// index (CheckConsistency), closes it, and fails the test if any goroutine
// started since New is still running.
func New(t testing.TB, opts Options) *Registry {
	t.Helper()
	leaks := goleak.IgnoreCurrent()
	cfg := registry.DefaultConfig()
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
	r := &Registry{Registry: reg, Clock: clock, Seed: seed, t: t}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("registrytest: node %s ran with seed %d", cfg.NodeID, seed)
		}
		if err := reg.CheckConsistency(); err != nil {
			t.Errorf("registrytest: inconsistent index: %v", err)
		}
		if err := reg.Close(); err != nil {
			t.Errorf("registrytest: close: %v", err)
		}
		if err := goleak.Find(leaks); err != nil {
			t.Errorf("registrytest: leaked goroutines: %v", err)
		}
	})
	return r
}

// Advance moves the fake clock by d and waits until the registry has
// handled every deadline that passed.
func (r *Registry) Advance(d time.Duration) {
	r.t.Helper()
	r.Clock.Advance(d)
	r.Settle()
}

// Settle waits until the registry has handled every deadline that has
// passed on its clock (Registry.Tick). It works whoever moved the clock, and
// whatever else shares it.
func (r *Registry) Settle() {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Tick(ctx); err != nil {
		r.t.Fatalf("registrytest: the registry did not settle: %v", err)
	}
}
