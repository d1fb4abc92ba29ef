package raftstore

import "errors"

// Rejections: a command that was committed and applied but refused by the
// state rules carries one of these (wrapped with details) in its Result and
// in the Listener's Change. Every replica refuses it in the same way.
var (
	// ErrServiceExists: CreateService of a service that has a definition.
	ErrServiceExists = errors.New("raftstore: service exists")
	// ErrServiceNotFound: UpdateService or DeleteService of an unknown service.
	ErrServiceNotFound = errors.New("raftstore: service not found")
	// ErrServiceNotEmpty: DeleteService of a service that still has
	// persistent instances.
	ErrServiceNotEmpty = errors.New("raftstore: service not empty")
	// ErrKindMismatch: the command mixes ephemeral and persistent (an
	// ephemeral definition over persistent instances, a persistent instance
	// in an ephemeral service, or a definition changing its kind).
	ErrKindMismatch = errors.New("raftstore: kind mismatch")
	// ErrInstanceNotFound: SetHealth of an unknown persistent instance.
	ErrInstanceNotFound = errors.New("raftstore: instance not found")
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
