package distro

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
