// Package metric holds the one histogram type the engine packages share: a
// fixed set of bucket bounds, one atomic counter per bucket, no lock and no
// allocation per observation. Packages expose its snapshots in their Stats
// structs through a type alias (raftstore.Histogram), so embedders can name
// the type, and the optional Prometheus package converts them to
// Prometheus histograms.
//
// A Histogram is safe for concurrent use. Its zero value is not usable: make
// one with NewHistogram (or use LatencyBounds for durations). Keep one per
// component instance, never a package-level one (no global state).
package metric

import (
	"sync/atomic"
	"time"
)

// latencyBounds are the default upper bounds of a latency histogram, from
// 100 µs to 10 s, about three per decade: they cover a local apply (tens
// of microseconds lands in the first bucket) up to a proposal that waited
// for an election.
var latencyBounds = [...]time.Duration{
	100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond,
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second,
}

// LatencyBounds returns a copy of the default latency bounds.
func LatencyBounds() []time.Duration { return append([]time.Duration(nil), latencyBounds[:]...) }

// Histogram counts durations into fixed buckets. Observe costs a short
// search over the bounds and two atomic adds.
type Histogram struct {
	bounds []time.Duration // ascending upper bounds (inclusive)
	counts []atomic.Uint64 // len(bounds)+1: the last one is +Inf
	sum    atomic.Int64    // nanoseconds
}

// NewHistogram returns a histogram with the given ascending upper bounds
// (copied); none means LatencyBounds. Bounds that are not strictly
// ascending are dropped.
func NewHistogram(bounds ...time.Duration) *Histogram {
	if len(bounds) == 0 {
		bounds = latencyBounds[:]
	}
	h := &Histogram{bounds: make([]time.Duration, 0, len(bounds))}
	for _, b := range bounds {
		if n := len(h.bounds); n == 0 || b > h.bounds[n-1] {
			h.bounds = append(h.bounds, b)
		}
	}
	h.counts = make([]atomic.Uint64, len(h.bounds)+1)
	return h
}

// Observe counts one duration. Negative durations (a clock step) count as 0.
func (h *Histogram) Observe(d time.Duration) { h.ObserveN(d, 1) }

// ObserveN counts n observations of one duration, at the cost of one.
func (h *Histogram) ObserveN(d time.Duration, n uint64) {
	if n == 0 {
		return
	}
	if d < 0 {
		d = 0
	}
	lo, hi := 0, len(h.bounds) // the first bound >= d; len(bounds) is +Inf
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if h.bounds[m] < d {
			lo = m + 1
		} else {
			hi = m
		}
	}
	h.counts[lo].Add(n)
	h.sum.Add(int64(d) * int64(n))
}

// Snapshot returns the counts so far. The buckets are read one by one, so
// a snapshot taken during observations may be off by those in flight;
// Count is the sum of the buckets, so it always agrees with them.
func (h *Histogram) Snapshot() HistogramSnapshot {
	s := HistogramSnapshot{Bounds: h.bounds, Counts: make([]uint64, len(h.counts))}
	for i := range h.counts {
		c := h.counts[i].Load()
		s.Counts[i] = c
		s.Count += c
	}
	s.Sum = time.Duration(h.sum.Load())
	return s
}

// HistogramSnapshot is a histogram's state at one moment.
type HistogramSnapshot struct {
	// Bounds are the buckets' upper bounds (inclusive), ascending. Shared
	// with the histogram: do not modify.
	Bounds []time.Duration `json:"bounds"`
	// Counts has one count per bucket, not cumulative: Counts[i] counts
	// the observations in (Bounds[i-1], Bounds[i]]; the last element,
	// Counts[len(Bounds)], those above the last bound.
	Counts []uint64      `json:"counts"`
	Count  uint64        `json:"count"` // all observations
	Sum    time.Duration `json:"sum"`   // their sum
}

// Cumulative calls fn for each bound with the count of observations at or
// below it, in ascending order (the Prometheus form; +Inf is Count).
func (s HistogramSnapshot) Cumulative(fn func(le time.Duration, count uint64)) {
	var acc uint64
	for i, b := range s.Bounds {
		acc += s.Counts[i]
		fn(b, acc)
	}
}

// Quantile estimates the q-quantile (0 ≤ q ≤ 1) by linear interpolation
// within the bucket that holds it, like Prometheus's histogram_quantile.
// It returns 0 without observations, and the last bound for a quantile in
// the +Inf bucket.
func (s HistogramSnapshot) Quantile(q float64) time.Duration {
	if s.Count == 0 || len(s.Bounds) == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	rank := q * float64(s.Count)
	var acc float64
	for i, b := range s.Bounds {
		c := float64(s.Counts[i])
		if acc+c >= rank && c > 0 {
			lo := time.Duration(0)
			if i > 0 {
				lo = s.Bounds[i-1]
			}
			return lo + time.Duration(float64(b-lo)*((rank-acc)/c))
		}
		acc += c
	}
	return s.Bounds[len(s.Bounds)-1]
}
