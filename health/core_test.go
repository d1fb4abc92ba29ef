package health

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/testutil"
	"github.com/muster-io/muster/model"
)

func testCore(t testing.TB, edit func(*Config)) *core {
	t.Helper()
	cfg := DefaultConfig()
	if edit != nil {
		edit(&cfg)
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return newCore(&cfg, rand.NewPCG(7, 7))
}

// TestCoreFlipRule runs result sequences through the thresholds (3 and 3, no damping) from a
// given start state, and compares the states after each result.
func TestCoreFlipRule(t *testing.T) {
	const (
		O = 'o' // healthy
		F = 'f' // ordinary failure
		D = 'd' // definite failure
	)
	cases := []struct {
		name    string
		start   bool
		results string
		states  string // 'H' or 'U' after each result
	}{
		{"three failures", true, "fff", "HHU"},
		{"broken run", true, "ffoff", "HHHHH"},
		{"definite at once", true, "d", "U"},
		{"definite after failures", true, "fd", "HU"},
		{"three oks back", false, "ooo", "UUH"},
		{"broken ok run", false, "oofoo", "UUUUU"},
		{"definite does not reset ok need", false, "oodooo", "UUUUUH"},
		{"round trip", true, "fffooo", "HHUUUH"},
		{"unhealthy ignores definite", false, "dd", "UU"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := testCore(t, func(cfg *Config) { cfg.Damping = NoDamping })
			k := key(1)
			c.set(k, tcp(k), tc.start, 0)
			now := int64(0)
			for i, r := range tc.results {
				jobs := c.dispatch(now, 1, nil)
				if len(jobs) != 1 {
					t.Fatalf("result %d: %d jobs due at %d", i, len(jobs), now)
				}
				res := Result{Healthy: r == O, Definite: r == D}
				tr, flipped := c.complete(jobs[0].slot, jobs[0].gen, res, now)
				st, _ := c.get(k)
				want := tc.states[i] == 'H'
				if st.Healthy != want {
					t.Fatalf("after %q: healthy %v, want %v", tc.results[:i+1], st.Healthy, want)
				}
				prev := tc.start
				if i > 0 {
					prev = tc.states[i-1] == 'H'
				}
				if flipped != (prev != want) || (flipped && tr.healthy != want) {
					t.Fatalf("after %q: flipped %v (%v)", tc.results[:i+1], flipped, tr.healthy)
				}
				now = st.NextDue.UnixNano()
			}
		})
	}
}

func TestCoreAdapt(t *testing.T) {
	b := &Interval{Min: time.Second, Max: 5 * time.Second, Factor: 0.75}
	cases := []struct {
		cur  time.Duration
		res  Result
		want time.Duration
	}{
		{4 * time.Second, Result{Healthy: true, Latency: 0}, 3 * time.Second},
		{2 * time.Second, Result{Healthy: true, Latency: 10 * time.Millisecond}, time.Second + 502500*time.Microsecond},
		{time.Second, Result{Healthy: true}, time.Second},                     // clamped at Min
		{time.Second, Result{}, 2 * time.Second},                              // a failure counts as Max
		{5 * time.Second, Result{Definite: true}, 5 * time.Second},            // stays at Max
		{7 * time.Second, Result{Healthy: true, Latency: 0}, 5 * time.Second}, // a drawn interval above Max is clamped
	}
	for _, tc := range cases {
		if got := time.Duration(adapt(int64(tc.cur), tc.res, b)); got != tc.want {
			t.Errorf("adapt(%v, %+v) = %v, want %v", tc.cur, tc.res, got, tc.want)
		}
	}
}

// A hold that starts with a flip to healthy suppresses it: the instance stays unhealthy.
func TestCoreDampingSuppressesFlipToHealthy(t *testing.T) {
	c := testCore(t, func(cfg *Config) {
		cfg.HealthyAfter, cfg.UnhealthyAfter = 1, 1
		cfg.Damping = Damping{Flips: 2, Window: time.Minute, Hold: time.Minute}
	})
	k := key(1)
	c.set(k, tcp(k), false, 0)
	now := int64(0)
	step := func(r Result) (bool, Status) {
		jobs := c.dispatch(now, 1, nil)
		if len(jobs) != 1 {
			t.Fatalf("no job at %d", now)
		}
		_, flipped := c.complete(jobs[0].slot, jobs[0].gen, r, now)
		st, _ := c.get(k)
		now = st.NextDue.UnixNano()
		return flipped, st
	}
	for _, r := range []Result{ok1ms, fail} { // 2 flips
		if f, _ := step(r); !f {
			t.Fatal("no flip")
		}
	}
	f, st := step(ok1ms) // the 3rd within a minute: held unhealthy
	if f || st.Healthy || !st.Damped || !strings.Contains(st.DampReason, "3 flips within 1m0s") {
		t.Fatalf("flipped %v, %+v", f, st)
	}
	// A Set with another state ends the hold: the caller is the authority.
	c.set(k, tcp(k), true, now)
	if st, _ := c.get(k); st.Damped || !st.Healthy || st.RecentFlips != 0 {
		t.Fatalf("after Set(true): %+v", st)
	}
}

// TestCoreRandomOps runs random operations on a core and checks its invariants after each:
// every probed target that is not running has exactly one live heap element at its due
// time; running ones have none and are never dispatched twice; the running count matches.
// It runs a fresh seed, or MUSTER_SEEDS seeds from MUSTER_SEED (see internal/testutil).
func TestCoreRandomOps(t *testing.T) {
	testutil.Seeds(t, 0, 1, func(t *testing.T, seed uint64) {
		runCoreOps(t, rand.New(rand.NewPCG(seed, seed)), 5000)
	})
}

// FuzzCoreOps drives the same checks from fuzzed bytes.
func FuzzCoreOps(f *testing.F) {
	f.Add(uint64(1), uint16(200))
	f.Add(uint64(42), uint16(2000))
	f.Fuzz(func(t *testing.T, seed uint64, n uint16) {
		runCoreOps(t, rand.New(rand.NewPCG(seed, ^seed)), int(n%4000))
	})
}

func runCoreOps(t *testing.T, r *rand.Rand, ops int) {
	c := testCore(t, func(cfg *Config) {
		cfg.HealthyAfter, cfg.UnhealthyAfter = 1+r.IntN(3), 1+r.IntN(3)
		cfg.Damping = Damping{Flips: r.IntN(4), Window: 20 * time.Second, Hold: 30 * time.Second}
	})
	const maxRun = 4
	types := []model.CheckType{"", model.CheckTCP, model.CheckHTTP, model.CheckMySQL, model.CheckNone, "ODD"}
	var (
		now      int64
		inflight []job
		keys     = make([]model.InstanceKey, 12)
	)
	for i := range keys {
		keys[i] = key(i)
	}
	for op := range ops {
		k := keys[r.IntN(len(keys))]
		switch x := r.IntN(10); {
		case x < 3:
			tg := tcp(k)
			tg.Check.Type = types[r.IntN(len(types))]
			c.set(k, tg, r.IntN(2) == 0, now)
		case x < 4:
			c.remove(k)
		case x < 6:
			now += int64(r.IntN(3000)) * int64(time.Millisecond)
			for _, j := range c.dispatch(now, maxRun, nil) {
				for _, o := range inflight {
					if o.slot == j.slot && o.gen == j.gen {
						t.Fatalf("op %d: slot %d dispatched twice", op, j.slot)
					}
				}
				inflight = append(inflight, j)
			}
		default:
			if len(inflight) == 0 {
				continue
			}
			i := r.IntN(len(inflight))
			j := inflight[i]
			inflight = append(inflight[:i], inflight[i+1:]...)
			res := Result{Healthy: r.IntN(2) == 0, Definite: r.IntN(4) == 0, Latency: time.Duration(r.IntN(1000)) * time.Millisecond}
			before := c.stats
			tr, flipped := c.complete(j.slot, j.gen, res, now)
			if flipped {
				if d := c.stats.toHealthy + c.stats.toUnhealthy - before.toHealthy - before.toUnhealthy; d != 1 {
					t.Fatalf("op %d: a flip counted %d times", op, d)
				}
				if tr.healthy && c.stats.toHealthy != before.toHealthy+1 {
					t.Fatalf("op %d: a flip to healthy not counted as such", op)
				}
			}
		}
		checkCore(t, op, c, len(inflight))
		if c.running > maxRun {
			t.Fatalf("op %d: %d running, bound %d", op, c.running, maxRun)
		}
	}
}

func checkCore(t *testing.T, op int, c *core, inflight int) {
	t.Helper()
	if c.running != inflight {
		t.Fatalf("op %d: running %d, %d in flight", op, c.running, inflight)
	}
	liveElems := map[int32]int{}
	stale := 0
	for i, d := range c.heap {
		if i > 0 && c.heap[(i-1)/arity].at > d.at {
			t.Fatalf("op %d: heap order broken at %d", op, i)
		}
		if c.live(d) {
			liveElems[d.slot]++
			if c.entries[d.slot].due != d.at {
				t.Fatalf("op %d: live element of slot %d at %d, entry due %d", op, d.slot, d.at, c.entries[d.slot].due)
			}
		} else {
			stale++
		}
	}
	if stale != c.stale {
		t.Fatalf("op %d: %d stale elements, counted %d", op, stale, c.stale)
	}
	if len(c.index)+len(c.free) != len(c.entries) {
		t.Fatalf("op %d: %d keys + %d free != %d slots", op, len(c.index), len(c.free), len(c.entries))
	}
	probed, damped := 0, 0
	for _, slot := range c.index {
		e := &c.entries[slot]
		if e.kind != kindNone {
			probed++
		}
		if e.heldUntil != 0 {
			damped++
		}
	}
	if probed != c.stats.probed || damped != c.stats.damped {
		t.Fatalf("op %d: %d probed and %d damped targets, counted %d and %d", op, probed, damped, c.stats.probed, c.stats.damped)
	}
	for k, slot := range c.index {
		e := &c.entries[slot]
		if !e.used || e.key != k {
			t.Fatalf("op %d: index of %v points to slot %d holding %v", op, k, slot, e.key)
		}
		want := 0
		if e.kind != kindNone && !e.running {
			want = 1
		}
		if liveElems[int32(slot)] != want || e.scheduled != (want == 1) {
			t.Fatalf("op %d: %v (kind %d, running %v) has %d live elements, scheduled %v", op, k, e.kind, e.running, liveElems[int32(slot)], e.scheduled)
		}
		if e.heldUntil != 0 && e.healthy {
			t.Fatalf("op %d: %v held but healthy", op, k)
		}
		if e.nflips > c.damp.Flips {
			t.Fatalf("op %d: %d flips remembered, limit %d", op, e.nflips, c.damp.Flips)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	def := DefaultConfig()
	if err := def.Validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	cases := []struct {
		field string
		edit  func(*Config)
	}{
		{"MaxConcurrent", func(c *Config) { c.MaxConcurrent = -1 }},
		{"CheckTimeout", func(c *Config) { c.CheckTimeout = -1 }},
		{"FirstIntervalMin", func(c *Config) { c.FirstIntervalMin = -1 }},
		{"FirstIntervalMax", func(c *Config) { c.FirstIntervalMax = c.FirstIntervalMin }},
		{"TCPInterval.Min", func(c *Config) { c.TCPInterval.Min = -1 }},
		{"HTTPInterval.Max", func(c *Config) { c.HTTPInterval.Max = c.HTTPInterval.Min - 1 }},
		{"MySQLInterval.Factor", func(c *Config) { c.MySQLInterval.Factor = 1 }},
		{"TCPInterval.Factor", func(c *Config) { c.TCPInterval.Factor = -0.1 }},
		{"HealthyAfter", func(c *Config) { c.HealthyAfter = -1 }},
		{"UnhealthyAfter", func(c *Config) { c.UnhealthyAfter = -1 }},
		{"Damping.Flips", func(c *Config) { c.Damping.Flips = maxDampFlips + 1 }},
		{"Damping.Window", func(c *Config) { c.Damping.Window = -1 }},
		{"Damping.Hold", func(c *Config) { c.Damping.Hold = -1 }},
	}
	for _, tc := range cases {
		c := DefaultConfig()
		tc.edit(&c)
		err := c.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidConfig naming the field", tc.field, err)
		}
		if _, err := NewScheduler(c); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: NewScheduler: %v", tc.field, err)
		}
	}
	// Damping off needs no window.
	c := DefaultConfig()
	c.Damping = NoDamping
	if err := c.Validate(); err != nil {
		t.Errorf("damping off: %v", err)
	}
	// A bad built-in checker config is reported by NewScheduler.
	c = DefaultConfig()
	c.HTTP.Timeout = -1
	if _, err := NewScheduler(c); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "HTTPConfig.Timeout") {
		t.Errorf("bad HTTP config: %v", err)
	}
}

// FuzzConfigValidate: Validate never panics, and a config it accepts makes a scheduler.
func FuzzConfigValidate(f *testing.F) {
	d := DefaultConfig()
	f.Add(d.MaxConcurrent, int64(d.CheckTimeout), int64(d.FirstIntervalMin), int64(d.FirstIntervalMax),
		int64(d.TCPInterval.Min), int64(d.TCPInterval.Max), d.TCPInterval.Factor, d.HealthyAfter, d.UnhealthyAfter,
		d.Damping.Flips, int64(d.Damping.Window), int64(d.Damping.Hold))
	f.Fuzz(func(t *testing.T, maxc int, ct, fmin, fmax, imin, imax int64, factor float64, ha, ua, flips int, win, hold int64) {
		c := DefaultConfig()
		c.MaxConcurrent, c.CheckTimeout = maxc%1024, time.Duration(ct)
		c.FirstIntervalMin, c.FirstIntervalMax = time.Duration(fmin), time.Duration(fmax)
		c.TCPInterval = Interval{Min: time.Duration(imin), Max: time.Duration(imax), Factor: factor}
		c.HealthyAfter, c.UnhealthyAfter = ha, ua
		c.Damping = Damping{Flips: flips, Window: time.Duration(win), Hold: time.Duration(hold)}
		if c.Validate() != nil {
			return
		}
		s, err := NewScheduler(c)
		if err != nil {
			t.Fatalf("Validate accepted, NewScheduler: %v", err)
		}
		k := key(1)
		s.Set(k, tcp(k), true) // draws a first interval: must not panic
		_ = s.Close()
	})
}

// The result of a check that was running when its target switched to NONE is dropped: the
// health of a NONE target is set by hand only.
func TestCoreResultAfterSwitchToNoneIsDropped(t *testing.T) {
	c := testCore(t, nil)
	k := key(1)
	c.set(k, tcp(k), true, 0)
	jobs := c.dispatch(0, 1, nil)
	none := tcp(k)
	none.Check.Type = model.CheckNone
	c.set(k, none, true, 0)
	if _, flipped := c.complete(jobs[0].slot, jobs[0].gen, Result{Definite: true}, 0); flipped {
		t.Fatal("a dropped result flipped the target")
	}
	st, _ := c.get(k)
	if !st.Healthy || st.Checks != 0 || st.Running || !st.NextDue.IsZero() || c.running != 0 {
		t.Fatalf("%+v, running %d", st, c.running)
	}
}

// TestConfigValidateEvery: Validate reports every rule a config breaks, in one error that
// wraps ErrInvalidConfig, a line per rule.
func TestConfigValidateEvery(t *testing.T) {
	c := DefaultConfig()
	c.MaxConcurrent, c.HealthyAfter = -1, -1
	err := c.Validate()
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Validate = %v, want ErrInvalidConfig", err)
	}
	for _, field := range []string{"MaxConcurrent", "HealthyAfter"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("Validate = %v, does not name %s", err, field)
		}
	}
	// One complete line per rule, each with the package prefix.
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 2 {
		t.Fatalf("Validate = %q: %d lines for 2 rules", err, len(lines))
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, ErrInvalidConfig.Error()+": ") {
			t.Errorf("line %q lacks the prefix %q", l, ErrInvalidConfig)
		}
	}
}

// TestConfigZeroIsDefault: Config{} is valid and each of its zero fields takes its default,
// field by field in an Interval and the Damping; NoDamping turns damping off.
func TestConfigZeroIsDefault(t *testing.T) {
	var zero Config
	if err := zero.Validate(); err != nil {
		t.Fatalf("Validate(Config{}) = %v", err)
	}
	if got, want := zero.withDefaults(), DefaultConfig(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Config{} with defaults = %+v, want %+v", got, want)
	}
	part := Config{TCPInterval: Interval{Min: 10 * time.Second}, Damping: Damping{Flips: 2}}
	d := part.withDefaults()
	if d.TCPInterval.Max != 10*time.Second || d.TCPInterval.Factor != DefaultConfig().TCPInterval.Factor {
		t.Fatalf("TCPInterval with Min 10 s only = %+v", d.TCPInterval)
	}
	if d.Damping != (Damping{Flips: 2, Window: time.Minute, Hold: time.Minute}) {
		t.Fatalf("Damping with Flips only = %+v", d.Damping)
	}
	if err := part.Validate(); err != nil {
		t.Fatal(err)
	}
	s, err := NewScheduler(Config{})
	if err != nil {
		t.Fatalf("NewScheduler(Config{}) = %v", err)
	}
	_ = s.Close()
	// Damping off: the core is given no flips to count.
	c := testCore(t, func(cfg *Config) { cfg.Damping = NoDamping })
	if c.damp.Flips != 0 {
		t.Fatalf("NoDamping became %+v", c.damp)
	}
}
