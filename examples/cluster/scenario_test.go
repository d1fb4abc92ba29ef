package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The tests of this package run the real stack on 127.0.0.1: TCP transport,
// memberlist, Dragonboat and Badger on disk, the health checkers. Set
// MUSTER_E2E_LOG=1 to see the nodes' logs.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// long runs the longer variants: three rounds of crash-restart, and a
// partition held for 30 s.
var long = flag.Bool("e2e.long", false, "run the longer variants of the real-stack tests")

// testLogger discards the nodes' logs unless MUSTER_E2E_LOG is set.
func testLogger() *slog.Logger { return logger(os.Getenv("MUSTER_E2E_LOG") != "") }

// tlog sends the narration to the test log, one line per call.
type tlog struct{ t *testing.T }

func (w tlog) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// waitFor polls cond until it holds, failing the test after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startCluster starts n nodes with the demo's timings and waits until they
// are ready, in one membership, with a Raft leader. f, if not nil, wraps
// their transports. The nodes stop gracefully at the end of the test.
func startCluster(t *testing.T, n int, withFaults bool) (*cluster, *faults) {
	t.Helper()
	c, err := newCluster(n, defaultTimings(), t.TempDir(), testLogger())
	if err != nil {
		t.Fatal(err)
	}
	var f *faults
	if withFaults {
		f = newFaults(c)
	}
	t.Cleanup(c.close)
	for i := range c.specs {
		if _, err := c.start(context.Background(), i); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, "every node ready, in one membership, with one Raft leader", c.settled)
	return c, f
}

// The demo's scenario, every step of it: the scenario checks each outcome
// itself (instances seen on every node, the weight applied and followed,
// the TCP check flipping both ways on every node, the crash detected, the
// leader moved, the crashed node's session instances gone and its beat
// instances adopted with none lost, a write committed without it, the
// restart answering ErrNotReady until ready and never a partial list, then
// catching up) and fails the run otherwise.
func TestScenario(t *testing.T) {
	var out syncBuffer
	steps, err := run(context.Background(), options{nodes: 3, t: defaultTimings(), out: io.MultiWriter(tlog{t}, &out), dir: t.TempDir(), metrics: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	// After the crash a survivor explains the crashed node's session
	// instance: registered by that node's session, then orphaned.
	for _, want := range []string{"explains ", "registered, published by session ", "removed (orphaned: its owner node left)", "metric families from 3 nodes"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the narration lacks %q", want)
		}
	}
	want := []string{
		"start 3 nodes",
		"ephemeral instances registered on different nodes",
		"weighted selection",
		"a TCP-checked persistent instance's listener stops",
		"its listener comes back",
		"the Raft leader's node crashes",
		"a persistent write while it is down",
		"the node restarts",
		"what an operator sees",
	}
	if len(steps) != len(want) {
		t.Fatalf("%d steps done, want %d", len(steps), len(want))
	}
	for i, s := range steps {
		if s.name != want[i] || s.result == "" || s.took <= 0 {
			t.Errorf("step %d = %+v, want %q with a result and a duration", i+1, s, want[i])
		}
	}
}

func TestScenarioRejectsTooFewNodes(t *testing.T) {
	_, err := run(context.Background(), options{nodes: 2, t: defaultTimings()})
	if err == nil || !strings.Contains(err.Error(), "-nodes must be 3–9") {
		t.Fatalf("run with 2 nodes: %v, want an error naming -nodes and its range", err)
	}
}

// syncBuffer is a bytes.Buffer safe for the narration's writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
