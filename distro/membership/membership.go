package membership

import "errors"

// MaxIDLen is the longest node ID (bytes).
const MaxIDLen = 256

// Member is one live node of the cluster.
type Member struct {
	ID   string // node ID, unique in the cluster; the transport addresses nodes by it
	Addr string // transport address, for transport.TCPConfig.Resolve (may be empty in tests)
}

// Membership tells which nodes are alive.
//
// Concurrency contract: all methods are safe for concurrent use.
type Membership interface {
	// Members returns the live members, this node included, in no particular order. It does not
	// block. The slice is the caller's.
	Members() []Member

	// Subscribe registers fn, called with the full live member list on every change. Calls are
	// serialized per subscriber and made from the membership's own goroutine (or, for Static,
	// synchronously from the caller of Set); fn must not block long and must not call Subscribe
	// or cancel. cancel removes fn; after it returns fn is not called again. cancel is idempotent.
	Subscribe(fn func([]Member)) (cancel func())
}

// Errors shared by distro and its memberships (distro re-exports them: match distro.ErrClosed
// and so on).
var (
	// ErrClosed is returned by calls on a closed Replicator or membership.
	ErrClosed = errors.New("distro: closed")
	// ErrInvalidConfig is wrapped by the Validate errors of distro's and the memberships'
	// configurations.
	ErrInvalidConfig = errors.New("distro: invalid config")
	// ErrNotStarted is returned by a gossip membership's key rotation calls before Start.
	ErrNotStarted = errors.New("distro: not started")
	// ErrStarted is returned by a second Start.
	ErrStarted = errors.New("distro: already started")
	// ErrUnknownMember is returned by a gossip membership's Addr for an ID that is not a live
	// member.
	ErrUnknownMember = errors.New("distro: unknown member")
)
