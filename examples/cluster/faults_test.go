package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/muster-io/muster/transport"
)

// faults cuts the links between nodes of a real cluster. It wraps each
// node's Muster transport and memberlist's network transport; a cut link
// loses every message and gossip packet sent over it, and refuses new
// gossip streams. Raft goes over Muster's transport
// (raftstore.Config.Transport), so a cut link cuts Raft too.
type faults struct {
	mu     sync.Mutex
	cut    map[[2]string]bool // from, to node ID
	byAddr map[string]string  // gossip address → node ID

	dropped atomic.Int64 // messages and packets lost to cuts
}

func newFaults(c *cluster) *faults {
	f := &faults{cut: map[[2]string]bool{}, byAddr: map[string]string{}}
	c.wrapTCP = f.wrapTCP
	c.wrapGossip = f.wrapGossip
	return f
}

// isolate cuts every link between id and the other nodes, both ways.
func (f *faults) isolate(id string, others ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, o := range others {
		if o != id {
			f.cut[[2]string{id, o}] = true
			f.cut[[2]string{o, id}] = true
		}
	}
}

// heal restores every link.
func (f *faults) heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.cut)
}

// lost reports whether a message from → to is lost, and counts it.
func (f *faults) lost(from, to string) bool {
	f.mu.Lock()
	cut := f.cut[[2]string{from, to}]
	f.mu.Unlock()
	if cut {
		f.dropped.Add(1)
	}
	return cut
}

func (f *faults) nodeAt(addr string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byAddr[addr]
}

var errCut = errors.New("link cut by the test")

func (f *faults) wrapTCP(id string, t transport.Transport) transport.Transport {
	return &faultyTransport{Transport: t, self: id, f: f}
}

// faultyTransport loses requests and one-way messages over cut links, in
// both directions: outgoing ones before they leave, incoming ones before
// their handler runs (those already in flight when the cut happens).
type faultyTransport struct {
	transport.Transport
	self string
	f    *faults
}

func (t *faultyTransport) Request(ctx context.Context, to string, kind transport.Kind, body []byte) ([]byte, error) {
	if t.f.lost(t.self, to) {
		return nil, fmt.Errorf("%w: %w", transport.ErrUnreachable, errCut)
	}
	return t.Transport.Request(ctx, to, kind, body)
}

func (t *faultyTransport) Send(ctx context.Context, to string, kind transport.Kind, body []byte) error {
	if t.f.lost(t.self, to) {
		return nil // accepted, never delivered: Send is best effort
	}
	return t.Transport.Send(ctx, to, kind, body)
}

func (t *faultyTransport) Handle(kind transport.Kind, h transport.Handler) {
	t.Transport.Handle(kind, t.cutting(h))
}

// HandleOrdered keeps the order of the kinds that ask for it (Raft's
// messages) when the wrapped transport offers one.
func (t *faultyTransport) HandleOrdered(kind transport.Kind, h transport.Handler) {
	if o, ok := t.Transport.(transport.OrderedHandler); ok {
		o.HandleOrdered(kind, t.cutting(h))
		return
	}
	t.Handle(kind, h)
}

// cutting wraps h to lose what arrives over a cut link (nil stays nil: a
// removal).
func (t *faultyTransport) cutting(h transport.Handler) transport.Handler {
	if h == nil {
		return nil
	}
	return func(ctx context.Context, from string, body []byte) ([]byte, error) {
		if t.f.lost(from, t.self) {
			return nil, errCut
		}
		return h(ctx, from, body)
	}
}

func (f *faults) wrapGossip(id string, t memberlist.Transport) memberlist.Transport {
	// The node binds its gossip port before wrapping it: learn the
	// address here.
	if nt, ok := t.(interface{ GetAutoBindPort() int }); ok {
		f.mu.Lock()
		f.byAddr[net.JoinHostPort("127.0.0.1", strconv.Itoa(nt.GetAutoBindPort()))] = id
		f.mu.Unlock()
	}
	return &faultyGossip{Transport: t, self: id, f: f}
}

// faultyGossip loses gossip packets and refuses stream connections over cut
// links. Both ends are wrapped, so cutting outgoing traffic cuts the link.
type faultyGossip struct {
	memberlist.Transport
	self string
	f    *faults
}

func (g *faultyGossip) WriteTo(b []byte, addr string) (time.Time, error) {
	if g.f.lost(g.self, g.f.nodeAt(addr)) {
		return time.Now(), nil
	}
	return g.Transport.WriteTo(b, addr)
}

func (g *faultyGossip) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if g.f.lost(g.self, g.f.nodeAt(addr)) {
		return nil, fmt.Errorf("dial %s: %w", addr, errCut)
	}
	return g.Transport.DialTimeout(addr, timeout)
}
