package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"syscall"
	"time"

	"github.com/muster-io/muster/distro"
	"github.com/muster-io/muster/model"
)

// params is one measured configuration.
type params struct {
	Nodes     int    // nodes of the cluster before the join
	Instances int    // instance records, spread over the nodes' sessions
	Changes   int    // single changes timed (each alone in its sync)
	Batch     int    // changes per step in the batched measurement (Changes/Batch steps)
	InFlight  int    // changes per owner waiting in their merge window when a verify round runs (churn)
	Chunk     int    // records written per owner between two sync rounds while loading the cluster
	Profile   string // if set, CPU profiles of the single changes and of the join are written to Profile + "[.join].<nodes>x<instances>", and allocation profiles before and after the join to Profile + ".allocs.{before,after}.<nodes>x<instances>"
}

// result is what one configuration measured.
type result struct {
	params
	HeapPerNode     float64       // bytes of Go heap per node (all nodes' heap / nodes, after GC)
	HeapPerRecord   float64       // of it, per record held
	JoinerHeap      float64       // heap the joining node added (after GC)
	ChangeBytes     float64       // bytes sent and answered across the cluster per single change (sync)
	ChangePeerBytes float64       // of it, per peer
	ChangeCPU       time.Duration // process CPU across the cluster per change, GC included
	ChangeGC        time.Duration // of it, the GC's (runtime/metrics estimate)
	ChangeAlloc     uint64        // bytes allocated across the cluster per change
	BatchBytes      float64       // per change, in batches of Batch
	BatchCPU        time.Duration
	BatchGC         time.Duration
	BatchAlloc      uint64
	VerifyIdle      float64 // verify + repair bytes per peer per round, nothing changing
	VerifyIdleMax   float64 // the largest node's, per peer
	VerifyChurn     float64 // the same with InFlight changes per owner in their merge window
	VerifyChurnMax  float64
	ChurnRepairRecs float64 // records sent in verify repairs per peer per round, churning
	JoinReady       time.Duration
	JoinCPU         time.Duration
	JoinGC          time.Duration // the GC's CPU over the join (runtime/metrics estimate: it counts idle mark workers' time, and can exceed JoinCPU)
	JoinAlloc       uint64        // bytes allocated in the process during the join
	JoinGCs         uint64        // GC cycles that ended during the join
	JoinBytes       float64       // snapshot bytes the joiner pulled
	JoinPeers       int
	Setup           time.Duration
}

// cpuTime is the process's user + system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// usage is the process's CPU time, the GC's share of it (runtime/metrics' estimate) and the
// bytes allocated so far.
type usage struct {
	cpu, gc time.Duration
	alloc   uint64
}

func usageNow() usage {
	ms := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(ms)
	return usage{cpu: cpuTime(), gc: time.Duration(ms[0].Value.Float64() * 1e9), alloc: ms[1].Value.Uint64()}
}

func (u usage) sub(o usage) usage { return usage{u.cpu - o.cpu, u.gc - o.gc, u.alloc - o.alloc} }
func (u usage) add(o usage) usage { return usage{u.cpu + o.cpu, u.gc + o.gc, u.alloc + o.alloc} }

// per returns u divided by n, less base (each at least 0).
func (u usage) per(n int, base usage) usage {
	d := time.Duration(n)
	return usage{cpu: max(u.cpu/d-base.cpu, 0), gc: max(u.gc/d-base.gc, 0), alloc: max(u.alloc/uint64(n), base.alloc) - base.alloc}
}

// gcCycles is the number of GC cycles completed so far.
func gcCycles() uint64 {
	ms := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(ms)
	return ms[0].Value.Uint64()
}

// writeAllocs writes the allocation profile so far to path (pprof -base subtracts one from
// another), after a collection: the profile is as of the last one.
func writeAllocs(path string) error {
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// heap returns HeapAlloc after two collections.
func heap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// payloadOf is the registry's payload of a session instance record: pubPayload{Instances: [in]}
// in msgpack (registry/replicate.go), for instance id with the given weight.
type pubPayload struct {
	Instances []model.Instance `msgpack:"i"`
}

func payloadOf(id int, weight float64) []byte {
	svc := model.ServiceKey{Name: "svc-" + strconv.Itoa(id/100)}
	in := model.NewInstance(svc, fmt.Sprintf("10.%d.%d.%d", id>>16&255, id>>8&255, id&255), 8080)
	in.Weight = weight
	in.Metadata = model.NewMetadata(map[string]string{
		"version": "1.4.2",
		"zone":    "zone-" + string(rune('a'+id%3)),
		"id":      "i-" + strconv.Itoa(id),
	})
	b, err := model.Marshal(pubPayload{Instances: []model.Instance{in}})
	if err != nil {
		panic(err)
	}
	return b
}

// recordKey is the key of instance id's record, as the registry names a session's instance
// record: "s/" + sessionID + "/" + 32 hex digits. Sessions hold 1,000 instances; session s is
// owned by node s mod nodes.
func recordKey(owner string, id int) string {
	sum := sha256.Sum256([]byte(strconv.Itoa(id)))
	return fmt.Sprintf("s/%s-%016x/%s", owner, id/1000, hex.EncodeToString(sum[:16]))
}

func ownerOf(id, nodes int) int { return (id / 1000) % nodes }

type logf func(format string, args ...any)

// measure builds a cluster of p.Nodes, loads p.Instances records into it, and measures.
func measure(p params, log logf) (res result, err error) {
	res.params = p
	start := time.Now() // real time
	base := heap()
	c := newCluster(nil)
	defer c.close()
	for range p.Nodes {
		if _, err := c.addNode(p.Nodes); err != nil {
			return res, err
		}
	}
	for _, n := range c.nodes {
		for _, o := range c.nodes {
			n.mem.Add(distro.Member{ID: o.id})
		}
	}
	ctx := context.Background()
	for _, n := range c.nodes {
		if err := n.rep.Start(ctx); err != nil {
			return res, err
		}
	}
	for i := 0; !allReady(c); i++ {
		if i > 100 {
			return res, fmt.Errorf("the cluster did not start")
		}
		if err := c.advance(100*time.Millisecond, 100*time.Millisecond); err != nil {
			return res, err
		}
	}

	// Load: every owner writes Chunk records, then a sync round ships them.
	keys := make([]string, p.Instances)
	for id := range p.Instances {
		keys[id] = recordKey(nodeID(ownerOf(id, p.Nodes)), id)
	}
	next := make([]int, p.Nodes) // per owner, the next id it writes
	for o := range p.Nodes {
		next[o] = o * 1000
	}
	written := 0
	for written < p.Instances {
		for o, n := range c.nodes[:p.Nodes] {
			for k := 0; k < p.Chunk && next[o] < p.Instances; k++ {
				id := next[o]
				if _, err := n.rep.Put(distro.KindSession, keys[id], payloadOf(id, 1)); err != nil {
					return res, fmt.Errorf("put %d: %w", id, err)
				}
				written++
				if next[o]++; next[o]%1000 == 0 {
					next[o] += (p.Nodes - 1) * 1000
				}
			}
		}
		if err := c.advance(time.Second, time.Second); err != nil {
			return res, err
		}
		log("  loaded %d/%d records", written, p.Instances)
	}
	// Two verify periods: whatever a verify round that ran while syncs were waiting repaired is
	// done, and every node holds every record.
	if err := c.advance(10*time.Second, time.Second); err != nil {
		return res, err
	}
	for _, n := range c.nodes {
		if s := n.rep.Stats(); s.Records != p.Instances {
			return res, fmt.Errorf("%s holds %d records, want %d", n.id, s.Records, p.Instances)
		}
	}
	h := heap()
	res.HeapPerNode = float64(h-base) / float64(p.Nodes)
	res.HeapPerRecord = res.HeapPerNode / float64(p.Instances)
	log("  heap %.0f MB per node (%.0f B per record)", res.HeapPerNode/1e6, res.HeapPerRecord)

	// Single changes: one record changed, one sync round (SyncDelay) on the clock, settled.
	// Steps in which a verify round ran are left out; the harness's own cost (an empty step) is
	// measured the same way and subtracted.
	weight := 2.0
	change := func(i int) error {
		id := (i * 7919) % p.Instances
		o := c.nodes[ownerOf(id, p.Nodes)]
		_, err := o.rep.Put(distro.KindSession, keys[id], payloadOf(id, weight))
		weight++
		return err
	}
	step := func(changes int, from int) (u usage, sent kindSnap, clean bool, err error) {
		v0, s0, u0 := c.verifyRounds(), c.stats(), usageNow()
		for i := range changes {
			if err := change(from + i); err != nil {
				return u, sent, false, err
			}
		}
		if err := c.advance(time.Second, time.Second); err != nil {
			return u, sent, false, err
		}
		u1, s1 := usageNow(), c.stats()
		return u1.sub(u0), s1.sub(s0), c.verifyRounds() == v0, nil
	}
	// timed runs steps until it has timed the given number of clean ones; it returns the CPU of
	// a clean step and the sync bytes of a step (every step: a sync is a sync).
	timed := func(changes, steps int) (u usage, bytes float64, err error) {
		var total usage
		var sync uint64
		n, i := 0, 0
		for ; n < steps; i++ {
			d, s, clean, err := step(changes, i*changes)
			if err != nil {
				return u, 0, err
			}
			if changes > 0 && s.msgs[kindSync] == 0 {
				return u, 0, fmt.Errorf("a change was not synced")
			}
			sync += s.bytes[kindSync]
			if clean {
				total = total.add(d)
				n++
			}
		}
		return total, float64(sync) / float64(i), nil
	}
	runtime.GC()
	empty, _, err := timed(0, p.Changes)
	if err != nil {
		return res, err
	}
	var prof *os.File
	if p.Profile != "" {
		if prof, err = os.Create(fmt.Sprintf("%s.%dx%d", p.Profile, p.Nodes, p.Instances)); err != nil {
			return res, err
		}
		if err := pprof.StartCPUProfile(prof); err != nil {
			return res, err
		}
	}
	one, b1, err := timed(1, p.Changes)
	if prof != nil {
		pprof.StopCPUProfile()
		_ = prof.Close()
	}
	if err != nil {
		return res, err
	}
	empty = empty.per(p.Changes, usage{})
	one = one.per(p.Changes, empty)
	res.ChangeCPU, res.ChangeGC, res.ChangeAlloc = one.cpu, one.gc, one.alloc
	res.ChangeBytes = b1
	res.ChangePeerBytes = res.ChangeBytes / float64(p.Nodes-1)
	steps := max(p.Changes/p.Batch, 1)
	bat, bb, err := timed(p.Batch, steps)
	if err != nil {
		return res, err
	}
	bat = bat.per(steps, empty)
	res.BatchCPU, res.BatchGC, res.BatchAlloc = bat.cpu/time.Duration(p.Batch), bat.gc/time.Duration(p.Batch), bat.alloc/uint64(p.Batch)
	res.BatchBytes = bb / float64(p.Batch)
	log("  change: %.0f B, %v CPU (%v of it GC), %d B allocated across the cluster; in batches of %d: %.0f B, %v CPU (%v GC), %d B allocated per change",
		res.ChangeBytes, res.ChangeCPU, res.ChangeGC, res.ChangeAlloc, p.Batch, res.BatchBytes, res.BatchCPU, res.BatchGC, res.BatchAlloc)

	// Verify with nothing changing: find a round, on a 100 ms grid.
	pairs := p.Nodes * (p.Nodes - 1)
	perPeer := func(d kindSnap, nodes []kindSnap) (avg, maxNode float64) {
		avg = float64(d.bytes[kindVerify]+d.bytes[kindRepair]) / float64(pairs)
		for _, s := range nodes {
			maxNode = max(maxNode, float64(s.bytes[kindVerify]+s.bytes[kindRepair])/float64(p.Nodes-1))
		}
		return avg, maxNode
	}
	nodeSnaps := func() []kindSnap {
		out := make([]kindSnap, p.Nodes)
		for i, n := range c.nodes[:p.Nodes] {
			out[i] = n.st.snap()
		}
		return out
	}
	subAll := func(a, b []kindSnap) []kindSnap {
		out := make([]kindSnap, len(a))
		for i := range a {
			out[i] = a[i].sub(b[i])
		}
		return out
	}
	v0 := c.verifyRounds()
	for c.verifyRounds() == v0 {
		if err := c.advance(100*time.Millisecond, 100*time.Millisecond); err != nil {
			return res, err
		}
	}
	// A round just ran. The next one is a VerifyInterval on.
	n0, s0, v0 := nodeSnaps(), c.stats(), c.verifyRounds()
	if err := c.advance(5*time.Second, 100*time.Millisecond); err != nil {
		return res, err
	}
	if got := c.verifyRounds() - v0; got != uint64(pairs) {
		return res, fmt.Errorf("%d verify rounds in a period, want %d", got, pairs)
	}
	res.VerifyIdle, res.VerifyIdleMax = perPeer(c.stats().sub(s0), subAll(nodeSnaps(), n0))

	// Verify while changes wait in their merge window: InFlight changes per owner made half a
	// SyncDelay before the round.
	if err := c.advance(4500*time.Millisecond, 100*time.Millisecond); err != nil {
		return res, err
	}
	n0, s0, v0 = nodeSnaps(), c.stats(), c.verifyRounds()
	rep0 := uint64(0)
	for _, n := range c.nodes {
		rep0 += n.rep.Stats().RepairRecords
	}
	for o := range p.Nodes {
		for k := range p.InFlight {
			id := ((o+k*p.Nodes)*1000 + k*37) % p.Instances
			if ownerOf(id, p.Nodes) != o {
				continue
			}
			if _, err := c.nodes[o].rep.Put(distro.KindSession, keys[id], payloadOf(id, weight)); err != nil {
				return res, err
			}
			weight++
		}
	}
	if err := c.advance(1500*time.Millisecond, 100*time.Millisecond); err != nil {
		return res, err
	}
	if got := c.verifyRounds() - v0; got != uint64(pairs) {
		return res, fmt.Errorf("%d verify rounds in the churn window, want %d", got, pairs)
	}
	res.VerifyChurn, res.VerifyChurnMax = perPeer(c.stats().sub(s0), subAll(nodeSnaps(), n0))
	rep1 := uint64(0)
	for _, n := range c.nodes {
		rep1 += n.rep.Stats().RepairRecords
	}
	res.ChurnRepairRecs = float64(rep1-rep0) / float64(pairs)
	log("  verify per peer per round: %.0f B idle (max node %.0f), %.0f B with %d changes per owner in flight (max %.0f, %.1f repair records)",
		res.VerifyIdle, res.VerifyIdleMax, res.VerifyChurn, p.InFlight, res.VerifyChurnMax, res.ChurnRepairRecs)

	// Join: a new node, listed by every member, starts and loads.
	if err := c.settle(); err != nil {
		return res, err
	}
	j, err := c.addNode(0)
	if err != nil {
		return res, err
	}
	for _, n := range c.nodes[:p.Nodes] {
		n.mem.Add(distro.Member{ID: j.id})
	}
	if err := c.settle(); err != nil {
		return res, err
	}
	hj := heap()
	if p.Profile != "" {
		if err := writeAllocs(fmt.Sprintf("%s.allocs.before.%dx%d", p.Profile, p.Nodes, p.Instances)); err != nil {
			return res, err
		}
		f, err := os.Create(fmt.Sprintf("%s.join.%dx%d", p.Profile, p.Nodes, p.Instances))
		if err != nil {
			return res, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return res, err
		}
		defer func() { _ = f.Close() }()
		defer pprof.StopCPUProfile() // (a no-op once stopped at ready)
	}
	js0, t0, u0, g0 := j.st.snap(), cpuTime(), usageNow(), gcCycles()
	began := time.Now() // real time
	if err := j.rep.Start(ctx); err != nil {
		return res, err
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Minute) // real time: a guard
	defer cancel()
	if err := j.rep.WaitReady(wctx); err != nil {
		return res, fmt.Errorf("the joiner did not get ready: %w", err)
	}
	res.JoinReady = time.Since(began) // real time
	res.JoinCPU = cpuTime() - t0
	u1 := usageNow().sub(u0)
	res.JoinGC, res.JoinAlloc, res.JoinGCs = u1.gc, u1.alloc, gcCycles()-g0
	if p.Profile != "" {
		pprof.StopCPUProfile() // the join only, not the collections that measure the heap after it
		if err := writeAllocs(fmt.Sprintf("%s.allocs.after.%dx%d", p.Profile, p.Nodes, p.Instances)); err != nil {
			return res, err
		}
	}
	js := j.st.snap().sub(js0)
	res.JoinBytes = float64(js.bytes[kindSnapshot])
	res.JoinPeers = j.rep.Stats().LoadPeers
	if err := c.settle(); err != nil {
		return res, err
	}
	if s := j.rep.Stats(); s.Records != p.Instances {
		return res, fmt.Errorf("the joiner holds %d records, want %d", s.Records, p.Instances)
	}
	res.JoinerHeap = float64(heap()) - float64(hj)
	log("  join: ready in %v (CPU %v, GC estimate %v; %.0f MB allocated, %d GC cycles), pulled %.1f MB from %d peers, heap %.0f MB",
		res.JoinReady.Round(time.Millisecond), res.JoinCPU.Round(time.Millisecond), res.JoinGC.Round(time.Millisecond),
		float64(res.JoinAlloc)/1e6, res.JoinGCs, res.JoinBytes/1e6, res.JoinPeers, res.JoinerHeap/1e6)
	res.Setup = time.Since(start) // real time
	return res, nil
}

func allReady(c *cluster) bool {
	for _, n := range c.nodes {
		if !n.rep.Ready() {
			return false
		}
	}
	return true
}
