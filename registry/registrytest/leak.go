package registrytest

import (
	"bytes"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"

	"go.uber.org/goleak"
)

// leakCheck finds the goroutines that a test's registries left running.
//
// By default it is strict, as goleak is: every goroutine that was not
// running when the check was created must be gone at the end. That cannot
// tell a test's goroutines from those of tests running beside it
// (t.Parallel), so a parallel test asks for the descent rule instead: only
// goroutines descended from the goroutine that created the check (the
// test's), and not running when it was created, count. Descent is read from
// the "created by … in goroutine N" line of each goroutine's trace; a
// goroutine whose creator has exited cannot be traced to the test and is
// not counted, so that rule may miss a leak (the strict one does not).
type leakCheck struct {
	strict goleak.Option // nil under the descent rule
	root   int64
	before map[int64]bool
}

func newLeakCheck(parallel bool) *leakCheck {
	if !parallel {
		return &leakCheck{strict: goleak.IgnoreCurrent()}
	}
	gs := goroutines()
	self := currentGoroutine()
	before := make(map[int64]bool, len(gs))
	for id := range gs {
		before[id] = true
	}
	return &leakCheck{root: self, before: before}
}

// find returns an error describing the leaked goroutines, retrying for up
// to wait while they finish exiting.
func (l *leakCheck) find(wait time.Duration) error {
	if l.strict != nil {
		deadline := time.Now().Add(wait)
		for {
			err := goleak.Find(l.strict) // it retries for a moment itself
			if err == nil || time.Now().After(deadline) {
				return err
			}
		}
	}
	deadline := time.Now().Add(wait)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		leaked := l.leaked()
		if len(leaked) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d goroutines still running:\n\n%s", len(leaked), strings.Join(leaked, "\n\n"))
		}
		time.Sleep(delay)
	}
}

func (l *leakCheck) leaked() []string {
	gs := goroutines()
	var out []string
	for id, g := range gs {
		if l.before[id] || id == l.root {
			continue
		}
		for p, hops := g.parent, 0; hops < len(gs)+1; hops++ {
			if p == l.root {
				out = append(out, g.trace)
				break
			}
			pg, ok := gs[p]
			if !ok || l.before[p] {
				break // its creator has exited, or was there before the check: not the test's
			}
			p = pg.parent
		}
	}
	return out
}

type goroutine struct {
	parent int64
	trace  string
}

// goroutines returns every goroutine by ID, with its creator's ID.
func goroutines() map[int64]goroutine {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := make(map[int64]goroutine)
	for _, block := range bytes.Split(buf, []byte("\n\n")) {
		trace := string(bytes.TrimSpace(block))
		id, ok := goroutineID(trace)
		if !ok {
			continue
		}
		g := goroutine{parent: -1, trace: trace}
		if i := strings.LastIndex(trace, " in goroutine "); i >= 0 {
			rest := trace[i+len(" in goroutine "):]
			if j := strings.IndexByte(rest, '\n'); j >= 0 {
				rest = rest[:j]
			}
			if p, err := strconv.ParseInt(strings.TrimSpace(rest), 10, 64); err == nil {
				g.parent = p
			}
		}
		out[id] = g
	}
	return out
}

// goroutineID parses "goroutine 123 [state]:" at the start of a trace.
func goroutineID(trace string) (int64, bool) {
	rest, ok := strings.CutPrefix(trace, "goroutine ")
	if !ok {
		return 0, false
	}
	end := strings.IndexByte(rest, ' ')
	if end < 0 {
		return 0, false
	}
	id, err := strconv.ParseInt(rest[:end], 10, 64)
	return id, err == nil
}

func currentGoroutine() int64 {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _ := goroutineID(string(buf))
	return id
}
