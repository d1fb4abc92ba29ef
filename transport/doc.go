// Package transport carries messages between Muster nodes.
//
// # Usage
//
//	cfg := transport.DefaultTCPConfig()
//	cfg.NodeID = "n1"
//	cfg.Secret = secret // or TLS (mutual); one of them is required
//	cfg.Resolve = func(id string) (string, error) { return addrs[id], nil }
//	t, err := transport.NewTCP(cfg) // validates, starts nothing
//	t.Handle(kind, func(ctx context.Context, from string, body []byte) ([]byte, error) {
//		return answer, nil // from is the node ID the handshake authenticated
//	})
//	err = t.Start(ctx) // listens
//	resp, err := t.Request(ctx, "n2", kind, body)
//	err = t.Send(ctx, "n2", kind, body) // one-way, best effort
//	t.Handle(kind, nil)                 // removes the handler
//	err = t.Close()
//
// Tests use a MemNetwork instead, in memory, with faults on demand:
//
//	var net transport.MemNetwork // the zero value is ready
//	a, err := net.Node("a")      // a *MemTransport, the same interface
//	net.Partition("a", "b")
//	net.Heal()
//
// Every component that installs a handler removes it on Close.
//
// # Model
//
// A [Transport] addresses nodes by ID. It offers a request/response call
// ([Transport.Request]) and a best-effort one-way message
// ([Transport.Send]); the receiver runs the [Handler] installed for the
// message's [Kind]. Handler errors reach the caller as a *[RemoteError]; a
// kind without a handler is answered with [ErrNoHandler]. Bodies are
// copied: sender and receiver never share memory. There is no ordering
// guarantee between messages, even from one sender: handlers run
// concurrently, unless the kind is ordered (below).
//
// # Ordered kinds
//
// A kind installed with [OrderedHandler.HandleOrdered] (both
// implementations have it; find it by type assertion) is ordered: its
// messages (one-way and requests) from one peer over one connection are
// handled one at a time, in arrival order, and messages one goroutine
// sends to one peer arrive in the order it sent them. That is the order a
// replication protocol needs for its one-way stream (raftstore's Raft
// message batches are an ordered kind): without it, a later message
// overtakes an earlier one under load and the receiver sees a gap. What is
// not ordered: messages of different kinds, of one kind from different
// peers, from different goroutines at once (their order is the order they
// reach the connection), across connections (a reconnect, the dial
// tie-break, a TLS reload), and a node's messages to itself. A message the
// receiver sheds (see Load) leaves a gap.
//
// Each ordered kind has, per connection, a queue and at most one goroutine
// serving it (started when a message arrives at an empty queue, gone when
// it is empty again), besides the connection's MaxInflight handlers.
// Head-of-line blocking is confined to the kind on that connection: a
// handler that blocks holds up the later messages of its kind from that
// peer, while other kinds, and the same kind from other peers, are handled
// as usual. Its queue takes at most MaxQueued messages and, with the
// message running, half of MaxQueuedBytes (an empty queue takes any
// message); its bytes count in the connection's MaxQueuedBytes too, so a
// blocked ordered handler leaves the other kinds at least half the
// connection's byte budget. Beyond either bound a request of the kind is
// answered with ErrBusy and a one-way message dropped, counted in
// TCPStats.Shed (and ShedBytes). Close cancels the running handler's
// context and drops what is queued (queued requests fail with
// ErrUnreachable at the caller, as for any connection that closes).
// Ordered handlers should be quick, as every handler should: a slow one
// lowers its kind's throughput from that peer to one message at a time.
//
// Two implementations share one behaviour suite:
//
//   - [TCP], for production: one multiplexed connection per peer pair,
//     mutual TLS or a shared-secret handshake (one of them is required; see
//     Security below).
//   - [MemNetwork] and its [MemTransport]s, for tests: in memory, with
//     partitions, per-link drop rate and delay, and manual delivery.
//
// # Concurrency
//
// Every method of both implementations is safe for concurrent use.
// Handlers run in goroutines owned by the receiving transport, possibly
// many at once; their context ends when the caller's deadline passes, when
// the connection closes or when the transport closes. Close cancels them
// and returns only once every goroutine the transport started (handlers
// included) has returned, so a handler must honour its context. Close is
// idempotent; afterwards every call fails with [ErrClosed], and requests
// that were waiting fail with [ErrClosed] too.
//
// # Errors
//
//   - [ErrUnreachable] (wrapping the cause): the peer is unknown, down,
//     refused the handshake, partitioned, or the connection died while the
//     request was pending. Pending requests fail with it as soon as the
//     connection's reader sees the connection end, not when their context
//     ends.
//   - [ErrTooLarge]: a body (request, one-way or response) above the limit
//     (4 MiB by default).
//   - [ErrBusy] (TCP): the peer's handler queue for the connection is full.
//   - ctx.Err(): the caller's context ended first. A request whose remote
//     handler failed after the caller's deadline passed reports the
//     deadline, not the handler's error.
//
// # MemNetwork
//
// The zero value is ready; set Clock, Seed and MaxMessageSize before the
// first call. [MemNetwork.Node] creates a node; a closed node's ID can be
// created again (a restart).
//
//   - Reachability: [MemNetwork.Partition] (both ways),
//     [MemNetwork.PartitionOneWay], [MemNetwork.Isolate] and
//     [MemNetwork.Heal] (removes all of them). Request and Send to an
//     unreachable node (unknown, closed, partitioned, isolated) fail at once
//     with ErrUnreachable. Reachability is checked again when a delayed or
//     queued message is delivered, and for the response: a partition that
//     starts meanwhile loses the message and fails a waiting request with
//     ErrUnreachable.
//   - Links: [MemNetwork.SetLink] gives one direction a drop rate, drawn
//     from a source seeded by Seed (same seed, same send order: same drops),
//     and a delay run on Clock (a clockwork fake clock makes it
//     deterministic: advance the clock to deliver). A one-way message lost
//     to the drop rate is silent (Send returns nil); a lost request fails at
//     once with ErrUnreachable rather than hanging until its context ends.
//   - Manual delivery ([MemNetwork.SetManual]): requests and one-way
//     messages are queued instead of delivered; [MemNetwork.Pending] lists
//     them as [Envelope]s, [MemNetwork.WaitPending] waits for them, and
//     [MemNetwork.Deliver], [MemNetwork.Drop], [MemNetwork.Duplicate] and
//     [MemNetwork.DeliverAll] release them in any order (reordering is
//     delivering in a different order). Dropping a request fails its caller
//     with ErrUnreachable; a duplicated request runs the handler twice and
//     the caller sees the first response.
//   - Responses are never queued, delayed or dropped by the drop rate: they
//     reach the caller as soon as the handler returns, unless the way back
//     is partitioned or the caller closed.
//   - Ordered kinds: messages of an ordered kind from one sender node are
//     handled one at a time in the order the network hands them over: send
//     order (per goroutine), also through a link delay (a message due
//     brings along every earlier message of an ordered kind its sender
//     sent to the node that the network still holds, so a delay that
//     shrinks never reorders them; one removed, SetLink to zero, lets new
//     messages overtake those still delayed).
//     The fault injection stays explicit: the drop rate leaves gaps, and in
//     manual mode Deliver, Drop and Duplicate decide the order, so a test
//     reorders an ordered kind on purpose by delivering out of order. The
//     queues are not bounded (MemNetwork sheds nothing).
//   - [MemNetwork.Stats] counts messages and body bytes per direction
//     (requests, one-way messages and responses), for cost-per-round
//     figures.
//
// # TCP
//
// [NewTCP] validates and copies a [TCPConfig]; [TCP.Start] listens
// ([TCP.Addr] gives the actual port when ListenAddr has port 0); peers are
// dialled on the first call to them, at the address Resolve returns.
//
// Wire format. After the handshake, both directions carry frames:
//
//	uint32 big-endian length of what follows (header + body)
//	header: a msgpack array [flags, kind, request id, timeout µs, error code]
//	body:   raw bytes (for an error response, the error text)
//
// Flags are one of request, response, one-way, go-away, ping and pong, plus
// error on a response (ping and pong only on a protocol version 2
// connection; see Versions). A request carries the caller's remaining time in microseconds
// (0: no deadline), from which the peer derives its handler's deadline.
// Decoders accept longer header arrays (for later versions) as long as
// every field is an unsigned integer. A frame longer than MaxFrameSize plus
// the header, a malformed header, an unknown flag combination or kind 0
// closes the connection with a logged reason; nothing in the decoder
// panics (it is fuzzed). Writes go through one writer goroutine per
// connection that batches frames in a buffer and flushes when its queue
// drains.
//
// Handshake. On a new connection (inside TLS, if configured) the client
// sends a hello with its ID, the ID it meant to reach and a random 32-byte
// nonce; the server checks the ID is its own and answers with its ID, its
// nonce and a proof; the client checks the server's proof and sends its
// own; the server checks it and sends a status (accepted, or duplicate:
// see below). A proof is HMAC-SHA256 keyed by the shared Secret over both
// nonces, both IDs and a per-direction label, compared in constant time;
// the secret never crosses the wire and fresh nonces defeat replay. A side
// with a Secret refuses a peer without it and the other way round; refusals
// are logged by the server. Each handshake message is a length-prefixed
// msgpack map of at most 4 KiB, decoded with the model package's hardened
// decoder. The handshake (TLS included) is bounded by HandshakeTimeout from
// the accept, and at most MaxHandshakes inbound handshakes run at once,
// MaxHandshakesPerIP per source address. A connection from an address at
// MaxHandshakesPerIP is closed unread. When all MaxHandshakes slots are
// taken, a connection from an address holding fewer slots than the one
// holding the most takes the slot of that address's oldest pending
// handshake, which is closed; otherwise it is closed unread. Either way
// the closed connection is counted in TCPStats.Limited and logged with
// exponential spacing. So addresses that hold slots idle cannot lock out
// a member from another address: a member's handshake is displaced only
// if the attacker opens enough connections to cycle through every slot
// before the member's handshake completes (one or two round trips), and a
// displaced member retries with backoff.
// With TLS the same tls.Config serves both sides; for mutual TLS set
// ClientAuth to tls.RequireAndVerifyClientCert. With TLS, after the TLS
// handshake each side checks that the other's verified certificate names
// the node ID it claims (VerifyPeerID; by default the subject common name,
// a DNS name or a URI must equal the ID), as etcd's
// --peer-cert-allowed-cn does, but per node.
//
// Versions. Opening hellos carry version 1 (which first-version nodes
// require) and the highest protocol version the sender speaks in a field
// those nodes skip; a connection runs the lower of both. Version 2 adds
// ping and pong frames, the idle deadline and the takeover probe's ping.
// On a version-1 connection (a node not yet upgraded, during a rolling
// upgrade) no ping or pong is sent, since a version-1 node closes the
// connection on a frame type it does not know, and so there is no idle
// deadline (as in version 1), and the takeover probe is the version-1
// no-op frame.
//
// Counters (dials, handshakes accepted and refused by [RefuseReason],
// frames and bytes each way, messages shed, open connections) are
// available from [TCP.Stats]: atomic counters the transport keeps anyway,
// read without stopping it. Package registry/metrics exports them to
// Prometheus (docs/monitoring.md lists the metrics).
//
// Paths. With certificate identities (mutual TLS) a node calls a peer
// over one connection per pair, whichever side dialled it, chosen by the
// tie-break below. Without them (a Secret alone, SecretIdentity, Insecure
// with Resolve) a node's calls go only over connections it dialled to the
// address Resolve gives, and the connections peers dialled carry only the
// peers' calls (a pair may then hold two connections); when a peer dials
// in while this node holds a path to it, that path is probed as below and
// closed if silent, so that the next call redials. A node without Resolve
// calls over the connections peers dialled only with certificate
// identities, or Insecure.
//
// Dial tie-break. Both nodes of a pair may dial each other at the same
// time. An inbound connection never takes over a live one: a server that
// holds a connection to the node a dialler claims sends a ping on it and
// waits up to 250 ms for a frame to arrive on it (a pong, or anything
// else). If none does, the held connection is dead (the node restarted,
// on the same host or elsewhere, or its host is gone) and is closed, and
// the new connection installed: a node that restarts on a new address is
// not locked out. If the held connection answers, the dial is answered
// "duplicate" (counted in TCPStats.Kept; both sides log it at Warn, with
// exponential spacing) and the dialler uses the held connection. So a
// holder of the secret that claims a connected, live node's ID gets no
// path to its traffic. On a version-1 connection the probe is a no-op
// frame and the server waits up to 250 ms for the held connection to close
// (a restarted host resets it); a node that restarted elsewhere is then
// refused until the idle peer's connection goes. When both dials complete at once,
// each node installs its own outbound connection by the tie-break: the one
// dialled by the lower node ID (byte-wise string order) is kept. A
// replaced connection is retired gracefully rather than cut: each side
// stops sending new requests on it and sends a go-away frame, and it
// closes once both sides have sent go-away, no request of either side
// awaits a response and no handler runs, so no call fails because of the
// tie-break (or of [TCP.ReloadTLS], which retires every connection the
// same way).
//
// Failure behaviour. When a connection ends (peer closed or died, read or
// write error, malformed input), pending requests on it fail at once with
// ErrUnreachable and its handlers' contexts end. The next call dials again.
// A failed dial starts a backoff: the next dial to that peer waits
// ReconnectMin, doubling per consecutive failure up to ReconnectMax, with
// ±25% jitter from Rand, timed on Clock; calls meanwhile fail at once with
// ErrUnreachable wrapping the last dial error. A connection (of version
// 2) on which nothing arrives for IdleTimeout gets a ping, which every
// peer answers at once; if another IdleTimeout passes in silence, it
// closes. So a healthy
// idle connection stays up (a ping and a pong per IdleTimeout, 30 s by
// default), and a black-holed or stalled peer (one that stops in the middle
// of a frame included) is disconnected after two to three IdleTimeouts.
// Give requests a deadline all the same. A dial that the kernel connects
// to itself (a simultaneous open onto our own ephemeral port, when nothing
// listens at the address) is aborted at once with ErrSelfConnect, with a
// reset rather than a TIME_WAIT, so the port stays free for its owner.
//
// Load. Each connection runs at most MaxInflight handlers at once; further
// messages wait in arrival order in a queue of MaxQueued, and the bodies
// of running and queued messages hold at most MaxQueuedBytes (64 MiB; a
// message is always accepted when the connection holds none). Beyond
// either a request is answered with ErrBusy and a one-way message is
// dropped; both are counted (TCPStats.Shed, and TCPStats.ShedBytes for
// the byte budget) and logged with exponential spacing (1st, 2nd, 4th,
// ...). A sender that needs every one-way message handled must
// bound what it has outstanding, or use requests. Ordered kinds have
// queues of their own, bounded as described under Ordered kinds. Senders
// block (up to their context) when a connection's write queue of
// WriteQueue frames is full.
//
// Time. Backoff runs on the injected clock. Socket and handler deadlines
// are derived from contexts, which use real time, and so are the handshake
// deadline, the idle deadline and the 250 ms wait for a probed connection.
//
// # Security
//
// Threat model: members hold credentials (a certificate from the cluster's
// CA, or the shared Secret); anyone else who can reach the port is hostile,
// and so is every byte a peer sends until it has been checked.
//
//   - Secure by default. [TCPConfig.Validate] refuses a config with neither
//     Secret nor TLS unless Insecure is set (for tests), and TLS that does
//     not require and verify client certificates unless a Secret with
//     SecretIdentity says the Secret alone identifies peers (or Insecure).
//     ListenAddr defaults to 127.0.0.1:0: listening beyond loopback must
//     be asked for.
//   - What the Secret gives: only holders complete the handshake (HMAC over
//     fresh nonces both ways, constant-time compare, the secret never
//     crosses the wire); everyone else is refused before a single frame is
//     read. Without TLS it also encrypts: every connection runs TLS 1.3,
//     both sides presenting a certificate of an Ed25519 key derived from
//     the Secret (HKDF-SHA256) and refusing any other key, with ephemeral
//     session keys, so nothing is readable or alterable on the wire. What
//     it does not give: identity. Every holder of the secret is trusted as
//     every node: it can claim any node ID, and what it sends is accepted
//     as coming from that node. Such a claim never takes a path away from
//     the real node: without certificate identities a node sends its calls
//     only over connections it dialled to the address Resolve gives
//     (without Resolve it makes no calls), and a connection dialled in is
//     served but never becomes the path to the node it claims, however
//     long the real node's link stalls. Prefer mutual TLS.
//   - What mutual TLS gives: encryption, and identity bound to a
//     certificate: a peer's claimed node ID must match its verified
//     certificate (VerifyPeerID, by default the common name, a DNS name or a
//     URI), on both sides, so a certificate issued to n3 cannot act as n2.
//     The Secret may be set as well (both are then required). Rotate
//     certificates with GetCertificate/GetClientCertificate or
//     [TCP.ReloadTLS].
//   - Bounded cost of unauthenticated peers: a handshake deadline
//     (HandshakeTimeout, 5 s) from the accept; at most MaxHandshakes (256)
//     handshakes in progress, MaxHandshakesPerIP (16) per source address;
//     handshake messages of at most 4 KiB. An attacker with many source
//     addresses (all of 127.0.0.0/8 on loopback) that fills MaxHandshakes
//     does not lock members out: when the slots are full, a newcomer from
//     an address holding fewer takes the slot of the oldest pending
//     handshake of the address holding the most. To delay a member it must
//     open connections fast enough to displace every slot within the
//     member's handshake, from at least MaxHandshakes/MaxHandshakesPerIP
//     addresses; a displaced member retries with backoff.
//   - Bounded cost of members: frames of at most MaxFrameSize (4 MiB) plus
//     the header; a frame's buffer grows as its bytes arrive (64 KiB at
//     first, then doubling), so a declared size costs at most 64 KiB until
//     its bytes arrive; IdleTimeout (30 s) disconnects a peer that stalls;
//     MaxInflight (1024) handlers and MaxQueued (16384) queued messages per
//     connection, whose bodies hold at most MaxQueuedBytes (64 MiB). Each
//     authenticated connection holds a 64 KiB read buffer and a 64 KiB
//     write buffer, and the number of connections (under distinct node
//     IDs) a holder of the Secret may open is not bounded here: with a
//     Secret alone, members are trusted not to exhaust each other.
//   - Malformed input closes the connection with a logged reason, never a
//     panic; the frame, hello and stream decoders are fuzzed.
package transport
