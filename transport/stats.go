package transport

import (
	"errors"
	"os"
)

// RefuseReason says why an inbound handshake was refused: the index of
// TCPStats.RefusedBy.
type RefuseReason int

// Reasons an inbound handshake is refused.
const (
	// RefuseTLS: the TLS handshake failed (no or an untrusted client
	// certificate, a TLS protocol error).
	RefuseTLS RefuseReason = iota
	// RefuseSecret: the shared-secret proof was wrong or missing (or sent
	// to a node configured without a secret).
	RefuseSecret
	// RefuseIdentity: the node ID the peer claims is not the one its
	// certificate names (ErrIdentity).
	RefuseIdentity
	// RefuseProtocol: not a Muster transport peer, another protocol
	// version, a malformed handshake message, a dial meant for another
	// node, or this node's own ID.
	RefuseProtocol
	// RefuseTimeout: HandshakeTimeout passed before the handshake ended.
	RefuseTimeout
	// RefuseIO: the connection failed or the peer closed it during the
	// handshake.
	RefuseIO
	// NumRefuseReasons is the number of reasons.
	NumRefuseReasons
)

var refuseNames = [NumRefuseReasons]string{"tls", "secret", "identity", "protocol", "timeout", "io"}

// String returns the reason's label: "tls", "secret", "identity",
// "protocol", "timeout" or "io" (the label of the Prometheus metric).
func (r RefuseReason) String() string {
	if r < 0 || r >= NumRefuseReasons {
		return "unknown"
	}
	return refuseNames[r]
}

// refusal tags a handshake error with its reason; its message is the
// wrapped error's.
type refusal struct {
	why RefuseReason
	err error
}

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

func refuse(why RefuseReason, err error) error { return &refusal{why: why, err: err} }

// refuseReasonOf classifies the error of a refused inbound handshake.
func refuseReasonOf(err error, timedOut bool) RefuseReason {
	var r *refusal
	switch {
	case timedOut || errors.Is(err, os.ErrDeadlineExceeded):
		return RefuseTimeout
	case errors.Is(err, ErrIdentity):
		return RefuseIdentity
	case errors.As(err, &r):
		return r.why
	}
	return RefuseIO
}
