package raftstore

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkPersistentRegister: 3 replicas on loopback in one process,
// fsync on (Dragonboat's LogDB syncs every write), 64 concurrent writers
// registering persistent instances through every node. Reports ops/s.
func BenchmarkPersistentRegister(b *testing.B) {
	for _, batch := range []int{maxBatchCommands, 1} {
		name := "batched"
		if batch == 1 {
			name = "unbatched"
		}
		b.Run(name, func(b *testing.B) {
			c := newCluster(b, 3, func(cfg *Config) {
				cfg.RTTMillisecond = 20
				cfg.MaxBatch = batch
				cfg.ProposeTimeout = 10 * time.Second
			})
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

// BenchmarkIdleNodeRSS starts one node (a single-member shard) and reports
// the process's resident memory after it is idle. The figure includes the
// test binary itself; run it alone (-run '^$' -bench IdleNodeRSS).
func BenchmarkIdleNodeRSS(b *testing.B) {
	before := rssKiB(b)
	c := newCluster(b, 1, func(cfg *Config) { cfg.RTTMillisecond = 50 })
	mustPropose(b, c.any(), Command{Op: OpPutInstance, Instance: persistent("rss", "10.3.0.1", 80)})
	runtime.GC()
	time.Sleep(500 * time.Millisecond)
	after := rssKiB(b)
	for range b.N {
	}
	b.ReportMetric(float64(after)/1024, "rss-MiB")
	b.ReportMetric(float64(after-before)/1024, "rss-delta-MiB")
}

func rssKiB(b *testing.B) int {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Skip("no /proc/self/status")
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int
			fmt.Sscanf(strings.TrimSpace(rest), "%d", &kb)
			return kb
		}
	}
	b.Skip("no VmRSS")
	return 0
}
