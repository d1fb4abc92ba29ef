// Command cluster is Muster's main demo: three registry nodes in one
// process on 127.0.0.1, on the real stack (TCP transport, memberlist,
// Dragonboat and Badger in a temporary directory, the health checkers). It
// plays a short scenario, narrates it, checks every outcome, and ends with a
// summary table. It exits 1 if any step does not turn out as it says.
//
//	go run ./examples/cluster
//	go run ./examples/cluster -nodes 5 -probe 500ms -v
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"text/tabwriter"
	"time"
)

func main() {
	o := options{t: defaultTimings(), out: os.Stdout}
	flag.IntVar(&o.nodes, "nodes", 3, "number of nodes, 3–9")
	flag.DurationVar(&o.t.Probe, "probe", o.t.Probe, "memberlist probe interval; a crashed node is detected after a few")
	flag.DurationVar(&o.t.SyncDelay, "sync-delay", o.t.SyncDelay, "distro: changes to one record merged for this long before sending (Nacos: 1s; 0: distro's default 1s; negative: sent at once)")
	flag.DurationVar(&o.t.Verify, "verify", o.t.Verify, "distro: anti-entropy period (Nacos: 5s)")
	flag.DurationVar(&o.t.Orphan, "orphan-timeout", o.t.Orphan, "distro: a dead node's session instances leave after this")
	flag.DurationVar(&o.t.CheckEvery, "check-interval", o.t.CheckEvery, "health: shortest TCP check interval (Nacos: 1s to 5s)")
	flag.DurationVar(&o.t.RaftRTT, "raft-rtt", o.t.RaftRTT, "Dragonboat's tick; an election takes about ten")
	flag.DurationVar(&o.t.BeatTimeout, "beat-timeout", o.t.BeatTimeout, "beat instances turn unhealthy after this without a beat (Nacos: 15s)")
	flag.BoolVar(&o.verbose, "v", false, "log the nodes' own lines to stderr")
	flag.StringVar(&o.metrics, "metrics", "127.0.0.1:0", "serve every node's Prometheus metrics at http://<addr>/metrics (loopback only; \"\" turns it off)")
	flag.StringVar(&o.console, "console", "", "serve the web console of the nodes at this loopback address while the demo runs, e.g. 127.0.0.1:0 (\"\": none)")
	flag.DurationVar(&o.linger, "linger", 0, "with -console, keep the cluster up this long after the scenario (Ctrl-C ends it)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	steps, err := run(ctx, o)
	if len(steps) > 0 {
		printSummary(o.out, steps)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

// options configure one run of the demo.
type options struct {
	nodes   int
	t       timings
	verbose bool
	metrics string // the /metrics address; "" serves none
	console string // the web console's address; "" serves none
	linger  time.Duration
	out     io.Writer // the narration
	dir     string    // data directory; "" makes a temporary one and removes it at the end
}

// step is one line of the summary table.
type step struct {
	name, result string
	took         time.Duration
}

func printSummary(w io.Writer, steps []step) {
	fmt.Fprintln(w, "\nSummary")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  step\tresult\ttook")
	var total time.Duration
	for _, s := range steps {
		fmt.Fprintf(tw, "  %s\t%s\t%v\n", s.name, s.result, s.took.Round(time.Millisecond))
		total += s.took
	}
	fmt.Fprintf(tw, "  total\t\t%v\n", total.Round(time.Millisecond))
	_ = tw.Flush()
}

func logger(verbose bool) *slog.Logger {
	if !verbose {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}
