package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/muster-io/muster/distro"
	"github.com/muster-io/muster/distro/gossip"
	"github.com/muster-io/muster/distro/membership"
	"github.com/muster-io/muster/health/mysqlcheck"
	"github.com/muster-io/muster/internal/logx"
	"github.com/muster-io/muster/raftstore"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/raftcp"
	"github.com/muster-io/muster/transport"
)

// Node is one running member of a cluster: Muster's TCP transport, the
// membership (memberlist, or a static list), and a registry with Distro,
// a Raft replica when configured, and the health checks.
//
// Its methods are safe for concurrent use.
type Node struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	state   int // stateNew, stateStarted, stateClosed
	members distro.Membership
	tcp     *transport.TCP
	ml      *gossip.Memberlist // nil with Peers
	proven  *membership.Proven // the members that proved their ID over the transport; nil with Peers
	reg     *registry.Registry
	repl    *distro.Replicator  // the registry's
	raft    *raftcp.Store       // nil without Raft
	mysql   *mysqlcheck.Checker // the health checks' MySQL checker, when the node made it
	closeMu sync.Mutex
}

const (
	stateNew = iota
	stateStarting
	stateStarted
	stateClosed
)

// New validates cfg and returns a node that has not started.
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Seeds = append([]string(nil), cfg.Seeds...)
	peers := make(map[string]string, len(cfg.Peers))
	for k, v := range cfg.Peers {
		peers[k] = v
	}
	cfg.Peers = peers
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Node{cfg: cfg, log: logx.WithNode(log, cfg.NodeID)}, nil
}

// Start is New followed by Node.Start: it returns a started node, which is
// ready once it has loaded its peers' data (WaitReady).
func Start(ctx context.Context, cfg Config) (*Node, error) {
	n, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if err := n.Start(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

// Start starts the transport, joins the membership and starts the
// registry. It does not wait for the node to be ready. A failed Start
// closes what it started; the node is then closed.
func (n *Node) Start(ctx context.Context) (err error) {
	n.mu.Lock()
	switch n.state {
	case stateClosed:
		n.mu.Unlock()
		return ErrClosed
	case stateNew:
	default:
		n.mu.Unlock()
		return ErrStarted
	}
	n.state = stateStarting
	n.mu.Unlock()
	defer func() {
		if err == nil {
			return
		}
		n.mu.Lock()
		closed := n.state == stateClosed
		n.mu.Unlock()
		if closed && !errors.Is(err, ErrClosed) {
			err = fmt.Errorf("%w (during Start: %w)", ErrClosed, err)
		}
		n.stop(true)
	}()

	cfg := &n.cfg
	if cfg.raft() {
		if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
			return fmt.Errorf("node: data directory: %w", err)
		}
	}

	// The transport resolves node IDs through the membership, which is
	// created after it (it carries the transport's bound address): Resolve
	// reads it under n.mu and knows nobody until then.
	tc := cfg.tcpConfig()
	tc.Logger = n.log
	tc.Resolve = n.resolve
	tcp, err := transport.NewTCP(tc)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if err := tcp.Start(ctx); err != nil {
		return fmt.Errorf("node: transport: %w", err)
	}
	if err := n.keep(func() { n.tcp = tcp }); err != nil {
		_ = tcp.Close()
		return err
	}
	var tr transport.Transport = tcp
	if cfg.WrapTransport != nil {
		tr = cfg.WrapTransport(tcp)
	}

	var members distro.Membership
	var ml *gossip.Memberlist
	var proven *membership.Proven
	if len(cfg.Peers) > 0 {
		st := distro.NewStatic(distro.Member{ID: cfg.NodeID, Addr: tcp.AdvertiseAddr()})
		st.Set(cfg.staticMembers()...)
		members = st
	} else {
		mc := cfg.memberlistConfig(tcp.AdvertiseAddr())
		mc.Logger = n.log
		if ml, err = gossip.New(mc); err != nil {
			return fmt.Errorf("node: %w", err)
		}
		members = ml
	}
	if err := n.keep(func() { n.ml = ml; n.members = members }); err != nil {
		return err
	}
	if ml != nil {
		if err := ml.Start(ctx); err != nil {
			return fmt.Errorf("node: membership: %w", err)
		}
		// Gossip is a hint: a node counts (HRW ownership, forwarding,
		// lease handovers) only once the transport reached it,
		// authenticated, under the ID gossip gives it. A holder of the
		// gossip key without the transport's credentials owns nothing.
		proven = membership.NewProven(ml, membership.ProvenConfig{
			Self:   cfg.NodeID,
			Prove:  func(ctx context.Context, m membership.Member) error { return tcp.Verify(ctx, m.ID) },
			Logger: n.log,
		})
		members = proven
		if err := n.keep(func() { n.proven, n.members = proven, proven }); err != nil {
			_ = proven.Close()
			return err
		}
	}

	var repl *distro.Replicator
	rcfg, cp, mc, err := cfg.registryConfig(tr, members, n.log, func(d *distro.Replicator) { repl = d })
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if err := n.keep(func() { n.mysql = mc }); err != nil {
		return err
	}
	reg, err := registry.New(rcfg)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if err := n.keep(func() { n.reg, n.repl, n.raft = reg, repl, cp }); err != nil {
		_ = reg.Close()
		return err
	}
	if err := reg.Start(ctx); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.state == stateClosed {
		return ErrClosed
	}
	n.state = stateStarted
	return nil
}

// keep records a component Start made, under n.mu, unless Close has begun:
// then the caller undoes it (a Close that ran meanwhile did not see it).
func (n *Node) keep(set func()) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.state == stateClosed {
		return ErrClosed
	}
	set()
	return nil
}

// resolve maps a node ID to its transport address through the membership.
func (n *Node) resolve(id string) (string, error) {
	n.mu.Lock()
	var m distro.Membership = n.members
	if n.ml != nil {
		m = n.ml // the gossip address of a member not proven yet: to prove it
	}
	n.mu.Unlock()
	switch m := m.(type) {
	case *gossip.Memberlist:
		return m.Addr(id)
	case nil:
		return "", fmt.Errorf("%w: %q (membership not started)", distro.ErrUnknownMember, id)
	default:
		for _, mb := range m.Members() {
			if mb.ID == id && mb.Addr != "" {
				return mb.Addr, nil
			}
		}
		return "", fmt.Errorf("%w: %q", distro.ErrUnknownMember, id)
	}
}

// ID returns the node's ID.
func (n *Node) ID() string { return n.cfg.NodeID }

// Registry returns the node's registry; nil before Start.
func (n *Node) Registry() *registry.Registry {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.reg
}

// Ready reports whether the node serves queries: it has loaded its peers'
// data and, with Raft, applied what was committed when it started.
func (n *Node) Ready() bool {
	reg := n.Registry()
	return reg != nil && reg.Ready()
}

// WaitReady blocks until the node is ready, ctx ends, or the node closes.
func (n *Node) WaitReady(ctx context.Context) error {
	reg := n.Registry()
	if reg == nil {
		return ErrNotStarted
	}
	return reg.WaitReady(ctx)
}

// Replicator returns the node's Distro replicator; nil before Start.
func (n *Node) Replicator() *distro.Replicator {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.repl
}

// Raft returns the node's Raft replica, for cluster operations
// (AddReplica, RemoveReplica, Info, Leader); nil before Start and without
// Raft.
func (n *Node) Raft() *raftstore.Node {
	n.mu.Lock()
	cp := n.raft
	n.mu.Unlock()
	if cp == nil {
		return nil
	}
	return cp.Node()
}

// Transport returns the node's TCP transport (not wrapped); nil before
// Start.
func (n *Node) Transport() *transport.TCP {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.tcp
}

// TransportAddr returns the address peers dial for this node's transport
// (the bound one, port 0 resolved, or AdvertiseAddr); empty before Start.
func (n *Node) TransportAddr() string {
	if t := n.Transport(); t != nil {
		return t.AdvertiseAddr()
	}
	return ""
}

// Membership returns the node's membership: with gossip, a
// *membership.Proven over the memberlist (the members that proved their
// ID over the transport: the ones the registry counts), or a
// *distro.Static with Peers; nil before Start.
func (n *Node) Membership() distro.Membership {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.members
}

// Gossip returns the node's memberlist (every node gossip reports, proven
// or not); nil before Start and with Peers.
func (n *Node) Gossip() *gossip.Memberlist {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ml
}

// GossipAddr returns the bound gossip address (host:port, port 0
// resolved), for other nodes' Seeds; empty before Start and with Peers.
func (n *Node) GossipAddr() string {
	n.mu.Lock()
	ml := n.ml
	n.mu.Unlock()
	if ml == nil {
		return ""
	}
	return ml.BindAddr()
}

// Close stops the node gracefully: the registry hands its sessions over
// while the network is up and closes (Raft, checks, Distro), then the node
// leaves the membership, then the transport closes. It waits for every
// goroutine and is idempotent.
func (n *Node) Close() error { return n.stop(true) }

// Kill stops the node as a crashed process would: its network goes first,
// so it hands nothing over and tells nobody; the peers find out by probing.
// For tests and demos of failures; otherwise like Close.
func (n *Node) Kill() error { return n.stop(false) }

func (n *Node) stop(graceful bool) error {
	n.closeMu.Lock()
	defer n.closeMu.Unlock()
	n.mu.Lock()
	n.state = stateClosed
	tcp, ml, reg, mc, proven := n.tcp, n.ml, n.reg, n.mysql, n.proven
	n.mu.Unlock()
	var errs []error
	keep := func(what string, err error) {
		if err != nil && !errors.Is(err, registry.ErrClosed) && !errors.Is(err, distro.ErrClosed) && !errors.Is(err, transport.ErrClosed) {
			errs = append(errs, fmt.Errorf("node: %s: %w", what, err))
		}
	}
	if !graceful {
		if tcp != nil {
			keep("transport", tcp.Close())
		}
		if ml != nil {
			keep("membership", ml.Kill())
		}
	}
	if reg != nil {
		keep("registry", reg.Close())
	}
	if mc != nil {
		keep("MySQL checker", mc.Close())
	}
	if proven != nil {
		keep("membership", proven.Close())
	}
	if ml != nil {
		keep("membership", ml.Close())
	}
	if tcp != nil {
		keep("transport", tcp.Close())
	}
	return errors.Join(errs...)
}
