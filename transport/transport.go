package transport

import "context"

// Kind names a message type. Each kind has at most one handler per
// transport. Ranges are reserved so that packages sharing a transport never
// collide:
//
//	1–63     distro (sync, verify, load)
//	64–95    registry (forwarded writes and beats)
//	96–127   raftstore (Raft messages, snapshot chunks, forwarded entries)
//	128–255  embedders
//
// Kind 0 is invalid.
type Kind uint16

// Handler serves one message. For a request the returned bytes are the
// response body and a non-nil error reaches the caller as a *RemoteError;
// for a one-way message both are discarded.
//
// Handlers may be called concurrently, from several goroutines, for the
// same or different peers (the handler of an ordered kind, see
// OrderedHandler, one message at a time per connection). The context ends
// when the request's deadline passes, the connection closes or the
// transport closes. A handler must not retain body after it returns.
type Handler func(ctx context.Context, from string, body []byte) ([]byte, error)

// Transport carries messages between nodes, addressed by node ID.
//
// All methods are safe for concurrent use.
type Transport interface {
	// LocalID returns this node's ID.
	LocalID() string

	// Handle installs h for kind, replacing any earlier handler; a nil h
	// removes the handler. Messages of a kind with no handler are answered
	// with ErrNoHandler. It does not block. Handlers already running are
	// not waited for.
	Handle(kind Kind, h Handler)

	// Request sends body to node `to` and waits for the response. It
	// blocks until the response arrives, ctx ends (ctx's deadline is also
	// the peer's), or the transport closes. Errors: ErrClosed,
	// ErrUnreachable (wrapping the cause), ErrTooLarge, a *RemoteError, or
	// ctx.Err().
	Request(ctx context.Context, to string, kind Kind, body []byte) ([]byte, error)

	// Send queues body for node `to` without waiting for it to be handled.
	// Delivery is best effort: a nil error means accepted for sending, not
	// delivered. It blocks at most until ctx ends while a connection is
	// being set up. The caller must not modify body after Send returns.
	Send(ctx context.Context, to string, kind Kind, body []byte) error

	// Close stops the transport: new calls fail with ErrClosed, pending
	// requests fail, running handlers see their context cancelled, and
	// Close returns once every goroutine the transport started has
	// returned. It is idempotent.
	Close() error
}

// SizeLimiter is implemented by transports that bound the size of a message
// body. Callers that may produce large bodies (raftstore's Raft traffic)
// find the limit by type assertion and fall back to DefaultMaxMessageSize.
type SizeLimiter interface {
	// MaxMessageSize returns the largest body, in bytes, that Request and
	// Send accept; larger ones fail with ErrTooLarge.
	MaxMessageSize() int
}
