package transport

// OrderedHandler is implemented by transports that can hand the messages
// of a kind to its handler in order. Both [TCP] and [MemTransport]
// implement it; a caller finds it by type assertion and falls back to
// [Transport.Handle] (no order) when a transport, such as a wrapper that
// embeds a Transport, does not.
type OrderedHandler interface {
	// HandleOrdered installs h for kind, replacing any earlier handler,
	// like Handle (a nil h removes it), and makes the kind ordered: the
	// messages of kind (one-way and requests) that arrive from one peer
	// over one connection are handled one at a time, in arrival order.
	// Messages one goroutine sends to one peer with Send or Request arrive
	// in the order it sent them while they travel over one connection;
	// across a reconnect, a tie-break or a TLS reload (a new connection)
	// there is no order, and messages a node sends to itself have none.
	// What the transport drops (the peer's load shedding, a MemNetwork drop
	// rate) leaves a gap, not a reordering.
	//
	// Each ordered kind has its own queue per connection, served by at
	// most one goroutine, so a handler that blocks delays only the later
	// messages of its kind from that connection: other kinds and other
	// connections go on. Its queue is bounded (see the package
	// documentation, Ordered kinds); beyond the bound messages of the kind
	// are shed as under overload. It does not block. Handlers already
	// running are not waited for.
	HandleOrdered(kind Kind, h Handler)
}
