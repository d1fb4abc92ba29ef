package transport

import "errors"

// Errors returned by transports.
var (
	ErrClosed      = errors.New("transport: closed")
	ErrUnreachable = errors.New("transport: peer unreachable")
	ErrNoHandler   = errors.New("transport: no handler for message kind")
	ErrTooLarge    = errors.New("transport: message too large")

	// ErrInvalidConfig wraps every configuration error; the message names
	// the field and the rule.
	ErrInvalidConfig = errors.New("transport: invalid config")
	// ErrNodeExists is returned by [MemNetwork.Node] for an ID whose
	// transport is still open.
	ErrNodeExists = errors.New("transport: node already exists")
	// ErrNotPending is returned by the manual-delivery methods of
	// [MemNetwork] for an envelope ID that is not queued.
	ErrNotPending = errors.New("transport: no pending message with that id")
	// ErrHandshake wraps every reason a TCP peer was refused during the
	// handshake (wrong or missing secret, wrong node, bad hello).
	ErrHandshake = errors.New("transport: handshake failed")
	// ErrMalformed wraps every reason a received frame was rejected.
	ErrMalformed = errors.New("transport: malformed frame")
	// ErrBusy is returned by a TCP Request when the peer runs MaxInflight
	// handlers for the connection and MaxQueued more messages are waiting,
	// or its handlers for the connection hold MaxQueuedBytes of bodies.
	ErrBusy = errors.New("transport: peer busy")
	// ErrNotStarted is returned by calls on a TCP transport before Start.
	ErrNotStarted = errors.New("transport: not started")
	// ErrStarted is returned by a second TCP.Start.
	ErrStarted = errors.New("transport: already started")
	// ErrIdentity wraps (with ErrHandshake) the refusal of a TLS peer whose
	// verified certificate does not name the node ID it claims, or that
	// presented no verified certificate where one is required.
	ErrIdentity = errors.New("transport: peer identity not proven by its certificate")
	// ErrSelfConnect is the dial error (wrapped in ErrUnreachable) of a TCP
	// connection whose local and remote addresses are equal: a
	// simultaneous open onto itself, dropped at once.
	ErrSelfConnect = errors.New("transport: connection to itself")
)

// RemoteError is an error a peer's handler returned.
type RemoteError struct {
	Node string // the peer
	Msg  string // its error text
}

func (e *RemoteError) Error() string { return "transport: remote " + e.Node + ": " + e.Msg }
