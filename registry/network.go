package registry

import (
	"context"

	"github.com/muster-io/muster/transport"
)

// Transport carries what the registry sends between the nodes of a cluster
// itself: beat writes forwarded to their owner, and beat leases handed to
// a key's new owner. Any transport.Transport implements it; the one the
// Replicator runs over is the usual choice. The registry installs its
// handlers (kinds 64 and 65) at Start and removes them at Close; the
// transport stays the caller's, to close after the registry.
//
// Both methods may be called concurrently.
type Transport interface {
	// Request sends body to node to and waits for the answer, or until
	// ctx ends; an unreachable node is an error matching
	// transport.ErrUnreachable.
	Request(ctx context.Context, to string, kind transport.Kind, body []byte) ([]byte, error)
	// Handle installs h for kind (nil removes it). It does not block.
	Handle(kind transport.Kind, h transport.Handler)
}
