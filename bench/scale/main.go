// Command scale measures how Distro's costs grow with the number of nodes and of instances:
// bytes and CPU per change across the cluster, verify bytes per peer per round, a joining node's
// time to ready and the memory per node. It runs distro replicators in one process on
// transport.MemNetwork with a fake clock (see docs/scaling.md for what is measured and how).
//
//	go run ./scale -nodes 3,5,9 -instances 100000,1000000
//	go run ./scale -quick            # seconds: a check, not a measurement
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func run(args []string, out, logw io.Writer) error {
	fs := flag.NewFlagSet("scale", flag.ContinueOnError)
	fs.SetOutput(logw)
	nodes := fs.String("nodes", "3,5,9", "cluster sizes (before the join), comma-separated")
	instances := fs.String("instances", "100000,1000000", "instance records, comma-separated")
	changes := fs.Int("changes", 1000, "single changes timed per configuration")
	batch := fs.Int("batch", 100, "changes per sync round in the batched measurement")
	inflight := fs.Int("inflight", 10, "changes per owner in their merge window at a verify round (churn)")
	chunk := fs.Int("chunk", 10000, "records each owner writes per sync round while the cluster is loaded")
	quick := fs.Bool("quick", false, "3 and 5 nodes, 2,000 instances, 20 changes: a check in seconds")
	quiet := fs.Bool("q", false, "no progress lines")
	profile := fs.String("cpuprofile", "", "write a CPU profile of each configuration's single changes to this path + .<nodes>x<instances>")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *quick {
		*nodes, *instances, *changes, *batch, *chunk = "3,5", "2000", 20, 10, 500
	}
	ns, err := ints(*nodes)
	if err != nil {
		return err
	}
	is, err := ints(*instances)
	if err != nil {
		return err
	}
	log := func(format string, args ...any) {
		if !*quiet {
			fmt.Fprintf(logw, format+"\n", args...)
		}
	}
	fmt.Fprintf(out, "%s, GOMAXPROCS=%d, %s/%s; load average at start: %s\n\n", runtime.Version(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, loadavg())
	fmt.Fprint(out, header)
	for _, inst := range is {
		for _, n := range ns {
			p := params{Nodes: n, Instances: inst, Changes: *changes, Batch: *batch, InFlight: *inflight, Chunk: *chunk, Profile: *profile}
			log("%d nodes, %d instances", n, inst)
			r, err := measure(p, log)
			if err != nil {
				return fmt.Errorf("%d nodes, %d instances: %w", n, inst, err)
			}
			fmt.Fprintln(out, r.row())
		}
	}
	fmt.Fprintf(out, "\nload average at end: %s\n", loadavg())
	return nil
}

const header = "| nodes | instances | heap / node | B / record | change: B (cluster) | B / peer | CPU (cluster) | alloc (cluster) | batched: B / change | CPU / change | alloc / change | verify idle: B / peer / round (max) | verify churn: B / peer / round (max) | join: ready | join: CPU | join: alloc (GC cycles) | join: pulled | joiner heap |\n" +
	"|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"

func (r result) row() string {
	return fmt.Sprintf("| %d | %s | %s | %.0f | %.0f | %.0f | %s | %s | %.0f | %s | %s | %.0f (%.0f) | %.0f (%.0f) | %s | %s | %s (%d) | %s from %d | %s |",
		r.Nodes, count(r.Instances), mb(r.HeapPerNode), r.HeapPerRecord,
		r.ChangeBytes, r.ChangePeerBytes, us(r.ChangeCPU), kb(r.ChangeAlloc), r.BatchBytes, us(r.BatchCPU), kb(r.BatchAlloc),
		r.VerifyIdle, r.VerifyIdleMax, r.VerifyChurn, r.VerifyChurnMax,
		r.JoinReady.Round(10*time.Millisecond), r.JoinCPU.Round(10*time.Millisecond),
		mb(float64(r.JoinAlloc)), r.JoinGCs, mb(r.JoinBytes), r.JoinPeers, mb(r.JoinerHeap))
}

func us(d time.Duration) string { return fmt.Sprintf("%.1f µs", float64(d)/1e3) }
func kb(b uint64) string        { return fmt.Sprintf("%.1f KB", float64(b)/1e3) }
func mb(b float64) string       { return fmt.Sprintf("%.1f MB", b/1e6) }

func count(n int) string {
	switch {
	case n >= 1e6 && n%1e6 == 0:
		return strconv.Itoa(n/1e6) + "M"
	case n >= 1e3 && n%1e3 == 0:
		return strconv.Itoa(n/1e3) + "k"
	}
	return strconv.Itoa(n)
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("bad number %q", f)
		}
		out = append(out, v)
	}
	return out, nil
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
