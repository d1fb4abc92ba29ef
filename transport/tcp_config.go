package transport

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/muster-io/muster/internal/cfgerr"
)

// TCPConfig configures a [TCP] transport. Set NodeID, Resolve and Secret or TLS; every other
// field left zero takes its default ([DefaultTCPConfig]), as everywhere in this module, and
// what can be turned off says how ([NoQueue]).
type TCPConfig struct {
	// NodeID is this node's ID, 1 to 255 bytes. Required.
	NodeID string
	// ListenAddr is the host:port to listen on; port 0 picks a free port
	// (see TCP.Addr). Default 127.0.0.1:0, loopback only: listening on
	// other interfaces (or the wildcard 0.0.0.0) must be asked for.
	ListenAddr string
	// AdvertiseAddr is the address peers should dial, if it differs from
	// the listen address (NAT, 0.0.0.0). Informational: it is returned by
	// TCP.AdvertiseAddr for the embedder's membership layer.
	AdvertiseAddr string
	// Resolve maps a node ID to the address to dial. Nil means this node
	// never dials: it answers the calls of peers that dialled it, and, if
	// their node IDs are bound to certificates (mutual TLS), calls them
	// over those connections. With a Secret alone (or SecretIdentity) a
	// node without Resolve makes no calls (ErrUnreachable): whoever dialled
	// in proved the Secret, not the ID it claims, and its connection must
	// not become the path to the node it claims (a stalled link would
	// hand that node's traffic to an impostor). Insecure lifts that rule.
	Resolve func(node string) (addr string, err error)
	// TLS, when set, wraps every connection in TLS with this config, used
	// for both the server and the client side. For mutual TLS set
	// Certificates, RootCAs, ClientCAs and ClientAuth =
	// tls.RequireAndVerifyClientCert. If ServerName is empty the host of the
	// dialled address is used. A peer's verified certificate must name the
	// node ID it claims (see VerifyPeerID). Without a Secret, a peer without
	// a verified certificate is refused unless Insecure is set. Certificates
	// can be rotated on a running transport with GetCertificate and
	// GetClientCertificate, or with [TCP.ReloadTLS].
	TLS *tls.Config
	// VerifyPeerID checks that a peer's verified TLS certificate (the leaf
	// of its verified chain) belongs to the node ID it claims in the
	// handshake; an error refuses the connection. It runs on both sides
	// (the server checks the client's claim, the client checks that the
	// node it dialled answered). Nil means [DefaultVerifyPeerID]: the ID
	// must equal the certificate's subject common name, one of its DNS
	// names or one of its URIs.
	VerifyPeerID func(node string, cert *x509.Certificate) error
	// Secret, when set (at least 16 bytes), must be shared by every node:
	// the handshake proves knowledge of it both ways with HMAC-SHA256 over
	// fresh nonces, never sending it. A peer without it is refused and
	// logged. Without TLS, the Secret also encrypts: every connection runs
	// TLS 1.3, both sides presenting a certificate of a key derived from
	// the Secret (HKDF-SHA256 to an Ed25519 key) and refusing a peer whose
	// certificate has another key, so a process without the Secret can
	// neither read nor alter the traffic. It authenticates membership, not
	// identity: every holder of the secret can claim every node ID. Such a
	// claim never takes a path away from the real node: without
	// certificate identities, a node sends its calls only over connections
	// it dialled to the address Resolve gives (see the package
	// documentation). Prefer mutual TLS.
	Secret []byte
	// SecretIdentity accepts TLS that does not require and verify a client
	// certificate (ClientAuth below tls.RequireAndVerifyClientCert), with a
	// Secret: a peer without a verified certificate is then authenticated
	// by the Secret alone, which any holder can use to claim any node ID,
	// and connections are handled as without certificates (each node
	// sends over the connections it dialled). Without it, Validate refuses
	// such TLS, and a peer presenting no verified certificate is refused.
	// Default false.
	SecretIdentity bool
	// Insecure allows a transport with neither Secret nor TLS (or with TLS
	// that verifies no client certificate and no Secret): anyone who can
	// reach the port can then join as any node, send any message and read
	// every response. Without Resolve it also lets the connections peers
	// dialled carry this node's calls although their node IDs are not
	// bound to certificates (see Resolve). For tests on loopback only.
	// Default false.
	Insecure bool
	// MaxFrameSize is the largest message body in bytes; larger requests,
	// responses and one-way messages fail with ErrTooLarge, and a peer
	// sending a larger frame is disconnected. Default 4 MiB.
	MaxFrameSize int
	// DialTimeout bounds one TCP connect. Default 5 s.
	DialTimeout time.Duration
	// HandshakeTimeout bounds the TLS and transport handshakes, counted
	// from the accept (or the connect) before the first byte: a peer that
	// does not complete the handshake in time is disconnected. Default 5 s.
	HandshakeTimeout time.Duration
	// MaxHandshakes bounds the inbound connections that have not finished
	// the handshake (unauthenticated), in total. When it is reached, a new
	// connection from an address holding fewer handshakes than the address
	// holding the most takes the slot of one of that address's pending
	// handshakes (closed): the oldest that has sent no byte yet, else the
	// oldest. Other new connections are closed at once. Both are counted
	// in TCPStats.Limited. Default 256.
	MaxHandshakes int
	// MaxHandshakesPerIP bounds them per source address (an IPv4 address,
	// or an IPv6 /64 prefix), so that one host cannot fill MaxHandshakes.
	// A new connection from an address at the bound takes the slot of one
	// of its pending handshakes, chosen as above: idle connections from a
	// member's own address do not lock it out. Must be <= MaxHandshakes.
	// Default 16.
	MaxHandshakesPerIP int
	// IdleTimeout bounds the silence on an authenticated connection: after
	// IdleTimeout without a byte received the transport sends a ping (every
	// peer answers one at once, so healthy idle connections stay up); if
	// another IdleTimeout passes without a byte, the connection is closed
	// (pending requests fail with ErrUnreachable, the next call dials
	// again). A peer that stalls, in a frame or between frames, is thus
	// disconnected after at most three IdleTimeouts. Only on connections
	// to peers of protocol version 2 or later: a version-1 peer cannot
	// answer a ping, so its connections get neither pings nor the idle
	// deadline. Default 30 s.
	IdleTimeout time.Duration
	// ReconnectMin and ReconnectMax bound the wait after a failed dial
	// before the next attempt to the same peer: it doubles from ReconnectMin
	// per consecutive failure up to ReconnectMax, with ±25% jitter. Calls
	// during the wait fail at once with ErrUnreachable. Defaults 100 ms and
	// 10 s.
	ReconnectMin time.Duration
	ReconnectMax time.Duration
	// MaxInflight bounds the handlers running at once for one connection;
	// further messages wait in a queue of MaxQueued, in arrival order.
	// Default 1024.
	MaxInflight int
	// MaxQueued bounds the messages per connection waiting for a handler;
	// beyond it a request is answered with ErrBusy and a one-way message is
	// dropped and logged. 0 means no queue. Default 16384.
	MaxQueued int
	// MaxQueuedBytes bounds the bytes of message bodies per connection held
	// by running and queued handlers, from receipt until the handler
	// returns; beyond it, as beyond MaxQueued, a request is answered with
	// ErrBusy and a one-way message is dropped and logged (counted in
	// TCPStats.Shed and TCPStats.ShedBytes). A message is always accepted
	// when the connection holds none, however large. Default 64 MiB.
	MaxQueuedBytes int
	// WriteQueue is the number of frames queued per connection before
	// senders block. Default 1024.
	WriteQueue int
	// Logger receives connection events; nil discards.
	Logger *slog.Logger
	// Clock times reconnect backoff; nil means the real clock. Socket
	// deadlines come from contexts and use real time.
	Clock clockwork.Clock
	// Rand draws backoff jitter; nil means a source seeded from
	// crypto/rand. It is used under the transport's lock: do not share it.
	// Handshake nonces always come from crypto/rand.
	Rand rand.Source
}

// NoQueue, as TCPConfig.MaxQueued, turns the handler queue off: a message that finds
// MaxInflight handlers running is refused (or dropped) at once.
const NoQueue = -1

// withDefaults returns c with each zero field set to its default.
func (c TCPConfig) withDefaults() TCPConfig {
	d := DefaultTCPConfig()
	cfgerr.Default(&c.ListenAddr, d.ListenAddr)
	cfgerr.Default(&c.MaxFrameSize, d.MaxFrameSize)
	cfgerr.Default(&c.DialTimeout, d.DialTimeout)
	cfgerr.Default(&c.HandshakeTimeout, d.HandshakeTimeout)
	cfgerr.Default(&c.MaxHandshakes, d.MaxHandshakes)
	cfgerr.Default(&c.MaxHandshakesPerIP, min(d.MaxHandshakesPerIP, max(c.MaxHandshakes, 1)))
	cfgerr.Default(&c.IdleTimeout, d.IdleTimeout)
	cfgerr.Default(&c.ReconnectMin, d.ReconnectMin)
	cfgerr.Default(&c.ReconnectMax, max(d.ReconnectMax, c.ReconnectMin))
	cfgerr.Default(&c.MaxInflight, d.MaxInflight)
	cfgerr.Default(&c.MaxQueued, d.MaxQueued)
	if c.MaxQueued < 0 {
		c.MaxQueued = 0 // NoQueue: the code compares with MaxQueued
	}
	cfgerr.Default(&c.MaxQueuedBytes, d.MaxQueuedBytes)
	cfgerr.Default(&c.WriteQueue, d.WriteQueue)
	return c
}

// DefaultTCPConfig returns the defaults; NodeID and Resolve still have to be
// set, and Secret or TLS (or, for tests, Insecure): Validate refuses a
// config with neither.
func DefaultTCPConfig() TCPConfig {
	return TCPConfig{
		ListenAddr:         "127.0.0.1:0",
		MaxFrameSize:       DefaultMaxMessageSize,
		DialTimeout:        5 * time.Second,
		HandshakeTimeout:   5 * time.Second,
		MaxHandshakes:      256,
		MaxHandshakesPerIP: 16,
		IdleTimeout:        30 * time.Second,
		ReconnectMin:       100 * time.Millisecond,
		ReconnectMax:       10 * time.Second,
		MaxInflight:        1024,
		MaxQueued:          16384,
		MaxQueuedBytes:     64 << 20,
		WriteQueue:         1024,
	}
}

// Validate reports every field that breaks its rule, joined in one error
// wrapping ErrInvalidConfig (nil if none). Besides the range of each field,
// it refuses a config that would let an anonymous peer in, or one whose
// peers could claim another node's ID: one with neither Secret nor TLS,
// or with TLS that requires no verified client certificate (ClientAuth !=
// tls.RequireAndVerifyClientCert, and no GetConfigForClient) unless it
// has a Secret and SecretIdentity says that the Secret alone identifies
// peers; Insecure allows both.
//
// Zero fields are checked as their defaults.
func (c TCPConfig) Validate() error { return c.withDefaults().validate() }

func (c TCPConfig) validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.NodeID != "" && len(c.NodeID) <= maxNodeIDLen, "NodeID must be 1 to %d bytes, got %d", maxNodeIDLen, len(c.NodeID))
	check(c.ListenAddr != "", "ListenAddr must be set (host:port, port 0 for any)")
	check(len(c.Secret) == 0 || len(c.Secret) >= 16, "Secret must be empty or at least 16 bytes, got %d", len(c.Secret))
	check(len(c.Secret) > 0 || c.TLS != nil || c.Insecure, "neither Secret nor TLS is set: anyone could join; set Secret (>= 16 bytes) or TLS (mutual), or Insecure: true to run unauthenticated")
	var clientAuth tls.ClientAuthType
	if c.TLS != nil {
		clientAuth = c.TLS.ClientAuth
	}
	check(c.TLS == nil || c.Insecure || c.TLS.ClientAuth == tls.RequireAndVerifyClientCert || c.TLS.GetConfigForClient != nil || (len(c.Secret) > 0 && c.SecretIdentity),
		"TLS with ClientAuth %v does not require and verify client certificates, so a peer's node ID would rest on the Secret alone (any holder can claim any node): set ClientAuth = tls.RequireAndVerifyClientCert, or a Secret with SecretIdentity: true to rely on it, or Insecure: true", clientAuth)
	check(!c.SecretIdentity || (len(c.Secret) > 0 && c.TLS != nil), "SecretIdentity needs a Secret and TLS (it accepts TLS peers without a verified client certificate on the Secret alone)")
	check(c.MaxFrameSize > 0 && c.MaxFrameSize <= 1<<30, "MaxFrameSize must be in (0, 1 GiB], got %d", c.MaxFrameSize)
	check(c.DialTimeout > 0, "DialTimeout must be > 0, got %v", c.DialTimeout)
	check(c.HandshakeTimeout > 0, "HandshakeTimeout must be > 0, got %v", c.HandshakeTimeout)
	check(c.MaxHandshakes > 0, "MaxHandshakes must be > 0, got %d", c.MaxHandshakes)
	check(c.MaxHandshakesPerIP > 0 && c.MaxHandshakesPerIP <= c.MaxHandshakes, "MaxHandshakesPerIP must be in (0, MaxHandshakes = %d], got %d", c.MaxHandshakes, c.MaxHandshakesPerIP)
	check(c.IdleTimeout > 0, "IdleTimeout must be > 0, got %v", c.IdleTimeout)
	check(c.ReconnectMin > 0, "ReconnectMin must be > 0, got %v", c.ReconnectMin)
	check(c.ReconnectMax >= c.ReconnectMin, "ReconnectMax (%v) must be >= ReconnectMin (%v)", c.ReconnectMax, c.ReconnectMin)
	check(c.MaxInflight > 0, "MaxInflight must be > 0, got %d", c.MaxInflight)
	check(c.MaxQueuedBytes > 0, "MaxQueuedBytes must be > 0, got %d", c.MaxQueuedBytes)
	check(c.WriteQueue > 0, "WriteQueue must be > 0, got %d", c.WriteQueue)
	return cfgerr.Join(ErrInvalidConfig, errs...)
}
