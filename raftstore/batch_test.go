package raftstore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// closedLoop runs writers goroutines that each propose rounds commands to n,
// the next as soon as the last returns, and fails t on any error.
func closedLoop(t *testing.T, n *Node, writers, rounds int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				cmd := Command{Op: OpPutInstance, Instance: persistent("svc", fmt.Sprintf("10.0.%d.%d", w, i), 8080)}
				if _, err := n.Propose(ctx, cmd); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// Callers that propose again as soon as they have their result share one
// entry: the batcher waits for them (BatchWait) instead of proposing the
// first to return alone and leaving the rest for the entry after.
func TestBatchWaitKeepsCallersTogether(t *testing.T) {
	const writers, rounds = 8, 25
	// A window far longer than any caller takes to come back, unless the
	// machine stalls: then an entry or two more, which the bound allows.
	c := newCluster(t, 1, func(cfg *Config) { cfg.BatchWait = 500 * time.Millisecond })
	n := c.nodes[1]
	closedLoop(t, n, writers, rounds)
	st := n.Stats()
	if st.Proposals != writers*rounds || st.ProposalsFailed != 0 {
		t.Fatalf("proposals: %+v", st)
	}
	// Without the wait the writers split into cohorts: about twice the entries.
	if st.Entries > rounds+5 {
		t.Errorf("%d entries for %d writers × %d rounds: the writers did not share entries (waits %d, expired %d)",
			st.Entries, writers, rounds, st.BatchWaits, st.BatchWaitsExpired)
	}
	if st.BatchWaits == 0 {
		t.Error("the batcher never waited")
	}

	// A lone command after them waits at most for the rest of the window
	// (the others do not come back), then goes out alone.
	before := n.Stats()
	mustPropose(t, n, Command{Op: OpPutInstance, Instance: persistent("svc", "10.1.0.1", 8080)})
	after := n.Stats()
	if waits, expired := after.BatchWaits-before.BatchWaits, after.BatchWaitsExpired-before.BatchWaitsExpired; waits > 1 || expired != waits {
		t.Errorf("lone command: %d waits, %d expired; want at most one, expired", waits, expired)
	}
	if after.Entries != before.Entries+1 {
		t.Errorf("lone command: %d entries, want 1", after.Entries-before.Entries)
	}
}

// BatchWait 0 proposes whatever is queued at once: the batcher never waits.
func TestBatchWaitOff(t *testing.T) {
	c := newCluster(t, 1, func(cfg *Config) { cfg.BatchWait = 0 })
	n := c.nodes[1]
	closedLoop(t, n, 8, 10)
	if st := n.Stats(); st.Proposals != 80 || st.BatchWaits != 0 || st.BatchWaitsExpired != 0 {
		t.Errorf("stats: %+v", st)
	}
}
