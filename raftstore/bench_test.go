package raftstore

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/lni/dragonboat/v4/raftpb"
)

// BenchmarkPersistentRegister: 3 replicas on loopback in one process,
// fsync on (Dragonboat's LogDB syncs every write), 64 concurrent writers
// registering persistent instances. Reports ops/s.
//
//   - batched: writers spread over the three nodes (two thirds of the
//     proposals are forwarded by followers, which answer once they have
//     applied the entry themselves);
//   - batched-at-leader: every writer on the leader;
//   - unbatched: spread, one command per Raft entry;
//   - batched-muster-tcp: as batched, with Raft over Muster's TCP transport
//     (Config.Transport) instead of Dragonboat's;
//   - batched-no-wait: as batched, with BatchWait 0 (what is queued goes at
//     once, and the writers split into cohorts that take turns);
//   - batched-sync-commit: as batched, with SyncCommitIndex (every change
//     of the commit index fsynced on its own, as Dragonboat does).
func BenchmarkPersistentRegister(b *testing.B) {
	for _, mode := range []struct {
		name       string
		batch      int
		atLeader   bool
		muster     bool
		noWait     bool
		syncCommit bool
	}{
		{"batched", maxBatchCommands, false, false, false, false},
		{"batched-at-leader", maxBatchCommands, true, false, false, false},
		{"unbatched", 1, false, false, false, false},
		{"batched-muster-tcp", maxBatchCommands, false, true, false, false},
		{"batched-no-wait", maxBatchCommands, false, false, true, false},
		{"batched-sync-commit", maxBatchCommands, false, false, false, true},
	} {
		batch := mode.batch
		b.Run(mode.name, func(b *testing.B) {
			tweak := func(cfg *Config) {
				cfg.RTTMillisecond = 20
				cfg.MaxBatch = batch
				cfg.ProposeTimeout = 10 * time.Second
				if mode.noWait {
					cfg.BatchWait = NoBatchWait
				}
				cfg.SyncCommitIndex = mode.syncCommit
			}
			var c *cluster
			if mode.muster {
				tcps := tcpTransports(b, "r1", "r2", "r3")
				c = newClusterAt(b, map[uint64]string{1: "r1", 2: "r2", 3: "r3"}, func(cfg *Config) {
					tweak(cfg)
					cfg.Transport = tcps[cfg.RaftAddress]
				})
			} else {
				c = newCluster(b, 3, tweak)
			}
			nodes := make([]*Node, 0, 3)
			for _, n := range c.nodes {
				nodes = append(nodes, n)
			}
			const writers = 64
			ops := max(b.N, 2*writers)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					n := nodes[w%len(nodes)]
					if mode.atLeader {
						for _, cand := range nodes {
							if cand.IsLeader() {
								n = cand
							}
						}
					}
					for {
						i := next.Add(1)
						if i > int64(ops) {
							return
						}
						inst := persistent("bench", "10.1."+strconv.Itoa(int(i/250))+"."+strconv.Itoa(int(i%250)), 8080)
						if _, err := n.Propose(context.Background(), Command{Op: OpPutInstance, Instance: inst}); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			el := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(ops)/el.Seconds(), "ops/s")
		})
	}
}

// BenchmarkLinearizableRead: Barrier + a local Badger read on a follower
// of a 3-replica cluster. Reports p50 and p99 in ms.
func BenchmarkLinearizableRead(b *testing.B) {
	c := newCluster(b, 3, nil)
	inst := persistent("read", "10.2.0.1", 80)
	leader := c.waitLeader()
	mustPropose(b, c.nodes[leader], Command{Op: OpPutInstance, Instance: inst})
	var n *Node
	for id, m := range c.nodes {
		if id != leader {
			n = m
		}
	}
	ctx := context.Background()
	ops := max(b.N, 200)
	lat := make([]time.Duration, 0, ops)
	b.ResetTimer()
	for range ops {
		t0 := time.Now()
		_, ok, err := n.GetInstance(ctx, inst.Key(), ReadOptions{Linearizable: true})
		if err != nil || !ok {
			b.Fatal(ok, err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkIdleNodeRSS reports the resident memory of a process running
// one idle node (a single-member shard, production RTT of 50 ms, one
// instance written), measured in a fresh child process (this test binary
// re-executed) so that other benchmarks do not skew it: rss-MiB is VmRSS
// from /proc/self/status, heap-MiB the Go heap in use.
func BenchmarkIdleNodeRSS(b *testing.B) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		b.Skip("no /proc/self/status")
	}
	// One child whatever b.N: the figure is a state, not a per-op cost.
	cmd := exec.Command(os.Args[0], "-test.run=^TestIdleNodeRSSChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "RAFTSTORE_RSS_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("child: %v\n%s", err, out)
	}
	var rss, heap float64
	for line := range strings.Lines(string(out)) {
		if _, after, ok := strings.Cut(line, "rss-kib="); ok {
			var r, h float64
			if _, err := fmt.Sscanf(strings.TrimSpace(after), "%f heap-kib=%f", &r, &h); err == nil {
				rss, heap = r/1024, h/1024
			}
		}
	}
	if rss == 0 {
		b.Fatalf("child printed no figure:\n%s", out)
	}
	for range b.N {
	}
	b.ReportMetric(rss, "rss-MiB")
	b.ReportMetric(heap, "heap-MiB")
}

// TestIdleNodeRSSChild is BenchmarkIdleNodeRSS's child process.
func TestIdleNodeRSSChild(t *testing.T) {
	if os.Getenv("RAFTSTORE_RSS_CHILD") == "" {
		t.Skip("run by BenchmarkIdleNodeRSS")
	}
	c := newCluster(t, 1, func(cfg *Config) { cfg.RTTMillisecond = 50 })
	mustPropose(t, c.any(), Command{Op: OpPutInstance, Instance: persistent("rss", "10.3.0.1", 80)})
	time.Sleep(time.Second) // idle: a benchmark figure, not a wait for state
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Printf("rss-kib=%d heap-kib=%d\n", rssKiB(t), ms.HeapInuse/1024)
}

func rssKiB(t testing.TB) int {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int
			fmt.Sscanf(strings.TrimSpace(rest), "%d", &kb)
			return kb
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// BenchmarkInboundCheck: the inbound checks of one Raft batch of eight
// messages from a member over a Muster transport (membership cached).
func BenchmarkInboundCheck(b *testing.B) {
	g := newGuard(testDeployment, 1, 1)
	members := map[uint64]string{1: "r1", 2: "r2", 3: "r3"}
	load := func() (map[uint64]string, bool) { return members, true }
	g.source.Store(&load)
	batch := raftBatch("r2", 2, pb.Replicate)
	for range 7 {
		batch.Requests = append(batch.Requests, batch.Requests[0])
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := g.checkBatch(&batch, "r2"); err != nil {
			b.Fatal(err)
		}
	}
}
