package transport

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/testutil"
	"go.uber.org/goleak"
)

// chaosCheck runs callers between every pair of nodes while disturb breaks
// things, and checks that every call either gets the right answer or fails
// with an allowed error, and that once disturb returns every pair talks
// again.
func chaosCheck(t *testing.T, ids []string, node func(id string) Transport, disturb func(rng *rand.Rand), seed uint64) {
	t.Helper()
	var ok, failed atomic.Int64
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i, from := range ids {
		for j, to := range ids {
			if i == j {
				continue
			}
			wg.Go(func() {
				for n := 0; ctx.Err() == nil; n++ {
					rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
					body := fmt.Sprintf("%s-%d", from, n)
					got, err := node(from).Request(rctx, to, 1, []byte(body))
					cancel()
					switch {
					case err == nil:
						if string(got) != from+":"+body {
							t.Errorf("%s->%s: got %q for %q", from, to, got, body)
						}
						ok.Add(1)
					case errors.Is(err, ErrUnreachable), errors.Is(err, ErrClosed), errors.Is(err, context.Canceled),
						errors.Is(err, ErrNoHandler): // a node restarted by the chaos, before its handler is back
						failed.Add(1)
					default:
						t.Errorf("%s->%s: unexpected error %v", from, to, err)
					}
					if err != nil {
						time.Sleep(time.Millisecond) // pace retries against a down peer (test code)
					}
				}
			})
		}
	}
	disturb(rand.New(rand.NewPCG(seed, seed)))
	stop()
	wg.Wait()
	t.Logf("seed %d: %d calls answered, %d failed with allowed errors", seed, ok.Load(), failed.Load())
	if ok.Load() == 0 {
		t.Fatal("no call succeeded")
	}
	// After the chaos every pair talks again.
	for _, from := range ids {
		for _, to := range ids {
			eventually(t, from+" reaches "+to+" after the chaos", func() bool {
				_, err := node(from).Request(testCtx(t), to, 1, nil)
				return err == nil
			})
		}
	}
}

// The chaos tests run a fresh seed each, or MUSTER_SEEDS seeds from
// MUSTER_SEED (see internal/testutil).
func TestChaosMem(t *testing.T) { testutil.Seeds(t, 0, 1, chaosMem) }

func TestChaosTCP(t *testing.T) { testutil.Seeds(t, 0, 1, chaosTCP) }

func chaosMem(t *testing.T, seed uint64) {
	defer goleak.VerifyNone(t)
	n := MemNetwork{Seed: seed}
	ids := []string{"a", "b", "c"}
	var mu sync.Mutex
	nodes := map[string]*MemTransport{}
	for _, id := range ids {
		tr, err := n.Node(id)
		if err != nil {
			t.Fatal(err)
		}
		tr.Handle(1, echo)
		nodes[id] = tr
	}
	defer func() {
		for _, tr := range nodes {
			_ = tr.Close()
		}
	}()
	get := func(id string) Transport {
		mu.Lock()
		defer mu.Unlock()
		return nodes[id]
	}
	chaosCheck(t, ids, get, func(rng *rand.Rand) {
		for range 60 {
			x, y := ids[rng.IntN(3)], ids[rng.IntN(3)]
			switch rng.IntN(5) {
			case 0:
				n.Partition(x, y)
			case 1:
				n.Isolate(x)
			case 2:
				n.Heal()
			case 3:
				n.SetLink(x, y, LinkConfig{DropRate: rng.Float64() / 2})
			case 4: // restart x
				mu.Lock()
				_ = nodes[x].Close()
				tr, err := n.Node(x)
				if err != nil {
					t.Error(err)
				} else {
					tr.Handle(1, echo)
					nodes[x] = tr
				}
				mu.Unlock()
			}
			time.Sleep(2 * time.Millisecond)
		}
		n.Heal()
		for _, x := range ids {
			for _, y := range ids {
				n.SetLink(x, y, LinkConfig{})
			}
		}
	}, seed)
}

func chaosTCP(t *testing.T, seed uint64) {
	defer goleak.VerifyNone(t)
	c := newTCPCluster(t, 0, nil)
	defer c.CloseAll()
	ids := []string{"a", "b", "c"}
	var mu sync.Mutex
	nodes := map[string]Transport{}
	start := func(id string) {
		tr := c.Node(t, id)
		tr.Handle(1, echo)
		nodes[id] = tr
	}
	for _, id := range ids {
		start(id)
	}
	get := func(id string) Transport {
		mu.Lock()
		defer mu.Unlock()
		return nodes[id]
	}
	chaosCheck(t, ids, get, func(rng *rand.Rand) {
		for range 12 {
			x := ids[rng.IntN(3)]
			mu.Lock()
			_ = nodes[x].Close() // restart x on a new port
			start(x)
			mu.Unlock()
			time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond)
		}
	}, seed)
}
