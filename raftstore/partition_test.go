package raftstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lni/dragonboat/v4/config"
	chantrans "github.com/lni/dragonboat/v4/plugin/chan"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
	"github.com/muster-io/muster/transport"
)

// partNet wraps Dragonboat's in-process channel transport and drops the
// messages between blocked pairs of addresses.
type partNet struct {
	mu      sync.Mutex
	blocked map[[2]string]bool
}

func (p *partNet) isolate(addr string, others ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, o := range others {
		p.blocked[[2]string{addr, o}] = true
		p.blocked[[2]string{o, addr}] = true
	}
}

func (p *partNet) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.blocked)
}

func (p *partNet) cut(from, to string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.blocked[[2]string{from, to}]
}

type partFactory struct{ net *partNet }

func (f partFactory) Create(c config.NodeHostConfig, h raftio.MessageHandler, ch raftio.ChunkHandler) raftio.ITransport {
	return &partTransport{ITransport: chantrans.NewChanTransport(c, h, ch), self: c.RaftAddress, net: f.net}
}

func (f partFactory) Validate(addr string) bool { return addr != "" }

type partTransport struct {
	raftio.ITransport
	self string
	net  *partNet
}

func (t *partTransport) GetConnection(ctx context.Context, target string) (raftio.IConnection, error) {
	c, err := t.ITransport.GetConnection(ctx, target)
	if err != nil {
		return nil, err
	}
	return &partConn{IConnection: c, from: t.self, to: target, net: t.net}, nil
}

type partConn struct {
	raftio.IConnection
	from, to string
	net      *partNet
}

func (c *partConn) SendMessageBatch(b pb.MessageBatch) error {
	if c.net.cut(c.from, c.to) {
		return nil // lost on the way
	}
	return c.IConnection.SendMessageBatch(b)
}

var chanAddrSeq atomic.Int64

// An isolated leader loses its leadership (CheckQuorum); writes and
// linearizable reads on it fail with ErrNoLeader within the bounded wait
// while local reads answer; the majority elects a new leader and goes on;
// after healing, the old leader catches up.
func TestPartitionedLeader(t *testing.T) {
	t.Run("dragonboat-chan", func(t *testing.T) {
		net := &partNet{blocked: map[[2]string]bool{}}
		members := map[uint64]string{}
		for id := uint64(1); id <= 3; id++ {
			members[id] = fmt.Sprintf("chan-%d:1", chanAddrSeq.Add(1))
		}
		testPartitionedLeader(t, members, func(cfg *Config) { cfg.transport = partFactory{net} }, net.isolate, net.heal)
	})
	// The same over a Muster transport (Config.Transport): Raft traffic
	// goes through a MemNetwork, and its Isolate cuts it.
	t.Run("muster-transport", func(t *testing.T) {
		var mem transport.MemNetwork
		members := map[uint64]string{1: "r1", 2: "r2", 3: "r3"}
		testPartitionedLeader(t, members, func(cfg *Config) {
			tr, err := mem.Node(cfg.RaftAddress)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tr.Close() })
			cfg.Transport = tr
		}, func(addr string, _ ...string) { mem.Isolate(addr) }, mem.Heal)
	})
}

func testPartitionedLeader(t *testing.T, members map[uint64]string, tweak func(*Config), isolate func(addr string, others ...string), heal func()) {
	c := newClusterAt(t, members, func(cfg *Config) {
		tweak(cfg)
		cfg.ProposeTimeout = 500 * time.Millisecond
		cfg.ReadTimeout = 500 * time.Millisecond
	})
	ctx := context.Background()
	inst := persistent("part", "10.0.0.10", 80)
	settle(t, c.any(), Command{Op: OpPutInstance, Instance: inst})
	c.converged(1)

	old := c.waitLeader()
	var others []string
	var majority []*Node
	for id, addr := range members {
		if id != old {
			others = append(others, addr)
			majority = append(majority, c.nodes[id])
		}
	}
	isolate(members[old], others...)

	// The majority elects a new leader and accepts writes.
	eventually(t, 10*time.Second, "a new leader in the majority", func() bool {
		id, ok := majority[0].Leader()
		id2, ok2 := majority[1].Leader()
		return ok && ok2 && id == id2 && id != old
	})
	inst2 := persistent("part", "10.0.0.10", 81)
	settle(t, majority[0], Command{Op: OpPutInstance, Instance: inst2})

	// The isolated old leader: ErrNoLeader for writes and linearizable
	// reads, local reads still answer.
	n := c.nodes[old]
	start := time.Now()
	if _, err := n.Propose(ctx, Command{Op: OpDeleteInstance, Key: inst.Key()}); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("write on the isolated leader: %v", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("bounded wait took %v", el)
	}
	if _, _, err := n.GetInstance(ctx, inst2.Key(), ReadOptions{Linearizable: true}); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("linearizable read on the isolated leader: %v", err)
	}
	if _, ok, err := n.GetInstance(ctx, inst.Key(), ReadOptions{}); err != nil || !ok {
		t.Fatalf("local read on the isolated leader: %v %v", ok, err)
	}
	eventually(t, 10*time.Second, "the isolated leader to step down", func() bool {
		id, ok := n.Leader()
		return !ok || id != old
	})

	// Heal: it catches up with the majority's write.
	heal()
	eventually(t, 10*time.Second, "the old leader to catch up", func() bool {
		_, ok, err := n.GetInstance(ctx, inst2.Key(), ReadOptions{Linearizable: true})
		return err == nil && ok
	})
	c.converged(c.waitLeader())
}
