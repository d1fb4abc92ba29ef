package registry

import (
	"context"
	"fmt"

	"github.com/muster-io/muster/model"
)

// store keeps the CP data: service definitions, persistent instances,
// instance patches and the health of persistent instances. Apply takes a
// normalized command (model.Command) and who asks for it (model.Origin);
// it returns once cmd has taken effect in this registry's index (through
// applyLocked or the Store's feed), or with the error that refused it. The
// command is passed by value: through an interface a pointer would make
// every caller's command a heap allocation.
//
// The standalone store applies commands in memory at once; nothing survives
// Close. A replicated store (Raft) proposes them and feeds the applied ones
// to every node's index.
//
// Start, WaitReady, Barrier, Leader and Close are the exported Store's
// (see cpstore.go); the standalone store has nothing to start, wait for or
// close, and leads alone.
type store interface {
	Apply(ctx context.Context, cmd model.Command, o model.Origin) error
	Leader() bool
	Start(ctx context.Context) error
	WaitReady(ctx context.Context) error
	Barrier(ctx context.Context) error
	Close() error
}

// memStore is the standalone store.
type memStore struct{ r *Registry }

func (m *memStore) Apply(ctx context.Context, cmd model.Command, o model.Origin) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r := m.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkWrite(); err != nil {
		return err
	}
	return r.applyLocked(&cmd, o)
}

func (m *memStore) Start(context.Context) error       { return nil }
func (m *memStore) WaitReady(context.Context) error   { return nil }
func (m *memStore) Barrier(ctx context.Context) error { return ctx.Err() }
func (m *memStore) Leader() bool                      { return true }
func (m *memStore) Close() error                      { return nil }

// applyLocked admits cmd and applies it to the index. The caller holds mu,
// so that concurrent writers cannot both pass a check made earlier.
func (r *Registry) applyLocked(cmd *model.Command, o model.Origin) error {
	if err := r.admitLocked(cmd, o); err != nil {
		if err == model.ErrNoop {
			return nil
		}
		return err
	}
	r.core.apply(cmd, o, r.leaseStart())
	r.carryOut()
	return nil
}

// admitLocked admits cmd from o (index.admit). The caller holds mu (read
// or write).
func (r *Registry) admitLocked(cmd *model.Command, o model.Origin) error {
	return r.core.admit(cmd, o)
}

func kindMismatch(s *service) error {
	kind := "persistent"
	if s.ephemeral {
		kind = "ephemeral"
	}
	return fmt.Errorf("%w: %s is %s", ErrKindMismatch, s.key, kind)
}
