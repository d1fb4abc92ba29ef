package model

import "fmt"

// The state rules of commands, written once for both stores that apply
// them: the registry's standalone store (its in-memory index) and
// raftstore's state machine (its own data). Each reads the state through
// CommandState, a few lookups per command.
//
// Two scopes, one switch:
//
//   - CheckCommand: the replicated rules, which a Raft state machine applies
//     to every committed command. They read only persistent data and the
//     command's encoded fields, so every replica decides alike. They are
//     frozen: a change would decide an entry already in a log differently
//     on a replica that replays it, so new rules go into admission only.
//   - AdmitCommand: the replicated rules plus the admission rules, checked by
//     the node that takes the write, against its whole index (ephemeral data
//     too), with who asks (Origin). A standalone registry admits and then
//     applies under one lock; a registry over Raft admits and then proposes,
//     and the state machine checks the replicated rules again at apply time.
//
// A command that passed is applied with ResolveCommand, which rewrites it
// into what the state stores (a re-put keeps the stored health, a patch is
// merged with the stored one) and reports whether anything changes.
//
// The registry implements CommandState over its index (Service: the
// service's kind, definition and slot counts; Instance: a slot and its
// persistent record; Patch: its patch table), admits every write with
// AdmitCommand (then its limits and the patch countdown of an expiry, its
// own), resolves a command with ResolveCommand before mirroring it, and
// uses these errors as its own (registry.ErrNotFound is ErrNotFound, and
// so on; ErrNoop is success). Over Raft it admits a command as the caller
// gave it and sets Upsert on an UpdateService before proposing (a service
// that exists only through ephemeral instances has no record in the state
// machine).

// CommandState is the stored state the rules read. Implementations answer
// from memory; the rules call them a few times per command and never keep
// what they return. The caller of the rules holds whatever lock guards the
// state for the length of the check and the apply.
type CommandState interface {
	// Service reports what the state holds of service k (normalized); the
	// zero ServiceState when nothing.
	Service(k ServiceKey) ServiceState
	// Instance reports what the state holds of instance k (normalized).
	Instance(k InstanceKey) InstanceState
	// Patch returns the stored patch of instance k, if any. The rules only
	// read it (InstancePatch.Merge shares nothing with it).
	Patch(k InstanceKey) (InstancePatch, bool)
}

// ServiceState is what a CommandState holds of one service.
type ServiceState struct {
	// Exists: the state holds the service (a definition or instances; a
	// registry also keeps an emptied service for a while, and its kind with
	// it).
	Exists bool
	// Ephemeral is the service's kind when Exists: its definition's, or
	// else its instances'.
	Ephemeral bool
	// Definition is the stored definition, nil when none. The rules only
	// read it (the health check types of its clusters).
	Definition *Service
	// Instances counts the instances the state holds, of either kind
	// (DeleteService needs none); Persistent those among them with a
	// persistent record.
	Instances, Persistent int
}

// InstanceState is what a CommandState holds of one instance.
type InstanceState struct {
	// Exists: the state holds the instance, persistent or ephemeral.
	Exists bool
	// Persistent: the state holds a persistent record of it, whose health
	// is Healthy.
	Persistent, Healthy bool
}

// Origin says who asks for a command, for the admission rules. It is not
// part of the command's encoding (the log does not carry it).
type Origin struct {
	// Checker marks a SetHealth from the active health checks, which own
	// the health of checked clusters (and leave NONE clusters alone).
	Checker bool
	// Expiry marks a RemovePatch by the clean-up of a patch whose instance
	// went away: it has nothing to do if the instance came back.
	Expiry bool
}

// CheckCommand checks a normalized command against the replicated rules
// and st. It returns nil, ErrNoop (nothing to apply: not a refusal), or an
// error wrapping ErrServiceExists, ErrServiceNotFound, ErrServiceNotEmpty,
// ErrKindMismatch or ErrInstanceNotFound with the service or instance
// concerned. An unknown op is a *ValidationError.
//
//   - CreateService: refused if a definition exists, or if the service
//     exists with the other kind, or it is ephemeral and persistent
//     instances exist.
//   - UpdateService: refused if the service does not exist (unless
//     Upsert), or on the kinds as CreateService.
//   - DeleteService: refused if the service does not exist, or if it has
//     instances.
//   - PutInstance: refused if the instance is ephemeral or its service
//     exists and is ephemeral.
//   - DeleteInstance, PatchInstance: always pass.
//   - RemovePatch: ErrNoop without a stored patch.
//   - SetHealth: refused without a persistent record of the instance.
func CheckCommand(c *Command, st CommandState) error { return check(c, st, false, Origin{}) }

// AdmitCommand checks a normalized command against the replicated rules
// and the admission rules, with st the whole state of the node that takes
// the write (ephemeral data too). Besides CheckCommand's errors it returns
// ErrHealthChecked, and ErrNoop for more commands that became moot:
//
//   - PatchInstance: refused (ErrInstanceNotFound) for an unknown instance.
//   - RemovePatch: ErrNoop for an Expiry whose instance exists again.
//   - SetHealth: refused with ErrKindMismatch for an instance of an
//     ephemeral service (its health follows its beats or session);
//     refused with ErrHealthChecked unless o.Checker when the cluster's
//     check type is not NONE; ErrNoop for a checker's result on a NONE
//     cluster (it turned to manual health meanwhile).
func AdmitCommand(c *Command, st CommandState, o Origin) error { return check(c, st, true, o) }

func check(c *Command, st CommandState, admit bool, o Origin) error {
	switch c.Op {
	case OpCreateService, OpUpdateService:
		def := &c.Service
		s := st.Service(def.Key)
		if c.Op == OpCreateService {
			if s.Definition != nil {
				return fmt.Errorf("%w: %s", ErrServiceExists, def.Key)
			}
		} else if !s.Exists && !c.Upsert {
			return fmt.Errorf("%w: %s", ErrServiceNotFound, def.Key)
		}
		if (def.Ephemeral && s.Persistent > 0) || (s.Exists && s.Ephemeral != def.Ephemeral) {
			return kindMismatch(def.Key, s.Ephemeral)
		}
	case OpDeleteService:
		s := st.Service(c.SvcKey)
		if !s.Exists {
			return fmt.Errorf("%w: %s", ErrServiceNotFound, c.SvcKey)
		}
		if s.Instances > 0 {
			return fmt.Errorf("%w: %s has %d instances", ErrServiceNotEmpty, c.SvcKey, s.Instances)
		}
	case OpPutInstance:
		in := &c.Instance
		if in.Ephemeral {
			return fmt.Errorf("%w: instance %s is ephemeral", ErrKindMismatch, in.Key())
		}
		if s := st.Service(in.Service); s.Exists && s.Ephemeral {
			return kindMismatch(in.Service, true)
		}
	case OpDeleteInstance:
	case OpPatchInstance:
		if admit && !st.Instance(c.Patch.Key).Exists {
			return fmt.Errorf("%w: %s", ErrInstanceNotFound, c.Patch.Key)
		}
	case OpRemovePatch:
		if _, ok := st.Patch(c.Key); !ok {
			return ErrNoop
		}
		if admit && o.Expiry && st.Instance(c.Key).Exists {
			return ErrNoop // the instance came back: the patch stays
		}
	case OpSetHealth:
		in := st.Instance(c.Key)
		if !admit {
			if !in.Persistent {
				return fmt.Errorf("%w: %s", ErrInstanceNotFound, c.Key)
			}
			return nil
		}
		s := st.Service(c.Key.Service)
		if !in.Exists || !in.Persistent && !s.Ephemeral {
			return fmt.Errorf("%w: %s", ErrInstanceNotFound, c.Key)
		}
		if s.Ephemeral {
			return fmt.Errorf("%w: %s is ephemeral; its health follows its beats or session", ErrKindMismatch, c.Key.Service)
		}
		var def Service
		if s.Definition != nil {
			def = *s.Definition
		}
		t := def.Cluster(c.Key.Cluster).HealthCheck.EffectiveType()
		switch {
		case t != CheckNone && !o.Checker:
			return fmt.Errorf("%w: cluster %s of %s uses %s checks", ErrHealthChecked, c.Key.Cluster, c.Key.Service, t)
		case t == CheckNone && o.Checker:
			return ErrNoop // a check result from before the cluster turned to manual health
		}
	default:
		return &ValidationError{Field: "command.op", Rule: "must be a known operation", Value: c.Op.String()}
	}
	return nil
}

func kindMismatch(k ServiceKey, ephemeral bool) error {
	kind := "persistent"
	if ephemeral {
		kind = "ephemeral"
	}
	return fmt.Errorf("%w: %s is %s", ErrKindMismatch, k, kind)
}

// ResolveCommand rewrites c, which the rules accepted against st, into the
// form the state stores, and reports whether applying it changes st:
//
//   - PutInstance: a re-put keeps the stored health (it belongs to the
//     checks and SetHealth); always a change (the caller compares the
//     instances if it keeps them).
//   - PatchInstance: the patch becomes the stored one merged with it
//     (InstancePatch.Merge, keyed by the command's key); always a change.
//   - SetHealth: a change only if the stored health differs.
//   - DeleteInstance: a change only if a persistent record exists.
//   - DeleteService: a change only if a definition exists.
//   - RemovePatch: a change only if a patch exists.
//   - CreateService, UpdateService: always a change.
//
// It reads st before the caller changes it, and shares no pointer with
// what st returned.
func ResolveCommand(c *Command, st CommandState) bool {
	switch c.Op {
	case OpPutInstance:
		if in := st.Instance(c.Instance.Key()); in.Persistent {
			c.Instance.Healthy = in.Healthy
		}
	case OpPatchInstance:
		old, _ := st.Patch(c.Patch.Key)
		merged := old.Merge(c.Patch)
		merged.Key = c.Patch.Key
		c.Patch = merged
	case OpSetHealth:
		in := st.Instance(c.Key)
		return in.Persistent && in.Healthy != c.Healthy
	case OpDeleteInstance:
		return st.Instance(c.Key).Persistent
	case OpDeleteService:
		return st.Service(c.SvcKey).Definition != nil
	case OpRemovePatch:
		_, ok := st.Patch(c.Key)
		return ok
	}
	return true
}
