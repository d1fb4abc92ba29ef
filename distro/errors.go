package distro

import (
	"errors"

	"github.com/muster-io/muster/distro/membership"
)

// Sentinel errors of the replicator. Match them with errors.Is; returned errors wrap them with
// context.
var (
	// ErrNotOwner is returned by Put and Delete when another node owns the key (HRW for beat
	// records, the opener for session records). The registry forwards the write to Owner(key).
	ErrNotOwner = errors.New("distro: not the owner")
	// ErrNotFound is returned by Delete for a key this node holds no record of.
	ErrNotFound = errors.New("distro: record not found")
	// ErrClosed is returned by calls on a closed Replicator or membership.
	ErrClosed = membership.ErrClosed
	// ErrNotReady is answered to peers' verify and snapshot requests before this node's own load
	// finished (a half-loaded node must not serve its partial state as a snapshot).
	ErrNotReady = errors.New("distro: not ready")
	// ErrInvalidConfig is wrapped by Config.Validate errors, and by those of the gossip
	// membership's config (package distro/gossip).
	ErrInvalidConfig = membership.ErrInvalidConfig
	// ErrInvalidRecord is wrapped by errors about malformed records and messages.
	ErrInvalidRecord = errors.New("distro: invalid record")
	// ErrNotStarted is returned by the gossip membership's key rotation calls before Start.
	ErrNotStarted = membership.ErrNotStarted
	// ErrStarted is returned by a second Start.
	ErrStarted = membership.ErrStarted
	// ErrNotMember is answered to a sync, repair, verify or snapshot request whose sender (the
	// node ID the transport authenticated) is not a current member here. It is retryable: a node
	// that has just joined may reach a peer before the peer's membership lists it (the loader
	// retries within LoadTimeout, syncs retry with backoff, verify runs again next round).
	ErrNotMember = errors.New("distro: sender is not a member")
	// ErrUnknownMember is returned by the gossip membership's Addr for an ID that is not a
	// live member.
	ErrUnknownMember = membership.ErrUnknownMember
)
