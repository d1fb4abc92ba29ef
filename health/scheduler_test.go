package health

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/muster-io/muster/internal/testutil"
	"github.com/muster-io/muster/model"
	"go.uber.org/goleak"
)

// stub is a scripted Checker: each target address has a queue of results (healthy, 1 ms, when
// empty); with a gate, every check waits for a token from it (or its ctx).
type stub struct {
	mu         sync.Mutex
	script     map[string][]Result
	calls      map[string]int
	last       map[string]Target
	running    int
	maxRunning int
	gate       chan struct{}
	started    chan string // receives the address of every check started; buffered
}

func newStub() *stub {
	return &stub{script: map[string][]Result{}, calls: map[string]int{}, last: map[string]Target{}, started: make(chan string, 1024)}
}

func (s *stub) queue(addr string, rs ...Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script[addr] = append(s.script[addr], rs...)
}

func (s *stub) Check(ctx context.Context, t Target) Result {
	addr := t.Addr()
	s.mu.Lock()
	s.calls[addr]++
	s.last[addr] = t
	s.running++
	s.maxRunning = max(s.maxRunning, s.running)
	s.mu.Unlock()
	s.started <- addr
	defer func() {
		s.mu.Lock()
		s.running--
		s.mu.Unlock()
	}()
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return Result{Reason: "canceled"}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.script[addr]; len(q) > 0 {
		s.script[addr] = q[1:]
		return q[0]
	}
	return ok1ms
}

// drainStarted empties the started channel (of checks that have completed).
func (s *stub) drainStarted() {
	for {
		select {
		case <-s.started:
		default:
			return
		}
	}
}

func (s *stub) callsTo(addr string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[addr]
}

var (
	ok1ms  = Result{Healthy: true, Latency: time.Millisecond, Reason: "ok"}
	fail   = Result{Reason: "status 503"}
	failed = Result{Definite: true, Reason: "connection refused"}
)

type flip struct {
	key     model.InstanceKey
	healthy bool
	st      Status
}

// harness is a started Scheduler on a fake clock, with a stub for every type, recording
// its transitions.
type harness struct {
	t     *testing.T
	clock *clockwork.FakeClock
	stub  *stub
	s     *Scheduler

	mu    sync.Mutex
	flips []flip
}

func newHarness(t *testing.T, edit func(*Config)) *harness {
	t.Helper()
	seed, _ := testutil.SeedRange(t, 0, 1) // MUSTER_SEED, else a fresh one
	t.Logf("seed: %d (replay with %s=%d)", seed, testutil.SeedEnv, seed)
	h := &harness{t: t, clock: clockwork.NewFakeClockAt(time.Unix(1_800_000_000, 0)), stub: newStub()}
	cfg := DefaultConfig()
	cfg.Clock = h.clock
	cfg.Rand = rand.NewPCG(seed, seed)
	cfg.Checkers = map[model.CheckType]Checker{model.CheckTCP: h.stub, model.CheckHTTP: h.stub, model.CheckMySQL: h.stub}
	cfg.OnTransition = func(key model.InstanceKey, healthy bool, st Status) {
		h.mu.Lock()
		h.flips = append(h.flips, flip{key, healthy, st})
		h.mu.Unlock()
	}
	if edit != nil {
		edit(&cfg)
	}
	s, err := NewScheduler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.s = s
	t.Cleanup(func() { goleak.VerifyNone(t) }) // runs after Close
	t.Cleanup(func() { _ = s.Close() })
	return h
}

func (h *harness) settle() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.s.Settle(ctx); err != nil {
		h.t.Fatalf("Settle: %v", err)
	}
}

// advance moves the clock by d and settles.
func (h *harness) advance(d time.Duration) {
	h.t.Helper()
	h.clock.Advance(d)
	h.settle()
}

// toNext advances the clock to key's next due time and settles; it returns the interval.
func (h *harness) toNext(key model.InstanceKey) time.Duration {
	h.t.Helper()
	st := h.status(key)
	if st.NextDue.IsZero() {
		h.t.Fatalf("%v: nothing due (%+v)", key, st)
	}
	d := st.NextDue.Sub(h.clock.Now())
	h.advance(d)
	return d
}

func (h *harness) status(key model.InstanceKey) Status {
	h.t.Helper()
	st, ok := h.s.Status(key)
	if !ok {
		h.t.Fatalf("no status for %v", key)
	}
	return st
}

func (h *harness) takeFlips() []flip {
	h.mu.Lock()
	defer h.mu.Unlock()
	f := h.flips
	h.flips = nil
	return f
}

func key(i int) model.InstanceKey {
	return model.InstanceKey{Service: model.ServiceKey{Name: "svc"}, IP: fmt.Sprintf("10.0.%d.%d", i/250, i%250+1), Port: 8080}
}

func tcp(k model.InstanceKey) Target { return Target{IP: k.IP, Port: k.Port} }

func TestSchedulerFirstCheckAtOnceThenDrawnInterval(t *testing.T) {
	h := newHarness(t, nil)
	const n = 200
	for i := range n {
		h.s.Set(key(i), tcp(key(i)), true)
	}
	h.settle() // no time passes
	lo, hi := 7*time.Second, time.Duration(0)
	for i := range n {
		st := h.status(key(i))
		if st.Checks != 1 {
			t.Fatalf("%v: %d checks at once, want 1", key(i), st.Checks)
		}
		d := st.NextDue.Sub(h.clock.Now())
		if d < 2*time.Second || d >= 7*time.Second {
			t.Fatalf("%v: first interval %v, want in [2s, 7s)", key(i), d)
		}
		lo, hi = min(lo, d), max(hi, d)
	}
	if hi-lo < 3*time.Second {
		t.Fatalf("first intervals of %d targets span only [%v, %v]: not spread", n, lo, hi)
	}
}

func TestSchedulerIntervalsAdaptWithinBounds(t *testing.T) {
	for _, tc := range []struct {
		typ      model.CheckType
		min, max time.Duration
	}{
		{model.CheckTCP, time.Second, 5 * time.Second},
		{model.CheckHTTP, 500 * time.Millisecond, 5 * time.Second},
		{model.CheckMySQL, 2 * time.Second, 3 * time.Second},
	} {
		t.Run(string(tc.typ), func(t *testing.T) {
			h := newHarness(t, nil)
			k := key(1)
			tg := tcp(k)
			tg.Check.Type = tc.typ
			h.s.Set(k, tg, true)
			h.settle()
			h.toNext(k) // the drawn interval, checked above
			// Fast and healthy: the interval shrinks to Min and stays there.
			var d time.Duration
			for range 30 {
				d = h.toNext(k)
				if d < tc.min || d > tc.max {
					t.Fatalf("interval %v outside [%v, %v]", d, tc.min, tc.max)
				}
			}
			if d != tc.min {
				t.Fatalf("a fast healthy target settles at %v, want Min %v", d, tc.min)
			}
			// Failing: it backs off to Max.
			for range 60 {
				h.stub.queue(tg.Addr(), fail)
				d = h.toNext(k)
				if d < tc.min || d > tc.max {
					t.Fatalf("interval %v outside [%v, %v]", d, tc.min, tc.max)
				}
			}
			if st := h.status(k); tc.max-st.Interval > tc.max/100 {
				t.Fatalf("a failing target settles at %v, want Max %v", st.Interval, tc.max)
			}
		})
	}
}

func TestSchedulerThreeConsecutiveToFlip(t *testing.T) {
	h := newHarness(t, nil)
	k := key(1)
	addr := tcp(k).Addr()
	h.s.Set(k, tcp(k), true)
	h.settle() // ok

	// Two failures, an ok, two failures: no flip.
	for _, r := range []Result{fail, fail, ok1ms, fail, fail} {
		h.stub.queue(addr, r)
		h.toNext(k)
	}
	if f := h.takeFlips(); len(f) != 0 || !h.status(k).Healthy {
		t.Fatalf("flipped without 3 consecutive failures: %+v", f)
	}
	if st := h.status(k); st.ConsecutiveFail != 2 || st.ConsecutiveOK != 0 {
		t.Fatalf("counts %d ok, %d fail; want 0, 2", st.ConsecutiveOK, st.ConsecutiveFail)
	}
	h.stub.queue(addr, fail)
	h.toNext(k)
	f := h.takeFlips()
	if len(f) != 1 || f[0].healthy || f[0].key != k || f[0].st.Healthy || f[0].st.Last.Reason != "status 503" || f[0].st.ConsecutiveFail != 3 {
		t.Fatalf("after the 3rd failure: flips %+v, want one to unhealthy", f)
	}
	// Back: two oks do nothing, the third flips.
	h.toNext(k)
	h.toNext(k)
	if f := h.takeFlips(); len(f) != 0 || h.status(k).Healthy {
		t.Fatalf("flipped back after 2 oks: %+v", f)
	}
	h.toNext(k)
	if f := h.takeFlips(); len(f) != 1 || !f[0].healthy || !h.status(k).Healthy {
		t.Fatalf("after the 3rd ok: flips %+v, want one to healthy", f)
	}
}

func TestSchedulerConfigurableThresholds(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.UnhealthyAfter = 1; c.HealthyAfter = 5 })
	k := key(1)
	addr := tcp(k).Addr()
	h.stub.queue(addr, fail)
	h.s.Set(k, tcp(k), true)
	h.settle()
	if f := h.takeFlips(); len(f) != 1 || f[0].healthy {
		t.Fatalf("UnhealthyAfter 1: %+v", f)
	}
	for range 4 {
		h.toNext(k)
	}
	if h.status(k).Healthy {
		t.Fatal("healthy after 4 oks with HealthyAfter 5")
	}
	h.toNext(k)
	if !h.status(k).Healthy {
		t.Fatal("unhealthy after 5 oks with HealthyAfter 5")
	}
}

func TestSchedulerDefiniteFlipsAtOnce(t *testing.T) {
	h := newHarness(t, nil)
	k := key(1)
	h.stub.queue(tcp(k).Addr(), failed)
	h.s.Set(k, tcp(k), true)
	h.settle()
	f := h.takeFlips()
	if len(f) != 1 || f[0].healthy || f[0].st.Last.Reason != "connection refused" {
		t.Fatalf("flips %+v, want one to unhealthy at the first, definite, failure", f)
	}
	// A definite failure of an unhealthy target changes nothing.
	h.stub.queue(tcp(k).Addr(), failed)
	h.toNext(k)
	if f := h.takeFlips(); len(f) != 0 {
		t.Fatalf("flips %+v", f)
	}
}

// A new owner starts from the known state: an unhealthy instance handed over stays
// unhealthy until 3 oks, and a healthy one that checks ok is never reported.
func TestSchedulerStartsFromKnownState(t *testing.T) {
	h := newHarness(t, nil)
	sick, well := key(1), key(2)
	h.s.Set(sick, tcp(sick), false)
	h.s.Set(well, tcp(well), true)
	h.settle()
	if h.status(sick).Healthy || !h.status(well).Healthy {
		t.Fatal("initial states not kept")
	}
	h.toNext(sick) // the first check was the first ok
	if f := h.takeFlips(); len(f) != 0 {
		t.Fatalf("flips %+v before 3 oks", f)
	}
	h.toNext(sick)
	f := h.takeFlips()
	if len(f) != 1 || f[0].key != sick || !f[0].healthy {
		t.Fatalf("flips %+v, want sick -> healthy only", f)
	}
	// The caller's state wins over the scheduler's: Set(false) on a healthy target adopts it.
	h.s.Set(well, tcp(well), false)
	if st := h.status(well); st.Healthy || st.ConsecutiveOK != 0 {
		t.Fatalf("after Set(false): %+v", st)
	}
}

// A check still running is never started again, however late it is.
func TestSchedulerNoDoubleStart(t *testing.T) {
	h := newHarness(t, nil)
	h.stub.gate = make(chan struct{})
	k := key(1)
	h.s.Set(k, tcp(k), true)
	<-h.stub.started
	for range 10 {
		h.clock.Advance(10 * time.Second)
	}
	// Let the driver see every timer; a second start would show up in calls.
	waitFor(t, func() bool { st := h.status(k); return st.Running && st.NextDue.IsZero() })
	if n := h.stub.callsTo(tcp(k).Addr()); n != 1 {
		t.Fatalf("%d checks started, want 1", n)
	}
	h.stub.gate <- struct{}{}
	h.settle()
	st := h.status(k)
	if st.Checks != 1 || st.Running || h.stub.callsTo(tcp(k).Addr()) != 1 {
		t.Fatalf("after release: %+v, calls %d", st, h.stub.callsTo(tcp(k).Addr()))
	}
	// The next check is an interval after the completion, not an immediate catch-up.
	if d := st.NextDue.Sub(h.clock.Now()); d < 2*time.Second {
		t.Fatalf("next due in %v after a late completion", d)
	}
}

func TestSchedulerConcurrencyBound(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxConcurrent = 3 })
	h.stub.gate = make(chan struct{})
	const n = 10
	for i := range n {
		h.s.Set(key(i), tcp(key(i)), true)
	}
	for range 3 {
		<-h.stub.started
	}
	for done := 0; done < n; done++ {
		// Exactly 3 run while more are waiting.
		if left := n - done; left >= 3 {
			waitFor(t, func() bool { h.stub.mu.Lock(); defer h.stub.mu.Unlock(); return h.stub.running == 3 })
		}
		h.stub.gate <- struct{}{}
	}
	h.settle()
	if h.stub.maxRunning != 3 {
		t.Fatalf("at most %d checks ran at once, want 3", h.stub.maxRunning)
	}
	for i := range n {
		if st := h.status(key(i)); st.Checks != 1 {
			t.Fatalf("%v: %d checks", key(i), st.Checks)
		}
	}
}

func TestSchedulerConfigChangeAppliesNextCheck(t *testing.T) {
	h := newHarness(t, nil)
	k := key(1)
	h.s.Set(k, tcp(k), true)
	h.settle()
	due := h.status(k).NextDue

	changed := tcp(k)
	changed.Check = model.HealthCheck{Type: model.CheckHTTP, Port: 9090, Path: "/health"}
	h.s.Set(k, changed, true)
	h.settle()
	st := h.status(k)
	if st.Checks != 1 || !st.NextDue.Equal(due) || st.Type != model.CheckHTTP {
		t.Fatalf("after the change: %+v; want no extra check, due unchanged, type HTTP", st)
	}
	h.toNext(k)
	h.stub.mu.Lock()
	got := h.stub.last[changed.Addr()]
	h.stub.mu.Unlock()
	if got.Check.Path != "/health" || got.Check.Type != model.CheckHTTP {
		t.Fatalf("the next check saw %+v, want the new config", got)
	}
}

func TestSchedulerRemoveStopsChecks(t *testing.T) {
	h := newHarness(t, nil)
	k, other := key(1), key(2)
	h.s.Set(k, tcp(k), true)
	h.s.Set(other, tcp(other), true)
	h.settle()
	h.s.Remove(k)
	if _, ok := h.s.Status(k); ok {
		t.Fatal("status after Remove")
	}
	for range 10 {
		h.advance(5 * time.Second)
	}
	if n := h.stub.callsTo(tcp(k).Addr()); n != 1 {
		t.Fatalf("%d checks of a removed target, want 1", n)
	}
	if h.status(other).Checks < 5 {
		t.Fatal("the other target stopped too")
	}
	// Removed while running: no transition is reported.
	h.stub.gate = make(chan struct{})
	h.stub.queue(tcp(other).Addr(), failed)
	h.stub.drainStarted()
	h.clock.Advance(10 * time.Second)
	<-h.stub.started
	h.s.Remove(other)
	h.stub.gate <- struct{}{}
	h.settle()
	if f := h.takeFlips(); len(f) != 0 {
		t.Fatalf("flips %+v for a removed target", f)
	}
	if h.s.Len() != 0 {
		t.Fatalf("Len %d", h.s.Len())
	}
}

func TestSchedulerNoneIsNeverProbed(t *testing.T) {
	h := newHarness(t, nil)
	k := key(1)
	tg := tcp(k)
	tg.Check.Type = model.CheckNone
	h.s.Set(k, tg, false)
	h.settle()
	h.advance(time.Minute)
	st := h.status(k)
	if st.Probed || st.Checks != 0 || st.Healthy || h.stub.callsTo(tg.Addr()) != 0 || !st.NextDue.IsZero() {
		t.Fatalf("NONE target: %+v, calls %d", st, h.stub.callsTo(tg.Addr()))
	}
	h.s.Set(k, tg, true) // set by hand
	if !h.status(k).Healthy {
		t.Fatal("manual health not taken")
	}
	// Unknown types are not probed either.
	tg.Check.Type = "GRPC"
	h.s.Set(k, tg, true)
	h.settle()
	if st := h.status(k); st.Probed || st.Checks != 0 {
		t.Fatalf("unknown type: %+v", st)
	}
	// Switching to a probed type checks at once; back to NONE stops.
	tg.Check.Type = model.CheckTCP
	h.s.Set(k, tg, true)
	h.settle()
	if st := h.status(k); st.Checks != 1 || !st.Probed {
		t.Fatalf("after switching to TCP: %+v", st)
	}
	tg.Check.Type = model.CheckNone
	h.s.Set(k, tg, true)
	h.advance(time.Minute)
	if st := h.status(k); st.Checks != 1 || !st.NextDue.IsZero() {
		t.Fatalf("after switching back to NONE: %+v", st)
	}
}

func TestSchedulerFlapDamping(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.HealthyAfter, c.UnhealthyAfter = 1, 1
		c.Damping = Damping{Flips: 4, Window: 60 * time.Second, Hold: 60 * time.Second}
	})
	k := key(1)
	addr := tcp(k).Addr()
	h.s.Set(k, tcp(k), true)
	h.settle()
	// Alternate: fail, ok, fail, ok are 4 flips; the 5th (fail) holds it unhealthy.
	for i, r := range []Result{fail, ok1ms, fail, ok1ms, fail} {
		h.stub.queue(addr, r)
		h.toNext(k)
		if f := h.takeFlips(); len(f) != 1 || f[0].healthy != r.Healthy {
			t.Fatalf("result %d (%+v): flips %+v", i, r, f)
		}
	}
	st := h.status(k)
	if !st.Damped || st.Healthy || !strings.Contains(st.DampReason, "flapping") || st.HeldUntil.Sub(h.clock.Now()) != 60*time.Second {
		t.Fatalf("after 5 flips: %+v, want held unhealthy for 60s", st)
	}
	if ss := h.s.Stats(); ss.ToUnhealthy != 3 || ss.ToHealthy != 2 || ss.Dampings != 1 || ss.Damped != 1 ||
		ss.TCP.Failed != 3 || ss.TCP.Healthy+ss.TCP.Failed != st.Checks || ss.Targets != 1 || ss.Probed != 1 {
		t.Fatalf("stats after 5 flips: %+v (checks %d)", ss, st.Checks)
	}
	// Held: oks do not flip it.
	for h.clock.Now().Before(st.HeldUntil) {
		if nd := h.status(k).NextDue; !nd.Before(st.HeldUntil) {
			break
		}
		h.toNext(k)
		if f := h.takeFlips(); len(f) != 0 {
			t.Fatalf("flipped while held: %+v", f)
		}
	}
	if !h.status(k).Damped || h.status(k).Healthy {
		t.Fatal("hold ended early")
	}
	// The first check after the hold releases it and, being ok, flips it back.
	h.toNext(k)
	f := h.takeFlips()
	st = h.status(k)
	if len(f) != 1 || !f[0].healthy || st.Damped || st.DampReason != "" || st.RecentFlips != 1 {
		t.Fatalf("after the hold: flips %+v, status %+v", f, st)
	}
	if ss := h.s.Stats(); ss.Damped != 0 || ss.Dampings != 1 || ss.ToHealthy != 3 || ss.HTTP != (CheckCounts{}) {
		t.Fatalf("stats after the hold: %+v", ss)
	}
	h.s.Remove(k)
	if ss := h.s.Stats(); ss.Targets != 0 || ss.Probed != 0 {
		t.Fatalf("stats after Remove: %+v", ss)
	}
}

// Flips spread out more than the window never trigger damping.
func TestSchedulerSlowFlipsAreNotDamped(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.HealthyAfter, c.UnhealthyAfter = 1, 1
		c.Damping = Damping{Flips: 2, Window: 10 * time.Second, Hold: 60 * time.Second}
	})
	k := key(1)
	addr := tcp(k).Addr()
	h.s.Set(k, tcp(k), true)
	h.settle()
	for i := range 10 {
		r := fail
		if i%2 == 1 {
			r = ok1ms
		}
		h.advance(11 * time.Second) // past the window; several checks ok in between
		h.stub.queue(addr, r)
		h.toNext(k)
		if f := h.takeFlips(); len(f) != 1 {
			t.Fatalf("flip %d: %+v", i, f)
		}
		if h.status(k).Damped {
			t.Fatalf("damped after slow flip %d", i)
		}
	}
}

func TestSchedulerCheckerPanicIsAFailure(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.Checkers[model.CheckTCP] = panicky{}
	})
	k := key(1)
	h.s.Set(k, tcp(k), true)
	h.settle()
	if st := h.status(k); st.Last.Healthy || !strings.Contains(st.Last.Reason, "panicked") {
		t.Fatalf("%+v", st)
	}
}

type panicky struct{}

func (panicky) Check(context.Context, Target) Result { panic("boom") }

func TestSchedulerLifecycle(t *testing.T) {
	defer goleak.VerifyNone(t)
	cfg := DefaultConfig()
	cfg.Clock = clockwork.NewFakeClock()
	s, err := NewScheduler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Settle(context.Background()); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("Settle before Start: %v", err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); !errors.Is(err, ErrStarted) {
		t.Fatalf("second Start: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Close: %v", err)
	}
	if err := s.Settle(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Settle after Close: %v", err)
	}
	s.Set(key(1), tcp(key(1)), true) // no-op
	if s.Len() != 0 {
		t.Fatal("Set after Close added a target")
	}
	// Close without Start.
	s2, _ := NewScheduler(cfg)
	_ = s2.Close()
	// A done ctx is refused.
	s3, _ := NewScheduler(cfg)
	defer s3.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s3.Start(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Start with a done ctx: %v", err)
	}
}

// Close cancels running checks and waits for them.
func TestSchedulerCloseCancelsChecks(t *testing.T) {
	h := newHarness(t, nil)
	h.stub.gate = make(chan struct{}) // never opened: checks wait for ctx
	for i := range 5 {
		h.s.Set(key(i), tcp(key(i)), true)
	}
	for range 5 {
		<-h.stub.started
	}
	if err := h.s.Close(); err != nil {
		t.Fatal(err)
	}
	if f := h.takeFlips(); len(f) != 0 {
		t.Fatalf("flips %+v on Close", f)
	}
}

// With the built-in checkers and the real clock: a listener is healthy, and once closed
// the instance turns unhealthy at once (refused is definite).
func TestSchedulerRealTCP(t *testing.T) {
	defer goleak.VerifyNone(t)
	ln, err := newLocalListener()
	if err != nil {
		t.Fatal(err)
	}
	flips := make(chan bool, 4)
	cfg := DefaultConfig()
	cfg.FirstIntervalMin, cfg.FirstIntervalMax = 10*time.Millisecond, 20*time.Millisecond
	cfg.TCPInterval = Interval{Min: 10 * time.Millisecond, Max: 20 * time.Millisecond, Factor: 0.5}
	cfg.OnTransition = func(_ model.InstanceKey, healthy bool, _ Status) { flips <- healthy }
	s, err := NewScheduler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tg := tcpTarget(t, ln.Addr().String())
	k := model.InstanceKey{Service: model.ServiceKey{Name: "svc"}, IP: tg.IP, Port: tg.Port}
	s.Set(k, tg, false)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	next := func() bool {
		select {
		case h := <-flips:
			return h
		case <-time.After(10 * time.Second):
			t.Fatal("no flip in 10s")
			return false
		}
	}
	if !next() {
		t.Fatal("first flip to unhealthy")
	}
	_ = ln.Close()
	if next() {
		t.Fatal("second flip to healthy")
	}
	if st, _ := s.Status(k); st.Last.Reason != "connection refused" || st.ConsecutiveFail != 1 {
		t.Fatalf("%+v", st)
	}
}

// waitFor polls cond until it holds, or fails after 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// OnTransition may call the scheduler: here it reads the status and removes the target.
func TestSchedulerCallbackMayCallScheduler(t *testing.T) {
	var h *harness
	seen := make(chan Status, 1)
	h = newHarness(t, func(c *Config) {
		c.OnTransition = func(key model.InstanceKey, healthy bool, st Status) {
			got, _ := h.s.Status(key)
			seen <- got
			h.s.Remove(key)
		}
	})
	k := key(1)
	h.stub.queue(tcp(k).Addr(), failed)
	h.s.Set(k, tcp(k), true)
	h.settle()
	if st := <-seen; st.Healthy || st.Checks != 1 {
		t.Fatalf("status in the callback: %+v", st)
	}
	if _, ok := h.s.Status(k); ok {
		t.Fatal("the callback's Remove did not take")
	}
}

// CheckTimeout bounds a checker that ignores its own timeout: the check's ctx ends and its
// slot is freed.
func TestSchedulerCheckTimeoutBoundsStuckChecker(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.CheckTimeout = 50 * time.Millisecond; c.MaxConcurrent = 1 })
	h.stub.gate = make(chan struct{}) // never opened: only ctx ends the check
	k := key(1)
	h.s.Set(k, tcp(k), true)
	h.settle()
	st := h.status(k)
	if st.Checks != 1 || st.Running || st.Last.Healthy || st.Last.Reason != "canceled" {
		t.Fatalf("%+v", st)
	}
}

// slowChecker blocks until its check is cancelled, then takes a while to
// return, as a checker tearing down a connection would.
type slowChecker struct {
	started chan struct{}
	once    sync.Once
	running atomic.Int32
}

func (c *slowChecker) Check(ctx context.Context, _ Target) Result {
	c.running.Add(1)
	defer c.running.Add(-1)
	c.once.Do(func() { close(c.started) })
	<-ctx.Done()
	time.Sleep(50 * time.Millisecond)
	return Result{}
}

// Close called twice at once: both calls return only once the running check
// has returned.
func TestSchedulerConcurrentCloseWaits(t *testing.T) {
	slow := &slowChecker{started: make(chan struct{})}
	h := newHarness(t, func(c *Config) { c.Checkers[model.CheckTCP] = slow })
	k := key(1)
	h.s.Set(k, tcp(k), true)
	<-slow.started
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = h.s.Close()
			if n := slow.running.Load(); n != 0 {
				t.Errorf("Close returned with %d check still running", n)
			}
		}()
	}
	wg.Wait()
}
