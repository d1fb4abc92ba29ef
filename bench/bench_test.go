package main

import (
	"bytes"
	"context"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		out := make([]time.Duration, len(xs))
		for i, x := range xs {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	for _, tc := range []struct {
		lat  []time.Duration
		p    int
		want time.Duration
	}{
		{nil, 50, 0},
		{ms(7), 99, 7 * time.Millisecond},
		{ms(5, 1, 4, 2, 3), 50, 3 * time.Millisecond},
		{ms(5, 1, 4, 2, 3), 99, 5 * time.Millisecond},
		{ms(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 90, 9 * time.Millisecond},
	} {
		if got := percentile(tc.lat, tc.p); got != tc.want {
			t.Errorf("percentile(%v, %d) = %v, want %v", tc.lat, tc.p, got, tc.want)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := median(tc.xs); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
	if !math.IsNaN(median(nil)) {
		t.Error("median of nothing is not NaN")
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{human(1_560_000, "/s"), "1.56M/s"},
		{human(14_900, "/s"), "14.9k/s"},
		{human(455, "/s"), "455/s"},
		{human(0.14, "ms"), "0.140 ms"},
		{human(490, "ms"), "490.0 ms"},
		{human(1109.4, "B"), "1109 B"},
		{ratio(105.2), "105×"},
		{ratio(50.1), "50.1×"},
		{ratio(0.7), "0.70×"},
		{ratio(0.027), "0.027×"},
		{ratio(math.NaN()), "–"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestSelectRows(t *testing.T) {
	all := rows()
	if sel, err := selectRows(all, "all"); err != nil || len(sel) != len(all) {
		t.Fatalf("all: %d rows, %v", len(sel), err)
	}
	sel, err := selectRows(all, "heap-beat, query")
	if err != nil || len(sel) != 2 || sel[0].id != "query" || sel[1].id != "heap-beat" {
		var ids []string
		for _, r := range sel {
			ids = append(ids, r.id)
		}
		t.Fatalf("heap-beat,query: %v, %v (want table order: query, heap-beat)", ids, err)
	}
	if _, err := selectRows(all, "query,nope"); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("unknown row: %v", err)
	}
	seen := map[string]bool{}
	for _, r := range all {
		if seen[r.id] || len(r.muster) == 0 || (r.etcd == nil || r.muster[0].run == nil) && r.paired == nil ||
			r.paired != nil && len(r.muster) != 1 {
			t.Errorf("row %q: duplicate id, or a side missing", r.id)
		}
		seen[r.id] = true
	}
}

// TestSmoke runs two short rows end to end, a standalone one and a 3-node
// one, through the command's own entry point: systems start, measure, and
// close, and the table comes out.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and Muster clusters")
	}
	before := tempEntries(t)
	var out bytes.Buffer
	if err := run([]string{"-smoke", "-rows", "query,visibility-batch"}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log(out.String())
	for _, want := range []string{"| query, service of 100", "| cross-node visibility p99, 1 session × 100 instances", "median: etcd"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if after := tempEntries(t); after > before {
		t.Errorf("%d muster-bench- directories left in %s", after-before, os.TempDir())
	}
}

func tempEntries(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir(os.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range es {
		if strings.HasPrefix(e.Name(), "muster-bench-") {
			n++
		}
	}
	return n
}

// BenchmarkRows runs each side of each row once per iteration, with the
// full sizes (smoke sizes with -short), and reports its measurement: the
// same numbers as the command, in the shape benchstat reads. Compare the
// etcd and muster sub-benchmarks of a row:
//
//	go test -run '^$' -bench 'Rows/register-cluster-session' -benchtime 1x -count 5
func BenchmarkRows(b *testing.B) {
	sz := fullSizes()
	if testing.Short() {
		sz = smokeSizes()
	}
	unit := map[string]string{"/s": "ops/s", "ms": "ms", "B": "B/instance"}
	for _, r := range rows() {
		if r.paired != nil {
			b.Run(r.id, func(b *testing.B) {
				var ev, mv []float64
				for i := 0; i < b.N; i++ {
					e, m, err := r.paired(context.Background(), sz, i%2 == 0)
					if err != nil {
						b.Fatal(err)
					}
					ev, mv = append(ev, e.value), append(mv, m.value)
				}
				b.ReportMetric(median(ev), "etcd-"+unit[r.unit])
				b.ReportMetric(median(mv), "muster-"+unit[r.unit])
			})
			continue
		}
		sides := []variant{{"etcd", r.etcd}}
		for _, v := range r.muster {
			sides = append(sides, variant{"muster-" + v.name, v.run})
		}
		for _, s := range sides {
			b.Run(r.id+"/"+s.name, func(b *testing.B) {
				var vals []float64
				for i := 0; i < b.N; i++ {
					res, err := runSide(context.Background(), sz, s.name, s.run)
					if err != nil {
						b.Fatal(err)
					}
					vals = append(vals, res.value)
				}
				b.ReportMetric(median(vals), unit[r.unit])
			})
		}
	}
}

// TestFsyncBound: a throughput reads against the fsync latency as commands per fsync and as
// the fraction of every writer's command in every round.
func TestFsyncBound(t *testing.T) {
	per, frac := fsyncBound(8000, 4*time.Millisecond, 64)
	if math.Abs(per-32) > 1e-9 || math.Abs(frac-0.5) > 1e-9 {
		t.Fatalf("8k/s at 4 ms per fsync, 64 writers: %.3f per fsync, %.3f of the bound; want 32 and 0.5", per, frac)
	}
}

// TestProbeDisk: the probe writes, fdatasyncs and times appends in the directory it is given.
func TestProbeDisk(t *testing.T) {
	dir := t.TempDir()
	d, err := probeDisk(dir, 10)
	if err != nil {
		t.Fatal(err)
	}
	if d.p50 <= 0 || d.p99 < d.p50 {
		t.Fatalf("p50 %v, p99 %v", d.p50, d.p99)
	}
	t.Logf("fdatasync of a 4 KiB append in %s: p50 %v, p99 %v (10 appends)", dir, d.p50, d.p99)
	st, err := os.Stat(dir + "/fsync-probe")
	if err != nil || st.Size() != 15*4096 {
		t.Fatalf("probe file: %v, %v (want 15 appends of 4 KiB)", st, err)
	}
}

// TestRunPaired: the paired driver starts both sides (in the round's order), runs every
// writer's writes exactly once and in order on each side, alternates the sides from one
// segment to the next (each side first in half of them), waits for each side's writes,
// and closes both.
func TestRunPaired(t *testing.T) {
	sz := smokeSizes()
	sz.writers, sz.persistentPerWriter = 4, 16
	for _, etcdFirst := range []bool{true, false} {
		var mu sync.Mutex
		var started, trace []string
		done := map[string][][]int{}
		closed, waited := map[string]bool{}, map[string]int{}
		start := func(_ context.Context, dir string, etcd bool) (*pairedSide, error) {
			name := "muster-raft"
			if etcd {
				name = "etcd"
			}
			started = append(started, name)
			done[name] = make([][]int, sz.writers)
			return &pairedSide{
				name: name,
				op: func(w, i int) error {
					mu.Lock()
					defer mu.Unlock()
					if n := len(trace); n == 0 || trace[n-1] != name {
						trace = append(trace, name)
					}
					done[name][w] = append(done[name][w], i)
					return nil
				},
				wait: func(_ context.Context, ops int) error { waited[name] = ops; return nil },
				close: func() {
					// The directory is still there: a store writes to it while it closes.
					if _, err := os.Stat(dir); err != nil {
						t.Errorf("%s closed after its directory was removed: %v", name, err)
					}
					closed[name] = true
				},
			}, nil
		}
		e, m, err := runPaired(context.Background(), sz, etcdFirst, start)
		if err != nil {
			t.Fatal(err)
		}
		first, second := "etcd", "muster-raft"
		if !etcdFirst {
			first, second = second, first
		}
		if !slices.Equal(started, []string{first, second}) {
			t.Errorf("etcdFirst %v: started %v", etcdFirst, started)
		}
		// first, second, second, first, first, …: a change of side after every segment
		// but the pairs' middle.
		var want []string
		for seg := range pairedSegments {
			a, b := first, second
			if seg%2 == 1 {
				a, b = b, a
			}
			if n := len(want); n == 0 || want[n-1] != a {
				want = append(want, a)
			}
			want = append(want, b)
		}
		if !slices.Equal(trace, want) {
			t.Errorf("etcdFirst %v: sides ran %v, want %v", etcdFirst, trace, want)
		}
		for name, ws := range done {
			for w, is := range ws {
				for i := range sz.persistentPerWriter {
					if i >= len(is) || is[i] != i {
						t.Fatalf("%s writer %d did %v, want 0…%d once each, in order", name, w, is, sz.persistentPerWriter-1)
					}
				}
			}
			if total := sz.writers * sz.persistentPerWriter; waited[name] != total || !closed[name] {
				t.Errorf("%s: waited for %d (want %d), closed %v", name, waited[name], total, closed[name])
			}
		}
		if e.value <= 0 || m.value <= 0 || !strings.Contains(e.note, "64 ops") || !strings.Contains(m.note, "8 segments") {
			t.Errorf("results %+v, %+v", e, m)
		}
	}
}
