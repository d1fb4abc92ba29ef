package registry

import (
	"context"
	"errors"
	"fmt"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/raftstore"
)

// CP data through Raft. With Config.Raft set, every write of persistent data
// is proposed to the raftstore node; the state machine decides it on every
// replica alike, and its change feed (raftListener) mirrors each applied
// command into this node's index, so queries and watches on every node see
// it. Propose returns once the command has been applied here, so a write
// is visible in this node's queries when the call returns.

// ErrNoLeader: a write of persistent data could not be committed because
// the Raft group has no leader (no quorum) within the bounded wait. Reads
// go on from the local copy.
var ErrNoLeader = raftstore.ErrNoLeader

// RaftNode returns the registry's Raft replica, or nil when persistent data
// is not in Raft. Use it for cluster operations (AddReplica, RemoveReplica,
// Info, Leader); writing through it bypasses the registry's checks of
// ephemeral data, though every node's index still follows what it applies.
func (r *Registry) RaftNode() *raftstore.Node {
	if rs, ok := r.store.(*raftStore); ok {
		return rs.node
	}
	return nil
}

// errNotLeader: a clean-up that only the Raft leader proposes was asked of
// another node; it counts down again.
var errNotLeader = errors.New("registry: not the raft leader")

// raftStore is the replicated store.
type raftStore struct {
	r    *Registry
	node *raftstore.Node
}

func (s *raftStore) Apply(ctx context.Context, cmd *command) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	rc, err := s.prepare(cmd)
	if refusedByIndex(err) || err == errSkip && cmd.op == opRemovePatch && !cmd.expiry {
		// This node's index may lag the log (a delete committed through
		// another node a moment ago): check again once it has applied
		// everything committed so far. Only refusals pay for the barrier.
		if berr := s.node.Barrier(ctx); berr == nil {
			rc, err = s.prepare(cmd)
		}
	}
	if err != nil {
		if err == errSkip {
			return nil
		}
		return err
	}
	res, err := s.node.Propose(ctx, rc)
	if err != nil {
		if errors.Is(err, raftstore.ErrClosed) {
			return ErrClosed
		}
		return fmt.Errorf("registry: %w", err)
	}
	if res.Rejected != nil {
		return rejection(res.Rejected)
	}
	return nil
}

// prepare checks cmd against this node's index (the rules that involve
// ephemeral data can only be checked here) and converts it.
func (s *raftStore) prepare(cmd *command) (raftstore.Command, error) {
	r := s.r
	r.mu.RLock()
	defer r.mu.RUnlock()
	if err := r.checkWrite(); err != nil {
		return raftstore.Command{}, err
	}
	if err := r.checkLocked(cmd); err != nil {
		return raftstore.Command{}, err
	}
	rc := raftstore.Command{Healthy: cmd.healthy}
	switch cmd.op {
	case opCreateService:
		rc.Op, rc.Service = raftstore.OpCreateService, cmd.service
	case opUpdateService:
		rc.Op, rc.Service = raftstore.OpUpdateService, cmd.service
		// A service that exists here only through its ephemeral instances
		// has no record in the state machine: the update creates it.
		rc.Upsert = true
	case opDeleteService:
		rc.Op, rc.SvcKey = raftstore.OpDeleteService, cmd.skey
		if svc := r.services[cmd.skey]; svc != nil && svc.def == nil && svc.ephemeral {
			// Nothing stored: the implicit service goes when it is empty.
			return rc, errSkip
		}
	case opPutInstance:
		rc.Op, rc.Instance = raftstore.OpPutInstance, cmd.inst
	case opDeleteInstance:
		rc.Op, rc.Key = raftstore.OpDeleteInstance, cmd.key
	case opPatchInstance:
		rc.Op, rc.Patch = raftstore.OpPatchInstance, cmd.patch
	case opRemovePatch:
		rc.Op, rc.Key = raftstore.OpRemovePatch, cmd.key
		if cmd.expiry && !s.leader() {
			return rc, errNotLeader // every node counts down; the leader proposes
		}
	case opSetHealth:
		rc.Op, rc.Key = raftstore.OpSetHealth, cmd.key
	default:
		return rc, fmt.Errorf("registry: unknown command %d", cmd.op)
	}
	return rc, nil
}

func (s *raftStore) leader() bool { return s.node.IsLeader() }

func (s *raftStore) Close() error { return s.node.Close() }

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

// rejection maps a state machine's rejection to the registry's errors.
func rejection(err error) error {
	var base error
	switch {
	case errors.Is(err, raftstore.ErrServiceExists):
		base = ErrServiceExists
	case errors.Is(err, raftstore.ErrServiceNotFound), errors.Is(err, raftstore.ErrInstanceNotFound):
		base = ErrNotFound
	case errors.Is(err, raftstore.ErrServiceNotEmpty):
		base = ErrServiceNotEmpty
	case errors.Is(err, raftstore.ErrKindMismatch):
		base = ErrKindMismatch
	default:
		return err
	}
	return fmt.Errorf("%w: %w", base, err)
}

// fromRaft converts an applied raftstore command.
func fromRaft(rc *raftstore.Command) command {
	cmd := command{healthy: rc.Healthy, checked: true}
	switch rc.Op {
	case raftstore.OpCreateService:
		cmd.op, cmd.service = opCreateService, rc.Service.WithDefaults()
	case raftstore.OpUpdateService:
		cmd.op, cmd.service = opUpdateService, rc.Service.WithDefaults()
	case raftstore.OpDeleteService:
		cmd.op, cmd.skey = opDeleteService, rc.SvcKey.WithDefaults()
	case raftstore.OpPutInstance:
		cmd.op, cmd.inst = opPutInstance, rc.Instance.WithDefaults()
	case raftstore.OpDeleteInstance:
		cmd.op, cmd.key = opDeleteInstance, rc.Key.WithDefaults()
	case raftstore.OpPatchInstance:
		cmd.op, cmd.patch = opPatchInstance, rc.Patch
		cmd.patch.Key = cmd.patch.Key.WithDefaults()
	case raftstore.OpRemovePatch:
		cmd.op, cmd.key = opRemovePatch, rc.Key.WithDefaults()
	case raftstore.OpSetHealth:
		cmd.op, cmd.key = opSetHealth, rc.Key.WithDefaults()
	}
	return cmd
}

// raftListener mirrors the state machine into the index.
type raftListener struct{ r *Registry }

var _ raftstore.Listener = raftListener{}

// Applied mirrors committed commands, in log order.
func (l raftListener) Applied(changes []raftstore.Change) {
	r := l.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state.Load() == stateClosed {
		return
	}
	for i := range changes {
		if changes[i].Rejected != nil {
			continue
		}
		cmd := fromRaft(&changes[i].Cmd)
		r.mirrorLocked(&cmd)
	}
}

// Reset replaces the index's CP data with st: on start, from disk, and
// after a snapshot was installed.
func (l raftListener) Reset(st raftstore.State) {
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
	// Drop what the state no longer holds.
	var gone []model.InstanceKey
	var undefine []*service
	for key, s := range r.services {
		if s.def != nil && !keepSvc[key] {
			undefine = append(undefine, s)
		}
		for _, sl := range s.slots {
			if sl.pers != nil && !keepInst[sl.key()] {
				gone = append(gone, sl.key())
			}
		}
	}
	for _, key := range gone {
		r.mirrorLocked(&command{op: opDeleteInstance, key: key})
	}
	for _, s := range undefine {
		r.mirrorLocked(&command{op: opDeleteService, skey: s.key})
	}
	for key := range r.patches {
		r.mirrorLocked(&command{op: opRemovePatch, key: key})
	}
	// Install the state.
	for i := range st.Services {
		r.mirrorService(st.Services[i].WithDefaults())
	}
	for i := range st.Instances {
		r.mirrorPutInstance(st.Instances[i].WithDefaults(), true)
	}
	for i := range st.Patches {
		p := st.Patches[i]
		p.Key = p.Key.WithDefaults()
		r.mirrorLocked(&command{op: opPatchInstance, patch: p})
	}
	r.log.Debug("persistent data loaded", "services", len(st.Services), "instances", len(st.Instances), "index", st.Index)
}

// barrier waits until this node has applied every persistent write
// committed before it was called.
func (r *Registry) barrier(ctx context.Context) error {
	rs, ok := r.store.(*raftStore)
	if !ok {
		return ctx.Err()
	}
	if err := rs.node.Barrier(ctx); err != nil {
		return fmt.Errorf("registry: linearizable read: %w", err)
	}
	return nil
}
