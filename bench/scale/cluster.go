package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/muster-io/muster/distro"
	"github.com/muster-io/muster/transport"
)

// The distro message kinds (distro/wire.go), for the per-kind byte counts.
const (
	kindSync     = 1
	kindVerify   = 2
	kindRepair   = 3
	kindSnapshot = 4
	numKinds     = 64
)

// kindStats counts what one node sent and was answered, per message kind.
type kindStats struct {
	msgs  [numKinds]atomic.Uint64 // requests and one-way messages sent
	bytes [numKinds]atomic.Uint64 // their bodies plus the bodies of the answers
}

// kindSnap is a copy of kindStats.
type kindSnap struct {
	msgs, bytes [numKinds]uint64
}

func (k *kindStats) snap() kindSnap {
	var s kindSnap
	for i := range numKinds {
		s.msgs[i], s.bytes[i] = k.msgs[i].Load(), k.bytes[i].Load()
	}
	return s
}

func (s kindSnap) sub(o kindSnap) kindSnap {
	for i := range numKinds {
		s.msgs[i] -= o.msgs[i]
		s.bytes[i] -= o.bytes[i]
	}
	return s
}

func (s kindSnap) add(o kindSnap) kindSnap {
	for i := range numKinds {
		s.msgs[i] += o.msgs[i]
		s.bytes[i] += o.bytes[i]
	}
	return s
}

// countingTransport wraps a transport and counts, per kind, the bytes of the requests this node
// sends and of the answers it gets (the body bytes both ways of each exchange it starts).
type countingTransport struct {
	transport.Transport
	st *kindStats
}

func (c *countingTransport) Request(ctx context.Context, to string, kind transport.Kind, body []byte) ([]byte, error) {
	resp, err := c.Transport.Request(ctx, to, kind, body)
	if int(kind) < numKinds {
		c.st.msgs[kind].Add(1)
		c.st.bytes[kind].Add(uint64(len(body) + len(resp)))
	}
	return resp, err
}

func (c *countingTransport) Send(ctx context.Context, to string, kind transport.Kind, body []byte) error {
	if int(kind) < numKinds {
		c.st.msgs[kind].Add(1)
		c.st.bytes[kind].Add(uint64(len(body)))
	}
	return c.Transport.Send(ctx, to, kind, body)
}

func (c *countingTransport) MaxMessageSize() int {
	if l, ok := c.Transport.(transport.SizeLimiter); ok {
		return l.MaxMessageSize()
	}
	return transport.DefaultMaxMessageSize
}

// countStore is a Store that keeps nothing: it counts what distro hands it. The records
// themselves are held by distro's table (the measured memory is distro's, not a registry's).
type countStore struct {
	applied atomic.Uint64
	adopted atomic.Uint64
}

func (s *countStore) Apply(distro.Record)             { s.applied.Add(1) }
func (s *countStore) ApplyBatch(recs []distro.Record) { s.applied.Add(uint64(len(recs))) }
func (s *countStore) Adopt(distro.Record, time.Time)  { s.adopted.Add(1) }
func (s *countStore) MembersChanged(members []string) {}

var _ distro.Store = (*countStore)(nil)

type node struct {
	id    string
	st    kindStats
	tr    *countingTransport
	mem   *distro.Static
	rep   *distro.Replicator
	store countStore
}

// cluster is distro replicators on one MemNetwork and one fake clock, with Static membership.
type cluster struct {
	clk   *clockwork.FakeClock
	net   *transport.MemNetwork
	nodes []*node
	mod   func(*distro.Config)
}

func newCluster(mod func(*distro.Config)) *cluster {
	clk := clockwork.NewFakeClockAt(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	return &cluster{clk: clk, net: &transport.MemNetwork{Clock: clk, Seed: 1}, mod: mod}
}

func nodeID(i int) string { return fmt.Sprintf("n%d", i+1) }

// addNode makes a node that lists every node made so far (and itself); it is not started and
// the others do not list it yet.
func (c *cluster) addNode(coldStart int) (*node, error) {
	id := nodeID(len(c.nodes))
	mt, err := c.net.Node(id)
	if err != nil {
		return nil, err
	}
	n := &node{id: id}
	n.tr = &countingTransport{Transport: mt, st: &n.st}
	n.mem = distro.NewStatic(distro.Member{ID: id})
	for _, o := range c.nodes {
		n.mem.Add(distro.Member{ID: o.id})
	}
	cfg := distro.DefaultConfig()
	cfg.NodeID, cfg.Transport, cfg.Membership, cfg.Store = id, n.tr, n.mem, &n.store
	cfg.Clock = c.clk
	cfg.ColdStartMembers = coldStart
	if c.mod != nil {
		c.mod(&cfg)
	}
	n.rep, err = distro.New(cfg)
	if err != nil {
		return nil, err
	}
	c.nodes = append(c.nodes, n)
	return n, nil
}

// settle waits until nothing is running or in flight and no replicator has anything due at the
// clock's time (registrytest.Cluster.Settle, for replicators alone).
func (c *cluster) settle() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // real time: a guard
	defer cancel()
	if err := c.net.WaitIdle(ctx); err != nil {
		return err
	}
	last := c.net.TotalStats().Messages
	for {
		did := false
		for _, n := range c.nodes {
			d, err := n.rep.Settle(ctx)
			if err != nil {
				return fmt.Errorf("%s: %w", n.id, err)
			}
			did = did || d
		}
		if err := c.net.WaitIdle(ctx); err != nil {
			return err
		}
		now := c.net.TotalStats().Messages
		if !did && now == last {
			return nil
		}
		last = now
	}
}

// advance moves the clock by d in steps of at most step, settling after each.
func (c *cluster) advance(d, step time.Duration) error {
	for d > 0 {
		s := min(d, step)
		c.clk.Advance(s)
		d -= s
		if err := c.settle(); err != nil {
			return err
		}
	}
	return nil
}

func (c *cluster) stats() kindSnap {
	var s kindSnap
	for _, n := range c.nodes {
		s = s.add(n.st.snap())
	}
	return s
}

func (c *cluster) verifyRounds() uint64 {
	var v uint64
	for _, n := range c.nodes {
		v += n.rep.Stats().VerifyRounds
	}
	return v
}

func (c *cluster) close() {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = n.rep.Close()
			_ = n.tr.Close()
		}()
	}
	wg.Wait()
}
