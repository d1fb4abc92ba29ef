package registry_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/testutil"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
)

// TestRandomOperations drives the registry with random registrations,
// beats, sessions, deregistrations and clock moves, and after every step
// checks the index's invariants and compares every service's instances with
// a plain model of what should be there. It runs seeds 1–40 (1–8 with
// -short), or MUSTER_SEEDS seeds from MUSTER_SEED (see internal/testutil);
// a failure names the seed that replays it.
func TestRandomOperations(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 8
	}
	testutil.Seeds(t, 1, seeds, randomRun)
}

// modelBeat is the model of one beat instance.
type modelBeat struct{ last time.Time }

func randomRun(t *testing.T, seed uint64) {
	r := registrytest.New(t, registrytest.Options{Seed: seed + 1})
	rng := rand.New(rand.NewPCG(seed, 42))
	services := []string{"r0", "r1", "r2"}
	pick := func() model.Instance {
		in := model.NewInstance(svcKey(services[rng.IntN(len(services))]), fmt.Sprintf("10.1.0.%d", 1+rng.IntN(5)), 8000+rng.IntN(2))
		if rng.IntN(4) == 0 {
			in.Cluster = "c2"
		}
		return in
	}
	beats := map[model.InstanceKey]*modelBeat{}
	type modelSession struct {
		s     *registry.Session
		ttl   time.Duration
		last  time.Time
		insts map[model.InstanceKey]bool
	}
	var sessions []*modelSession
	now := func() time.Time { return r.Clock.Now() }
	expire := func() { // what the registry should have done by now
		for k, b := range beats {
			if now().Sub(b.last) >= 30*time.Second {
				delete(beats, k)
			}
		}
		sessions = slices.DeleteFunc(sessions, func(s *modelSession) bool {
			return s.ttl > 0 && now().Sub(s.last) >= s.ttl
		})
	}
	for step := range 300 {
		op := rng.IntN(10)
		switch op {
		case 0, 1: // register a beat instance
			in := pick()
			mustRegister(t, r, in)
			beats[in.Key().WithDefaults()] = &modelBeat{last: now()}
		case 2: // heartbeat: a light one fails for what is gone, a full one re-registers it
			in := pick()
			k := in.Key().WithDefaults()
			if rng.IntN(2) == 0 {
				_, err := r.Heartbeat(ctx, k)
				if _, held := beats[k]; held != (err == nil) || err != nil && !errors.Is(err, registry.ErrNotFound) {
					t.Fatalf("step %d: Heartbeat(%s) = %v, model holds it: %v", step, k, err, held)
				}
				if err != nil {
					continue
				}
			} else if _, err := r.HeartbeatInstance(ctx, in); err != nil {
				t.Fatal(err)
			}
			beats[k] = &modelBeat{last: now()}
		case 3: // deregister a beat instance; one only sessions publish is refused
			in := pick()
			k := in.Key().WithDefaults()
			_, beat := beats[k]
			inSession := false
			for _, ms := range sessions {
				inSession = inSession || ms.insts[k]
			}
			err := r.Deregister(ctx, in.Key())
			if want := !beat && inSession; want != errors.Is(err, registry.ErrSessionInstance) || err != nil && !want {
				t.Fatalf("step %d: Deregister(%s) = %v; model: beat %v, in a session %v", step, k, err, beat, inSession)
			}
			delete(beats, k)
		case 4: // open a session
			ttl := time.Duration(rng.IntN(2)) * 10 * time.Second
			s, err := r.OpenSession(ctx, registry.SessionOptions{TTL: ttl})
			if err != nil {
				t.Fatal(err)
			}
			sessions = append(sessions, &modelSession{s: s, ttl: ttl, last: now(), insts: map[model.InstanceKey]bool{}})
		case 5, 6: // a session registers, deregisters, or keeps alive
			if len(sessions) == 0 {
				continue
			}
			ms := sessions[rng.IntN(len(sessions))]
			in := pick()
			switch rng.IntN(3) {
			case 0:
				mustRegister(t, ms.s, in)
				ms.insts[in.Key().WithDefaults()] = true
			case 1:
				if err := ms.s.Deregister(ctx, in.Key()); err != nil {
					t.Fatal(err)
				}
				delete(ms.insts, in.Key().WithDefaults())
			case 2:
				if err := ms.s.KeepAlive(ctx); err != nil {
					t.Fatal(err)
				}
				ms.last = now()
			}
		case 7: // close a session
			if len(sessions) == 0 {
				continue
			}
			i := rng.IntN(len(sessions))
			sessions[i].s.Close()
			sessions = slices.Delete(sessions, i, i+1)
		default: // time passes
			r.Advance(time.Duration(rng.IntN(12_000)) * time.Millisecond)
			expire()
		}
		if err := r.Internals().CheckConsistency(); err != nil {
			t.Fatalf("step %d (op %d): %v", step, op, err)
		}
		for _, name := range services {
			want := map[model.InstanceKey]bool{}
			healthy := map[model.InstanceKey]bool{}
			for k, b := range beats {
				if k.Service.Name == name {
					want[k] = true
					healthy[k] = now().Sub(b.last) < 15*time.Second
				}
			}
			for _, ms := range sessions {
				for k := range ms.insts {
					if k.Service.Name == name {
						want[k] = true
						healthy[k] = true // a session instance is healthy; it wins when it sorts first
					}
				}
			}
			v := all(t, r, name)
			got := map[model.InstanceKey]bool{}
			for i, in := range v.Instances {
				k := in.Key()
				got[k] = true
				if !want[k] {
					t.Fatalf("step %d (op %d): %s present, should be gone", step, op, k)
				}
				onlyBeat := true
				for _, ms := range sessions {
					if ms.insts[k] {
						onlyBeat = false
					}
				}
				if onlyBeat && v.RealHealthy(i) != healthy[k] {
					t.Fatalf("step %d (op %d): %s really healthy=%v, want %v", step, op, k, v.RealHealthy(i), healthy[k])
				}
			}
			for k := range want {
				if !got[k] {
					t.Fatalf("step %d (op %d): %s missing", step, op, k)
				}
			}
		}
	}
}
