package raftstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/transport"
)

// memCluster starts replicas whose Raft traffic goes over a MemNetwork
// (Config.Transport): their RaftAddress is their node ID.
func memCluster(t *testing.T, mem *transport.MemNetwork, ids []string, tweak func(*Config)) *cluster {
	t.Helper()
	members := map[uint64]string{}
	for i, id := range ids {
		members[uint64(i+1)] = id
	}
	return newClusterAt(t, members, func(cfg *Config) {
		memTransport(t, mem, cfg)
		if tweak != nil {
			tweak(cfg)
		}
	})
}

func memTransport(t testing.TB, mem *transport.MemNetwork, cfg *Config) {
	t.Helper()
	tr, err := mem.Node(cfg.RaftAddress)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	cfg.Transport = tr
}

// Over a Muster transport, a replica that joins after the log was compacted
// gets the state as a snapshot streamed in chunks (KindRaftChunk), and the
// cluster's messages flow over the network (KindRaftMessages).
func TestMusterTransportSnapshotJoin(t *testing.T) {
	var mem transport.MemNetwork
	small := func(cfg *Config) { cfg.SnapshotEntries, cfg.CompactionOverhead = 20, 5 }
	c := memCluster(t, &mem, []string{"r1", "r2", "r3"}, small)
	for p := range 60 {
		mustPropose(t, c.any(), Command{Op: OpPutInstance, Instance: persistent("svc", "10.0.0.1", p+1)})
	}
	c.converged(c.waitLeader())
	if st := mem.TotalStats(); st.Messages == 0 {
		t.Fatal("no Raft message went over the Muster transport")
	}

	n4 := c.joinAt(4, "r4", func(cfg *Config) {
		small(cfg)
		memTransport(t, &mem, cfg)
		cfg.JoinMembers = map[uint64]string{1: "r1", 2: "r2", 3: "r3"}
	})
	// The running shard's members reach the joiner's guard before any
	// traffic: until it learns the membership, r3 cannot pose as r1.
	n4.guard.pinMu.Lock()
	pinned := maps.Clone(n4.guard.pinned)
	n4.guard.pinMu.Unlock()
	for id, node := range map[uint64]string{1: "r1", 2: "r2", 3: "r3"} {
		if pinned[id] != node {
			t.Fatalf("joiner's guard pins replica %d to %q, want %q (JoinMembers): %v", id, pinned[id], node, pinned)
		}
	}
	st := c.converged(c.waitLeader())
	if len(st.Instances) != 60 {
		t.Fatalf("after the join: %d instances, want 60", len(st.Instances))
	}
	if err := n4.WaitReady(t.Context()); err != nil {
		t.Fatal(err)
	}
	if c.lis[4].resets < 2 { // Open of an empty store, then the snapshot
		t.Fatalf("the joined replica's listener saw %d resets, want a snapshot recovery", c.lis[4].resets)
	}
	// Restarted, the joiner pins the members it was given again (its
	// bootstrap record, made by a join, names none).
	c.stop(4)
	n4 = c.start(4)
	n4.guard.pinMu.Lock()
	pinned = maps.Clone(n4.guard.pinned)
	n4.guard.pinMu.Unlock()
	for id, node := range map[uint64]string{1: "r1", 2: "r2", 3: "r3"} {
		if pinned[id] != node {
			t.Fatalf("restarted joiner's guard pins replica %d to %q, want %q (JoinMembers): %v", id, pinned[id], node, pinned)
		}
	}
	if err := n4.WaitReady(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// With Transport set, RaftAddress and the members are node IDs.
func TestConfigTransportAddresses(t *testing.T) {
	var mem transport.MemNetwork
	tr, err := mem.Node("n1")
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	cfg := testConfig(t, t.TempDir(), 1, "")
	cfg.Transport = tr
	cfg.InitialMembers = map[uint64]string{1: "n1", 2: "n2"}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("node IDs with Transport: %v", err)
	}
	cfg.RaftAddress = "n2"
	if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "RaftAddress") {
		t.Fatalf("RaftAddress other than the transport's ID: %v", err)
	}
	cfg.RaftAddress = ""
	cfg.InitialMembers = map[uint64]string{1: "n1", 2: ""}
	if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "InitialMembers") {
		t.Fatalf("an empty member node ID: %v", err)
	}
}

// tcpTransports starts Muster TCP transports on loopback for the node IDs,
// each resolving the others, with the test secret; they close when the
// test ends, after the nodes using them.
func tcpTransports(tb testing.TB, ids ...string) map[string]transport.Transport {
	tb.Helper()
	net := newTCPNet(tb)
	out := map[string]transport.Transport{}
	for _, id := range ids {
		out[id] = net.add(id, testSecret)
	}
	return out
}

// testSecret is the shared secret of the tests' TCP transports.
var testSecret = []byte("raftstore-test-secret-0123456789")

// tcpNet is a set of Muster TCP transports on loopback that resolve each
// other by node ID.
type tcpNet struct {
	tb    testing.TB
	mu    sync.Mutex
	addrs map[string]string
}

func newTCPNet(tb testing.TB) *tcpNet { return &tcpNet{tb: tb, addrs: map[string]string{}} }

// add starts a transport for node id with secret; it closes when the test
// ends.
func (n *tcpNet) add(id string, secret []byte) transport.Transport {
	n.tb.Helper()
	return n.addWith(id, func(cfg *transport.TCPConfig) { cfg.Secret = secret })
}

// addWith starts a transport for node id with the credentials set makes;
// it closes when the test ends.
func (n *tcpNet) addWith(id string, set func(*transport.TCPConfig)) transport.Transport {
	n.tb.Helper()
	cfg := transport.DefaultTCPConfig()
	cfg.NodeID, cfg.ListenAddr = id, "127.0.0.1:0"
	set(&cfg)
	cfg.Resolve = func(node string) (string, error) {
		n.mu.Lock()
		defer n.mu.Unlock()
		if a, ok := n.addrs[node]; ok {
			return a, nil
		}
		return "", fmt.Errorf("unknown node %q", node)
	}
	t, err := transport.NewTCP(cfg)
	if err != nil {
		n.tb.Fatal(err)
	}
	if err := t.Start(context.Background()); err != nil {
		n.tb.Fatal(err)
	}
	n.tb.Cleanup(func() { _ = t.Close() })
	n.mu.Lock()
	n.addrs[id] = t.Addr()
	n.mu.Unlock()
	return t
}

// addr returns the listening address of node id.
func (n *tcpNet) addr(id string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.addrs[id]
}

// splitBatch keeps every message and entry in order, chains the pieces of a
// split Replicate message, fits every piece in the limit, and refuses an
// entry that cannot fit.
func TestSplitBatch(t *testing.T) {
	entries := make([]pb.Entry, 40)
	for i := range entries {
		entries[i] = pb.Entry{Index: uint64(101 + i), Term: 7, Cmd: make([]byte, 1000)}
	}
	b := pb.MessageBatch{DeploymentId: 9, SourceAddress: "r1", BinVer: 210, Requests: []pb.Message{
		{Type: pb.Heartbeat, To: 2, From: 1, Term: 7, Commit: 100},
		{Type: pb.Replicate, To: 2, From: 1, Term: 7, LogIndex: 100, LogTerm: 6, Commit: 120, Entries: entries},
		{Type: pb.Heartbeat, To: 3, From: 1, Term: 7, Commit: 120},
	}}
	const limit = 8 << 10
	pieces, err := splitBatch(b, limit)
	if err != nil {
		t.Fatal(err)
	}
	if len(pieces) < 5 {
		t.Fatalf("%d pieces for a %d-byte batch with limit %d", len(pieces), b.Size(), limit)
	}
	var msgs []pb.Message
	for _, p := range pieces {
		body, err := p.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if len(body) > limit {
			t.Fatalf("a piece encodes to %d bytes, limit %d", len(body), limit)
		}
		if p.DeploymentId != 9 || p.SourceAddress != "r1" || p.BinVer != 210 {
			t.Fatalf("a piece lost the batch header: %+v", p)
		}
		msgs = append(msgs, p.Requests...)
	}
	if msgs[0].Type != pb.Heartbeat || msgs[0].To != 2 || msgs[len(msgs)-1].Type != pb.Heartbeat || msgs[len(msgs)-1].To != 3 {
		t.Fatal("the messages around the split one moved")
	}
	next, prevTerm := uint64(100), uint64(6)
	for _, m := range msgs[1 : len(msgs)-1] {
		if m.Type != pb.Replicate || m.LogIndex != next || m.LogTerm != prevTerm || m.Commit != 120 {
			t.Fatalf("piece LogIndex %d LogTerm %d Commit %d, want %d %d 120", m.LogIndex, m.LogTerm, m.Commit, next, prevTerm)
		}
		for _, e := range m.Entries {
			if e.Index != next+1 {
				t.Fatalf("entry %d after %d", e.Index, next)
			}
			next, prevTerm = e.Index, e.Term
		}
	}
	if next != 140 {
		t.Fatalf("the pieces end at entry %d, want 140", next)
	}

	big := pb.MessageBatch{Requests: []pb.Message{{Type: pb.Replicate, Entries: []pb.Entry{{Index: 1, Cmd: make([]byte, 2*limit)}}}}}
	if _, err := splitBatch(big, limit); !errors.Is(err, errEntryTooLarge) {
		t.Fatalf("an entry larger than the limit: %v, want errEntryTooLarge", err)
	}
}

// A follower cut off while the log grows by more than the transport's
// message limit catches up after the heal: the catch-up batches are sent
// in pieces.
func TestMusterTransportLargeCatchUp(t *testing.T) {
	var mem transport.MemNetwork // 4 MiB messages
	c := memCluster(t, &mem, []string{"r1", "r2", "r3"}, nil)
	leader := c.waitLeader()
	var lagging uint64 = 1
	if leader == 1 {
		lagging = 2
	}
	mem.Isolate(c.cfgs[lagging].RaftAddress)
	md := map[string]string{"blob": strings.Repeat("x", 900)}
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range 400 {
				in := persistent("big", "10.3.0.1", w*1000+p+1)
				in.Metadata = model.NewMetadata(md)
				mustPropose(t, c.nodes[leader], Command{Op: OpPutInstance, Instance: in})
			}
		}()
	}
	wg.Wait()
	mem.Heal()
	c.eventually(30*time.Second, "the lagging follower catches up", func() bool {
		st := c.lis[lagging].state()
		return len(st.Instances) == 16*400
	})
}

// Close waits for a batch being handed to Dragonboat: Dragonboat tears the
// NodeHost down right after closing its transport.
func TestMuxTransportCloseWaitsForHandlers(t *testing.T) {
	var mem transport.MemNetwork
	a, err := mem.Node("a")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := mem.Node("b")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	entered, release := make(chan struct{}), make(chan struct{})
	var handled atomic.Bool
	recv := muxFactory{t: b, guard: newGuard(testDeployment, 1, 2)}.Create(config.NodeHostConfig{}, func(pb.MessageBatch) {
		close(entered)
		<-release
		handled.Store(true)
	}, func(pb.Chunk) bool { return true }).(*muxTransport)
	if err := recv.Start(); err != nil {
		t.Fatal(err)
	}
	send := muxFactory{t: a, guard: newGuard(testDeployment, 1, 1)}.Create(config.NodeHostConfig{}, nil, nil)
	conn, err := send.GetConnection(context.Background(), "b")
	if err != nil {
		t.Fatal(err)
	}
	hb := pb.MessageBatch{DeploymentId: testDeployment, BinVer: raftio.TransportBinVersion, SourceAddress: "a",
		Requests: []pb.Message{{Type: pb.Heartbeat, ShardID: 1, From: 1, To: 2}}}
	if err := conn.SendMessageBatch(hb); err != nil {
		t.Fatal(err)
	}
	<-entered
	closed := make(chan bool)
	go func() {
		_ = recv.Close()
		closed <- handled.Load()
	}()
	eventually(t, 5*time.Second, "Close begins", func() bool {
		recv.mu.Lock()
		defer recv.mu.Unlock()
		return recv.closed
	})
	close(release)
	if !<-closed {
		t.Fatal("Close returned while a handler was still in Dragonboat")
	}
}

// Raft message batches from a peer reach Dragonboat in the order its
// connection sent them (KindRaftMessages is an ordered kind), over TCP and
// over a MemNetwork, also while the receiver is slow; the snapshot-chunk
// kind stays concurrent.
func TestMuxTransportBatchesInOrder(t *testing.T) {
	var mem transport.MemNetwork
	ma, err := mem.Node("a")
	if err != nil {
		t.Fatal(err)
	}
	defer ma.Close()
	mb, err := mem.Node("b")
	if err != nil {
		t.Fatal(err)
	}
	defer mb.Close()
	tcp := tcpTransports(t, "a", "b")
	for _, tc := range []struct {
		name string
		a, b transport.Transport
	}{{"mem", ma, mb}, {"tcp", tcp["a"], tcp["b"]}} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 2000
			var mu sync.Mutex
			var got []uint64
			var running atomic.Int32
			done := make(chan struct{})
			recv := muxFactory{t: tc.b, guard: newGuard(testDeployment, 1, 2)}.Create(config.NodeHostConfig{}, func(b pb.MessageBatch) {
				if running.Add(1) != 1 {
					t.Error("two batches of one peer handed to Dragonboat at once")
				}
				defer running.Add(-1)
				mu.Lock()
				got = append(got, b.Requests[0].Commit)
				if len(got) == n {
					close(done)
				}
				mu.Unlock()
				if b.Requests[0].Commit%100 == 0 {
					time.Sleep(time.Millisecond) // a slow moment: later batches queue up
				}
			}, func(pb.Chunk) bool { return true })
			if err := recv.Start(); err != nil {
				t.Fatal(err)
			}
			defer recv.Close()
			send := muxFactory{t: tc.a, guard: newGuard(testDeployment, 1, 1)}.Create(config.NodeHostConfig{}, nil, nil)
			conn, err := send.GetConnection(context.Background(), "b")
			if err != nil {
				t.Fatal(err)
			}
			for i := range uint64(n) {
				hb := pb.MessageBatch{DeploymentId: testDeployment, BinVer: raftio.TransportBinVersion, SourceAddress: "a",
					Requests: []pb.Message{{Type: pb.Heartbeat, ShardID: 1, From: 1, To: 2, Commit: i}}}
				if err := conn.SendMessageBatch(hb); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("batches not all delivered")
			}
			mu.Lock()
			defer mu.Unlock()
			for i, c := range got {
				if c != uint64(i) {
					t.Fatalf("batch %d handed over in position %d", c, i)
				}
			}
		})
	}
}
