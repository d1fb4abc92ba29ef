// Command faultlab runs a Muster cluster as separate processes, each in
// its own Linux network namespace, drives it with real clients while it
// injects faults (a link down, partitions, an asymmetric partition,
// SIGKILL, SIGSTOP, a full disk, a power loss of the Raft log), and checks
// the recorded history: persistent operations linearizable (porcupine),
// ephemeral data converged on every node after the last heal, no
// acknowledged registration lost, no removed instance back, no node stuck
// not ready, every removal explained by the event journal. See README.md.
//
// It needs root (ip netns, nftables, mount). A test harness, not library
// code: it reads the real clock.
//
//	go build -o /tmp/faultlab ./faultlab && /tmp/faultlab -duration 2m
//	/tmp/faultlab -duration 1h -nodes 5
//	/tmp/faultlab -replay /tmp/muster-faultlab/1234/history.json
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/anishathalye/porcupine"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "node" {
		if err := runNode(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "faultlab node:", err)
			os.Exit(2)
		}
		return
	}
	code, err := runLab(os.Args[1:], os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "faultlab:", err)
		os.Exit(2)
	}
	os.Exit(code)
}

type lab struct {
	out       io.Writer
	dir       string
	logLevel  string
	tmpfsSize string
	t0        time.Time
	c         *cluster
	rec       recorder
	keySeq    atomic.Int64
	space     PersistSpace
	bounds    Bounds

	mu       sync.Mutex
	fails    []failure
	counts   map[string]map[string]int // operation → result → count
	deadIncs []string
	inFault  string
}

func (l *lab) logf(format string, args ...any) {
	fmt.Fprintf(l.out, "%8.1fs  %s\n", time.Since(l.t0).Seconds(), fmt.Sprintf(format, args...)) // real time
}

func (l *lab) fail(check, detail string) {
	l.mu.Lock()
	l.fails = append(l.fails, failure{check, detail})
	l.mu.Unlock()
	l.logf("FAIL %s: %s", check, detail)
}

func (l *lab) count(op, res string) {
	if res == "" {
		res = "refused"
	}
	l.mu.Lock()
	if l.counts[op] == nil {
		l.counts[op] = map[string]int{}
	}
	l.counts[op][res]++
	l.mu.Unlock()
}

func (l *lab) setFault(kind string) {
	l.mu.Lock()
	l.inFault = kind
	l.mu.Unlock()
}

// incDied records that every session of incarnation inc (a "pid/" prefix:
// every incarnation of a process) on node id died.
func (l *lab) incDied(id, inc string) {
	t := l.now()
	l.mu.Lock()
	l.deadIncs = append(l.deadIncs, inc)
	l.mu.Unlock()
	l.rec.eph(EOp{Kind: "sdead", Node: id, Inc: inc, Call: t, Ret: t, Result: "ok"})
}

func (l *lab) incDead(inc string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, d := range l.deadIncs {
		if d == inc || (strings.HasSuffix(d, "/") && strings.HasPrefix(inc, d)) {
			return true
		}
	}
	return false
}

// nodeExited is called when a node process exits without the lab ending it.
func (l *lab) nodeExited(n *labNode, err error) {
	if ee := (*exec.ExitError)(nil); n.strict && errors.As(err, &ee) && ee.ExitCode() == powerLossExit {
		// A power loss (POST /powerloss) ends the process; the next one
		// loads the Raft log it kept.
		if err := l.c.start(n); err != nil {
			l.fail("restart", fmt.Sprintf("%s after its power loss: %v", n.id, err))
		}
		return
	}
	l.mu.Lock()
	during := l.inFault
	l.mu.Unlock()
	pid := 0
	if n.cmd != nil && n.cmd.Process != nil {
		pid = n.cmd.Process.Pid
	}
	l.incDied(n.id, fmt.Sprintf("%d/", pid))
	l.rec.exit(ExitRec{Node: n.id, At: l.now(), Err: errText(err), During: during, Tail: n.tail(4000)})
	l.logf("node %s exited (%v) during %q", n.id, err, during)
	if during != "diskfull" {
		l.fail("node crashed", fmt.Sprintf("%s exited: %v", n.id, err))
		if !n.strict {
			// Start it again, so that the run goes on (and the failure
			// is reported at the end).
			go func() {
				time.Sleep(time.Second) // real time
				if err := l.c.start(n); err != nil {
					l.logf("restart %s: %v", n.id, err)
				}
			}()
		}
	}
}

func runLab(args []string, out io.Writer) (int, error) {
	fs := flag.NewFlagSet("faultlab", flag.ContinueOnError)
	nodes := fs.Int("nodes", 3, "node processes: 3 or 5")
	duration := fs.Duration("duration", 2*time.Minute, "how long faults are injected (then the final checks run)")
	seed := fs.Uint64("seed", 0, "random seed (0: from the clock; printed)")
	base := fs.String("dir", filepath.Join(os.TempDir(), "muster-faultlab"), "base directory: the run's is <dir>/<pid>")
	kinds := fs.String("faults", strings.Join(faultKinds, ","), "fault kinds, comma-separated")
	workers := fs.Int("workers", 3, "persistent-data workers")
	converge := fs.Duration("converge", 30*time.Second, "bound: ephemeral data converged on every node after the last heal")
	ready := fs.Duration("ready", 30*time.Second, "bound: every node ready with a Raft leader after each heal")
	linTimeout := fs.Duration("lintimeout", 2*time.Minute, "porcupine's time budget (then inconclusive)")
	logLevel := fs.String("loglevel", "warn", "the nodes' log level (their logs: <run dir>/nX/node.log)")
	tmpfsSize := fs.String("tmpfs", "128m", "size of n3's tmpfs data directory (the full-disk fault)")
	replay := fs.String("replay", "", "check a saved history.json again instead of running")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	if *replay != "" {
		h, err := readHistory(*replay)
		if err != nil {
			return 2, err
		}
		r := check(h, *linTimeout)
		printSummary(out, h, r, nil)
		if len(r.Failures) > 0 {
			return 1, nil
		}
		return 0, nil
	}
	if *nodes != 3 && *nodes != 5 {
		return 2, errors.New("-nodes must be 3 or 5")
	}
	var kindList []string
	for _, k := range strings.Split(*kinds, ",") {
		if k = strings.TrimSpace(k); k != "" {
			kindList = append(kindList, k)
		}
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano()) // real time
	}
	if os.Geteuid() != 0 {
		return 2, errors.New("needs root: ip netns, nftables and mount")
	}
	for _, tool := range []string{"ip", "nft", "mount"} {
		if _, err := lookPath(tool); err != nil {
			return 2, fmt.Errorf("%s not found (apt-get install -y iproute2 nftables)", tool)
		}
	}
	if err := os.MkdirAll(*base, 0o700); err != nil {
		return 2, err
	}
	for _, r := range cleanLeftovers(*base) {
		fmt.Fprintln(out, "removed a dead run's leftover:", r)
	}
	l := &lab{out: out, dir: filepath.Join(*base, fmt.Sprint(os.Getpid())), logLevel: *logLevel, tmpfsSize: *tmpfsSize,
		t0: time.Now(), counts: map[string]map[string]int{}, // real time
		space:  PersistSpace{Services: 4, Keys: 4, IP: fmt.Sprintf("%s.%d", labNet, instanceBase-1)},
		bounds: Bounds{ConvergeNs: converge.Nanoseconds(), ReadyNs: ready.Nanoseconds()}}
	if err := os.MkdirAll(l.dir, 0o700); err != nil {
		return 2, err
	}
	l.rec.h = History{Seed: *seed, Started: time.Now().UTC().Format(time.RFC3339), Bounds: l.bounds, Keys: l.space} // real time
	fmt.Fprintf(out, "faultlab: %d nodes, %v of faults (%s), seed %d, run dir %s\n", *nodes, *duration, strings.Join(kindList, ","), *seed, l.dir)

	c, err := newCluster(l, *nodes)
	l.c = c
	cleanup := func() {
		if c != nil {
			c.teardown()
		}
	}
	defer cleanup()
	// A signal ends the run the same way: teardown, then exit.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sigs
		fmt.Fprintln(out, "faultlab: signal", s, "- cleaning up")
		cleanup()
		os.Exit(130)
	}()
	if err != nil {
		return 2, err
	}
	for _, n := range c.nodes {
		l.rec.h.Nodes = append(l.rec.h.Nodes, n.id)
	}
	for _, n := range c.nodes {
		if err := c.start(n); err != nil {
			return 2, err
		}
	}
	if d := l.waitHealthy(context.Background(), "start"); d < 0 {
		return 2, errors.New("the cluster did not become ready")
	} else {
		l.logf("cluster ready in %v", ns(d))
	}

	rng := rand.New(rand.NewPCG(*seed, 1))
	runCtx, stopAll := context.WithCancel(context.Background())
	workCtx, stopWork := context.WithCancel(runCtx)
	liveBeats := &sync.Map{}
	var wg sync.WaitGroup
	goFn := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }
	for i := 0; i < *workers; i++ {
		r := rand.New(rand.NewPCG(*seed, uint64(100+i)))
		goFn(func() { l.persistWorker(workCtx, i, r) })
	}
	for i, n := range c.nodes {
		r := rand.New(rand.NewPCG(*seed, uint64(200+i)))
		goFn(func() { l.sessionWorker(workCtx, n, r) })
	}
	var beatWG sync.WaitGroup
	for i := 0; i < beatClients; i++ {
		r := rand.New(rand.NewPCG(*seed, uint64(300+i)))
		beatWG.Add(1)
		go func() { defer beatWG.Done(); l.beatClient(runCtx, workCtx, r, liveBeats) }()
	}

	faultCtx, stopFaults := context.WithTimeout(context.Background(), *duration)
	l.schedule(faultCtx, kindList, rng)
	stopFaults()
	stopWork()
	wg.Wait()
	l.logf("faults over; final checks")

	l.final(liveBeats)
	stopAll()
	beatWG.Wait()

	h := l.rec.snapshot()
	r := check(h, *linTimeout)
	l.mu.Lock()
	r.Failures = append(append([]failure(nil), l.fails...), r.Failures...)
	r.Failures = dedupe(r.Failures)
	counts := l.counts
	l.mu.Unlock()
	printSummary(out, h, r, counts)
	if len(r.Failures) == 0 && r.Lin != "unknown" {
		return 0, nil
	}
	path := filepath.Join(l.dir, "history.json")
	if err := writeHistory(path, h); err != nil {
		fmt.Fprintln(out, "writing the history:", err)
	}
	if r.Lin == "illegal" {
		vis := filepath.Join(l.dir, "linearizability.html")
		if err := porcupine.VisualizePath(linModel, r.LinInfo, vis); err == nil {
			fmt.Fprintln(out, "porcupine's visualization:", vis)
		}
	}
	_ = os.WriteFile(filepath.Join(l.dir, "keep"), nil, 0o600)
	fmt.Fprintf(out, "history: %s (check it again: faultlab -replay %s); node logs: %s/n*/node.log\n", path, path, l.dir)
	if len(r.Failures) == 0 {
		return 0, nil // inconclusive linearizability only: reported, not a failure
	}
	return 1, nil
}

// dedupe drops repeated failures (the lab's and the checker's may name the
// same event).
func dedupe(fs []failure) []failure {
	seen := map[failure]bool{}
	out := fs[:0]
	for _, f := range fs {
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	return out
}

// final heals everything, waits for every node to be ready, then polls
// every node until the ephemeral data converged (or the bound passes),
// reads the persistent data everywhere and the journals of the removed
// keys.
func (l *lab) final(liveBeats *sync.Map) {
	ctx := context.Background()
	for _, n := range l.c.nodes {
		_ = n.signal(syscall.SIGCONT)
		_ = l.c.net.link(n.id, true)
		l.c.net.unblock(n.id)
		if n.tmpfs != "" {
			_ = n.unfill()
		}
		if !n.running() && !n.strict {
			_ = l.c.start(n)
		}
	}
	healed := l.now()
	f := &Final{HealedAt: healed}
	if d := l.waitHealthy(ctx, "the final heal"); d >= 0 {
		l.logf("all nodes ready %v after the final heal", ns(d))
	}
	deadline := healed + l.bounds.ConvergeNs
	for {
		// The beat clients that beat after the heal are live.
		f.Live = f.Live[:0]
		liveBeats.Range(func(k, v any) bool {
			if v.(*atomic.Int64).Load() > healed {
				f.Live = append(f.Live, k.(string))
			}
			return true
		})
		sort.Strings(f.Live)
		h := l.rec.snapshot()
		h.Final = f
		f.Views = map[string]map[string][]string{}
		ok := true
		for _, n := range l.c.nodes {
			f.Views[n.id] = map[string][]string{}
			for s := 0; s < ephServices; s++ {
				svc := fmt.Sprintf("e%d", s)
				rd, good := l.readEph(ctx, n, svc)
				if !good {
					ok = false
				}
				f.Views[n.id][svc] = rd.Keys
			}
		}
		if ok && converged(h) {
			f.Converged, f.ConvergedAt = true, l.now()
			l.logf("ephemeral data converged on every node %v after the final heal", ns(f.ConvergedAt-healed))
			break
		}
		if l.now() > deadline {
			break
		}
		time.Sleep(500 * time.Millisecond) // real time: polling a real cluster
	}
	// Persistent data on every node, after a linearizable read on each (so
	// that each has applied everything).
	f.Persist = map[string]map[string]string{}
	for _, n := range l.c.nodes {
		m := map[string]string{}
		for s := 0; s < l.space.Services; s++ {
			svc := fmt.Sprintf("p%d", s)
			var q queryResp
			if err := n.api.call(ctx, opTimeout, "/query", queryReq{Service: svc, Linearizable: true}, &q); err != nil {
				l.fail("final read", fmt.Sprintf("%s %s: %v", n.id, svc, err))
				continue
			}
			for _, in := range q.Instances {
				m[fmt.Sprintf("%s/%d", svc, in.Port)] = in.Val
			}
		}
		f.Persist[n.id] = m
	}
	// The journals: every key that is gone (the latest 400) and a sample
	// of those expected.
	h := l.rec.snapshot()
	h.Final = f
	st := ephFates(h)
	var keys []string
	for _, op := range h.Eph {
		if op.Key != "" && (st.gone[op.Key] || st.expected[op.Key]) {
			keys = append(keys, op.Key)
		}
	}
	keys = uniq(keys)
	if len(keys) > 600 {
		keys = keys[len(keys)-600:]
	}
	f.Explain = map[string]map[string]explainResp{}
	for _, k := range keys {
		svc, ip, port := splitKey(k)
		f.Explain[k] = map[string]explainResp{}
		for _, n := range l.c.nodes {
			var ex explainResp
			if err := n.api.call(ctx, opTimeout, "/explain", instReq{Service: svc, IP: ip, Port: port}, &ex); err == nil {
				f.Explain[k][n.id] = ex
			}
		}
	}
	for _, n := range l.c.nodes {
		var rr readyResp
		if err := n.api.call(ctx, time.Second, "/ready", struct{}{}, &rr); err != nil || !rr.Ready {
			f.NotReady = append(f.NotReady, n.id)
		}
	}
	l.rec.mu.Lock()
	l.rec.h.Final = f
	l.rec.mu.Unlock()
}

func uniq(s []string) []string {
	seen := map[string]bool{}
	out := s[:0]
	for _, k := range s {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// converged reports whether every node's final view holds every expected
// key, no key that is gone, and the same keys of unknown fate.
func converged(h *History) bool {
	st := ephFates(h)
	var ref map[string]bool
	for _, node := range sortedKeys(h.Final.Views) {
		v := map[string]bool{}
		for _, keys := range h.Final.Views[node] {
			for _, k := range keys {
				v[k] = true
			}
		}
		for k := range st.expected {
			if !v[k] {
				return false
			}
		}
		for k := range v {
			if st.gone[k] {
				return false
			}
		}
		if ref != nil {
			for k := range st.unknown {
				if v[k] != ref[k] {
					return false
				}
			}
		}
		ref = v
	}
	return true
}

// printSummary prints the table: faults by kind, operations by result,
// and the failures.
func printSummary(out io.Writer, h *History, r *checkResult, counts map[string]map[string]int) {
	fmt.Fprintf(out, "\n== faultlab summary (seed %d, %d nodes)\n", h.Seed, len(h.Nodes))
	byKind := map[string][]FaultRec{}
	for _, f := range h.Faults {
		byKind[f.Kind] = append(byKind[f.Kind], f)
	}
	fmt.Fprintf(out, "%-12s %6s %14s %14s\n", "fault", "count", "recovery max", "recovery p50")
	total := 0
	for _, k := range sortedKeys(byKind) {
		fs := byKind[k]
		total += len(fs)
		var rec []int64
		for _, f := range fs {
			rec = append(rec, f.Recovered)
		}
		sort.Slice(rec, func(i, j int) bool { return rec[i] < rec[j] })
		fmt.Fprintf(out, "%-12s %6d %14v %14v\n", k, len(fs), ns(rec[len(rec)-1]), ns(rec[len(rec)/2]))
	}
	fmt.Fprintf(out, "%-12s %6d\n", "total", total)
	if counts != nil {
		fmt.Fprintf(out, "\n%-20s %8s %8s %8s %8s\n", "operation", "ok", "unknown", "notfound", "refused")
		for _, op := range sortedKeys(counts) {
			c := counts[op]
			fmt.Fprintf(out, "%-20s %8d %8d %8d %8d\n", op, c["ok"], c["unknown"], c["notfound"], c["refused"])
		}
	}
	nPersist := len(h.Persist)
	fmt.Fprintf(out, "\nrecorded: %d persistent operations (porcupine: %s), %d ephemeral operations, %d ephemeral reads, %d node exits\n",
		nPersist, r.Lin, len(h.Eph), len(h.Reads), len(h.Exits))
	if f := h.Final; f != nil {
		conv := "not converged"
		if f.Converged {
			conv = fmt.Sprintf("converged %v after the last heal (bound %v)", ns(f.ConvergedAt-f.HealedAt), ns(h.Bounds.ConvergeNs))
		}
		st := ephFates(h)
		fmt.Fprintf(out, "final: %s; %d expected, %d gone, %d of unknown fate; %d journals checked\n",
			conv, len(st.expected), len(st.gone), len(st.unknown), len(f.Explain))
	}
	if len(r.Reasons) > 0 {
		var parts []string
		for _, k := range sortedKeys(r.Reasons) {
			parts = append(parts, fmt.Sprintf("%s %d", k, r.Reasons[k]))
		}
		fmt.Fprintf(out, "removal reasons in the journals: %s\n", strings.Join(parts, ", "))
	}
	for _, f := range r.Failures {
		fmt.Fprintf(out, "FAILURE %s: %s\n", f.Check, f.Detail)
	}
	verdict := "PASS"
	if len(r.Failures) > 0 {
		verdict = "FAIL"
	}
	fmt.Fprintf(out, "faultlab: %s: %d faults, %d persistent ops (linearizable: %s), %d ephemeral ops, %d failures\n",
		verdict, total, nPersist, r.Lin, len(h.Eph), len(r.Failures))
}
