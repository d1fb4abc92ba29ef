package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
	"time"
)

// The persistent row runs etcd's side and then Muster's, each for a few seconds. On a
// shared machine the CPU that other processes take moves on that scale, and one side can
// run beside a build while the other runs alone: the per-round ratio then measures the
// machine as much as the stores (bench/README.md, the persistent row). The paired row runs
// both clusters at once, idle but for the side being driven, and drives them in
// alternating segments (etcd, Muster, Muster, etcd, …) of a few hundred milliseconds,
// so that both sides see nearly the same machine.

// pairedSegments is the number of segments each side's writes are cut into.
const pairedSegments = 8

// pairedSide is one system started for a paired round.
type pairedSide struct {
	name string
	// op does writer w's i-th write.
	op func(w, i int) error
	// wait returns once every node holds ops writes.
	wait func(ctx context.Context, ops int) error
	// detail describes the run after it (may be nil).
	detail func() string
	close  func()
}

// runPaired runs one round of a paired row: both systems started in fresh directories
// (etcd first when etcdFirst), then perWriter writes per writer on each side in
// alternating segments; a side's time is the sum of its segments and of its final wait
// for full replication. The CPU figures of a side are summed over its segments too.
func runPaired(ctx context.Context, sz sizes, etcdFirst bool,
	start func(ctx context.Context, dir string, etcd bool) (*pairedSide, error)) (etcdRes, musterRes result, err error) {
	var sides [2]*pairedSide // 0 etcd, 1 muster
	var dirs []string
	defer func() { // the systems first, then their directories
		for _, s := range sides {
			if s != nil {
				s.close()
			}
		}
		for _, d := range dirs {
			os.RemoveAll(d)
		}
	}()
	order := []int{1, 0}
	if etcdFirst {
		order = []int{0, 1}
	}
	for _, k := range order {
		dir, err := os.MkdirTemp("", "muster-bench-")
		if err != nil {
			return result{}, result{}, err
		}
		dirs = append(dirs, dir)
		s, err := start(ctx, dir, k == 0)
		if err != nil {
			return result{}, result{}, err
		}
		sides[k] = s
	}
	per := sz.persistentPerWriter
	segs := min(pairedSegments, per)
	var took [2]time.Duration
	var cpu [2]sysSample // summed differences
	var ops [2]int
	var segTook [2][]string // each segment's time, for the note
	for seg := range segs {
		from, to := seg*per/segs, (seg+1)*per/segs
		// etcd, muster, muster, etcd, …: each side goes first in half the pairs.
		pair := order
		if seg%2 == 1 {
			pair = []int{order[1], order[0]}
		}
		for _, k := range pair {
			s := sides[k]
			var n int
			var el time.Duration
			a := sampleSys()
			pprof.Do(ctx, pprof.Labels("side", s.name), func(context.Context) {
				n, el, err = closedLoop(sz.writers, to-from, 0, func(w, i int) error { return s.op(w, from+i) })
			})
			b := sampleSys()
			if err != nil {
				return result{}, result{}, fmt.Errorf("%s: %w", s.name, err)
			}
			ops[k] += n
			took[k] += el
			segTook[k] = append(segTook[k], fmt.Sprintf("%.0f", ms(el)))
			cpu[k] = cpu[k].add(a, b)
		}
	}
	var res [2]result
	for k, s := range sides {
		a, t0 := sampleSys(), time.Now() // real time
		if err := s.wait(ctx, ops[k]); err != nil {
			return result{}, result{}, fmt.Errorf("%s: %w", s.name, err)
		}
		took[k] += time.Since(t0) // real time
		cpu[k] = cpu[k].add(a, sampleSys())
		detail := sysNote(sysSample{}, cpu[k], ops[k], took[k]) + "\nsegments (ms): " + strings.Join(segTook[k], " ")
		if s.detail != nil {
			if d := s.detail(); d != "" {
				detail += "\n" + d
			}
		}
		res[k] = result{value: float64(ops[k]) / took[k].Seconds(),
			note:   fmt.Sprintf("%d ops in %v, %d segments", ops[k], took[k].Round(time.Millisecond), segs),
			detail: detail, cpuPerOp: cpuPerOp(sysSample{}, cpu[k], ops[k])}
	}
	return res[0], res[1], nil
}

// startPairedPersistent starts a side of the paired persistent row: the persistent row's
// 3-node cluster, etcd's or Muster's, writer w on node w mod 3.
func startPairedPersistent(ctx context.Context, dir string, etcd bool) (*pairedSide, error) {
	if etcd {
		c, err := startEtcd(ctx, 3, dir)
		if err != nil {
			return nil, err
		}
		return &pairedSide{
			name: "etcd",
			op: func(w, i int) error {
				id := w<<18 + i
				k, v := etcdKV(instance(svcOf(id, 100), id))
				_, err := c.clients[w%len(c.clients)].Put(ctx, k, v)
				return err
			},
			wait:  func(ctx context.Context, ops int) error { return c.waitCount(ctx, "/registry/", ops) },
			close: c.Close,
		}, nil
	}
	c, err := startMuster(ctx, 3, dir, true)
	if err != nil {
		return nil, err
	}
	raft0 := c.raftStats()
	var tr0 [2]uint64
	tr0[0], tr0[1] = c.transportShed()
	return &pairedSide{
		name: "muster-raft",
		op: func(w, i int) error {
			id := w<<18 + i
			in := instance(svcOf(id, 100), id)
			in.Ephemeral = false
			return c.regs[w%len(c.regs)].Register(ctx, in)
		},
		wait: func(ctx context.Context, ops int) error { return waitInstances(ctx, c.regs, ops) },
		detail: func() string {
			var tr1 [2]uint64
			tr1[0], tr1[1] = c.transportShed()
			return raftNote(raft0, c.raftStats()) + "\n" + transportNote(tr0, tr1)
		},
		close: c.Close,
	}, nil
}
