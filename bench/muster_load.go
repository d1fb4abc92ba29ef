package main

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/raftstore"
	"github.com/muster-io/muster/registry"
)

// musterRegister: writers register new ephemeral instances, writer w on node
// w mod n. With session, each writer opens a session first (off the clock)
// and registers through it; otherwise each instance is a beat publisher of
// its own ip:port (Registry.Register, forwarded to its owner in a cluster).
// With more than one node the round ends when every node holds every
// instance (replication included).
func musterRegister(ctx context.Context, dir string, nodes, writers, perWriter int, dur time.Duration, services int, session bool) (result, error) {
	regs, closeAll, err := musterNodes(ctx, dir, nodes, false, func(l *registry.Limits) {
		l.MaxInstancesPerSession = max(l.MaxInstancesPerSession, perWriter)
	})
	if err != nil {
		return result{}, err
	}
	defer closeAll()
	sessions := make([]*registry.Session, writers)
	if session {
		for w := range sessions {
			if sessions[w], err = regs[w%nodes].OpenSession(ctx, registry.SessionOptions{}); err != nil {
				return result{}, err
			}
		}
	}
	start := time.Now() // real time
	ops, _, err := closedLoop(writers, perWriter, dur, func(w, i int) error {
		id := w<<18 + i
		in := instance(svcOf(id, services), id)
		if session {
			return sessions[w].Register(ctx, in)
		}
		return regs[w%nodes].Register(ctx, in)
	})
	if err != nil {
		return result{}, err
	}
	if nodes > 1 {
		if err := waitInstances(ctx, regs, ops); err != nil {
			return result{}, err
		}
	}
	el := time.Since(start) // real time
	return result{value: float64(ops) / el.Seconds(), note: fmt.Sprintf("%d ops in %v", ops, el.Round(time.Millisecond))}, nil
}

// musterNodes starts a standalone registry (n = 1) or an n-node cluster
// and returns its registries and a function that closes everything.
func musterNodes(ctx context.Context, dir string, n int, raft bool, limits func(*registry.Limits)) ([]*registry.Registry, func(), error) {
	if n == 1 && !raft {
		r, err := startStandalone(ctx, limits)
		if err != nil {
			return nil, nil, err
		}
		return []*registry.Registry{r}, func() { _ = r.Close() }, nil
	}
	c, err := startMuster(ctx, n, dir, raft)
	if err != nil {
		return nil, nil, err
	}
	return c.regs, c.Close, nil
}

// waitInstances waits until every registry holds want instances.
func waitInstances(ctx context.Context, regs []*registry.Registry, want int) error {
	for _, r := range regs {
		err := waitFor(ctx, 60*time.Second, fmt.Sprintf("node %s holds %d instances", r.NodeID(), want), func() (bool, error) {
			return r.Counts().Instances >= want, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// musterPersistent: writers register new persistent instances (Raft, fsync
// on) on a 3-node cluster, writer w on node w mod 3; the round ends when
// every node holds every instance.
func musterPersistent(ctx context.Context, dir string, writers, perWriter int) (result, error) {
	c, err := startMuster(ctx, 3, dir, true)
	if err != nil {
		return result{}, err
	}
	defer c.Close()
	regs := c.regs
	raft0 := c.raftStats()
	var tr0 [2]uint64
	tr0[0], tr0[1] = c.transportShed()
	sys0, start := sampleSys(), time.Now() // real time
	ops, _, err := closedLoop(writers, perWriter, 0, func(w, i int) error {
		id := w<<18 + i
		in := instance(svcOf(id, 100), id)
		in.Ephemeral = false
		return regs[w%len(regs)].Register(ctx, in)
	})
	if err != nil {
		return result{}, err
	}
	if err := waitInstances(ctx, regs, ops); err != nil {
		return result{}, err
	}
	el, sys1 := time.Since(start), sampleSys() // real time
	detail := sysNote(sys0, sys1, ops, el)
	if d := raftNote(raft0, c.raftStats()); d != "" {
		detail += "\n" + d
	}
	var tr1 [2]uint64
	tr1[0], tr1[1] = c.transportShed()
	detail += "\n" + transportNote(tr0, tr1)
	return result{value: float64(ops) / el.Seconds(), note: fmt.Sprintf("%d ops in %v", ops, el.Round(time.Millisecond)),
		detail: detail, cpuPerOp: cpuPerOp(sys0, sys1, ops)}, nil
}

// raftStats returns every node's raftstore counters.
func (c *musterCluster) raftStats() []raftstore.Stats {
	st := make([]raftstore.Stats, len(c.nodes))
	for i, nd := range c.nodes {
		if r := nd.Raft(); r != nil {
			st[i] = r.Stats()
		}
	}
	return st
}

// transportShed returns the inbound messages the nodes' transports shed (their handler
// queue was full: a one-way message, such as a batch of Raft messages, is then dropped) and
// the connections they dialled.
func (c *musterCluster) transportShed() (shed, dials uint64) {
	for _, nd := range c.nodes {
		if t := nd.Transport(); t != nil {
			st := t.Stats()
			shed, dials = shed+st.Shed, dials+st.Dials
		}
	}
	return shed, dials
}

// transportNote formats what transportShed counted between a round's start (a) and its end (b).
func transportNote(a, b [2]uint64) string {
	return fmt.Sprintf("transport: %d inbound messages shed (handler queue full), %d dials", b[0]-a[0], b[1]-a[1])
}

// raftNote says, from the nodes' counters before (a) and after (b) a round,
// where its commands went: per node, the commands proposed there, the
// entries they went in (a follower's forwarded to the leader, which merged
// them with its own) and the Raft log's synchronous writes, the leader,
// and what could have disturbed the round (leader changes, snapshots).
func raftNote(a, b []raftstore.Stats) string {
	var cmds, writes, changes, snaps, retries, timeouts, dropped uint64
	var per []string
	for i := range b {
		p := b[i].Proposals - a[i].Proposals
		e := b[i].Entries - a[i].Entries
		w := b[i].LogWrites - a[i].LogWrites
		cmds, writes = cmds+p, writes+w
		changes += b[i].LeaderChanges - a[i].LeaderChanges
		snaps += b[i].SnapshotsCreated - a[i].SnapshotsCreated
		retries += b[i].EntryRetries - a[i].EntryRetries
		timeouts += b[i].EntryAttemptsTimedOut - a[i].EntryAttemptsTimedOut
		dropped += b[i].Inbound.Dropped - a[i].Inbound.Dropped
		lead := ""
		if b[i].IsLeader {
			lead = fmt.Sprintf(" (leader: %d merged entries)", b[i].MergedEntries-a[i].MergedEntries)
		} else if f := b[i].EntriesForwarded - a[i].EntriesForwarded; f > 0 {
			lead = fmt.Sprintf(" (%d forwarded, %d fell back)", f, b[i].ForwardFallbacks-a[i].ForwardFallbacks)
		}
		per = append(per, fmt.Sprintf("n%d%s %d cmds in %d entries (%.1f per entry, %d waits expired), %d log writes",
			i+1, lead, p, e, float64(p)/float64(max(e, 1)), b[i].BatchWaitsExpired-a[i].BatchWaitsExpired, w))
	}
	if len(per) == 0 {
		return ""
	}
	return fmt.Sprintf("raft: %s; %.1f commands per log write; %d leader changes, %d snapshots, %d entry retries (%d timed out), %d inbound batches dropped",
		strings.Join(per, "; "), float64(cmds)/float64(max(writes, 1)), changes, snaps, retries, timeouts, dropped)
}

// musterKeepAlive: keys beat instances renewed by Heartbeat (beat), or keys
// sessions with a TTL, one instance each, renewed by KeepAlive (session);
// writers cycle through them.
func musterKeepAlive(ctx context.Context, writers, keys int, dur time.Duration, session bool) (result, error) {
	r, err := startStandalone(ctx, nil)
	if err != nil {
		return result{}, err
	}
	defer r.Close()
	ikeys := make([]model.InstanceKey, keys)
	sessions := make([]*registry.Session, keys)
	for j := range keys {
		in := instance(svcOf(j, 100), j)
		ikeys[j] = in.Key()
		if !session {
			if err := r.Register(ctx, in); err != nil {
				return result{}, err
			}
			continue
		}
		if sessions[j], err = r.OpenSession(ctx, registry.SessionOptions{TTL: leaseTTL * time.Second}); err != nil {
			return result{}, err
		}
		if err := sessions[j].Register(ctx, in); err != nil {
			return result{}, err
		}
	}
	ops, el, err := closedLoop(writers, 0, dur, func(w, i int) error {
		j := (w + i*writers) % keys
		if session {
			return sessions[j].KeepAlive(ctx)
		}
		_, err := r.Heartbeat(ctx, ikeys[j])
		return err
	})
	if err != nil {
		return result{}, err
	}
	return result{value: float64(ops) / el.Seconds(), note: fmt.Sprintf("%d renewals of %d", ops, keys)}, nil
}

// musterQuery: writers query one service of n instances over and over.
func musterQuery(ctx context.Context, writers, n int, dur time.Duration) (result, error) {
	r, err := startStandalone(ctx, nil)
	if err != nil {
		return result{}, err
	}
	defer r.Close()
	svc := model.ServiceKey{Name: "orders"}
	sess, err := r.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		return result{}, err
	}
	for i := range n {
		if err := sess.Register(ctx, instance(svc, i)); err != nil {
			return result{}, err
		}
	}
	q := model.Query{Service: svc}
	ops, el, err := closedLoop(writers, 0, dur, func(w, i int) error {
		v, err := r.Query(ctx, q)
		if err != nil {
			return err
		}
		if len(v.Instances) != n {
			return fmt.Errorf("got %d instances, want %d", len(v.Instances), n)
		}
		return nil
	})
	if err != nil {
		return result{}, err
	}
	return result{value: float64(ops) / el.Seconds(), note: fmt.Sprintf("%d queries", ops)}, nil
}

// musterFanout: watchers watchers of a service of 100 instances (one
// session), each read by a goroutine of its own; a change is a
// re-registration of one instance with a new weight, timed until every
// watcher's goroutine has been handed it by Next. Reports the median.
func musterFanout(ctx context.Context, watchers, changes int) (result, error) {
	r, err := startStandalone(ctx, func(l *registry.Limits) { l.MaxWatchers = max(l.MaxWatchers, 2*watchers) })
	if err != nil {
		return result{}, err
	}
	defer r.Close()
	svc := model.ServiceKey{Name: "orders"}
	sess, err := r.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		return result{}, err
	}
	insts := make([]model.Instance, 100)
	for i := range insts {
		insts[i] = instance(svc, i)
		if err := sess.Register(ctx, insts[i]); err != nil {
			return result{}, err
		}
	}
	var (
		wantGen    atomic.Int64
		wantWeight atomic.Uint64 // float64 bits
		pending    atomic.Int64
		reached    = make(chan struct{}, 1)
		wg         sync.WaitGroup
	)
	wctx, cancel := context.WithCancel(ctx)
	defer func() { cancel(); wg.Wait() }()
	for range watchers {
		w, err := r.Watch(wctx, model.Query{Service: svc})
		if err != nil {
			return result{}, err
		}
		if _, err := w.Next(ctx); err != nil {
			return result{}, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.Close()
			var counted int64
			for {
				u, err := w.Next(wctx)
				if err != nil {
					return
				}
				gen := wantGen.Load()
				weight := float64frombits(wantWeight.Load())
				for _, in := range u.Delta.Updated {
					if counted < gen && in.Weight == weight {
						counted = gen
						if pending.Add(-1) == 0 {
							reached <- struct{}{}
						}
					}
				}
			}
		}()
	}
	lat, err := timeFanout(changes, watchers, &pending, reached, func(ch int) func() error {
		in := insts[ch%len(insts)]
		in.Weight = float64(2 + ch)
		wantWeight.Store(float64bits(in.Weight))
		wantGen.Store(int64(ch + 1))
		return func() error { return sess.Register(ctx, in) }
	})
	if err != nil {
		return result{}, err
	}
	return latencyResult(lat, 50), nil
}

// musterHeap: the Go heap a standalone registry holds per instance after n
// registrations in services of 100: through sessions of 1,000 instances
// (session), or each on its own beat publisher and lease (beat). The
// baseline is taken after the registry started.
func musterHeap(ctx context.Context, n int, session bool) (result, error) {
	r, err := startStandalone(ctx, nil)
	if err != nil {
		return result{}, err
	}
	defer r.Close()
	before := heapNow()
	var sess *registry.Session
	for id := range n {
		in := instance(svcOf(id, max(n/100, 1)), id)
		if !session {
			if err := r.Register(ctx, in); err != nil {
				return result{}, err
			}
			continue
		}
		if id%1000 == 0 {
			if sess, err = r.OpenSession(ctx, registry.SessionOptions{}); err != nil {
				return result{}, err
			}
		}
		if err := sess.Register(ctx, in); err != nil {
			return result{}, err
		}
	}
	after := heapNow()
	runtime.KeepAlive(r)
	return result{value: float64(after-before) / float64(n), note: fmt.Sprintf("%d instances, %.1f MiB", n, float64(after-before)/(1<<20))}, nil
}

// musterVisibility: on a 3-node cluster, an instance registered on node A
// is timed until a watcher on node B is handed it. perInstanceSession opens
// a session per instance (100 sessions of one instance); otherwise one
// session registers them all (one session of 100). Sessions are opened off
// the clock. Reports the 99th percentile.
func musterVisibility(ctx context.Context, dir string, samples, reps int, perInstanceSession bool) (result, error) {
	regs, closeAll, err := musterNodes(ctx, dir, 3, false, nil)
	if err != nil {
		return result{}, err
	}
	defer closeAll()
	a, b := regs[0], regs[1]
	var lat []time.Duration
	for rep := range reps {
		svc := model.ServiceKey{Name: fmt.Sprintf("vis-%d", rep)}
		seen := make(chan string, 4096)
		wctx, cancel := context.WithCancel(ctx)
		w, err := b.Watch(wctx, model.Query{Service: svc})
		if err != nil {
			cancel()
			return result{}, err
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.Close()
			for {
				u, err := w.Next(wctx)
				if err != nil {
					return
				}
				for _, in := range u.Delta.Added {
					seen <- in.IP
				}
			}
		}()
		var sess *registry.Session
		for i := range samples {
			if perInstanceSession || i == 0 {
				if sess, err = a.OpenSession(ctx, registry.SessionOptions{}); err != nil {
					cancel()
					return result{}, err
				}
			}
			in := instance(svc, rep*samples+i)
			start := time.Now() // real time
			if err := sess.Register(ctx, in); err != nil {
				cancel()
				return result{}, err
			}
			if err := waitSeen(seen, in.IP); err != nil {
				cancel()
				return result{}, err
			}
			lat = append(lat, time.Since(start)) // real time
		}
		cancel()
		wg.Wait()
	}
	return latencyResult(lat, 99), nil
}
