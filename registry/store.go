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
// applyLocked or the Store's feed), or with the error that refused it. It
// may rewrite cmd (model.ResolveCommand).
//
// The standalone store applies commands in memory at once; nothing survives
// Close. A replicated store (Raft) proposes them and feeds the applied ones
// to every node's index.
//
// Start, WaitReady, Barrier, Leader and Close are the exported Store's
// (see cpstore.go); the standalone store has nothing to start, wait for or
// close, and leads alone.
type store interface {
	Apply(ctx context.Context, cmd *model.Command, o model.Origin) error
	Leader() bool
	Start(ctx context.Context) error
	WaitReady(ctx context.Context) error
	Barrier(ctx context.Context) error
	Close() error
}

// memStore is the standalone store.
type memStore struct{ r *Registry }

func (m *memStore) Apply(ctx context.Context, cmd *model.Command, o model.Origin) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r := m.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkWrite(); err != nil {
		return err
	}
	return r.applyLocked(cmd, o)
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
	r.mirrorLocked(cmd)
	return nil
}

// admitLocked checks a normalized cmd from o against the rules
// (model.AdmitCommand over the index: a service's kind, no delete while
// instances exist, patches only for instances the registry holds, manual
// health only for NONE clusters), then against what only the registry
// knows: a patch's expiry waits for its newest countdown, and the limits
// (admitCommand). It returns model.ErrNoop for a command that has nothing
// to do. The caller holds mu (read or write).
//
// A replicated store checks the replicated rules again in its state
// machine (model.CheckCommand), at apply time; the others involve
// ephemeral data and can only be checked here, on the node that takes the
// write.
func (r *Registry) admitLocked(cmd *model.Command, o model.Origin) error {
	if err := model.AdmitCommand(cmd, (*indexState)(r), o); err != nil {
		return err
	}
	if cmd.Op == model.OpRemovePatch && o.Expiry {
		if _, ok := r.patchGone.Get(cmd.Key); ok {
			return model.ErrNoop // it came back and went again since: a new countdown runs
		}
	}
	return r.admitCommand(cmd)
}

// indexState is the index as the rules read it (model.CommandState). The
// caller of the rules holds mu.
type indexState Registry

var _ model.CommandState = (*indexState)(nil)

// Service reports the service of k. The index never holds a persistent
// record in an ephemeral service (CheckConsistency), and a persistent
// service's slots all hold one, so Persistent is its slot count.
func (x *indexState) Service(k model.ServiceKey) model.ServiceState {
	s := x.services[k]
	if s == nil {
		return model.ServiceState{}
	}
	st := model.ServiceState{Exists: true, Ephemeral: s.ephemeral, Definition: s.def, Instances: len(s.slots)}
	if !s.ephemeral {
		st.Persistent = len(s.slots)
	}
	return st
}

// Instance reports the slot of k.
func (x *indexState) Instance(k model.InstanceKey) model.InstanceState {
	_, sl := (*Registry)(x).lookup(k)
	if sl == nil {
		return model.InstanceState{}
	}
	st := model.InstanceState{Exists: true}
	if sl.pers != nil {
		st.Persistent, st.Healthy = true, sl.pers.healthy
	}
	return st
}

// Patch returns the stored patch of k.
func (x *indexState) Patch(k model.InstanceKey) (model.InstancePatch, bool) {
	if p := x.patches[k]; p != nil {
		return *p, true
	}
	return model.InstancePatch{}, false
}

// mirrorLocked applies cmd, which the rules accepted, to the index: first
// model.ResolveCommand (a re-put keeps the stored health, a patch merges
// with the stored one), then the change. In cluster mode every node's
// index mirrors the commands its replicated store applied, so this never
// refuses: where the node's ephemeral data conflicts with an accepted
// command (a race between an ephemeral and a persistent registration of
// one service on two nodes), the conflict is logged and the ephemeral side
// keeps the service. The caller holds mu.
func (r *Registry) mirrorLocked(cmd *model.Command) {
	changes := model.ResolveCommand(cmd, (*indexState)(r))
	switch cmd.Op {
	case model.OpCreateService, model.OpUpdateService:
		r.mirrorService(cmd.Service)
	case model.OpDeleteService:
		// Not only a definition goes: an empty implicit service goes with
		// it, a change that ResolveCommand, which counts definitions, does
		// not report.
		s := r.services[cmd.SvcKey]
		if s == nil {
			return
		}
		s.def = nil
		if s.empty() {
			r.removeService(s)
		} else {
			r.changed(s)
		}
	case model.OpPutInstance:
		r.mirrorPutInstance(cmd.Instance)
	case model.OpDeleteInstance:
		if !changes {
			return
		}
		s, sl := r.lookup(cmd.Key)
		last := sl.pers
		sl.pers = nil
		r.untarget(cmd.Key)
		r.dropSlotIfDead(sl, last)
		r.changed(s)
	case model.OpPatchInstance:
		merged := cmd.Patch
		had := r.patches[merged.Key] != nil
		r.patches[merged.Key] = &merged
		if s, sl := r.lookup(merged.Key); sl != nil {
			sl.patch = &merged
			r.changed(s)
		} else if !had {
			r.startPatchCountdown(merged.Key)
		}
	case model.OpRemovePatch:
		if !changes {
			return
		}
		delete(r.patches, cmd.Key)
		r.patchGone.Remove(cmd.Key)
		if s, sl := r.lookup(cmd.Key); sl != nil {
			sl.patch = nil
			r.changed(s)
		}
	case model.OpSetHealth:
		if !changes {
			return
		}
		s, sl := r.lookup(cmd.Key)
		sl.pers = sl.pers.withHealth(cmd.Healthy)
		r.changed(s)
		r.syncTarget(s, sl)
	}
}

// mirrorService stores a definition, creating the service if needed.
func (r *Registry) mirrorService(def model.Service) {
	s := r.services[def.Key]
	if s == nil {
		s = &service{key: def.Key, ephemeral: def.Ephemeral}
		r.addService(s)
	} else if s.ephemeral != def.Ephemeral {
		r.log.Warn("a stored definition conflicts with this node's instances; keeping the instances' kind",
			"service", def.Key.String(), "ephemeral", s.ephemeral)
		return
	}
	s.def = &def
	r.emptySvcs.Remove(s.key)
	r.changed(s)
	r.syncTargets(s)
}

// mirrorPutInstance stores a persistent instance as given, health
// included (mirrorLocked resolved a re-put's health; a state reload
// carries it).
func (r *Registry) mirrorPutInstance(inst model.Instance) {
	s, err := r.ensureService(inst.Service, false)
	if err != nil {
		r.log.Warn("a stored instance conflicts with this node's ephemeral instances", "instance", inst.Key().String(), "err", err)
		return
	}
	stored := newRec(&inst)
	sl := r.slotFor(s, stored)
	born := !sl.live()
	if sl.pers != nil && sl.pers.equal(stored) {
		return
	}
	sl.pers = stored
	if born {
		r.slotBorn(sl)
	}
	r.changed(s)
	r.syncTarget(s, sl)
}

// startPatchCountdown starts the PatchTTL countdown of the patch of key,
// whose instance is gone.
func (r *Registry) startPatchCountdown(key model.InstanceKey) {
	putLease(r, &r.patchGone, key, r.cfg.PatchTTL)
}

func kindMismatch(s *service) error {
	kind := "persistent"
	if s.ephemeral {
		kind = "ephemeral"
	}
	return fmt.Errorf("%w: %s is %s", ErrKindMismatch, s.key, kind)
}
