// Package raftcp keeps a registry's persistent data in a Raft group: it
// implements registry.Store with a raftstore.Node (Dragonboat, with its
// state in Badger on disk).
//
// It is the only piece of a registry that links Dragonboat and Badger;
// a registry without Config.Store keeps persistent data in memory and
// links neither.
//
// # Use
//
//	rc := raftstore.DefaultConfig()
//	rc.ReplicaID, rc.DeploymentID, rc.Dir = 1, 4711, "/var/lib/muster"
//	rc.Transport, rc.InitialMembers = tr, map[uint64]string{1: "n1", 2: "n2", 3: "n3"}
//	cp := raftcp.New(rc)
//	cfg := registry.DefaultConfig()
//	cfg.Store = cp.Open
//	reg, err := registry.New(cfg) // builds the raftstore node
//	node := cp.Node()             // AddReplica, Leader, Info…
//
// The registry owns the node's Listener (its change feed) and Limits
// (its own): they must be left unset. A nil Logger or Clock means the
// registry's. The registry starts and closes the node.
package raftcp

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/muster-io/muster/internal/cfgerr"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/raftstore"
	"github.com/muster-io/muster/registry"
)

// Store is a registry.Store over a raftstore node. Its methods are safe for
// concurrent use.
type Store struct {
	cfg raftstore.Config

	mu   sync.Mutex
	node *raftstore.Node // set by Open
}

var _ registry.Store = (*Store)(nil)

// New returns a Store that Open builds from cfg. It starts nothing.
func New(cfg raftstore.Config) *Store { return &Store{cfg: cfg} }

// Open builds the raftstore node over the registry's change feed: it is a
// registry.StoreFunc, for registry.Config.Store. A Store opens once.
func (s *Store) Open(env registry.Env, feed registry.StoreFeed) (registry.Store, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.node != nil {
		return nil, errors.New("raftcp: the store is open already: one Store per registry")
	}
	rc := s.cfg
	var errs []error
	if rc.Listener != nil {
		errs = append(errs, errors.New("Raft: Listener must be nil: the registry's change feed is used"))
	}
	if rc.Limits != (model.Limits{}) {
		errs = append(errs, errors.New("Raft: Limits must be unset: the registry's limits are used"))
	}
	if err := cfgerr.Join(registry.ErrInvalidConfig, errs...); err != nil {
		return nil, err
	}
	rc.Listener, rc.Limits = &listener{feed: feed}, env.Limits
	if rc.Logger == nil {
		rc.Logger = env.Logger
	}
	if rc.Clock == nil {
		rc.Clock = env.Clock
	}
	node, err := raftstore.New(rc)
	if err != nil {
		return nil, err
	}
	s.node = node
	return s, nil
}

// Node returns the Raft replica, nil before Open. Use it for cluster
// operations (AddReplica, RemoveReplica, Info, Leader); writing through it
// bypasses the registry's checks of ephemeral data, though every node's
// index still follows what it applies.
func (s *Store) Node() *raftstore.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.node
}

// Start starts the node.
func (s *Store) Start(ctx context.Context) error { return mapErr(s.Node().Start(ctx)) }

// WaitReady waits until the node has applied what was committed when it
// started.
func (s *Store) WaitReady(ctx context.Context) error { return mapErr(s.Node().WaitReady(ctx)) }

// Barrier waits until the node has applied every write committed before
// the call.
func (s *Store) Barrier(ctx context.Context) error { return mapErr(s.Node().Barrier(ctx)) }

// IsLeader reports whether the node leads the group.
func (s *Store) IsLeader() bool { return s.Node().IsLeader() }

// Propose commits cmd. A rejection is raftstore's, which matches model's
// rule errors, and so the registry's.
func (s *Store) Propose(ctx context.Context, cmd model.Command) (rejected, err error) {
	res, err := s.Node().Propose(ctx, cmd)
	if err != nil {
		return nil, mapErr(err)
	}
	return res.Rejected, nil
}

// Close closes the node.
func (s *Store) Close() error { return s.Node().Close() }

// mapErr makes the node's errors match the registry's as well.
func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raftstore.ErrClosed):
		return fmt.Errorf("%w: %w", registry.ErrClosed, err)
	case errors.Is(err, raftstore.ErrNoLeader):
		return fmt.Errorf("%w: %w", registry.ErrNoLeader, err)
	}
	return err
}

// listener passes the state machine's change feed on to the registry.
// Its calls come one at a time (raftstore.Listener), so it reuses one
// buffer for the commands it hands on, which the feed gets for the call
// only (registry.StoreFeed).
type listener struct {
	feed registry.StoreFeed
	cmds []model.Command
}

func (l *listener) Applied(changes []raftstore.Change) {
	cmds := l.cmds[:0]
	for i := range changes {
		if changes[i].Rejected == nil {
			cmds = append(cmds, changes[i].Cmd)
		}
	}
	l.feed.Applied(cmds)
	clear(cmds) // nothing of the call stays reachable from the buffer
	l.cmds = nil
	if cap(cmds) <= maxKeptCmds {
		l.cmds = cmds[:0]
	}
}

// maxKeptCmds caps the buffer the listener keeps between calls (a long
// call, a replica catching up, may pass many more).
const maxKeptCmds = 1024

func (l *listener) Reset(st raftstore.State) {
	l.feed.Reset(registry.StoreState{Services: st.Services, Instances: st.Instances, Patches: st.Patches, Index: st.Index})
}
