package transport

import "errors"

// Errors returned by transports.
var (
	ErrClosed      = errors.New("transport: closed")
	ErrUnreachable = errors.New("transport: peer unreachable")
	ErrNoHandler   = errors.New("transport: no handler for message kind")
	ErrTooLarge    = errors.New("transport: message too large")
)

// RemoteError is an error a peer's handler returned.
type RemoteError struct {
	Node string // the peer
	Msg  string // its error text
}

func (e *RemoteError) Error() string { return "transport: remote " + e.Node + ": " + e.Msg }
