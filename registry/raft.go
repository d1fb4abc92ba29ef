package registry

import (
	"context"
	"errors"
	"fmt"

	"github.com/muster-io/muster/model"
)

// CP data in a replicated Store (Raft: package registry/raftcp). With
// Config.Store set, every write of persistent data is proposed to the
// Store; its rules decide it on every replica alike, and its change feed
// (storeFeed) mirrors each applied command into this node's index, so
// queries and watches on every node see it. Propose returns once the
// command has been applied here, so a write is visible in this node's
// queries when the call returns.

// errNotLeader: a clean-up that only the Raft leader proposes was asked of
// another node; it counts down again.
var errNotLeader = errors.New("registry: not the raft leader")

// raftStore is the replicated store: the registry's side of a Store.
type raftStore struct {
	r  *Registry
	cp Store
}

func (s *raftStore) Apply(ctx context.Context, cmd model.Command, o model.Origin) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	rc, err := s.prepare(&cmd, o)
	if refusedByIndex(err) || err == model.ErrNoop && cmd.Op == model.OpRemovePatch && !o.Expiry {
		// This node's index may lag the log (a delete committed through
		// another node a moment ago): check again once it has applied
		// everything committed so far. Only refusals pay for the barrier.
		if berr := s.cp.Barrier(ctx); berr == nil {
			rc, err = s.prepare(&cmd, o)
		}
	}
	if err != nil {
		if err == model.ErrNoop {
			return nil
		}
		return err
	}
	rejected, err := s.cp.Propose(ctx, rc)
	if err != nil {
		if errors.Is(err, ErrClosed) {
			return ErrClosed
		}
		return fmt.Errorf("registry: %w", err)
	}
	return rejected
}

// prepare admits cmd against this node's index (the rules that involve
// ephemeral data can only be checked here) and returns what to propose:
// cmd as the caller gave it, with Upsert set on an UpdateService.
func (s *raftStore) prepare(cmd *model.Command, o model.Origin) (model.Command, error) {
	r := s.r
	r.mu.RLock()
	defer r.mu.RUnlock()
	if err := r.checkWrite(); err != nil {
		return model.Command{}, err
	}
	if err := r.admitLocked(cmd, o); err != nil {
		return model.Command{}, err
	}
	rc := *cmd
	switch cmd.Op {
	case model.OpUpdateService:
		// A service that exists here only through its ephemeral instances
		// has no record in the state machine: the update creates it.
		rc.Upsert = true
	case model.OpDeleteService:
		if svc := r.core.service(&cmd.SvcKey); svc != nil && svc.def == nil && svc.ephemeral {
			// Nothing stored: the implicit service goes when it is empty.
			return rc, model.ErrNoop
		}
	case model.OpRemovePatch:
		if o.Expiry && !s.Leader() {
			return rc, errNotLeader // every node counts down; the leader proposes
		}
	}
	return rc, nil
}

func (s *raftStore) Leader() bool { return s.cp.IsLeader() }

func (s *raftStore) Start(ctx context.Context) error     { return s.cp.Start(ctx) }
func (s *raftStore) WaitReady(ctx context.Context) error { return s.cp.WaitReady(ctx) }
func (s *raftStore) Barrier(ctx context.Context) error   { return s.cp.Barrier(ctx) }
func (s *raftStore) Close() error                        { return s.cp.Close() }

// refusedByIndex reports whether err is a state rule's refusal, which a
// lagging index may have caused.
func refusedByIndex(err error) bool {
	for _, e := range [...]error{ErrNotFound, ErrServiceExists, ErrServiceNotEmpty, ErrKindMismatch, ErrHealthChecked} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// storeFeed mirrors the Store's applied commands into the index.
type storeFeed struct{ r *Registry }

var _ StoreFeed = storeFeed{}

// Applied mirrors committed commands, in log order.
func (l storeFeed) Applied(cmds []model.Command) {
	r := l.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state.Load() == stateClosed {
		return
	}
	for i := range cmds {
		cmds[i].Normalize()
		r.core.applyResolved(&cmds[i], r.leaseStart())
		r.carryOut()
	}
}

// Reset replaces the index's CP data with st: on start, from disk, and
// after a snapshot was installed.
func (l storeFeed) Reset(st StoreState) {
	r := l.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state.Load() == stateClosed {
		return
	}
	keepSvc := make(map[model.ServiceKey]bool, len(st.Services))
	for i := range st.Services {
		keepSvc[st.Services[i].Key.WithDefaults()] = true
	}
	keepInst := make(map[model.InstanceKey]bool, len(st.Instances))
	for i := range st.Instances {
		keepInst[st.Instances[i].Key().WithDefaults()] = true
	}
	// Each command is applied (index.apply) and carried out in turn.
	mirror := func(cmd *model.Command) {
		r.core.apply(cmd, model.Origin{}, r.leaseStart())
		r.carryOut()
	}
	// Drop what the state no longer holds.
	var gone []model.InstanceKey
	var undefine []*service
	for key, s := range r.core.allServices() {
		if s.def != nil && !keepSvc[key] {
			undefine = append(undefine, s)
		}
		for _, sl := range s.slots {
			if sl.pers() != nil && !keepInst[sl.key()] {
				gone = append(gone, sl.key())
			}
		}
	}
	for _, key := range gone {
		mirror(&model.Command{Op: model.OpDeleteInstance, Key: key})
	}
	for _, s := range undefine {
		mirror(&model.Command{Op: model.OpDeleteService, SvcKey: s.key})
	}
	for key := range r.core.allPatches() {
		mirror(&model.Command{Op: model.OpRemovePatch, Key: key})
	}
	// Install the state.
	for i := range st.Services {
		r.core.putService(st.Services[i].WithDefaults())
		r.carryOut()
	}
	for i := range st.Instances {
		r.core.putInstance(st.Instances[i].WithDefaults())
		r.carryOut()
	}
	for i := range st.Patches {
		p := st.Patches[i]
		p.Key = p.Key.WithDefaults()
		mirror(&model.Command{Op: model.OpPatchInstance, Patch: p})
	}
	r.log.Debug("persistent data loaded", "services", len(st.Services), "instances", len(st.Instances), "index", st.Index)
}

// barrier waits until this node has applied every persistent write
// committed before it was called.
func (r *Registry) barrier(ctx context.Context) error {
	if !r.sharedCP {
		return ctx.Err()
	}
	if err := r.store.Barrier(ctx); err != nil {
		return fmt.Errorf("registry: linearizable read: %w", err)
	}
	return nil
}
