// Command bench runs embedded etcd v3.7.3 and Muster side by side on the
// same workloads, in interleaved rounds, and prints per-round ratios
// (Muster / etcd) and their median. See README.md for what each row maps
// to on each side. A measurement harness, not library code: it reads the
// real clock to time what it measures (the lines say "real time").
//
//	cd bench && go run . -rounds 5 -rows all
//	cd bench && go run . -rounds 3 -rows register-cluster-session,visibility-batch
//	cd bench && go run . -smoke            # one short round of every row (CI)
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"syscall"
	"time"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	rounds := fs.Int("rounds", 5, "rounds per row; each round runs etcd and Muster once, in alternating order")
	only := fs.String("rows", "all", "comma-separated row ids, or all (see -list)")
	smoke := fs.Bool("smoke", false, "small workloads and one round (unless -rounds is given): a check that every row runs, not a measurement")
	list := fs.Bool("list", false, "list the rows and exit")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run (both sides) to this file")
	traceFile := fs.String("trace", "", "write an execution trace of the whole run to this file")
	memProfile := fs.String("memprofile", "", "write an allocation profile of the whole run (both sides) to this file at the end")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if *traceFile != "" {
		f, err := os.Create(*traceFile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			return err
		}
		defer trace.Stop()
	}
	if *memProfile != "" {
		defer func() {
			if f, err := os.Create(*memProfile); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	all := rows()
	if *list {
		for _, r := range all {
			fmt.Fprintf(out, "%-28s %s\n", r.id, r.title)
		}
		return nil
	}
	sel, err := selectRows(all, *only)
	if err != nil {
		return err
	}
	sz := fullSizes()
	if *smoke {
		sz = smokeSizes()
		roundsSet := false
		fs.Visit(func(f *flag.Flag) { roundsSet = roundsSet || f.Name == "rounds" })
		if !roundsSet {
			*rounds = 1
		}
	}
	if *rounds < 1 {
		return fmt.Errorf("-rounds must be at least 1")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	fmt.Fprintf(out, "muster vs embedded etcd v3.7.3: %s, GOMAXPROCS=%d, %d CPUs, %d round(s), smoke=%v, %s\n",
		runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU(), *rounds, *smoke, time.Now().UTC().Format(time.RFC3339)) // real time
	var sums []summary
	for _, r := range sel {
		s, err := runRow(ctx, out, r, sz, *rounds)
		if err != nil {
			return fmt.Errorf("%s: %w", r.id, err)
		}
		sums = append(sums, s...)
	}
	fmt.Fprintln(out)
	printTable(out, sums)
	return nil
}

// selectRows returns the rows named in spec ("all", or ids separated by
// commas), in table order.
func selectRows(all []row, spec string) ([]row, error) {
	if spec == "" || spec == "all" {
		return all, nil
	}
	want := map[string]bool{}
	for _, id := range strings.Split(spec, ",") {
		if id = strings.TrimSpace(id); id != "" {
			want[id] = true
		}
	}
	var sel []row
	for _, r := range all {
		if want[r.id] {
			sel = append(sel, r)
			delete(want, r.id)
		}
	}
	for id := range want {
		return nil, fmt.Errorf("unknown row %q (see -list)", id)
	}
	return sel, nil
}

// summary is one line of the final table: a row's Muster variant.
type summary struct {
	title, variant, unit string
	etcd, muster, ratios []float64
	disk                 []diskProbe // rows with disk set: each round's probe
	cpuRatios            []float64   // rows with disk set: each round's etcd CPU per op / Muster's
	writers              int
}

// runRow runs rounds rounds of r: in each, etcd and every Muster variant
// once, etcd first in even rounds and last in odd ones, each on a fresh
// system in a fresh temporary directory. It prints every round and the
// medians.
func runRow(ctx context.Context, out io.Writer, r row, sz sizes, rounds int) ([]summary, error) {
	fmt.Fprintf(out, "\n== %s [%s] (ratio = Muster / etcd)\n", r.title, r.id)
	sums := make([]summary, len(r.muster))
	for i, v := range r.muster {
		sums[i] = summary{title: r.title, variant: v.name, unit: r.unit}
	}
	for round := 0; round < rounds; round++ {
		var etcdRes result
		mres := make([]result, len(r.muster))
		runEtcd := func() error {
			res, err := runSide(ctx, sz, "etcd", r.etcd)
			etcdRes = res
			return err
		}
		runMuster := func() error {
			for i, v := range r.muster {
				res, err := runSide(ctx, sz, "muster-"+v.name, v.run)
				if err != nil {
					return fmt.Errorf("muster %s: %w", v.name, err)
				}
				mres[i] = res
			}
			return nil
		}
		first, second := runEtcd, runMuster
		if round%2 == 1 {
			first, second = runMuster, runEtcd
		}
		if r.paired != nil {
			first = func() error {
				var err error
				etcdRes, mres[0], err = r.paired(ctx, sz, round%2 == 0)
				return err
			}
			second = func() error { return nil }
		}
		if err := first(); err != nil {
			return nil, err
		}
		if err := second(); err != nil {
			return nil, err
		}
		var probe diskProbe
		if r.disk {
			p, err := runProbe()
			if err != nil {
				return nil, fmt.Errorf("disk probe: %w", err)
			}
			probe = p
		}
		fmt.Fprintf(out, "round %d: etcd %s (%s)\n", round+1, human(etcdRes.value, r.unit), etcdRes.note)
		if r.disk {
			printDetail(out, etcdRes.detail)
		}
		for i, v := range r.muster {
			rt := mres[i].value / etcdRes.value
			fmt.Fprintf(out, "         muster %-7s %s (%s)  ratio %s\n", v.name, human(mres[i].value, r.unit), mres[i].note, ratio(rt))
			if r.disk {
				printDetail(out, mres[i].detail)
				if c := etcdRes.cpuPerOp / mres[i].cpuPerOp; etcdRes.cpuPerOp > 0 && mres[i].cpuPerOp > 0 {
					fmt.Fprintf(out, "         cpu ratio %s (etcd's CPU per op / Muster's: what the ratio is when both are CPU-bound)\n", ratio(c))
					sums[i].cpuRatios = append(sums[i].cpuRatios, c)
				}
			}
			sums[i].etcd = append(sums[i].etcd, etcdRes.value)
			sums[i].muster = append(sums[i].muster, mres[i].value)
			sums[i].ratios = append(sums[i].ratios, rt)
			if r.disk {
				fmt.Fprintf(out, "         %s\n", boundNote(mres[i].value, probe, sz.writers))
				sums[i].disk = append(sums[i].disk, probe)
				sums[i].writers = sz.writers
			}
		}
	}
	for _, s := range sums {
		fmt.Fprintf(out, "median: etcd %s, muster %s %s, ratio %s (rounds: %s)\n",
			human(median(s.etcd), s.unit), s.variant, human(median(s.muster), s.unit), ratio(median(s.ratios)), ratioList(s.ratios))
		if len(s.cpuRatios) > 0 {
			fmt.Fprintf(out, "median: cpu ratio %s (rounds: %s)\n", ratio(median(s.cpuRatios)), ratioList(s.cpuRatios))
		}
		if len(s.disk) > 0 {
			per, frac := s.bound()
			fmt.Fprintf(out, "median: disk fdatasync p50 %.2f ms; muster %s %.1f commands per fsync, %.0f %% of %d writers × one fsync per commit round (rounds: %s)\n",
				ms(s.fsyncMedian()), s.variant, median(per), 100*median(frac), s.writers, percentList(frac))
		}
	}
	return sums, nil
}

// printDetail prints a side's detail lines, indented under the round's line.
func printDetail(out io.Writer, detail string) {
	for _, l := range strings.Split(detail, "\n") {
		if l != "" {
			fmt.Fprintf(out, "           %s\n", l)
		}
	}
}

// runProbe probes the disk in a fresh temporary directory, as the sides' directories are.
func runProbe() (diskProbe, error) {
	dir, err := os.MkdirTemp("", "muster-bench-")
	if err != nil {
		return diskProbe{}, err
	}
	defer os.RemoveAll(dir)
	return probeDisk(dir, fsyncAppends)
}

// fsyncMedian is the median over the rounds of the probes' p50.
func (s *summary) fsyncMedian() time.Duration {
	ps := make([]float64, len(s.disk))
	for i, d := range s.disk {
		ps[i] = float64(d.p50)
	}
	return time.Duration(median(ps))
}

// bound is fsyncBound of each round: Muster's throughput against that round's probe.
func (s *summary) bound() (perFsync, fraction []float64) {
	for i, d := range s.disk {
		p, f := fsyncBound(s.muster[i], d.p50, s.writers)
		perFsync, fraction = append(perFsync, p), append(fraction, f)
	}
	return perFsync, fraction
}

func percentList(fs []float64) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = fmt.Sprintf("%.0f %%", 100*f)
	}
	return strings.Join(parts, " ")
}

// runSide runs one side in a temporary directory it removes afterwards. Its
// goroutines, and those they start, carry the profiler label side=name, so a
// profile of the run (-cpuprofile) splits by side: go tool pprof -tagfocus
// side=muster-raft.
func runSide(ctx context.Context, sz sizes, name string, f side) (res result, err error) {
	dir, err := os.MkdirTemp("", "muster-bench-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	pprof.Do(ctx, pprof.Labels("side", name), func(ctx context.Context) {
		res, err = f(ctx, sz, dir)
	})
	return res, err
}

func ratioList(rs []float64) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = ratio(r)
	}
	return strings.Join(parts, " ")
}

// printTable prints the medians as a Markdown table.
func printTable(out io.Writer, sums []summary) {
	fmt.Fprintln(out, "| workload | Muster variant | etcd (median) | Muster (median) | ratio (median) | per-round ratios |")
	fmt.Fprintln(out, "|---|---|---:|---:|---:|---|")
	for _, s := range sums {
		fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %s |\n", s.title, s.variant,
			human(median(s.etcd), s.unit), human(median(s.muster), s.unit), ratio(median(s.ratios)), ratioList(s.ratios))
		if len(s.cpuRatios) > 0 {
			fmt.Fprintf(out, "| ↳ CPU per op, etcd's / Muster's (this process, same rounds) | %s | – | – | %s | %s |\n",
				s.variant, ratio(median(s.cpuRatios)), ratioList(s.cpuRatios))
		}
		if len(s.disk) > 0 {
			per, frac := s.bound()
			fmt.Fprintf(out, "| ↳ bound: disk fdatasync of 4 KiB, p50 (same run) | – | – | %.2f ms | – | – |\n", ms(s.fsyncMedian()))
			fmt.Fprintf(out, "| ↳ %s per fsync; of %d writers × one fsync per commit round | %s | – | %.1f commands | %.0f %% | %s |\n",
				s.title, s.writers, s.variant, median(per), 100*median(frac), percentList(frac))
		}
	}
}
