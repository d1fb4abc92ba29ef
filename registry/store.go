package registry

import (
	"context"
	"errors"
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
//
// Start, WaitReady, Barrier, Leader and Close are the exported Store's
// (see cpstore.go); the standalone store has nothing to start, wait for or
// close, and leads alone.
type store interface {
	Apply(ctx context.Context, cmd *command) error
	Leader() bool
	Start(ctx context.Context) error
	WaitReady(ctx context.Context) error
	Barrier(ctx context.Context) error
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
	// checked marks a health change by the active health checks, which may
	// set the health of a checked cluster (SetHealth may not).
	checked bool
}

// errSkip is checkLocked's answer for a command that has become moot (an
// expiry whose instance came back): not an error, nothing to apply.
var errSkip = errors.New("registry: nothing to do")

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

func (m *memStore) Start(context.Context) error       { return nil }
func (m *memStore) WaitReady(context.Context) error   { return nil }
func (m *memStore) Barrier(ctx context.Context) error { return ctx.Err() }
func (m *memStore) Leader() bool                      { return true }
func (m *memStore) Close() error                      { return nil }

// applyLocked checks cmd against the state rules and applies it to the
// index. The caller holds mu, so that concurrent writers cannot both pass a
// check made earlier.
func (r *Registry) applyLocked(cmd *command) error {
	if err := r.checkLocked(cmd); err != nil {
		if err == errSkip {
			return nil
		}
		return err
	}
	r.mirrorLocked(cmd)
	return nil
}

// checkLocked checks cmd against the state rules: a service's kind, no
// delete while instances exist, patches only for instances the registry
// holds, manual health only for NONE clusters. The caller holds mu (read or
// write).
//
// A replicated store checks again in its state machine the rules that
// depend on CP data alone, at apply time; the ones that involve ephemeral
// data can only be checked here, on the node that takes the write.
func (r *Registry) checkLocked(cmd *command) error {
	switch cmd.op {
	case opCreateService:
		if s := r.services[cmd.service.Key]; s != nil {
			if s.def != nil {
				return fmt.Errorf("%w: %s", ErrServiceExists, s.key)
			}
			if s.ephemeral != cmd.service.Ephemeral {
				return kindMismatch(s)
			}
		}
	case opUpdateService:
		s := r.services[cmd.service.Key]
		if s == nil {
			return fmt.Errorf("%w: service %s", ErrNotFound, cmd.service.Key)
		}
		if s.ephemeral != cmd.service.Ephemeral {
			return kindMismatch(s)
		}
	case opDeleteService:
		s := r.services[cmd.skey]
		if s == nil {
			return fmt.Errorf("%w: service %s", ErrNotFound, cmd.skey)
		}
		if !s.empty() {
			return fmt.Errorf("%w: %s has %d", ErrServiceNotEmpty, s.key, len(s.slots))
		}
	case opPutInstance:
		if s := r.services[cmd.inst.Service]; s != nil && s.ephemeral {
			return kindMismatch(s)
		}
	case opPatchInstance:
		if _, sl := r.lookup(cmd.patch.Key); sl == nil {
			return fmt.Errorf("%w: instance %s", ErrNotFound, cmd.patch.Key)
		}
	case opRemovePatch:
		if r.patches[cmd.key] == nil {
			return errSkip
		}
		if cmd.expiry {
			if _, sl := r.lookup(cmd.key); sl != nil {
				return errSkip // the instance came back: the patch stays
			}
			if _, ok := r.patchGone.Get(cmd.key); ok {
				return errSkip // it came back and went again since: a new countdown runs
			}
		}
	case opSetHealth:
		s, sl := r.lookup(cmd.key)
		if sl == nil || sl.pers == nil && !s.ephemeral {
			return fmt.Errorf("%w: instance %s", ErrNotFound, cmd.key)
		}
		if s.ephemeral {
			return fmt.Errorf("%w: %s is ephemeral; its health follows its beats or session", ErrKindMismatch, cmd.key.Service)
		}
		def := s.definition()
		t := def.Cluster(cmd.key.Cluster).HealthCheck.EffectiveType()
		switch {
		case t != model.CheckNone && !cmd.checked:
			return fmt.Errorf("%w: cluster %s of %s uses %s checks", ErrHealthChecked, cmd.key.Cluster, cmd.key.Service, t)
		case t == model.CheckNone && cmd.checked:
			return errSkip // a check result from before the cluster turned to manual health
		}
	case opDeleteInstance:
	default:
		return fmt.Errorf("registry: unknown command %d", cmd.op)
	}
	return r.admitCommand(cmd)
}

// mirrorLocked applies cmd, which the state rules accepted, to the index.
// In cluster mode every node's index mirrors the commands its replicated
// store applied, so this never refuses: where the node's ephemeral data
// conflicts with an accepted command (a race between an ephemeral and a
// persistent registration of one service on two nodes), the conflict is
// logged and the ephemeral side keeps the service. The caller holds mu.
func (r *Registry) mirrorLocked(cmd *command) {
	switch cmd.op {
	case opCreateService, opUpdateService:
		r.mirrorService(cmd.service)
	case opDeleteService:
		s := r.services[cmd.skey]
		if s == nil {
			return
		}
		s.def = nil
		if s.empty() {
			r.removeService(s)
		} else {
			r.changed(s)
		}
	case opPutInstance:
		r.mirrorPutInstance(cmd.inst, false)
	case opDeleteInstance:
		s, sl := r.lookup(cmd.key)
		if sl == nil || sl.pers == nil {
			return
		}
		last := sl.pers
		sl.pers = nil
		r.note(cmd.key, EventRemoved, nil, "deleted")
		r.untarget(cmd.key)
		r.dropSlotIfDead(sl, last)
		r.changed(s)
	case opPatchInstance:
		p := cmd.patch
		var old model.InstancePatch
		if o := r.patches[p.Key]; o != nil {
			old = *o
		}
		merged := old.Merge(p)
		merged.Key = p.Key
		r.patches[p.Key] = &merged
		r.note(p.Key, EventPatched, nil, "")
		if s, sl := r.lookup(p.Key); sl != nil {
			sl.patch = &merged
			r.changed(s)
		} else if old.Key != p.Key {
			r.startPatchCountdown(p.Key)
		}
	case opRemovePatch:
		if r.patches[cmd.key] == nil {
			return
		}
		delete(r.patches, cmd.key)
		why := ""
		if cmd.expiry {
			why = "expired"
		}
		r.note(cmd.key, EventPatchRemoved, nil, why)
		r.patchGone.Remove(cmd.key)
		if s, sl := r.lookup(cmd.key); sl != nil {
			sl.patch = nil
			r.changed(s)
		}
	case opSetHealth:
		s, sl := r.lookup(cmd.key)
		if sl == nil || sl.pers == nil || sl.pers.healthy == cmd.healthy {
			return
		}
		sl.pers = sl.pers.withHealth(cmd.healthy)
		r.noteHealth(s, cmd.key, cmd.healthy)
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

// mirrorPutInstance stores a persistent instance. A re-registration keeps
// the stored health (it belongs to the checks and SetHealth) unless
// withHealth says the instance carries the health to store (a state
// reload).
func (r *Registry) mirrorPutInstance(inst model.Instance, withHealth bool) {
	s, err := r.ensureService(inst.Service, false)
	if err != nil {
		r.log.Warn("a stored instance conflicts with this node's ephemeral instances", "instance", inst.Key().String(), "err", err)
		return
	}
	stored := newRec(&inst)
	sl := r.slotFor(s, stored)
	born := !sl.live()
	if sl.pers != nil && !withHealth {
		stored.healthy = sl.pers.healthy
	}
	if sl.pers != nil && sl.pers.equal(stored) {
		return
	}
	sl.pers = stored
	if born {
		r.slotBorn(sl)
		r.note(sl.key(), EventRegistered, nil, "")
	} else {
		r.note(sl.key(), EventUpdated, nil, "")
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
