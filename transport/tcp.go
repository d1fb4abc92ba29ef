package transport

import (
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/muster-io/muster/internal/logx"
	"github.com/muster-io/muster/internal/randx"
)

// TCP is the production [Transport]: one multiplexed, optionally TLS
// connection per peer pair, a shared-secret handshake, length-prefixed
// frames. Create it with [NewTCP], then Start it. See the package
// documentation for the wire format and failure behaviour.
type TCP struct {
	cfg     TCPConfig
	log     *slog.Logger
	clock   clockwork.Clock
	maxBody int

	rmu sync.Mutex // guards rng
	rng *rand.Rand

	// beforeRetire, for tests, runs as a connection's retirement starts:
	// it holds the go-away back, as a busy scheduler may.
	beforeRetire atomic.Pointer[func()]

	handlers handlerTable

	ctx    context.Context // cancelled by Close only
	cancel context.CancelFunc

	tlsCfg atomic.Pointer[tls.Config] // nil without TLS; swapped by ReloadTLS

	// secretTLS encrypts the connections of a transport with a Secret and
	// no TLS (see secretTLS); nil otherwise.
	secretTLS *tls.Config
	// pathByDial: calls to a node go only over a connection this node
	// dialled to the address Resolve gives; connections peers dialled
	// serve their calls but never become the path (see installInbound).
	// Set whenever a peer's node ID is not bound to a verified
	// certificate (a Secret alone, SecretIdentity, Insecure), with or
	// without Resolve (without it this node then makes no calls), except
	// with Insecure and no Resolve (see TCPConfig.Resolve).
	pathByDial bool

	// dialContext connects; tests replace it (a self-connection).
	dialContext func(ctx context.Context, network, addr string) (net.Conn, error)

	hmu      sync.Mutex                     // guards hsTotal, hsByIP and hsSeq
	hsTotal  int                            // inbound handshakes in progress
	hsByIP   map[string][]*pendingHandshake // the same per source IP, oldest first
	hsSeq    uint64                         // admission order of pending handshakes
	limitLog atomic.Uint64                  // spaces the logs of refusals at the limits
	keptLog  atomic.Uint64                  // spaces the logs of inbound connections refused as duplicate
	dupLog   atomic.Uint64                  // spaces the logs of our dials refused as duplicate

	stats struct {
		dials, dialFailures, refused, shed     atomic.Uint64
		shedBytes                              atomic.Uint64
		limited, kept                          atomic.Uint64
		accepted                               atomic.Uint64
		refusedBy                              [NumRefuseReasons]atomic.Uint64
		framesIn, framesOut, bytesIn, bytesOut atomic.Uint64
	}

	mu      sync.Mutex
	started bool
	closed  bool
	ln      net.Listener
	peers   map[string]*peer
	conns   map[*conn]struct{} // every handshaken connection not yet closed
	wg      sync.WaitGroup
}

// peer is the connection state towards one node.
type peer struct {
	conn    *conn         // the connection new calls use; nil if none
	dialing chan struct{} // non-nil while a dial runs; closed when it ends
	changed chan struct{} // closed and replaced whenever conn changes
	fails   int           // consecutive failed dials
	next    time.Time     // no dial before this (backoff), on t.clock
	lastErr error
}

var _ Transport = (*TCP)(nil)

// takeoverWait bounds how long an inbound connection for a node that
// already has a connection waits, after a probe of the held one, for the
// held one to turn out dead (the peer restarted: its host resets it). A
// real-time bound on a network event.
const takeoverWait = 250 * time.Millisecond

// errDuplicate: the peer refused our connection because a preferred one
// between the pair exists; wait for it instead of dialling.
var errDuplicate = errors.New("transport: peer keeps its own connection")

// NewTCP validates and copies cfg. It starts nothing.
func NewTCP(cfg TCPConfig) (*TCP, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.Secret = slices.Clone(cfg.Secret)
	if cfg.TLS != nil {
		cfg.TLS = cfg.TLS.Clone()
	}
	t := &TCP{
		cfg:     cfg,
		log:     cfg.Logger,
		clock:   cfg.Clock,
		rng:     rand.New(randx.Source(cfg.Rand)),
		maxBody: cfg.MaxFrameSize,
		peers:   make(map[string]*peer),
		conns:   make(map[*conn]struct{}),
		hsByIP:  make(map[string][]*pendingHandshake),
	}
	if cfg.TLS != nil {
		t.tlsCfg.Store(cfg.TLS)
	} else if len(cfg.Secret) > 0 {
		st, err := secretTLS(cfg.Secret)
		if err != nil {
			return nil, err
		}
		t.secretTLS = st
	}
	t.pathByDial = cfg.pathByDial()
	d := net.Dialer{Timeout: cfg.DialTimeout}
	t.dialContext = d.DialContext
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	t.log = logx.WithNode(t.log, cfg.NodeID)
	if t.clock == nil {
		t.clock = clockwork.NewRealClock()
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	return t, nil
}

// Start listens on ListenAddr and accepts connections until Close. ctx
// bounds only the listen call. A second call fails with ErrStarted.
func (t *TCP) Start(ctx context.Context) error {
	t.mu.Lock()
	switch {
	case t.closed:
		t.mu.Unlock()
		return ErrClosed
	case t.started:
		t.mu.Unlock()
		return ErrStarted
	}
	t.mu.Unlock()
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", t.cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("transport: listen on %s: %w", t.cfg.ListenAddr, err)
	}
	t.mu.Lock()
	if t.closed || t.started {
		t.mu.Unlock()
		_ = ln.Close()
		return ErrClosed
	}
	t.ln, t.started = ln, true
	t.mu.Unlock()
	if !t.goFunc(func() { t.acceptLoop(ln) }) {
		_ = ln.Close()
		return ErrClosed
	}
	t.log.Info("transport listening", "addr", ln.Addr().String())
	return nil
}

// Addr returns the address the transport listens on (with the actual port
// when ListenAddr had port 0), or "" before Start.
func (t *TCP) Addr() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ln == nil {
		return ""
	}
	return t.ln.Addr().String()
}

// AdvertiseAddr returns the configured AdvertiseAddr, or Addr if it is
// empty.
func (t *TCP) AdvertiseAddr() string {
	if t.cfg.AdvertiseAddr != "" {
		return t.cfg.AdvertiseAddr
	}
	return t.Addr()
}

// LocalID returns the node ID.
func (t *TCP) LocalID() string { return t.cfg.NodeID }

// MaxMessageSize returns TCPConfig.MaxFrameSize (see SizeLimiter).
func (t *TCP) MaxMessageSize() int { return t.cfg.MaxFrameSize }

// Handle installs h for kind, replacing any earlier handler; a nil h
// removes it. It may be called before Start.
func (t *TCP) Handle(kind Kind, h Handler) { t.handlers.set(kind, h, false) }

// HandleOrdered installs h for kind and makes the kind ordered (see
// [OrderedHandler]). It may be called before Start.
func (t *TCP) HandleOrdered(kind Kind, h Handler) { t.handlers.set(kind, h, true) }

func (t *TCP) handler(kind Kind) Handler { return t.handlers.get(kind) }

// goFunc runs f in a goroutine that Close waits for. It returns false,
// without running f, once the transport is closed.
func (t *TCP) goFunc(f func()) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		f()
	}()
	return true
}

// Close stops listening, closes every connection (pending requests fail
// with ErrClosed, handlers see their context cancelled) and waits for every
// goroutine the transport started. It is idempotent.
func (t *TCP) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		t.wg.Wait()
		return nil
	}
	t.closed = true
	ln := t.ln
	conns := make([]*conn, 0, len(t.conns))
	for c := range t.conns {
		conns = append(conns, c)
	}
	t.mu.Unlock()

	t.cancel()
	if ln != nil {
		_ = ln.Close()
	}
	for _, c := range conns {
		c.close("transport closed")
	}
	t.wg.Wait()
	return nil
}

// ReloadTLS replaces the TLS configuration, for certificate or CA
// rotation on a running transport. cfg is copied and must satisfy the
// same rules as TCPConfig.TLS (Validate); the transport must have been
// created with TLS (a running cluster cannot switch between plain TCP and
// TLS). New handshakes use cfg at once. Established connections are
// retired gracefully, as by the dial tie-break: each side stops starting
// calls on them, calls in flight complete, and the next call dials with
// cfg, so no call fails because of the reload itself. A call fails only if
// the new handshake does (a peer that does not trust the new certificate
// yet): roll out trust in a new CA to every node before certificates it
// issued. Certificates can also be rotated without ReloadTLS, through
// GetCertificate and GetClientCertificate, which run on every handshake;
// established connections then keep their certificates.
func (t *TCP) ReloadTLS(cfg *tls.Config) error {
	if t.tlsCfg.Load() == nil {
		return fmt.Errorf("%w: TLS: ReloadTLS needs a transport created with TLS", ErrInvalidConfig)
	}
	if cfg == nil {
		return fmt.Errorf("%w: TLS: ReloadTLS needs a config, got nil", ErrInvalidConfig)
	}
	check := t.cfg
	check.TLS = cfg
	if err := check.Validate(); err != nil {
		return err
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return ErrClosed
	}
	t.tlsCfg.Store(cfg.Clone())
	t.mu.Unlock()
	t.retireAll()
	t.log.Info("TLS configuration reloaded")
	return nil
}

// retireIfStale retires c, just installed, if ReloadTLS replaced the TLS
// configuration while c's handshake ran: retireAll did not see c then, and
// c would otherwise live on with the old certificates.
func (t *TCP) retireIfStale(c *conn) {
	if c.tlsCfg == nil || c.tlsCfg == t.tlsCfg.Load() {
		return
	}
	t.unslot(c, false)
	if !t.goFunc(c.retire) {
		c.close("transport closed")
	}
}

// retireAll retires every connection: they drain and the next calls dial.
func (t *TCP) retireAll() {
	t.mu.Lock()
	conns := make([]*conn, 0, len(t.conns))
	for c := range t.conns {
		conns = append(conns, c)
	}
	t.mu.Unlock()
	for _, c := range conns {
		t.unslot(c, false) // now: new calls dial at once
		if !t.goFunc(c.retire) {
			c.close("transport closed")
		}
	}
}

// check returns the error for a call made now, if any.
func (t *TCP) check(kind Kind, body []byte) error {
	t.mu.Lock()
	closed, started := t.closed, t.started
	t.mu.Unlock()
	switch {
	case closed:
		return ErrClosed
	case !started:
		return ErrNotStarted
	case kind == 0:
		return fmt.Errorf("%w: kind 0 is invalid", ErrNoHandler)
	case len(body) > t.maxBody:
		return fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(body), t.maxBody)
	}
	return nil
}

// Request sends body to node `to` and waits for the response; see
// [Transport.Request]. It dials if there is no connection to the peer
// (subject to backoff after failed dials), and fails with ErrUnreachable if
// the connection dies before the response arrives.
func (t *TCP) Request(ctx context.Context, to string, kind Kind, body []byte) ([]byte, error) {
	if err := t.check(kind, body); err != nil {
		return nil, err
	}
	if to == t.cfg.NodeID {
		return t.local(ctx, kind, body, true)
	}
	for {
		if err := expired(ctx); err != nil {
			return nil, err
		}
		c, err := t.connFor(ctx, to)
		if err != nil {
			return nil, err
		}
		resp, err := c.request(ctx, kind, body)
		if errors.Is(err, errRetired) {
			continue // the connection was replaced meanwhile; use the new one
		}
		if err != nil && t.ctx.Err() != nil {
			return nil, ErrClosed
		}
		return resp, err
	}
}

// Send queues body for node `to`; see [Transport.Send]. It fails with
// ErrUnreachable if no connection can be set up.
func (t *TCP) Send(ctx context.Context, to string, kind Kind, body []byte) error {
	if err := t.check(kind, body); err != nil {
		return err
	}
	if to == t.cfg.NodeID {
		_, err := t.local(ctx, kind, body, false)
		return err
	}
	for {
		if err := expired(ctx); err != nil {
			return err
		}
		c, err := t.connFor(ctx, to)
		if err != nil {
			return err
		}
		err = c.send(ctx, kind, body)
		if errors.Is(err, errRetired) {
			continue
		}
		if err != nil && t.ctx.Err() != nil {
			return ErrClosed
		}
		return err
	}
}

// local serves a message addressed to this node without a connection.
func (t *TCP) local(ctx context.Context, kind Kind, body []byte, wait bool) ([]byte, error) {
	h := t.handler(kind)
	if h == nil {
		if !wait {
			return nil, nil
		}
		return nil, fmt.Errorf("%w: node %s kind %d", ErrNoHandler, t.cfg.NodeID, kind)
	}
	body = slices.Clone(body)
	done := make(chan memResult, 1)
	deadline, hasDeadline := ctx.Deadline()
	ok := t.goFunc(func() {
		hctx, cancel := t.ctx, context.CancelFunc(func() {})
		if hasDeadline && wait {
			hctx, cancel = context.WithDeadline(t.ctx, deadline)
		}
		defer cancel()
		resp, err := h(hctx, t.cfg.NodeID, body)
		switch {
		case err != nil:
			done <- memResult{nil, &RemoteError{Node: t.cfg.NodeID, Msg: err.Error()}}
		case len(resp) > t.maxBody:
			done <- memResult{nil, fmt.Errorf("%w: response of %d bytes, limit %d", ErrTooLarge, len(resp), t.maxBody)}
		default:
			done <- memResult{slices.Clone(resp), nil}
		}
	})
	if !ok {
		return nil, ErrClosed
	}
	if !wait {
		return nil, nil
	}
	select {
	case r := <-done:
		return r.body, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.ctx.Done():
		return nil, ErrClosed
	}
}

func (t *TCP) peerLocked(id string) *peer {
	p := t.peers[id]
	if p == nil {
		p = &peer{changed: make(chan struct{})}
		t.peers[id] = p
	}
	return p
}

// peerChanged wakes the calls waiting on peer id's connection: something
// they wait for changed on the peer's side.
func (t *TCP) peerChanged(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.peers[id]; p != nil {
		p.notify()
	}
}

func (p *peer) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// backoff returns the wait after the n-th consecutive failed dial.
func (t *TCP) backoff(n int) time.Duration {
	d := t.cfg.ReconnectMin
	for i := 1; i < n && d < t.cfg.ReconnectMax; i++ {
		d *= 2
	}
	d = min(d, t.cfg.ReconnectMax)
	t.rmu.Lock()
	f := 0.75 + 0.5*t.rng.Float64()
	t.rmu.Unlock()
	return time.Duration(float64(d) * f)
}

// connFor returns the connection to node `to`, dialling if needed.
func (t *TCP) connFor(ctx context.Context, to string) (*conn, error) {
	duplicates := 0 // dials the peer refused as duplicate, in this call
	for {
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return nil, ErrClosed
		}
		p := t.peerLocked(to)
		if c := p.conn; c != nil {
			t.mu.Unlock()
			return c, nil
		}
		if p.dialing != nil {
			dialing, changed := p.dialing, p.changed
			t.mu.Unlock()
			select {
			case <-dialing:
			case <-changed:
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-t.ctx.Done():
				return nil, ErrClosed
			}
			continue
		}
		if now := t.clock.Now(); now.Before(p.next) {
			err := fmt.Errorf("%w: %s: reconnect backoff for %v after: %w", ErrUnreachable, to, p.next.Sub(now), p.lastErr)
			t.mu.Unlock()
			return nil, err
		}
		if t.cfg.Resolve == nil {
			t.mu.Unlock()
			if t.pathByDial {
				return nil, fmt.Errorf("%w: %s: no Resolve configured, and peers' node IDs are not bound to certificates, so the connections peers dialled never carry this node's calls", ErrUnreachable, to)
			}
			return nil, fmt.Errorf("%w: %s: not connected and no Resolve configured", ErrUnreachable, to)
		}
		dialing, changed := make(chan struct{}), p.changed
		p.dialing = dialing
		t.mu.Unlock()

		t.stats.dials.Add(1)
		err := t.dial(ctx, to)
		if err != nil && !errors.Is(err, errDuplicate) {
			t.stats.dialFailures.Add(1)
		}

		t.mu.Lock()
		p.dialing = nil
		close(dialing)
		switch {
		case err == nil:
			p.fails, p.lastErr, p.next = 0, nil, time.Time{}
		case errors.Is(err, errDuplicate) || ctx.Err() != nil || t.closed:
		default:
			p.fails++
			p.lastErr = err
			p.next = t.clock.Now().Add(t.backoff(p.fails))
		}
		t.mu.Unlock()
		switch {
		case err == nil:
		case errors.Is(err, errDuplicate):
			// The peer's preferred connection to us is being set up; wait
			// for it to be installed, at most one handshake timeout (a real-
			// time bound on a network event, like a socket deadline).
			wctx, cancel := context.WithTimeout(ctx, t.cfg.HandshakeTimeout)
			timedOut := false
			select {
			case <-changed:
			case <-wctx.Done():
				timedOut = true
			case <-t.ctx.Done():
			}
			cancel()
			t.mu.Lock()
			ok := p.conn != nil
			t.mu.Unlock()
			// The change may have been the peer's connection going away
			// instead (one retired by a TLS reload, or found dead by the
			// probe): dial again, a few times, rather than fail the call.
			if duplicates++; !ok && (timedOut || duplicates >= 3 || t.ctx.Err() != nil) {
				return nil, fmt.Errorf("%w: %s: %w", ErrUnreachable, to, err)
			}
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case t.ctx.Err() != nil:
			return nil, ErrClosed
		default:
			t.log.Debug("dial failed", "peer", to, "err", err)
			return nil, fmt.Errorf("%w: %s: %w", ErrUnreachable, to, err)
		}
	}
}

// handshakeCtx bounds a handshake by HandshakeTimeout, parent and Close,
// and closes nc when it ends before stop is called.
func (t *TCP) handshakeCtx(parent context.Context, nc net.Conn) (context.Context, func() bool) {
	ctx, cancel := context.WithTimeout(parent, t.cfg.HandshakeTimeout)
	stopClose := context.AfterFunc(t.ctx, cancel)
	stopNC := context.AfterFunc(ctx, func() { _ = nc.Close() })
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl) // a socket deadline derived from the ctx deadline
	}
	return ctx, func() bool {
		stopClose()
		ok := stopNC()
		cancel()
		if ok {
			_ = nc.SetDeadline(time.Time{})
		}
		return ok
	}
}

func newNonce() []byte {
	b := make([]byte, nonceLen)
	_, _ = crand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return b
}

// dial connects to node `to`, runs the client handshake and installs the
// connection.
func (t *TCP) dial(ctx context.Context, to string) error {
	addr, err := t.cfg.Resolve(to)
	if err != nil {
		return fmt.Errorf("resolve: %w", err)
	}
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(t.ctx, cancel)
	defer stop()
	nc, err := t.dialContext(dctx, "tcp", addr)
	if err != nil {
		return err
	}
	if la, ra := nc.LocalAddr().String(), nc.RemoteAddr().String(); la == ra {
		// A simultaneous open onto our own ephemeral port (nothing listens
		// at addr and the kernel picked addr's port as ours). Abort it (no
		// linger: a reset, not a TIME_WAIT that would hold the port for a
		// minute), so that the node that owns the port can listen again.
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = nc.Close()
		t.log.Warn("dropped a connection to itself", "peer", to, "addr", la)
		return fmt.Errorf("%w: %s", ErrSelfConnect, la)
	}
	hctx, done := t.handshakeCtx(dctx, nc)
	c, err := t.clientHandshake(hctx, nc, to, addr)
	if !done() && err == nil {
		err = fmt.Errorf("%w: timed out", ErrHandshake)
	}
	if err != nil {
		_ = nc.Close()
		if c != nil {
			c.close("handshake timed out")
		}
		if !errors.Is(err, errDuplicate) {
			t.log.Warn("handshake failed", "peer", to, "addr", addr, "err", err)
		} else if n := t.dupLog.Add(1); n&(n-1) == 0 { // 1st, 2nd, 4th, ...
			t.log.Warn("peer refused our connection as duplicate: it holds a live connection from this node's ID (if this node restarted, that one is a stale connection or an impostor's)",
				"peer", to, "addr", addr, "refused_total", n)
		}
		return err
	}
	if !t.install(c) {
		return ErrClosed
	}
	c.start()
	t.retireIfStale(c)
	return nil
}

func (t *TCP) clientHandshake(ctx context.Context, nc net.Conn, to, addr string) (*conn, error) {
	rw := nc
	base := t.tlsCfg.Load()
	if base != nil {
		cfg := base.Clone()
		if cfg.ServerName == "" {
			if host, _, err := net.SplitHostPort(addr); err == nil {
				cfg.ServerName = host
			}
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, fmt.Errorf("%w: tls: %w", ErrHandshake, err)
		}
		// The node we dialled must be the one the certificate names.
		if err := t.checkPeerIdentity(tc, to); err != nil {
			return nil, err
		}
		rw = tc
	} else if t.secretTLS != nil {
		tc := tls.Client(nc, t.secretTLS)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, fmt.Errorf("%w: tls: %w", ErrHandshake, err)
		}
		rw = tc
	}
	self := t.cfg.NodeID
	cn := newNonce()
	if err := writeHello(rw, hello{Magic: helloMagic, Version: helloVersion, Max: protoVersion, Node: self, To: to, Nonce: cn}); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHandshake, err)
	}
	h, err := readHello(rw)
	if err != nil {
		return nil, fmt.Errorf("%w: reading server hello (refused?): %w", ErrHandshake, err)
	}
	if err := checkOpening(h); err != nil {
		return nil, err
	}
	if h.Node != to {
		return nil, fmt.Errorf("%w: dialled %q at %s but %q answered", ErrHandshake, to, addr, h.Node)
	}
	if err := verifyProof(t.cfg.Secret, h.Proof, "server", cn, h.Nonce, self, to); err != nil {
		return nil, err
	}
	var p []byte
	if len(t.cfg.Secret) > 0 {
		p = proof(t.cfg.Secret, "client", cn, h.Nonce, self, to)
	}
	if err := writeHello(rw, hello{Proof: p}); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHandshake, err)
	}
	st, err := readHello(rw)
	if err != nil {
		return nil, fmt.Errorf("%w: reading status (refused?): %w", ErrHandshake, err)
	}
	switch st.Status {
	case statusOK:
	case statusDuplicate:
		return nil, errDuplicate
	default:
		return nil, fmt.Errorf("%w: unknown status %d", ErrHandshake, st.Status)
	}
	c := t.newConn(rw, to, self, negotiate(h))
	c.tlsCfg = base
	return c, nil
}

func (t *TCP) acceptLoop(ln net.Listener) {
	for {
		nc, err := ln.Accept()
		if err != nil {
			if t.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			t.log.Warn("accept failed", "err", err)
			select { // a short pause so a persistent error does not spin
			case <-t.clock.After(10 * time.Millisecond):
			case <-t.ctx.Done():
				return
			}
			continue
		}
		ip := remoteIP(nc)
		ph, evicted, reason := t.admit(ip, nc)
		if evicted != nil {
			// Closing it fails its handshake; its goroutine ends and its
			// release is a no-op (the slot went to ph).
			_ = evicted.nc.Close()
			t.stats.limited.Add(1)
			t.logLimit("closed a pending handshake (an idle one first) to admit a newer connection: handshake slots full, for its address or in total", evicted.ip)
		}
		if ph == nil {
			_ = nc.Close()
			t.stats.limited.Add(1)
			t.logLimit(reason, ip)
			continue
		}
		if !t.goFunc(func() {
			defer t.release(ph)
			t.accept(&firstByte{Conn: nc, ph: ph}, ph)
		}) {
			t.release(ph)
			_ = nc.Close()
			return
		}
	}
}

// logLimit logs a connection closed at the handshake limits, with
// exponential spacing (1st, 2nd, 4th, ...): a flood must not flood the log.
func (t *TCP) logLimit(reason, ip string) {
	if n := t.limitLog.Add(1); n&(n-1) == 0 {
		t.log.Warn("refused inbound connection: "+reason, "remote", ip, "refused_total", n,
			"max_handshakes", t.cfg.MaxHandshakes, "max_handshakes_per_ip", t.cfg.MaxHandshakesPerIP)
	}
}

// remoteIP returns the source address an inbound connection counts
// against MaxHandshakesPerIP: its IPv4 address, or the /64 prefix of its
// IPv6 address (one host commonly holds a whole /64).
func remoteIP(nc net.Conn) string {
	if a, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		if a.IP.To4() == nil && len(a.IP) == net.IPv6len {
			return a.IP.Mask(net.CIDRMask(64, 128)).String() + "/64"
		}
		return a.IP.String()
	}
	host, _, err := net.SplitHostPort(nc.RemoteAddr().String())
	if err != nil {
		return nc.RemoteAddr().String()
	}
	return host
}

// pendingHandshake is an inbound connection holding a handshake slot.
type pendingHandshake struct {
	ip      string
	nc      net.Conn
	seq     uint64      // admission order
	spoke   atomic.Bool // a byte arrived (see firstByte)
	evicted bool        // its slot was given to a newer connection; guarded by hmu
	done    bool        // released; guarded by hmu
}

// firstByte marks its pending handshake as soon as a byte arrives: an
// idle connection is the first to lose its slot (see admit).
type firstByte struct {
	net.Conn
	ph    *pendingHandshake
	spoke bool // ph.spoke is set; the reader's own copy
}

func (f *firstByte) Read(b []byte) (int, error) {
	n, err := f.Conn.Read(b)
	if n > 0 && !f.spoke {
		f.spoke = true
		f.ph.spoke.Store(true)
	}
	return n, err
}

// evictable returns the pending handshake of l (oldest first) to close
// for a newcomer: the oldest that has sent nothing, else the oldest.
func evictable(l []*pendingHandshake) *pendingHandshake {
	for _, ph := range l {
		if !ph.spoke.Load() {
			return ph
		}
	}
	return l[0]
}

// admit takes a handshake slot for nc, from ip. When ip holds
// MaxHandshakesPerIP, one of its pending handshakes loses its slot to nc:
// the oldest that has sent nothing yet, else the oldest (evictable). When
// every slot is taken and ip holds fewer than the address holding the
// most, a pending handshake of that address (the oldest holder among
// several with as many) loses its slot to nc, chosen the same way. The
// loser is returned as evicted, for the caller to close. So idle
// handshakes, from other addresses or from a member's own, never lock a
// member out: its handshake speaks at once (usually before its connection
// is even accepted, which hasSpoken sees) and is not evicted while an
// idle one is pending, and an attacker whose connections speak can delay
// it only by opening connections faster than the member completes one
// round trip. Otherwise ph is nil and reason says why nc is refused.
func (t *TCP) admit(ip string, nc net.Conn) (ph, evicted *pendingHandshake, reason string) {
	spoke := hasSpoken(nc) // before the lock: a system call
	t.hmu.Lock()
	defer t.hmu.Unlock()
	mine := len(t.hsByIP[ip])
	if mine >= t.cfg.MaxHandshakesPerIP {
		evicted = evictable(t.hsByIP[ip])
		evicted.evicted = true
		t.dropLocked(evicted)
		mine--
	}
	if t.hsTotal >= t.cfg.MaxHandshakes {
		var victim []*pendingHandshake
		for _, l := range t.hsByIP {
			if len(l) > len(victim) || (len(l) == len(victim) && len(l) > 0 && l[0].seq < victim[0].seq) {
				victim = l
			}
		}
		if len(victim) <= mine {
			return nil, nil, "too many handshakes in progress"
		}
		evicted = evictable(victim)
		evicted.evicted = true
		t.dropLocked(evicted)
	}
	t.hsSeq++
	ph = &pendingHandshake{ip: ip, nc: nc, seq: t.hsSeq}
	ph.spoke.Store(spoke)
	t.hsTotal++
	t.hsByIP[ip] = append(t.hsByIP[ip], ph)
	return ph, evicted, ""
}

// dropLocked removes ph from the pending handshakes.
func (t *TCP) dropLocked(ph *pendingHandshake) {
	t.hsTotal--
	l := t.hsByIP[ph.ip]
	if i := slices.Index(l, ph); i >= 0 {
		l = slices.Delete(l, i, i+1)
	}
	if len(l) == 0 {
		delete(t.hsByIP, ph.ip)
	} else {
		t.hsByIP[ph.ip] = l
	}
}

// release returns the slot admit took, unless it was given away.
func (t *TCP) release(ph *pendingHandshake) {
	t.hmu.Lock()
	defer t.hmu.Unlock()
	if !ph.evicted && !ph.done {
		t.dropLocked(ph)
	}
	ph.done = true
}

// wasEvicted reports whether ph lost its slot to a newer connection.
func (t *TCP) wasEvicted(ph *pendingHandshake) bool {
	t.hmu.Lock()
	defer t.hmu.Unlock()
	return ph.evicted
}

// accept runs the server handshake on an inbound connection.
func (t *TCP) accept(nc net.Conn, ph *pendingHandshake) {
	remote := nc.RemoteAddr().String()
	ctx, done := t.handshakeCtx(t.ctx, nc)
	c, status, err := t.serverHandshake(ctx, nc)
	t.release(ph) // authenticated (or refused): the slot is free, and no longer to be evicted
	timedOut := !done()
	if timedOut && err == nil {
		err = fmt.Errorf("%w: timed out", ErrHandshake)
	}
	if err != nil {
		_ = nc.Close()
		if c != nil {
			c.close("handshake failed")
		}
		if t.ctx.Err() == nil && !t.wasEvicted(ph) { // an eviction is counted in Limited
			t.stats.refusedBy[refuseReasonOf(err, timedOut)].Add(1)
			t.stats.refused.Add(1)
			t.log.Warn("refused inbound connection", "remote", remote, "err", err)
		}
		return
	}
	t.stats.accepted.Add(1)
	if status == statusDuplicate {
		c.close("duplicate: the preferred connection exists")
		return
	}
	c.start()
	t.retireIfStale(c)
}

func (t *TCP) serverHandshake(ctx context.Context, nc net.Conn) (*conn, uint8, error) {
	rw := nc
	cfg := t.tlsCfg.Load()
	var tc *tls.Conn
	if cfg != nil {
		tc = tls.Server(nc, cfg)
	} else if t.secretTLS != nil {
		tc = tls.Server(nc, t.secretTLS)
	}
	if tc != nil {
		if err := tc.HandshakeContext(ctx); err != nil {
			why := RefuseTLS
			if errors.Is(err, errSecretKey) {
				why = RefuseSecret
			}
			return nil, 0, refuse(why, fmt.Errorf("%w: tls: %w", ErrHandshake, err))
		}
		rw = tc
	}
	self := t.cfg.NodeID
	h, err := readHello(rw)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: reading client hello: %w", ErrHandshake, err)
	}
	if err := checkOpening(h); err != nil {
		return nil, 0, err
	}
	switch {
	case h.To != self:
		return nil, 0, refuse(RefuseProtocol, fmt.Errorf("%w: peer %q dialled node %q, this is %q", ErrHandshake, h.Node, h.To, self))
	case h.Node == self:
		return nil, 0, refuse(RefuseProtocol, fmt.Errorf("%w: peer uses this node's ID %q", ErrHandshake, self))
	}
	// With TLS, the claimed ID must be the one the certificate names.
	if cfg != nil {
		if err := t.checkPeerIdentity(tc, h.Node); err != nil {
			return nil, 0, err
		}
	}
	sn := newNonce()
	var p []byte
	if len(t.cfg.Secret) > 0 {
		p = proof(t.cfg.Secret, "server", h.Nonce, sn, h.Node, self)
	}
	if err := writeHello(rw, hello{Magic: helloMagic, Version: helloVersion, Max: protoVersion, Node: self, Nonce: sn, Proof: p}); err != nil {
		return nil, 0, fmt.Errorf("%w: %w", ErrHandshake, err)
	}
	a, err := readHello(rw)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: peer %q: reading proof: %w", ErrHandshake, h.Node, err)
	}
	if err := verifyProof(t.cfg.Secret, a.Proof, "client", h.Nonce, sn, h.Node, self); err != nil {
		return nil, 0, fmt.Errorf("peer %q: %w", h.Node, err)
	}
	c := t.newConn(rw, h.Node, h.Node, negotiate(h))
	c.tlsCfg = cfg
	status := uint8(statusOK)
	if !t.installInbound(ctx, c) {
		status = statusDuplicate
	}
	if err := writeHello(rw, hello{Status: status}); err != nil {
		return c, 0, fmt.Errorf("%w: %w", ErrHandshake, err)
	}
	return c, status, nil
}

// install makes c, a connection this node dialled, the connection to its
// peer, or not, by the tie-break: the connection dialled by the lower node
// ID is preferred; between two of the same preference the newer wins. A
// replaced connection is retired: both sides stop sending requests on it,
// and it closes once drained. It returns false if the transport is closed.
func (t *TCP) install(c *conn) bool {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		c.close("transport closed")
		return false
	}
	p := t.peerLocked(c.peer)
	old := p.conn
	var retire *conn
	switch {
	case old == nil:
		p.conn = c
	case !c.preferred() && old.preferred():
		retire = c // keep old; drain c
	default: // c is preferred over old, or both are equal and c is newer
		p.conn = c
		retire = old
	}
	t.addLocked(p, c)
	t.mu.Unlock()
	t.log.Debug("connection up", "peer", c.peer, "dialer", c.dialer, "inbound", false)
	if retire != nil {
		// In the background: sending the go-away may wait for a full write
		// queue, and the dialling caller must not wait past its context.
		if !t.goFunc(retire.retire) {
			retire.close("transport closed")
		}
	}
	return true
}

func (t *TCP) addLocked(p *peer, c *conn) {
	t.conns[c] = struct{}{}
	p.fails, p.lastErr, p.next = 0, nil, time.Time{}
	p.notify()
}

// installInbound makes c, a connection the peer dialled, the connection to
// its peer if the peer has none. An inbound connection never takes over a
// live one: whoever dialled it proved the Secret (or a certificate) but,
// with a Secret alone, not that it is the node it claims, and the held
// connection may be the real node's. If one is held, installInbound probes
// it and waits at most takeoverWait (and ctx):
//
//   - version 2 (see negotiate): a ping, which a live peer answers at once.
//     If nothing arrives on the held connection in time it is closed as
//     dead (the node restarted, maybe elsewhere, and nothing will reset
//     it) and c installed.
//   - version 1: a no-op frame; if the peer restarted on the same host, its
//     host resets the stale connection, which then closes.
//
// If the held connection stays, c is refused and false returned (the
// client is told "duplicate" and uses the held connection, counted in
// TCPStats.Kept). It also returns false if the transport is closed.
func (t *TCP) installInbound(ctx context.Context, c *conn) bool {
	if t.pathByDial {
		return t.serveInbound(c)
	}
	for probed := false; ; probed = true {
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			c.close("transport closed")
			return false
		}
		p := t.peerLocked(c.peer)
		old := p.conn
		if old == nil {
			p.conn = c
			t.addLocked(p, c)
			t.mu.Unlock()
			t.log.Debug("connection up", "peer", c.peer, "dialer", c.dialer, "inbound", true)
			return true
		}
		changed := p.changed
		t.mu.Unlock()
		if probed {
			break
		}
		wctx, cancel := context.WithTimeout(ctx, takeoverWait) // real time: bounds a network event
		if old.pings {
			heard := old.demandLiveness(wctx)
			select {
			case <-changed:
			case <-heard:
			case <-wctx.Done():
				if ctx.Err() == nil {
					t.log.Info("closing a held connection that did not answer the takeover probe", "peer", c.peer, "wait", takeoverWait)
					old.close("no answer to the takeover probe")
				}
			}
		} else {
			old.probe()
			select {
			case <-changed:
			case <-wctx.Done():
			}
		}
		cancel()
	}
	t.stats.kept.Add(1)
	if n := t.keptLog.Add(1); n&(n-1) == 0 { // 1st, 2nd, 4th, ...: a flood must not flood the log
		t.log.Warn("refused inbound connection as duplicate: this node holds a live connection to the node it claims (an impostor, or a simultaneous dial)",
			"peer", c.peer, "kept_total", n)
	}
	return false
}

// serveInbound keeps c, a connection the peer dialled, for the calls the
// peer makes on it, without making it the path of this node's calls to the
// peer (pathByDial): with no certificate binding node IDs, whoever dialled
// c proved the Secret but not that it is the node it claims, so this
// node's calls go only over connections it dialled to the address Resolve
// gives, and an impostor's connection, however long the real node's link
// stalls, never receives them. The peer's arrival resets the backoff of
// dials towards it. If a path to the peer is held, it is probed in the
// background, as by installInbound: a held connection that stays silent
// for takeoverWait is closed (the node restarted, maybe on a new address,
// and nothing would reset it), so that the next call dials afresh; at
// worst an impostor makes this node redial a link that was stalling
// anyway. It returns false if the transport is closed.
func (t *TCP) serveInbound(c *conn) bool {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		c.close("transport closed")
		return false
	}
	p := t.peerLocked(c.peer)
	old := p.conn
	t.addLocked(p, c)
	t.mu.Unlock()
	t.log.Debug("connection up", "peer", c.peer, "dialer", c.dialer, "inbound", true, "path", false)
	if old != nil {
		t.goFunc(func() { t.probeHeld(old) })
	}
	return true
}

// probeHeld sends a probe on held, the path to a peer that just dialled
// this node, and closes it if nothing arrives within takeoverWait (a
// version-1 peer gets a no-op frame: a restarted host resets the stale
// connection).
func (t *TCP) probeHeld(held *conn) {
	if !held.pings {
		held.probe()
		return
	}
	ctx, cancel := context.WithTimeout(t.ctx, takeoverWait) // real time: bounds a network event
	defer cancel()
	select {
	case <-held.demandLiveness(ctx):
	case <-held.ctx.Done():
	case <-ctx.Done():
		if t.ctx.Err() == nil {
			t.log.Info("closing a held connection that did not answer the probe sent when its peer dialled in", "peer", held.peer, "wait", takeoverWait)
			held.close("no answer to the probe")
		}
	}
}

// unslot forgets c as its peer's connection.
func (t *TCP) unslot(c *conn, closed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if closed {
		delete(t.conns, c)
	}
	if p := t.peers[c.peer]; p != nil && p.conn == c {
		p.conn = nil
		p.notify()
	}
}

// TCPStats are counters of a [TCP] transport since it was created. They
// are atomic counters the transport keeps anyway (no lock, no allocation on
// the paths that count); Stats copies them. Fields read one by one: a
// snapshot taken while traffic flows may be off by what was in flight.
type TCPStats struct {
	Conns        int    // connections open now (including ones draining after the tie-break)
	Dials        uint64 // outbound connection attempts
	DialFailures uint64 // attempts that failed (connect, TLS or handshake)
	Accepted     uint64 // inbound handshakes that passed authentication (including those then answered "duplicate", counted in Kept)
	Refused      uint64 // inbound connections refused in the handshake: the sum of RefusedBy
	// RefusedBy splits Refused by reason, indexed by RefuseReason
	// (RefuseTLS, RefuseSecret, ...).
	RefusedBy [NumRefuseReasons]uint64
	Limited   uint64 // inbound connections closed unread: MaxHandshakes or MaxHandshakesPerIP was reached
	Kept      uint64 // inbound connections refused because a live connection to the node they claim was held
	Shed      uint64 // inbound messages refused (ErrBusy) or dropped (one-way) because the handler queue (MaxQueued or MaxQueuedBytes) was full
	ShedBytes uint64 // of Shed, those refused for MaxQueuedBytes
	FramesIn  uint64 // frames received after handshakes
	FramesOut uint64 // frames sent after handshakes
	BytesIn   uint64 // their bytes, framing included
	BytesOut  uint64
}

// Stats returns the transport's counters. It is safe for concurrent use
// and costs a lock (for Conns) and a copy.
func (t *TCP) Stats() TCPStats {
	t.mu.Lock()
	n := len(t.conns)
	t.mu.Unlock()
	s := TCPStats{
		Conns:        n,
		Dials:        t.stats.dials.Load(),
		DialFailures: t.stats.dialFailures.Load(),
		Accepted:     t.stats.accepted.Load(),
		Refused:      t.stats.refused.Load(),
		Limited:      t.stats.limited.Load(),
		Kept:         t.stats.kept.Load(),
		Shed:         t.stats.shed.Load(),
		ShedBytes:    t.stats.shedBytes.Load(),
		FramesIn:     t.stats.framesIn.Load(),
		FramesOut:    t.stats.framesOut.Load(),
		BytesIn:      t.stats.bytesIn.Load(),
		BytesOut:     t.stats.bytesOut.Load(),
	}
	for i := range s.RefusedBy {
		s.RefusedBy[i] = t.stats.refusedBy[i].Load()
	}
	return s
}

// Verify returns nil once this transport holds a connection to node that
// can carry its calls, authenticated under that ID: it dials (to the
// address Resolve gives) if there is none, and fails like a call would
// (ErrUnreachable, ErrHandshake). With certificates the ID is the one the
// peer's certificate names; with a Secret alone it is one that a holder
// of the Secret answered to at the address Resolve gives. A membership
// uses it to count a node only once it has proven the ID gossip claims
// (see distro/membership.Proven).
func (t *TCP) Verify(ctx context.Context, node string) error {
	if err := t.check(1, nil); err != nil {
		return err
	}
	if node == t.cfg.NodeID {
		return nil
	}
	_, err := t.connFor(ctx, node)
	return err
}
