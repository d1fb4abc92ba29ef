package xds

import "errors"

// ErrClosed is returned by the stream callbacks once Close has been called:
// new xDS streams are refused.
var ErrClosed = errors.New("xds: closed")

// ErrTooManyNames ends a stream that subscribes to more than
// Config.MaxNamesPerStream resource names: the client is sent
// codes.ResourceExhausted.
var ErrTooManyNames = errors.New("xds: too many resource names on one stream")
