package registry

import (
	"context"
	"fmt"

	"github.com/muster-io/muster/model"
)

// store keeps the CP data: service definitions, persistent instances,
// instance patches and the health of persistent instances. Apply returns
// once cmd has taken effect in this registry's index (through applyLocked),
// or with the error that refused it.
//
// The standalone store applies commands in memory at once; nothing survives
// Close. A replicated store (Raft) proposes them and feeds the applied ones
// to every node's index.
type store interface {
	Apply(ctx context.Context, cmd *command) error
	Close() error
}

type op uint8

const (
	opCreateService op = iota + 1
	opUpdateService
	opDeleteService
	opPutInstance
	opDeleteInstance
	opPatchInstance
	opRemovePatch
	opSetHealth
)

// command is one change of CP data. Fields are used according to op.
type command struct {
	op      op
	service model.Service     // create, update
	skey    model.ServiceKey  // delete service
	inst    model.Instance    // put instance
	key     model.InstanceKey // delete instance, remove patch, set health
	patch   model.InstancePatch
	healthy bool
	// expiry marks a removal by the registry's own clean-up: it applies only
	// if the patch's instance is still gone.
	expiry bool
}

// memStore is the standalone store.
type memStore struct{ r *Registry }

func (m *memStore) Apply(ctx context.Context, cmd *command) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r := m.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkWrite(); err != nil {
		return err
	}
	return r.applyLocked(cmd)
}

func (m *memStore) Close() error { return nil }

// applyLocked applies cmd to the index. The caller holds mu. The state rules
// (a service's kind, no delete while instances exist, manual health only for
// NONE clusters) are checked here, at apply time, so that concurrent writers
// cannot both pass a check made earlier.
func (r *Registry) applyLocked(cmd *command) error {
	switch cmd.op {
	case opCreateService:
		return r.applyCreateService(cmd.service)
	case opUpdateService:
		return r.applyUpdateService(cmd.service)
	case opDeleteService:
		return r.applyDeleteService(cmd.skey)
	case opPutInstance:
		return r.applyPutInstance(cmd.inst)
	case opDeleteInstance:
		r.applyDeleteInstance(cmd.key)
		return nil
	case opPatchInstance:
		return r.applyPatch(cmd.patch)
	case opRemovePatch:
		r.applyRemovePatch(cmd.key, cmd.expiry)
		return nil
	case opSetHealth:
		return r.applySetHealth(cmd.key, cmd.healthy)
	}
	return fmt.Errorf("registry: unknown command %d", cmd.op)
}

func (r *Registry) applyCreateService(def model.Service) error {
	s := r.services[def.Key]
	if s != nil {
		if s.def != nil {
			return fmt.Errorf("%w: %s", ErrServiceExists, def.Key)
		}
		if s.ephemeral != def.Ephemeral {
			return kindMismatch(s)
		}
	} else {
		s = &service{key: def.Key, ephemeral: def.Ephemeral}
		r.addService(s)
	}
	s.def = &def
	r.emptySvcs.Remove(s.key)
	r.changed(s)
	return nil
}

func (r *Registry) applyUpdateService(def model.Service) error {
	s := r.services[def.Key]
	if s == nil {
		return fmt.Errorf("%w: service %s", ErrNotFound, def.Key)
	}
	if s.ephemeral != def.Ephemeral {
		return kindMismatch(s)
	}
	s.def = &def
	r.emptySvcs.Remove(s.key)
	r.changed(s)
	return nil
}

func (r *Registry) applyDeleteService(key model.ServiceKey) error {
	s := r.services[key]
	if s == nil {
		return fmt.Errorf("%w: service %s", ErrNotFound, key)
	}
	if !s.empty() {
		return fmt.Errorf("%w: %s has %d", ErrServiceNotEmpty, key, len(s.slots))
	}
	s.def = nil
	r.removeService(s)
	return nil
}

func (r *Registry) applyPutInstance(inst model.Instance) error {
	s, err := r.ensureService(inst.Service, false)
	if err != nil {
		return err
	}
	stored := newRec(&inst)
	sl := r.slotFor(s, stored)
	born := !sl.live()
	if sl.pers != nil {
		// Health belongs to the checks and SetHealth; re-registering does
		// not reset it.
		stored.healthy = sl.pers.healthy
	}
	sl.pers = stored
	if born {
		r.slotBorn(sl)
	}
	r.changed(s)
	return nil
}

func (r *Registry) applyDeleteInstance(key model.InstanceKey) {
	s, sl := r.lookup(key)
	if sl == nil || sl.pers == nil {
		return
	}
	last := sl.pers
	sl.pers = nil
	r.dropSlotIfDead(sl, last)
	r.changed(s)
}

func (r *Registry) applyPatch(p model.InstancePatch) error {
	s, sl := r.lookup(p.Key)
	if sl == nil {
		return fmt.Errorf("%w: instance %s", ErrNotFound, p.Key)
	}
	var old model.InstancePatch
	if o := r.patches[p.Key]; o != nil {
		old = *o
	}
	merged := old.Merge(p)
	merged.Key = p.Key
	r.patches[p.Key] = &merged
	sl.patch = &merged
	r.changed(s)
	return nil
}

func (r *Registry) applyRemovePatch(key model.InstanceKey, expiry bool) {
	if r.patches[key] == nil {
		return
	}
	s, sl := r.lookup(key)
	if expiry {
		if sl != nil {
			return // the instance came back: the patch stays
		}
		if _, ok := r.patchGone.Get(key); ok {
			return // it came back and went again since: a new countdown runs
		}
	}
	delete(r.patches, key)
	r.patchGone.Remove(key)
	if sl != nil {
		sl.patch = nil
		r.changed(s)
	}
}

func (r *Registry) applySetHealth(key model.InstanceKey, healthy bool) error {
	s, sl := r.lookup(key)
	if sl == nil {
		return fmt.Errorf("%w: instance %s", ErrNotFound, key)
	}
	if s.ephemeral {
		return fmt.Errorf("%w: %s is ephemeral; its health follows its beats or session", ErrKindMismatch, key.Service)
	}
	def := s.definition()
	if t := def.Cluster(key.Cluster).HealthCheck.EffectiveType(); t != model.CheckNone {
		return fmt.Errorf("%w: cluster %s of %s uses %s checks", ErrHealthChecked, key.Cluster, key.Service, t)
	}
	if sl.pers.healthy == healthy {
		return nil
	}
	sl.pers = sl.pers.withHealth(healthy)
	r.changed(s)
	return nil
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
