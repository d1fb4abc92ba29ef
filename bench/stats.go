package main

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"time"
)

// result is one side's measurement in one round: value in the row's unit,
// and a note for the log (operations, sizes, the other percentile).
type result struct {
	value float64
	note  string
	// detail, if set, is printed under the round's line in rows marked disk: where the
	// side's CPU and flushes went (sysNote), and for Muster its Raft counters.
	detail string
	// cpuPerOp is the process's CPU time per operation while the side ran, in µs (0: not
	// measured). The other side did not run meanwhile, so it is this side's.
	cpuPerOp float64
}

// latencyResult reports percentile p of lat in milliseconds, with p50 and
// p99 in the note.
func latencyResult(lat []time.Duration, p int) result {
	return result{
		value: ms(percentile(lat, p)),
		note:  fmt.Sprintf("n=%d p50 %.3f ms, p99 %.3f ms", len(lat), ms(percentile(lat, 50)), ms(percentile(lat, 99))),
	}
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// percentile returns the p-th percentile of lat (nearest rank), 0 if empty.
func percentile(lat []time.Duration, p int) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	i := int(math.Ceil(float64(p)/100*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// median returns the median of xs (the mean of the middle two for an even
// count), NaN if empty.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// heapNow returns the live Go heap after two garbage collections.
func heapNow() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func float64bits(f float64) uint64     { return math.Float64bits(f) }
func float64frombits(b uint64) float64 { return math.Float64frombits(b) }

// human formats v in unit: rates with k/M suffixes, milliseconds and bytes
// with sensible precision.
func human(v float64, unit string) string {
	switch unit {
	case "/s":
		switch {
		case v >= 1e6:
			return fmt.Sprintf("%.2fM/s", v/1e6)
		case v >= 1e3:
			return fmt.Sprintf("%.1fk/s", v/1e3)
		default:
			return fmt.Sprintf("%.0f/s", v)
		}
	case "ms":
		if v < 1 {
			return fmt.Sprintf("%.3f ms", v)
		}
		return fmt.Sprintf("%.1f ms", v)
	case "B":
		return fmt.Sprintf("%.0f B", v)
	}
	return fmt.Sprintf("%g %s", v, unit)
}

// ratio formats a Muster/etcd ratio: "105×" above 10, "3.3×" above 1,
// "0.70×" and "0.027" below.
func ratio(r float64) string {
	switch {
	case math.IsNaN(r) || math.IsInf(r, 0):
		return "–"
	case r >= 100:
		return fmt.Sprintf("%.0f×", r)
	case r >= 10:
		return fmt.Sprintf("%.1f×", r)
	case r >= 0.1:
		return fmt.Sprintf("%.2f×", r)
	default:
		return fmt.Sprintf("%.3f×", r)
	}
}
