package raftstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/transport"
)

// proposeFrom has writers goroutines on each node of c propose count new
// instances each, and checks every answer: committed, not rejected, and
// in the listener of the node that proposed it when Propose returns.
func proposeFrom(t *testing.T, c *cluster, writers, count int) int {
	t.Helper()
	var wg sync.WaitGroup
	var failed atomic.Value
	total := 0
	for id, n := range c.nodes {
		for w := range writers {
			total += count
			wg.Go(func() {
				for i := range count {
					in := persistent(fmt.Sprintf("svc-%d", i%7), fmt.Sprintf("10.%d.%d.%d", id, w, i), 8080)
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					res, err := n.Propose(ctx, Command{Op: OpPutInstance, Instance: in})
					if err == nil && res.Rejected != nil {
						err = res.Rejected
					}
					if err == nil && !c.lis[id].has(in.Key()) {
						err = errors.New("not in the proposing replica's listener when Propose returned")
					}
					cancel()
					if err != nil {
						failed.Store(fmt.Errorf("replica %d writer %d command %d: %w", id, w, i, err))
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	return total
}

// Over a Muster transport, followers send their entries to the leader,
// which proposes them with its own in one merged entry: the cluster's log
// holds fewer entries than the nodes proposed, every command is applied
// once on every replica, and a follower's caller sees its write on its own
// replica when Propose returns.
func TestForwardMergesEntries(t *testing.T) {
	var mem transport.MemNetwork
	c := memCluster(t, &mem, []string{"r1", "r2", "r3"}, nil)
	leader := c.waitLeader()
	waitForwarding(t, c, leader)
	before := c.nodes[leader].Stats().Applied
	total := proposeFrom(t, c, 6, 40)
	st := c.converged(leader)
	if len(st.Instances) != total {
		t.Fatalf("%d instances, want %d", len(st.Instances), total)
	}
	var proposed, forwarded uint64
	for id, n := range c.nodes {
		s := n.Stats()
		proposed += s.Entries
		if id != leader {
			forwarded += s.EntriesForwarded
			if s.EntriesForwarded == 0 {
				t.Errorf("follower %d forwarded no entry (%d proposed)", id, s.Entries)
			}
		}
	}
	ls := c.nodes[leader].Stats()
	if ls.EntriesForwardedIn == 0 || ls.MergedEntries == 0 {
		t.Fatalf("the leader proposed %d followers' entries, %d merged; want some of each", ls.EntriesForwardedIn, ls.MergedEntries)
	}
	if log := ls.Applied - before; log >= proposed {
		t.Fatalf("%d entries in the log for %d proposed: none merged", log, proposed)
	}
	t.Logf("%d commands in %d entries proposed (%d forwarded, %d merged entries), %d in the log",
		total, proposed, forwarded, ls.MergedEntries, ls.Applied-before)
}

// waitForwarding waits until every follower of c knows leader and the
// shard's membership: until then a follower proposes its entries itself.
func waitForwarding(t *testing.T, c *cluster, leader uint64) {
	t.Helper()
	for id, n := range c.nodes {
		if id == leader {
			continue
		}
		eventually(t, 10*time.Second, fmt.Sprintf("replica %d knows the leader and the members", id), func() bool {
			l, ok := n.Leader()
			return ok && l == leader && n.guard.members()[leader] != ""
		})
	}
}

// failingPropose wraps a transport: its KindRaftPropose requests fail, before
// the leader sees them (lost) or after it has answered (answered: the
// answer is lost, the entry committed).
type failingPropose struct {
	transport.Transport
	answered bool
	count    atomic.Int64
}

func (f *failingPropose) Request(ctx context.Context, to string, kind transport.Kind, body []byte) ([]byte, error) {
	if kind != KindRaftPropose {
		return f.Transport.Request(ctx, to, kind, body)
	}
	f.count.Add(1)
	if f.answered {
		if _, err := f.Transport.Request(ctx, to, kind, body); err != nil {
			return nil, err
		}
	}
	return nil, transport.ErrUnreachable
}

// A follower whose entry could not be forwarded proposes it itself: before
// the leader saw it, or after the leader committed it and the answer was
// lost, when the state machine answers the second proposal of the entry
// with the first's outcome (a service created once, not refused as
// existing).
func TestForwardFallsBack(t *testing.T) {
	for _, answered := range []bool{false, true} {
		t.Run(fmt.Sprintf("answered=%v", answered), func(t *testing.T) {
			var mem transport.MemNetwork
			wrappers := map[string]*failingPropose{}
			c := memCluster(t, &mem, []string{"r1", "r2", "r3"}, func(cfg *Config) {
				w := &failingPropose{Transport: cfg.Transport, answered: answered}
				wrappers[cfg.RaftAddress] = w
				cfg.Transport = w
			})
			leader := c.waitLeader()
			waitForwarding(t, c, leader)
			var f *Node
			for id, n := range c.nodes {
				if id != leader {
					f = n
				}
			}
			res := mustPropose(t, f, Command{Op: OpCreateService, Service: model.Service{Key: svcKey("fallback")}})
			if res.Rejected != nil {
				t.Fatalf("create on a follower: refused %v; a second proposal of the entry applied it again", res.Rejected)
			}
			total := proposeFrom(t, c, 2, 10)
			c.converged(leader)
			s := f.Stats()
			if s.ForwardFallbacks == 0 || s.ForwardFallbacks != s.EntriesForwarded {
				t.Fatalf("follower: %d entries forwarded, %d fell back; want all to fall back", s.EntriesForwarded, s.ForwardFallbacks)
			}
			if got := c.nodes[leader].Stats().EntriesForwardedIn; answered != (got > 0) {
				t.Fatalf("the leader proposed %d followers' entries (answered: %v)", got, answered)
			}
			st := c.converged(leader)
			if len(st.Instances) != total || len(st.Services) != 1 {
				t.Fatalf("%d instances and %d services, want %d and 1", len(st.Instances), len(st.Services), total)
			}
		})
	}
}

// A forwarded entry from anything but a member's node, or malformed, is
// refused before it is queued.
func TestForwardRefused(t *testing.T) {
	var mem transport.MemNetwork
	c := memCluster(t, &mem, []string{"r1", "r2", "r3"}, nil)
	leader := c.waitLeader()
	ln := c.nodes[leader]
	entry := encodeEntry(ln.nextEntryID(), [][]byte{mustMarshal(t, &Command{Op: OpCreateService, Service: model.Service{Key: svcKey("x")}})})
	other := uint64(1)
	if other == leader {
		other = 2
	}
	stranger, err := mem.Node("stranger")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stranger.Close() })
	body := func(from uint64, e []byte) []byte {
		return append(binary.BigEndian.AppendUint64([]byte{capMerged}, from), e...)
	}
	to := fmt.Sprintf("r%d", leader)
	big := append([]byte{entryVersion}, make([]byte, maxForwardedEntry)...)
	for name, try := range map[string]func() error{
		"a stranger's node": func() error {
			_, err := stranger.Request(t.Context(), to, KindRaftPropose, body(other, entry))
			return err
		},
		"another member's replica ID": func() error { return forwardAs(t, c, leader, other, body(leader, entry)) },
		"too short":                   func() error { return forwardAs(t, c, leader, other, body(other, entry[:5])) },
		"another version":             func() error { return forwardAs(t, c, leader, other, body(other, append([]byte{9}, entry[1:]...))) },
		"larger than an entry may be": func() error { return forwardAs(t, c, leader, other, body(other, big)) },
		"to a replica not the leader": func() error {
			third := uint64(6) - leader - other
			return forwardAs(t, c, third, other, body(other, entry))
		},
	} {
		if err := try(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if st, ok, err := ln.GetService(t.Context(), svcKey("x"), ReadOptions{}); err != nil || ok {
		t.Fatalf("service x: %v %v %v; want none", st, ok, err)
	}
}

// forwardAs sends body as a KindRaftPropose request from replica from's
// node to replica to's.
func forwardAs(t *testing.T, c *cluster, to, from uint64, body []byte) error {
	t.Helper()
	_, err := c.cfgs[from].Transport.Request(t.Context(), fmt.Sprintf("r%d", to), KindRaftPropose, body)
	return err
}

// The leader merges followers' entries only while every other member
// forwards saying it applies merged entries (a replica that does not may
// run a version that would skip them): a follower that proposes through
// Dragonboat, or forwards without the capability, keeps the leader's
// entries unmerged.
func TestForwardMergeWaitsForAllMembers(t *testing.T) {
	for _, how := range []string{"not forwarding", "no capability"} {
		t.Run(how, func(t *testing.T) {
			var mem transport.MemNetwork
			strip := map[uint64]*atomic.Bool{}
			c := memCluster(t, &mem, []string{"r1", "r2", "r3"}, func(cfg *Config) {
				strip[cfg.ReplicaID] = new(atomic.Bool)
				cfg.Transport = noCapability{cfg.Transport, strip[cfg.ReplicaID]}
			})
			leader := c.waitLeader()
			waitForwarding(t, c, leader)
			for id, n := range c.nodes {
				if id == leader {
					continue
				}
				// Before its first proposal: the batcher reads these only
				// after taking one from the queue (a channel receive).
				if how == "not forwarding" {
					n.cfg.noForward = true
				} else {
					strip[id].Store(true)
				}
				break
			}
			total := proposeFrom(t, c, 4, 20)
			if st := c.converged(leader); len(st.Instances) != total {
				t.Fatalf("%d instances, want %d", len(st.Instances), total)
			}
			if s := c.nodes[leader].Stats(); s.MergedEntries != 0 || s.EntriesForwardedIn == 0 {
				t.Fatalf("the leader proposed %d followers' entries and merged %d; want some and none", s.EntriesForwardedIn, s.MergedEntries)
			}
		})
	}
}

// noCapability, once strip is set, forwards entries without saying it
// applies merged ones, as a version before them would.
type noCapability struct {
	transport.Transport
	strip *atomic.Bool
}

func (n noCapability) Request(ctx context.Context, to string, kind transport.Kind, body []byte) ([]byte, error) {
	if kind == KindRaftPropose && len(body) > 0 && n.strip.Load() {
		body = append([]byte{0}, body[1:]...)
	}
	return n.Transport.Request(ctx, to, kind, body)
}

// Each caller gets its own part's outcome, and a forward delivered twice
// is applied once: creations of a new service succeed and those of an
// existing one are refused as existing, whatever parts share their entry.
func TestForwardOutcomesPerPart(t *testing.T) {
	var mem transport.MemNetwork
	c := memCluster(t, &mem, []string{"r1", "r2", "r3"}, func(cfg *Config) { cfg.Transport = twice{cfg.Transport} })
	leader := c.waitLeader()
	waitForwarding(t, c, leader)
	mustPropose(t, c.nodes[leader], Command{Op: OpCreateService, Service: model.Service{Key: svcKey("taken")}})
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for id, n := range c.nodes {
		for w := range 3 {
			wg.Go(func() {
				for i := range 30 {
					name, exists := fmt.Sprintf("s-%d-%d-%d", id, w, i), i%2 == 1
					if exists {
						name = "taken"
					}
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					res, err := n.Propose(ctx, Command{Op: OpCreateService, Service: model.Service{Key: svcKey(name)}})
					cancel()
					switch {
					case err != nil:
						errs <- err
						return
					case exists != errors.Is(res.Rejected, ErrServiceExists) || !exists && res.Rejected != nil:
						errs <- fmt.Errorf("replica %d: create %s: rejected %v (exists %v)", id, name, res.Rejected, exists)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if s := c.nodes[leader].Stats(); s.MergedEntries == 0 {
		t.Fatal("no merged entry")
	}
}

// twice delivers each forwarded entry twice, the second answer to the
// caller: the second is a dedupe hit.
type twice struct{ transport.Transport }

func (d twice) Request(ctx context.Context, to string, kind transport.Kind, body []byte) ([]byte, error) {
	if kind == KindRaftPropose {
		if _, err := d.Transport.Request(ctx, to, kind, body); err != nil {
			return nil, err
		}
	}
	return d.Transport.Request(ctx, to, kind, body)
}

// A follower slow to apply an entry the leader committed for it does not
// propose it again: Propose fails with ErrNoLeader after ProposeTimeout
// (the command may still be applied later, and is, once).
func TestForwardSlowFollowerNoRepropose(t *testing.T) {
	var mem transport.MemNetwork
	c := memCluster(t, &mem, []string{"r1", "r2", "r3"}, func(cfg *Config) { cfg.ProposeTimeout = time.Second })
	leader := c.waitLeader()
	var f uint64
	for id := range c.nodes {
		if id != leader {
			f = id
		}
	}
	n := c.nodes[f]
	waitForwarding(t, c, leader)
	c.lis[f].mu.Lock() // its apply blocks in the listener
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, err := n.Propose(ctx, Command{Op: OpCreateService, Service: model.Service{Key: svcKey("slow")}})
	cancel()
	if !errors.Is(err, ErrNoLeader) {
		c.lis[f].mu.Unlock()
		t.Fatalf("Propose on a follower that cannot apply: %v, want ErrNoLeader", err)
	}
	// The batcher's own wait for the apply ends after the caller's: the
	// apply stays blocked until it has, so that its timeout is what ends it.
	eventually(t, 10*time.Second, "the follower's entry done", func() bool { return n.Stats().Entries == 1 })
	c.lis[f].mu.Unlock()
	if s := n.Stats(); s.EntriesForwarded != 1 || s.ForwardFallbacks != 0 {
		t.Fatalf("follower: %d forwarded, %d fell back; want the one, taken and not proposed again", s.EntriesForwarded, s.ForwardFallbacks)
	}
	if st := c.converged(leader); len(st.Services) != 1 {
		t.Fatalf("%d services, want the one", len(st.Services))
	}
}

// A follower may have at most maxForwardsPerSender entries at the leader.
func TestForwardPerSenderBound(t *testing.T) {
	var mem transport.MemNetwork
	c := memCluster(t, &mem, []string{"r1", "r2", "r3"}, nil)
	leader := c.waitLeader()
	ln := c.nodes[leader]
	other := uint64(1)
	if other == leader {
		other = 2
	}
	for range maxForwardsPerSender {
		if !ln.fwdSlots.take(other) {
			t.Fatal("a slot refused below the bound")
		}
	}
	entry := encodeEntry(ln.nextEntryID(), [][]byte{mustMarshal(t, &Command{Op: OpCreateService, Service: model.Service{Key: svcKey("x")}})})
	err := forwardAs(t, c, leader, other, append(binary.BigEndian.AppendUint64([]byte{capMerged}, other), entry...))
	if err == nil || !strings.Contains(err.Error(), errForwardBusy.Error()) {
		t.Fatalf("a forward past the bound: %v, want %v", err, errForwardBusy)
	}
	ln.fwdSlots.give(other)
	if err := forwardAs(t, c, leader, other, append(binary.BigEndian.AppendUint64([]byte{capMerged}, other), entry...)); err != nil {
		t.Fatalf("a forward with a slot free: %v", err)
	}
}

// splitEntry takes a merged entry apart and refuses every malformed one.
func TestSplitEntry(t *testing.T) {
	a := encodeEntry(entryID{1}, nil)
	b := encodeEntry(entryID{2}, [][]byte{{0xc0}})
	m := encodeMerged([][]byte{a, b})
	parts, err := splitEntry(m)
	if err != nil || len(parts) != 2 || string(parts[0]) != string(a) || string(parts[1]) != string(b) {
		t.Fatalf("split = %q, %v", parts, err)
	}
	if parts, err := splitEntry(a); err != nil || len(parts) != 1 || string(parts[0]) != string(a) {
		t.Fatalf("a plain entry: %q, %v", parts, err)
	}
	for name, bad := range map[string][]byte{
		"no count":        {mergedVersion},
		"no parts":        {mergedVersion, 0},
		"too many parts":  {mergedVersion, maxMergedParts + 1},
		"short length":    m[:4],
		"part past end":   m[:len(m)-1],
		"bytes after":     append(append([]byte{}, m...), 0),
		"count too large": append([]byte{mergedVersion, 3}, m[2:]...),
	} {
		if _, err := splitEntry(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
}

// A merged entry applies each part on its own: a part that does not decode
// is skipped (no codes) and the others apply, each part's codes after their
// count in the result.
func TestMergedEntryBadPart(t *testing.T) {
	var mem transport.MemNetwork
	c := memCluster(t, &mem, []string{"r1", "r2", "r3"}, nil)
	ln := c.nodes[c.waitLeader()]
	good := encodeEntry(ln.nextEntryID(), [][]byte{mustMarshal(t, &Command{Op: OpCreateService, Service: model.Service{Key: svcKey("good")}})})
	bad := append(encodeEntry(ln.nextEntryID(), nil)[:entryHdrLen], 0xc1) // 0xc1: never used in msgpack
	_, data, err := ln.proposeBounded(encodeMerged([][]byte{bad, good}))
	if err != nil {
		t.Fatal(err)
	}
	if want := []byte{0, 0, 0, 1, codeOK}; string(data) != string(want) {
		t.Fatalf("result %x, want %x", data, want)
	}
	if _, ok, err := ln.GetService(t.Context(), svcKey("good"), ReadOptions{}); err != nil || !ok {
		t.Fatalf("the good part's service: %v %v", ok, err)
	}
}

// The leader cut off while followers forward to it: their entries fall
// back or go to the new leader, and every acknowledged command is applied
// exactly once (a service created twice would answer its second creation
// as existing).
func TestForwardLeaderLost(t *testing.T) {
	var mem transport.MemNetwork
	c := memCluster(t, &mem, []string{"r1", "r2", "r3"}, nil)
	old := c.waitLeader()
	var wg sync.WaitGroup
	var acked atomic.Int64
	var failed atomic.Value
	cut := make(chan struct{})
	var cutOnce sync.Once
	for id, n := range c.nodes {
		if id == old {
			continue
		}
		for w := range 3 {
			wg.Go(func() {
				for i := range 40 {
					if i == 10 && w == 0 {
						cutOnce.Do(func() { close(cut) })
					}
					cmd := Command{Op: OpCreateService, Service: model.Service{Key: svcKey(fmt.Sprintf("s-%d-%d-%d", id, w, i))}}
					var res Result
					var err error
					retried := false
					for deadline := time.Now().Add(20 * time.Second); ; retried = true {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						res, err = n.Propose(ctx, cmd)
						cancel()
						if !errors.Is(err, ErrNoLeader) || time.Now().After(deadline) {
							break
						}
					}
					// A failed attempt may have committed: its retry then
					// finds the service (the count below still checks once).
					if err == nil && res.Rejected != nil && !(retried && errors.Is(res.Rejected, ErrServiceExists)) {
						err = res.Rejected
					}
					if err != nil {
						failed.Store(fmt.Errorf("replica %d writer %d service %d: %w", id, w, i, err))
						return
					}
					acked.Add(1)
				}
			})
		}
	}
	<-cut
	mem.Isolate(fmt.Sprintf("r%d", old))
	wg.Wait()
	mem.Heal()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	st := c.converged(c.waitLeader())
	if int64(len(st.Services)) != acked.Load() {
		t.Fatalf("%d services for %d acknowledged creations", len(st.Services), acked.Load())
	}
	var fellBack uint64
	for id, n := range c.nodes {
		if id != old {
			fellBack += n.Stats().ForwardFallbacks
		}
	}
	t.Logf("%d creations; %d forwarded entries fell back", acked.Load(), fellBack)
}
