package registry

import (
	"errors"

	"github.com/muster-io/muster/model"
)

// Errors returned by the registry. Match them with errors.Is; the returned
// errors wrap them with the service or instance concerned. Validation errors
// match model.ErrInvalid instead.
//
// Three are worth a retry of the same call, after a backoff: ErrNotReady
// (the node is still loading its data), ErrUnavailable (the owner of a beat
// instance could not be reached, or ownership is moving) and ErrNoLeader
// (the persistent store has no quorum); Retryable reports them, and a server
// maps them to "service unavailable" (HTTP 503), not to an internal error.
// ErrLimit may succeed once something is removed. The others need the call
// changed (a validation or rule error) or are final (ErrClosed,
// ErrSessionClosed, ErrWatchClosed). Each method lists those it returns; a
// context's error is returned as it is. The rule errors (ErrKindMismatch,
// ErrNotFound, ErrServiceExists, ErrServiceNotEmpty, ErrHealthChecked) are
// model's: the rules are model's (model.AdmitCommand), and a Store's
// rejections match them as they are.
var (
	// ErrClosed: the registry has been closed.
	ErrClosed = errors.New("registry: closed")
	// ErrStarted: Start was called a second time (as distro's and node's
	// ErrStarted).
	ErrStarted = errors.New("registry: already started")
	// ErrNotReady: the registry has not started, or is still loading its
	// data, and does not serve yet.
	ErrNotReady = errors.New("registry: not ready")
	// ErrKindMismatch: the service is ephemeral and the instance persistent,
	// or the other way round. A service's kind is fixed by its first
	// registration or its creation. It is model's rule error, which
	// model.AdmitCommand and a Store's rejections return.
	ErrKindMismatch = model.ErrKindMismatch
	// ErrNotFound: no such service or instance. It is model's, matched
	// too by the rules' model.ErrServiceNotFound and
	// model.ErrInstanceNotFound.
	ErrNotFound = model.ErrNotFound
	// ErrServiceExists: CreateService of a service that already has a stored
	// definition (model's rule error).
	ErrServiceExists = model.ErrServiceExists
	// ErrServiceNotEmpty: DeleteService of a service that still has
	// instances (model's rule error).
	ErrServiceNotEmpty = model.ErrServiceNotEmpty
	// ErrHealthChecked: SetHealth on a cluster whose health check type is not
	// NONE; its health belongs to the checker (model's rule error).
	ErrHealthChecked = model.ErrHealthChecked
	// ErrNoInstance: SelectOne found no healthy, enabled instance with a
	// positive weight.
	ErrNoInstance = errors.New("registry: no instance available")
	// ErrSessionClosed: the session was closed, or its keep-alive lapsed.
	ErrSessionClosed = errors.New("registry: session closed")
	// ErrUnavailable: a write for a beat instance owned by another node
	// could not be forwarded to it (unreachable, or ownership kept moving
	// for longer than the bounded retry). The caller may retry.
	ErrUnavailable = errors.New("registry: owner unavailable")
	// ErrInvalidConfig: New was given an invalid Config; the message names
	// every invalid field and its rule.
	ErrInvalidConfig = errors.New("registry: invalid config")
	// ErrWatchClosed: the watcher was closed.
	ErrWatchClosed = errors.New("registry: watch closed")
	// ErrLimit: the write would take the registry past one of its Limits;
	// nothing was changed. The message names the limit and its value, as
	// in "registry: limit reached: MaxInstancesPerService (10000): ...".
	// A metadata set over its limit also matches model.ErrInvalid.
	ErrLimit = errors.New("registry: limit reached")
	// ErrNotMember: a node that is not a current member of the cluster (in
	// the owner's view) forwarded a write; the owner applied nothing. A
	// member the owner does not know yet retries, as when ownership moves,
	// and then fails with ErrUnavailable, which wraps ErrNotMember.
	ErrNotMember = errors.New("registry: sender is not a member")
	// ErrSessionInstance: Registry.Deregister of an ephemeral instance that
	// only sessions publish; nothing was changed. Its session removes it
	// (Session.Deregister, Session.Close).
	ErrSessionInstance = errors.New("registry: instance is published by a session")
	// ErrNoLeader: a write of persistent data could not be committed because
	// the Store's group has no leader (no quorum) within its bounded wait.
	// Reads go on from the local copy. The Raft store's errors also match
	// raftstore.ErrNoLeader.
	ErrNoLeader = errors.New("registry: no leader")
)

// Retryable reports whether err is worth a retry of the same call after a
// backoff: it matches ErrNotReady, ErrUnavailable or ErrNoLeader.
func Retryable(err error) bool {
	return errors.Is(err, ErrNotReady) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNoLeader)
}
