package raftstore

import (
	"errors"

	"github.com/muster-io/muster/model"
)

// Rejections: a command that was committed and applied but refused by the
// state rules (model.CheckCommand) carries one of these (wrapped with
// details) in its Result and in the Listener's Change. Every replica
// refuses it in the same way. They are model's rule errors under
// raftstore's names: errors.Is matches either.
var (
	// ErrServiceExists: CreateService of a service that has a definition.
	ErrServiceExists = model.ErrServiceExists
	// ErrServiceNotFound: UpdateService or DeleteService of an unknown
	// service (it matches model.ErrNotFound).
	ErrServiceNotFound = model.ErrServiceNotFound
	// ErrServiceNotEmpty: DeleteService of a service that still has
	// persistent instances.
	ErrServiceNotEmpty = model.ErrServiceNotEmpty
	// ErrKindMismatch: the command mixes ephemeral and persistent (an
	// ephemeral definition over persistent instances, a persistent instance
	// in an ephemeral service, or a definition changing its kind).
	ErrKindMismatch = model.ErrKindMismatch
	// ErrInstanceNotFound: SetHealth of an unknown persistent instance (it
	// matches model.ErrNotFound).
	ErrInstanceNotFound = model.ErrInstanceNotFound
)

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
	// ErrInvalidConfig is matched by every Config.Validate error.
	ErrInvalidConfig = errors.New("raftstore: invalid config")
	// ErrCorrupt: stored or streamed state could not be decoded.
	ErrCorrupt = errors.New("raftstore: corrupt data")
)
