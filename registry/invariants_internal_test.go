package registry

import (
	"context"
	"strings"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/muster-io/muster/model"
)

// newFakeClockRegistry returns a started registry on a fake clock, closed
// when the test ends.
func newFakeClockRegistry(t *testing.T) *Registry {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Clock = clockwork.NewFakeClock()
	return startedNode(t, cfg)
}

// TestCheckConsistencyCatches: each way of breaking the index is reported.
func TestCheckConsistencyCatches(t *testing.T) {
	for name, tc := range map[string]struct {
		breakIt func(r *Registry)
		want    string
	}{
		"slots out of order": {func(r *Registry) {
			s := r.core.services[model.ServiceKey{Name: "a"}.WithDefaults()]
			s.slots[0], s.slots[1] = s.slots[1], s.slots[0]
		}, "out of order"},
		"lost lease": {func(r *Registry) {
			for _, p := range r.core.beats {
				r.core.beatLeases.Remove(p.insts.first())
				return
			}
		}, "has no lease"},
		"lost beat publisher": {func(r *Registry) {
			for ip := range r.core.beats {
				delete(r.core.beats, ip)
				return
			}
		}, "not in its publisher"},
		"patch detached": {func(r *Registry) {
			s := r.core.services[model.ServiceKey{Name: "a"}.WithDefaults()]
			s.slots[0].setPatch(nil)
		}, "does not carry its patch"},
	} {
		t.Run(name, func(t *testing.T) {
			r := newFakeClockRegistry(t)
			ctx := context.Background()
			for i := range 3 {
				in := model.NewInstance(model.ServiceKey{Name: "a"}, "10.0.0."+string(rune('1'+i)), 80)
				if err := r.Register(ctx, in); err != nil {
					t.Fatal(err)
				}
			}
			w := 2.0
			if err := r.PatchInstance(ctx, model.InstancePatch{Key: model.NewInstance(model.ServiceKey{Name: "a"}, "10.0.0.1", 80).Key(), Weight: &w}); err != nil {
				t.Fatal(err)
			}
			if err := r.Internals().CheckConsistency(); err != nil {
				t.Fatalf("healthy index reported: %v", err)
			}
			r.mu.Lock()
			tc.breakIt(r)
			r.mu.Unlock()
			err := r.Internals().CheckConsistency()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error about %q", err, tc.want)
			}
		})
	}
}

// TestStaleOrphanRemovalKeepsANewCountdown: a removal of an orphaned patch
// decided before its instance came back and went again must not drop the
// patch early: a new countdown runs.
func TestStaleOrphanRemovalKeepsANewCountdown(t *testing.T) {
	r := newFakeClockRegistry(t)
	ctx := context.Background()
	in := model.NewInstance(model.ServiceKey{Name: "a"}, "10.0.0.1", 80)
	key := in.Key().WithDefaults()
	w := 2.0
	s1, _ := r.OpenSession(ctx, SessionOptions{})
	_ = s1.Register(ctx, in)
	if err := r.PatchInstance(ctx, model.InstancePatch{Key: key, Weight: &w}); err != nil {
		t.Fatal(err)
	}
	s1.Close() // countdown 1
	s2, _ := r.OpenSession(ctx, SessionOptions{})
	_ = s2.Register(ctx, in) // back: countdown 1 cancelled
	s2.Close()               // countdown 2
	r.mu.Lock()
	_ = r.applyLocked(&model.Command{Op: model.OpRemovePatch, Key: key}, model.Origin{Expiry: true}) // the housekeeper's stale decision from countdown 1
	_, kept := r.core.patches[key]
	r.mu.Unlock()
	if !kept {
		t.Fatal("the patch was dropped while a new countdown runs")
	}
}
