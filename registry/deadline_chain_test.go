package registry_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
)

// Deadlines derived from an expiry run from the expiry's own deadline, not
// from when the registry processed it: the clock moved in one big step must
// give what it gives in small steps. Each case expires something at a known
// time T (a beat instance at 30 s, a session's keep-alive at its TTL) and
// looks just before and just after T + 60 s (PatchTTL, EmptyServiceTTL).

// advanceBy moves r's clock by d, in one step or in steps of step.
func advanceBy(r *registrytest.Registry, d, step time.Duration) {
	if step <= 0 {
		r.Advance(d)
		return
	}
	for ; d > 0; d -= min(d, step) {
		r.Advance(min(d, step))
	}
}

var stepSizes = []time.Duration{0, time.Second} // 0: one step

// expiresAt publishes inst so that it is gone at the returned time after
// now: a beat instance (30 s) or a session instance with a 10 s keep-alive.
func expiresAt(t *testing.T, r *registrytest.Registry, how string, in model.Instance) time.Duration {
	t.Helper()
	switch how {
	case "beat":
		mustRegister(t, r, in)
		return 30 * time.Second
	case "session":
		s, err := r.OpenSession(ctx, registry.SessionOptions{TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		mustRegister(t, s, in)
		return 10 * time.Second
	}
	t.Fatalf("unknown publisher %q", how)
	return 0
}

// TestPatchCountdownRunsFromExpiry: a patch outlives its expired instance by
// exactly PatchTTL.
func TestPatchCountdownRunsFromExpiry(t *testing.T) {
	for _, how := range []string{"beat", "session"} {
		for _, step := range stepSizes {
			for _, after := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/step=%v/after=%v", how, step, after), func(t *testing.T) {
					r := newReg(t)
					in := inst("pc", 1)
					gone := expiresAt(t, r, how, in)
					w := 5.0
					if err := r.PatchInstance(ctx, model.InstancePatch{Key: in.Key(), Weight: &w}); err != nil {
						t.Fatal(err)
					}
					ttl := registry.DefaultConfig().PatchTTL
					d := gone + ttl - time.Second
					if after {
						d = gone + ttl + time.Second
					}
					advanceBy(r, d, step)
					mustRegister(t, r, in) // a beat instance again
					v := all(t, r, "pc")
					if len(v.Instances) != 1 {
						t.Fatalf("instances %v", v.Instances)
					}
					want := 5.0
					if after {
						want = in.Weight // the patch went at gone+PatchTTL
					}
					if got := v.Instances[0].Weight; got != want {
						t.Fatalf("%v after the patch, weight %v, want %v (instance gone at %v, PatchTTL %v)", d, got, want, gone, ttl)
					}
				})
			}
		}
	}
}

// TestEmptyServiceCountdownRunsFromExpiry: an implicit service outlives its
// last instance's expiry by exactly EmptyServiceTTL.
func TestEmptyServiceCountdownRunsFromExpiry(t *testing.T) {
	for _, how := range []string{"beat", "session"} {
		for _, step := range stepSizes {
			for _, after := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/step=%v/after=%v", how, step, after), func(t *testing.T) {
					r := newReg(t)
					in := inst("es", 1)
					gone := expiresAt(t, r, how, in)
					ttl := registry.DefaultConfig().EmptyServiceTTL
					d := gone + ttl - time.Second
					if after {
						d = gone + ttl + time.Second
					}
					advanceBy(r, d, step)
					_, err := r.GetService(ctx, svcKey("es"))
					if exists := err == nil; exists == after {
						t.Fatalf("%v after the registration: GetService: %v (instance gone at %v, EmptyServiceTTL %v)", d, err, gone, ttl)
					}
					if err != nil && !errors.Is(err, registry.ErrNotFound) {
						t.Fatal(err)
					}
				})
			}
		}
	}
}
