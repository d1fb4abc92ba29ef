package distro

import "errors"

// Sentinel errors of the replicator. Match them with errors.Is; returned errors wrap them with
// context.
var (
	// ErrNotOwner is returned by Put and Delete when another node owns the key (HRW for beat
	// records, the opener for session records). The registry forwards the write to Owner(key).
	ErrNotOwner = errors.New("distro: not the owner")
	// ErrNotFound is returned by Delete for a key this node holds no record of.
	ErrNotFound = errors.New("distro: record not found")
	// ErrClosed is returned by calls on a closed Replicator or membership.
	ErrClosed = errors.New("distro: closed")
	// ErrNotReady is answered to peers' verify and snapshot requests before this node's own load
	// finished (a half-loaded node must not serve its partial state as a snapshot).
	ErrNotReady = errors.New("distro: not ready")
	// ErrInvalidConfig is wrapped by Config.Validate and MemberlistConfig.Validate errors.
	ErrInvalidConfig = errors.New("distro: invalid config")
	// ErrInvalidRecord is wrapped by errors about malformed records and messages.
	ErrInvalidRecord = errors.New("distro: invalid record")
	// ErrNotStarted is returned by Memberlist key rotation calls before Start.
	ErrNotStarted = errors.New("distro: not started")
	// ErrStarted is returned by a second Start.
	ErrStarted = errors.New("distro: already started")
	// ErrNotMember is answered to a sync, repair, verify or snapshot request whose sender (the
	// node ID the transport authenticated) is not a current member here. It is retryable: a node
	// that has just joined may reach a peer before the peer's membership lists it (the loader
	// retries within LoadTimeout, syncs retry with backoff, verify runs again next round).
	ErrNotMember = errors.New("distro: sender is not a member")
	// ErrUnknownMember is returned by Memberlist.Addr for an ID that is not a live member.
	ErrUnknownMember = errors.New("distro: unknown member")
)
