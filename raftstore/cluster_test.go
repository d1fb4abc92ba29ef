package raftstore

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/jonboulle/clockwork"

	"github.com/muster-io/muster/model"
)

// Writes on any node are visible on all, through the store and through the
// Listener; losing the leader elects a new one and writes go on; the old
// leader restarted from its directory catches up; a new replica joins by a
// streamed snapshot.
func TestClusterFailoverRestartJoin(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.SnapshotEntries = 20
		cfg.CompactionOverhead = 5
	})
	ctx := context.Background()
	// Writes through every node.
	for id, n := range c.nodes {
		for p := range 10 {
			mustPropose(t, n, Command{Op: OpPutInstance, Instance: persistent("svc", "10.0.0.1", int(id)*100+p+1)})
		}
	}
	mustPropose(t, c.nodes[1], Command{Op: OpCreateService, Service: model.Service{Key: svcKey("svc"), ProtectThreshold: 0.5}})
	w := 1.5
	mustPropose(t, c.nodes[2], Command{Op: OpPatchInstance, Patch: model.InstancePatch{Key: persistent("svc", "10.0.0.1", 101).Key(), Weight: &w}})
	st := c.converged(1)
	if len(st.Instances) != 30 || len(st.Services) != 1 || len(st.Patches) != 1 {
		t.Fatalf("state: %d instances, %d services, %d patches", len(st.Instances), len(st.Services), len(st.Patches))
	}

	// Stop the leader: a new one is elected and writes continue.
	old := c.waitLeader()
	c.stop(old)
	leader := c.waitLeader()
	if leader == old {
		t.Fatalf("leader still %d", old)
	}
	for p := range 40 { // more than SnapshotEntries: the log gets compacted
		mustPropose(t, c.any(), Command{Op: OpPutInstance, Instance: persistent("svc", "10.0.0.2", p+1)})
	}

	// Restart the old leader from its directory: it catches up.
	c.start(old)
	st = c.converged(leader)
	if len(st.Instances) != 70 {
		t.Fatalf("after restart: %d instances", len(st.Instances))
	}
	if c.lis[old].resets == 0 {
		t.Fatal("restarted node's listener got no Reset")
	}

	// A new replica joins: with the log compacted it needs a snapshot.
	for p := range 30 {
		mustPropose(t, c.any(), Command{Op: OpDeleteInstance, Key: persistent("svc", "10.0.0.2", p+1).Key()})
	}
	n4 := c.join(4, func(cfg *Config) { cfg.SnapshotEntries = 20; cfg.CompactionOverhead = 5 })
	st = c.converged(leader)
	if len(st.Instances) != 40 {
		t.Fatalf("after join: %d instances", len(st.Instances))
	}
	if err := n4.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if c.lis[4].resets < 2 { // Open of an empty store, then the snapshot
		t.Fatalf("joined node's listener: %d resets, want a snapshot recovery", c.lis[4].resets)
	}
	info := n4.Info()
	if len(info.Members) != 4 || !info.HasLeader || info.Applied == 0 {
		t.Fatalf("info: %+v", info)
	}

	// Remove it again.
	if err := c.nodes[leader].RemoveReplica(ctx, 4); err != nil {
		t.Fatal(err)
	}
	c.eventually(5*time.Second, "membership of 3", func() bool { return len(c.nodes[leader].Info().Members) == 3 })
	c.stop(4)
}

// A whole cluster stopped and restarted from disk loses nothing committed,
// and every Listener gets the state through Reset.
func TestClusterRestartFromDisk(t *testing.T) {
	c := newCluster(t, 3, nil)
	for p := range 25 {
		mustPropose(t, c.any(), Command{Op: OpPutInstance, Instance: persistent("a", "10.0.0.3", p+1)})
	}
	mustPropose(t, c.any(), Command{Op: OpSetHealth, Key: persistent("a", "10.0.0.3", 1).Key(), Healthy: false})
	mustPropose(t, c.any(), Command{Op: OpUpdateService, Upsert: true, Service: model.Service{Key: svcKey("a")}})
	want := c.converged(1)
	for id := range c.cfgs {
		c.stop(id)
	}
	for id := range c.cfgs {
		c.start(id)
	}
	c.waitLeader()
	for id, l := range c.lis {
		if l.resets != 1 {
			t.Fatalf("node %d: %d resets", id, l.resets)
		}
		if got := l.state(); !sameData(got, want) {
			t.Fatalf("node %d listener after restart:\n%+v\nwant\n%+v", id, got, want)
		}
	}
	got := c.converged(1)
	if !sameData(got, want) {
		t.Fatalf("after restart:\n%+v\nwant\n%+v", got, want)
	}
	i, ok, err := c.any().GetInstance(context.Background(), persistent("a", "10.0.0.3", 1).Key(), ReadOptions{Linearizable: true})
	if err != nil || !ok || i.Healthy {
		t.Fatalf("instance after restart: %+v %v %v", i, ok, err)
	}
}

// Without a quorum, writes fail with ErrNoLeader within the bounded wait and
// local reads still answer.
func TestNoQuorum(t *testing.T) {
	inst := persistent("q", "10.0.0.4", 80)
	n := withoutQuorum(t, inst, func(cfg *Config) {
		cfg.ProposeTimeout = 500 * time.Millisecond
		cfg.ReadTimeout = 500 * time.Millisecond
	})
	ctx := context.Background()
	start := time.Now()
	_, err := n.Propose(ctx, Command{Op: OpDeleteInstance, Key: inst.Key()})
	if !errors.Is(err, ErrNoLeader) {
		t.Fatalf("propose without quorum: %v", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("bounded wait took %v", el)
	}
	// The entry was tried again within the bound (one tick between attempts), and
	// the stats count it.
	if st := n.Stats(); st.EntryRetries == 0 || st.EntryAttemptsTimedOut > st.EntryRetries {
		t.Fatalf("after a proposal without quorum: EntryRetries %d, EntryAttemptsTimedOut %d", st.EntryRetries, st.EntryAttemptsTimedOut)
	}
	if err := n.Barrier(ctx); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("barrier without quorum: %v", err)
	}
	got, ok, err := n.GetInstance(ctx, inst.Key(), ReadOptions{})
	if err != nil || !ok || got.Port != 80 {
		t.Fatalf("local read without quorum: %+v %v %v", got, ok, err)
	}
	if _, err := n.Instances(ctx, inst.Service, ReadOptions{Linearizable: true}); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("linearizable read without quorum: %v", err)
	}
	// The caller's own deadline wins over the bounded wait.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := n.Propose(short, Command{Op: OpDeleteInstance, Key: inst.Key()}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("propose with short ctx: %v", err)
	}
}

// ProposeTimeout bounds a Propose call from its start, also when its
// command waits behind an entry that is itself in a bounded wait without a
// quorum (one entry is in flight per node): it does not wait twice.
func TestProposeBoundFromCall(t *testing.T) {
	const bound = time.Second
	inst := persistent("q", "10.0.0.4", 80)
	// One command per entry: once the batcher has taken the first, the
	// second cannot join its entry, and waits behind it.
	n := withoutQuorum(t, inst, func(cfg *Config) { cfg.ProposeTimeout, cfg.MaxBatch = bound, 1 })
	first := queue(t, n, Command{Op: OpDeleteInstance, Key: inst.Key()}, false)
	deadline := time.Now().Add(5 * time.Second)
	for len(n.queue) > 0 && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	start := time.Now()
	_, err := n.Propose(context.Background(), Command{Op: OpPutInstance, Instance: persistent("q", "10.0.0.5", 80)})
	took := time.Since(start)
	if !errors.Is(err, ErrNoLeader) {
		t.Fatalf("second propose without quorum: %v", err)
	}
	if took > bound*17/10 {
		t.Fatalf("second propose took %v: it waited for the first entry's bound, then its own (%v)", took, bound)
	}
	if r := <-first.done; !errors.Is(r.err, ErrNoLeader) {
		t.Fatalf("first command without quorum: %v", r.err)
	}
}

// A proposal made on a follower just after the leader went down is retried
// until the new leader takes it, on real time: with a fake Config.Clock that
// nobody moves (registrytest's), the pause between attempts used to wait for
// the clock, and the bounded wait ran out instead.
func TestProposeRetriesOnRealTime(t *testing.T) {
	fake := clockwork.NewFakeClock()
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.Clock = fake
		cfg.ProposeTimeout = 5 * time.Second
	})
	leader := c.waitLeader()
	c.stop(leader)
	var follower *Node
	for _, n := range c.nodes {
		follower = n
	}
	inst := persistent("q", "10.0.0.8", 80)
	if _, err := follower.Propose(context.Background(), Command{Op: OpPutInstance, Instance: inst}); err != nil {
		t.Fatalf("propose after the leader went down: %v", err)
	}
}

// A command whose Propose call returned before the batcher took it (its
// context or bounded wait ended, Close) is left out: never applied, counted
// as failed.
func TestProposeAbandonedLeftOut(t *testing.T) {
	c := newCluster(t, 3, nil)
	n := c.nodes[c.waitLeader()]
	gone := persistent("q", "10.0.0.6", 80)
	failed := n.Stats().ProposalsFailed
	p := queue(t, n, Command{Op: OpPutInstance, Instance: gone}, true)
	kept := persistent("q", "10.0.0.7", 80)
	mustPropose(t, n, Command{Op: OpPutInstance, Instance: kept})
	ctx := context.Background()
	if _, ok, err := n.GetInstance(ctx, gone.Key(), ReadOptions{}); ok || err != nil {
		t.Fatalf("the abandoned command was applied (%v, %v)", ok, err)
	}
	if _, ok, err := n.GetInstance(ctx, kept.Key(), ReadOptions{}); !ok || err != nil {
		t.Fatalf("the command after it: %v, %v", ok, err)
	}
	if got := n.Stats().ProposalsFailed; got != failed+1 {
		t.Fatalf("ProposalsFailed %d → %d, want one more", failed, got)
	}
	select {
	case r := <-p.done:
		t.Fatalf("an abandoned command got an outcome: %+v", r)
	default:
	}
}

// withoutQuorum starts three replicas (tweaked), writes inst through
// replica 1, stops the other two and returns replica 1: it has no quorum.
func withoutQuorum(t *testing.T, inst model.Instance, tweak func(*Config)) *Node {
	t.Helper()
	c := newCluster(t, 3, tweak)
	settle(t, c.nodes[1], Command{Op: OpPutInstance, Instance: inst})
	c.converged(1)
	c.stop(2)
	c.stop(3)
	return c.nodes[1]
}

// queue puts cmd into n's proposal queue as Propose does, marked as given
// up by its caller if gone, and returns the proposal: its outcome arrives
// on done.
func queue(t *testing.T, n *Node, cmd Command, gone bool) *proposal {
	t.Helper()
	cmd.Normalize()
	enc, err := cmd.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	p := &proposal{at: n.clock.Now(), enc: enc, done: make(chan proposalResult, 1)}
	p.gone.Store(gone)
	n.queue <- p
	return p
}

// After Barrier returns on a follower, its Listener has seen every write
// committed before the call: no polling needed.
func TestBarrierMakesListenerCurrent(t *testing.T) {
	c := newCluster(t, 3, nil)
	leader := c.waitLeader()
	ctx := context.Background()
	for i := range 30 {
		inst := persistent("bar", "10.0.0.8", i+1)
		mustPropose(t, c.nodes[leader], Command{Op: OpPutInstance, Instance: inst})
		for id, n := range c.nodes {
			if id == leader {
				continue
			}
			if err := n.Barrier(ctx); err != nil {
				t.Fatal(err)
			}
			l := c.lis[id]
			l.mu.Lock()
			_, ok := l.instances[inst.Key()]
			l.mu.Unlock()
			if !ok {
				t.Fatalf("node %d: listener missing write %d after Barrier", id, i)
			}
		}
	}
}

// A replica whose state machine lost everything it had applied (as after a
// crash before Badger's data reached the disk) rebuilds it by replaying
// the Raft log from the index Open reports.
func TestReplayAfterLostState(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.SnapshotEntries = NoSnapshots })
	for p := range 20 {
		mustPropose(t, c.any(), Command{Op: OpPutInstance, Instance: persistent("replay", "10.0.0.9", p+1)})
	}
	want := c.converged(1)
	c.stop(3)
	db, err := badger.Open(badgerOptions(filepath.Join(c.cfgs[3].Dir, "badger"), slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.DropAll(); err != nil {
		t.Fatal(err)
	}
	db.Close()
	c.start(3)
	got := c.converged(1)
	if !sameData(got, want) {
		t.Fatalf("after replay:\n%+v\nwant\n%+v", got, want)
	}
	st, err := c.nodes[3].State(context.Background(), ReadOptions{})
	if err != nil || !sameData(st, want) || st.Index == 0 {
		t.Fatalf("replica 3 after replay: index %d, %v", st.Index, err)
	}
}
