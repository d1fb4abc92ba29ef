package raftstore

import (
	"errors"

	"github.com/muster-io/muster/model"
)

// Rejections: a command that was committed and applied but refused by the
// state rules (model.CheckCommand) carries one of these (wrapped with
// details) in its Result and in the Listener's Change. Every replica
// refuses it in the same way. Each also matches model's rule error of the
// same name (errors.Is(err, model.ErrServiceExists), and model.ErrNotFound
// for both not-found errors), which the registry's rules return too.
var (
	// ErrServiceExists: CreateService of a service that has a definition.
	ErrServiceExists error = &ruleError{"raftstore: service exists", model.ErrServiceExists}
	// ErrServiceNotFound: UpdateService or DeleteService of an unknown service.
	ErrServiceNotFound error = &ruleError{"raftstore: service not found", model.ErrServiceNotFound}
	// ErrServiceNotEmpty: DeleteService of a service that still has
	// persistent instances.
	ErrServiceNotEmpty error = &ruleError{"raftstore: service not empty", model.ErrServiceNotEmpty}
	// ErrKindMismatch: the command mixes ephemeral and persistent (an
	// ephemeral definition over persistent instances, a persistent instance
	// in an ephemeral service, or a definition changing its kind).
	ErrKindMismatch error = &ruleError{"raftstore: kind mismatch", model.ErrKindMismatch}
	// ErrInstanceNotFound: SetHealth of an unknown persistent instance.
	ErrInstanceNotFound error = &ruleError{"raftstore: instance not found", model.ErrInstanceNotFound}
)

// ruleError is raftstore's name for one of model's rule errors.
type ruleError struct {
	msg   string
	model error
}

func (e *ruleError) Error() string { return e.msg }
func (e *ruleError) Unwrap() error { return e.model }

// Operational errors.
var (
	// ErrNoLeader: the write (or linearizable read) could not be committed
	// within the bounded wait (Config.ProposeTimeout or ReadTimeout) because
	// the shard had no leader or no quorum. A write that failed so may still
	// be applied later if it reached a leader before the wait ended.
	ErrNoLeader = errors.New("raftstore: no leader")
	// ErrClosed: the node is closed (or not started).
	ErrClosed = errors.New("raftstore: closed")
	// ErrNotStarted: a method that needs a running node was called before Start.
	ErrNotStarted = errors.New("raftstore: not started")
	// ErrStarted: Start was called on a node that was started already.
	ErrStarted = errors.New("raftstore: already started")
	// ErrInvalidConfig is matched by every Config.Validate error.
	ErrInvalidConfig = errors.New("raftstore: invalid config")
	// ErrCorrupt: stored or streamed state could not be decoded.
	ErrCorrupt = errors.New("raftstore: corrupt data")
)
