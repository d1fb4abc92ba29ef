package health

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/muster-io/muster/model"
)

// benchCore returns a core holding n TCP targets, all due at t0.
func benchCore(b *testing.B, n int, t0 int64) (*core, []model.InstanceKey) {
	b.Helper()
	cfg := DefaultConfig()
	c := newCore(&cfg, rand.NewPCG(1, 2))
	keys := make([]model.InstanceKey, n)
	for i := range keys {
		keys[i] = model.InstanceKey{Service: model.ServiceKey{Name: "svc"}, IP: ipOf(i), Port: 8080}
		c.set(keys[i], Target{IP: keys[i].IP, Port: 8080}, true, t0)
	}
	return c, keys
}

func ipOf(i int) string {
	return "10." + itoa(i>>16&0xff) + "." + itoa(i>>8&0xff) + "." + itoa(i&0xff)
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}

// BenchmarkSchedulerTick measures the scheduler's pure core, which the driver runs on every
// wake-up, with 100,000 TCP targets and stubbed checks that complete at once (the check
// itself, its goroutine and the result channel are not included; see
// BenchmarkSchedulerDriver).
//
// "due": each op advances the clock by 10 ms, dispatches every due check and completes it
// (flip rule, adaptive interval, re-arm in the heap). The first op finds all 100,000 due
// (they were just added); later ones about 1/200 of those whose interval ends in the step.
// ns/due is the cost per dispatched and completed check.
//
// "idle": a wake-up when nothing is due: must not allocate.
func BenchmarkSchedulerTick(b *testing.B) {
	const n = 100_000
	t0 := time.Unix(1_800_000_000, 0).UnixNano()
	b.Run("due", func(b *testing.B) {
		c, _ := benchCore(b, n, t0)
		jobs := make([]job, 0, n)
		now := t0
		res := Result{Healthy: true, Latency: 2 * time.Millisecond, Reason: "ok"}
		due := 0
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			jobs = c.dispatch(now, 1<<30, jobs[:0])
			for i := range jobs {
				c.complete(jobs[i].slot, jobs[i].gen, res, now)
			}
			due += len(jobs)
			now += int64(10 * time.Millisecond)
		}
		b.StopTimer()
		if due == 0 {
			b.Fatal("nothing was due")
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(due), "ns/due")
		b.ReportMetric(float64(due)/float64(b.N), "due/op")
	})
	b.Run("idle", func(b *testing.B) {
		c, _ := benchCore(b, n, t0)
		jobs := c.dispatch(t0, 1<<30, make([]job, 0, n))
		for i := range jobs {
			c.complete(jobs[i].slot, jobs[i].gen, Result{Healthy: true}, t0)
		}
		next, ok := c.next(1 << 30)
		if !ok || next <= t0 {
			b.Fatal("no future due time")
		}
		now := next - 1
		jobs = jobs[:0]
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			jobs = c.dispatch(now, 1<<30, jobs[:0])
			if _, ok := c.next(1 << 30); !ok || len(jobs) != 0 {
				b.Fatal("something was due")
			}
		}
		if a := testing.AllocsPerRun(100, func() { jobs = c.dispatch(now, 1<<30, jobs[:0]); c.next(1 << 30) }); a != 0 {
			b.Fatalf("%v allocations per idle tick, want 0", a)
		}
	})
}

// nopChecker is healthy at once.
type nopChecker struct{}

func (nopChecker) Check(context.Context, Target) Result {
	return Result{Healthy: true, Latency: time.Millisecond, Reason: "ok"}
}

// BenchmarkSchedulerDriver measures a whole check round trip through the driver, with 10,000
// targets on a fake clock and a checker that returns at once: dispatch under the lock, a
// goroutine per check, the result channel, completion. Each op advances the clock by 5 s, so
// that every target is due, and settles. ns/check is the cost per check.
func BenchmarkSchedulerDriver(b *testing.B) {
	const n = 10_000
	clock := clockwork.NewFakeClockAt(time.Unix(1_800_000_000, 0))
	cfg := DefaultConfig()
	cfg.Clock = clock
	cfg.Rand = rand.NewPCG(1, 2)
	cfg.Checkers = map[model.CheckType]Checker{model.CheckTCP: nopChecker{}}
	cfg.MaxConcurrent = 256
	s, err := NewScheduler(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	keys := make([]model.InstanceKey, n)
	for i := range keys {
		keys[i] = model.InstanceKey{Service: model.ServiceKey{Name: "svc"}, IP: ipOf(i), Port: 8080}
		s.Set(keys[i], Target{IP: keys[i].IP, Port: 8080}, true)
	}
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		b.Fatal(err)
	}
	if err := s.Settle(ctx); err != nil {
		b.Fatal(err)
	}
	checks := func() (total uint64) {
		for _, k := range keys {
			st, _ := s.Status(k)
			total += st.Checks
		}
		return total
	}
	before := checks()
	b.ResetTimer()
	for b.Loop() {
		clock.Advance(7 * time.Second)
		if err := s.Settle(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(checks()-before), "ns/check")
}
