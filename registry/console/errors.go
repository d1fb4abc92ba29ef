package console

import "errors"

// Errors an Authorize hook returns, matched with errors.Is. Any other error
// from the hook is taken as ErrForbidden.
var (
	// ErrUnauthenticated: the request carries no valid credentials (no
	// token, an expired or unknown one). The console answers 401, and a page
	// shows the login form.
	ErrUnauthenticated = errors.New("console: unauthenticated")
	// ErrForbidden: the user is known but may not do this (read the
	// namespace, or write to it). The console answers 403.
	ErrForbidden = errors.New("console: forbidden")
	// ErrInvalidConfig: New was given an invalid Config; the message names
	// the field and its rule.
	ErrInvalidConfig = errors.New("console: invalid config")
	// ErrClosed: the console has been closed.
	ErrClosed = errors.New("console: closed")
)

// Internal errors, shown to the user as they read.
var (
	errNoNode      = errors.New("console: no node to read from")
	errNoDistro    = errors.New("console: the node runs no Distro replicator")
	errUnknownNode = errors.New("console: no such node in the console")
)
