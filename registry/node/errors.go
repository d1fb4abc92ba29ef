package node

import "errors"

var (
	// ErrInvalidConfig is matched by Validate's errors, which name every
	// field that breaks its rule.
	ErrInvalidConfig = errors.New("node: invalid config")
	// ErrStarted is returned by a second Start.
	ErrStarted = errors.New("node: already started")
	// ErrNotStarted is returned by calls that need a started node.
	ErrNotStarted = errors.New("node: not started")
	// ErrClosed is returned by Start after Close.
	ErrClosed = errors.New("node: closed")
)
