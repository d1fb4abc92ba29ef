package metric

import (
	"sync"
	"testing"
	"time"
)

func TestHistogramBuckets(t *testing.T) {
	h := NewHistogram(time.Millisecond, 10*time.Millisecond, 5*time.Millisecond, 100*time.Millisecond)
	// 5ms is dropped (not ascending).
	for _, d := range []time.Duration{-1, 0, time.Millisecond, time.Millisecond + 1, 10 * time.Millisecond, 50 * time.Millisecond, time.Second} {
		h.Observe(d)
	}
	s := h.Snapshot()
	want := []uint64{3, 2, 1, 1}
	if len(s.Bounds) != 3 || len(s.Counts) != 4 {
		t.Fatalf("bounds %v counts %v", s.Bounds, s.Counts)
	}
	for i := range want {
		if s.Counts[i] != want[i] {
			t.Fatalf("counts = %v, want %v", s.Counts, want)
		}
	}
	if s.Count != 7 {
		t.Fatalf("count = %d", s.Count)
	}
	if wantSum := 2*time.Millisecond + 1 + 60*time.Millisecond + time.Second; s.Sum != wantSum {
		t.Fatalf("sum = %v, want %v", s.Sum, wantSum)
	}
	var cum []uint64
	s.Cumulative(func(_ time.Duration, c uint64) { cum = append(cum, c) })
	if cum[0] != 3 || cum[1] != 5 || cum[2] != 6 {
		t.Fatalf("cumulative = %v", cum)
	}
}

func TestHistogramQuantile(t *testing.T) {
	h := NewHistogram(10*time.Millisecond, 20*time.Millisecond)
	if q := h.Snapshot().Quantile(0.5); q != 0 {
		t.Fatalf("empty quantile = %v", q)
	}
	for range 10 {
		h.Observe(15 * time.Millisecond)
	}
	if q := h.Snapshot().Quantile(0.5); q != 15*time.Millisecond {
		t.Fatalf("p50 = %v", q)
	}
	h.Observe(time.Hour)
	if q := h.Snapshot().Quantile(1); q != 20*time.Millisecond {
		t.Fatalf("p100 = %v", q)
	}
}

func TestHistogramConcurrent(t *testing.T) {
	h := NewHistogram()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				h.Observe(time.Duration(g*1000+i) * time.Microsecond)
			}
		}()
	}
	wg.Wait()
	if c := h.Snapshot().Count; c != 4000 {
		t.Fatalf("count = %d", c)
	}
}

func BenchmarkObserve(b *testing.B) {
	h := NewHistogram()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		d := time.Duration(0)
		for pb.Next() {
			d += 37 * time.Microsecond
			h.Observe(d % (3 * time.Second))
		}
	})
}
