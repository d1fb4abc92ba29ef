package raftstore

import (
	"context"
	"fmt"
	"github.com/jonboulle/clockwork"
	"sync"
	"testing"
	"time"
)

// closedLoop runs writers goroutines that each propose rounds commands to n,
// the next as soon as the last returns, and returns the first error.
func closedLoop(n *Node, writers, rounds int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	start := make(chan struct{}) // the writers start together
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range rounds {
				cmd := Command{Op: OpPutInstance, Instance: persistent("svc", fmt.Sprintf("10.0.%d.%d", w, i), 8080)}
				if _, err := n.Propose(ctx, cmd); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	return <-errs // nil when closed empty
}

// Callers that propose again as soon as they have their result share one
// entry: the batcher waits for them (BatchWait) instead of proposing the
// first to return alone and leaving the rest for the entry after.
func TestBatchWaitKeepsCallersTogether(t *testing.T) {
	const writers, rounds = 8, 25
	// A window far longer than any caller takes to come back, unless the
	// machine stalls: then an entry or two more, which the bounds allow.
	c := newCluster(t, 1, func(cfg *Config) { cfg.BatchWait = 500 * time.Millisecond })
	n := c.nodes[1]
	if err := closedLoop(n, writers, rounds); err != nil {
		t.Fatal(err)
	}
	st := n.Stats()
	if st.Proposals != writers*rounds || st.ProposalsFailed != 0 {
		t.Fatalf("proposals: %+v", st)
	}
	// Without the wait the writers split into cohorts: about twice the entries.
	if st.Entries > rounds+5 {
		t.Errorf("%d entries for %d writers × %d rounds: the writers did not share entries (waits filled %d, expired %d)",
			st.Entries, writers, rounds, st.BatchWaitsFilled, st.BatchWaitsExpired)
	}
	// The wait ends when the callers are back, not when the window closes
	// (writers that got into different first entries finish at different
	// rounds, and each such end runs out one window).
	if st.BatchWaitsFilled == 0 || st.BatchWaitsExpired > writers {
		t.Errorf("waits filled %d, expired %d: want the waits to end as the writers come back", st.BatchWaitsFilled, st.BatchWaitsExpired)
	}

	// A lone command after them waits at most for the rest of the window
	// (the others do not come back), then goes out alone.
	before := n.Stats()
	mustPropose(t, n, Command{Op: OpPutInstance, Instance: persistent("svc", "10.1.0.1", 8080)})
	after := n.Stats()
	if filled, expired := after.BatchWaitsFilled-before.BatchWaitsFilled, after.BatchWaitsExpired-before.BatchWaitsExpired; filled != 0 || expired > 1 {
		t.Errorf("lone command: %d waits filled, %d expired; want at most one, expired", filled, expired)
	}
	if after.Entries != before.Entries+1 {
		t.Errorf("lone command: %d entries, want 1", after.Entries-before.Entries)
	}
}

// A command that comes after the window has closed goes out at once: the
// batcher does not wait for callers that did not come back.
func TestBatchWaitWindowCloses(t *testing.T) {
	const window = 20 * time.Millisecond
	pace := clockwork.NewFakeClock()
	c := newCluster(t, 1, func(cfg *Config) { cfg.BatchWait, cfg.pace = window, pace })
	n := c.nodes[1]
	// The writers finish at different entries, and a window then runs out
	// (the batcher waits for writers that are done): move the window's
	// clock along while they write.
	done := make(chan error, 1)
	go func() { done <- closedLoop(n, 8, 5) }()
	for writing := true; writing; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			writing = false
		case <-time.After(time.Millisecond):
			pace.Advance(window)
		}
	}
	// The window the last entry opened (before its answers went out) passes.
	pace.Advance(window)
	before := n.Stats()
	mustPropose(t, n, Command{Op: OpPutInstance, Instance: persistent("svc", "10.2.0.1", 8080)})
	after := n.Stats()
	if waits := after.BatchWaitsFilled + after.BatchWaitsExpired - before.BatchWaitsFilled - before.BatchWaitsExpired; waits != 0 || after.Entries != before.Entries+1 {
		t.Errorf("a command after the window: %d waits, %d entries; want none and one", waits, after.Entries-before.Entries)
	}
}

// BatchWait 0 proposes whatever is queued at once: the batcher never waits.
func TestBatchWaitOff(t *testing.T) {
	c := newCluster(t, 1, func(cfg *Config) { cfg.BatchWait = NoBatchWait })
	n := c.nodes[1]
	if err := closedLoop(n, 8, 10); err != nil {
		t.Fatal(err)
	}
	if st := n.Stats(); st.Proposals != 80 || st.BatchWaitsFilled != 0 || st.BatchWaitsExpired != 0 {
		t.Errorf("stats: %+v", st)
	}
}
