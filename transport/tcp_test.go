package transport

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	crand "crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"
)

// syncBuffer collects log output from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func bufLogger(buf *syncBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func TestTCPConfigValidate(t *testing.T) {
	ok := DefaultTCPConfig()
	ok.NodeID = "n1"
	ok.Secret = testSecret
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	cases := []struct {
		field string
		mut   func(*TCPConfig)
	}{
		{"NodeID", func(c *TCPConfig) { c.NodeID = "" }},
		{"NodeID", func(c *TCPConfig) { c.NodeID = strings.Repeat("x", 256) }},
		{"Secret", func(c *TCPConfig) { c.Secret = []byte("short") }},
		{"MaxFrameSize", func(c *TCPConfig) { c.MaxFrameSize = -1 }},
		{"DialTimeout", func(c *TCPConfig) { c.DialTimeout = -1 }},
		{"HandshakeTimeout", func(c *TCPConfig) { c.HandshakeTimeout = -1 }},
		{"ReconnectMin", func(c *TCPConfig) { c.ReconnectMin = -1 }},
		{"ReconnectMax", func(c *TCPConfig) { c.ReconnectMax = c.ReconnectMin / 2 }},
		{"MaxInflight", func(c *TCPConfig) { c.MaxInflight = -1 }},
		{"WriteQueue", func(c *TCPConfig) { c.WriteQueue = -1 }},
		{"MaxQueuedBytes", func(c *TCPConfig) { c.MaxQueuedBytes = -1 }},
		{"MaxHandshakes", func(c *TCPConfig) { c.MaxHandshakes = -1 }},
		{"MaxHandshakesPerIP", func(c *TCPConfig) { c.MaxHandshakesPerIP = -1 }},
		{"MaxHandshakesPerIP", func(c *TCPConfig) { c.MaxHandshakesPerIP = c.MaxHandshakes + 1 }},
		{"IdleTimeout", func(c *TCPConfig) { c.IdleTimeout = -1 }},
		{"Insecure", func(c *TCPConfig) { c.Secret = nil }},
		{"Insecure", func(c *TCPConfig) { c.Secret, c.TLS = nil, &tls.Config{ClientAuth: tls.VerifyClientCertIfGiven} }},
		// Optional client certificates with a Secret: identity would rest
		// on the Secret unless the config says so.
		{"SecretIdentity", func(c *TCPConfig) { c.TLS = &tls.Config{ClientAuth: tls.VerifyClientCertIfGiven} }},
		{"SecretIdentity", func(c *TCPConfig) { c.TLS = &tls.Config{} }},
		{"SecretIdentity", func(c *TCPConfig) { c.SecretIdentity = true }}, // without TLS
	}
	for _, good := range []func(*TCPConfig){
		func(c *TCPConfig) { c.Secret, c.Insecure = nil, true },
		func(c *TCPConfig) { c.Secret, c.TLS = nil, &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert} },
		func(c *TCPConfig) { c.TLS, c.SecretIdentity = &tls.Config{}, true }, // TLS for privacy, the Secret authenticates, explicitly
	} {
		c := ok
		good(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("valid config refused: %v", err)
		}
	}
	for _, tc := range cases {
		c := ok
		tc.mut(&c)
		err := c.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: got %v", tc.field, err)
		}
		if _, err := NewTCP(c); err == nil {
			t.Errorf("%s: NewTCP accepted an invalid config", tc.field)
		}
	}
}

// TestTCPConfigZeroIsDefault: a TCPConfig with NodeID and Secret only is
// valid and takes DefaultTCPConfig's values (loopback listening among
// them); NoQueue turns the handler queue off.
func TestTCPConfigZeroIsDefault(t *testing.T) {
	c := TCPConfig{NodeID: "n1", Secret: testSecret}
	if err := c.Validate(); err != nil {
		t.Fatalf("NodeID and Secret only: %v", err)
	}
	want := DefaultTCPConfig()
	want.NodeID, want.Secret = c.NodeID, c.Secret
	if got := c.withDefaults(); !reflect.DeepEqual(got, want) {
		t.Fatalf("zero fields: got %+v, want %+v", got, want)
	}
	small := c
	small.MaxHandshakes = 4 // below the default per-IP bound
	if err := small.Validate(); err != nil {
		t.Fatalf("MaxHandshakes 4, MaxHandshakesPerIP left zero: %v", err)
	}
	off := c
	off.MaxQueued = NoQueue
	if err := off.Validate(); err != nil {
		t.Fatalf("NoQueue: %v", err)
	}
	if q := off.withDefaults().MaxQueued; q != 0 {
		t.Fatalf("NoQueue leaves a queue of %d", q)
	}
}

func TestTCPLifecycle(t *testing.T) {
	defer goleak.VerifyNone(t)
	cfg := DefaultTCPConfig()
	cfg.NodeID = "a"
	cfg.Secret = testSecret
	tr, err := NewTCP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Addr() != "" {
		t.Fatal("address before Start")
	}
	if _, err := tr.Request(testCtx(t), "b", 1, nil); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("before Start: %v", err)
	}
	if err := tr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := tr.Start(context.Background()); err == nil || !errors.Is(err, ErrStarted) {
		t.Fatalf("second Start: %v, want ErrStarted", err)
	}
	if !strings.HasPrefix(tr.Addr(), "127.0.0.1:") || strings.HasSuffix(tr.Addr(), ":0") {
		t.Fatalf("Addr %q", tr.Addr())
	}
	if tr.AdvertiseAddr() != tr.Addr() {
		t.Fatal("AdvertiseAddr defaults to Addr")
	}
	// Without Resolve a node cannot dial.
	if _, err := tr.Request(testCtx(t), "b", 1, nil); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("no resolver: %v", err)
	}
	_ = tr.Close()
	if err := tr.Start(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Close: %v", err)
	}
}

// testCA makes a CA and returns it with a function issuing node certs.
func testCA(t *testing.T, name string) (*x509.CertPool, func(node string) tls.Certificate) {
	t.Helper()
	_, pool, issue := testCACert(t, name)
	return pool, issue
}

// testCACert is testCA that also returns the CA's certificate.
func testCACert(t *testing.T, name string) (*x509.Certificate, *x509.CertPool, func(node string) tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), crand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(crand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	serial := int64(1)
	issue := func(node string) tls.Certificate {
		nk, err := ecdsa.GenerateKey(elliptic.P256(), crand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		serial++
		ct := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: node},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		}
		d, err := x509.CreateCertificate(crand.Reader, ct, ca, &nk.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{d}, PrivateKey: nk}
	}
	return ca, pool, issue
}

func mtlsConfig(pool *x509.CertPool, cert tls.Certificate) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	}
}

// newMTLSCluster is newTCPCluster with mutual TLS from one test CA and no
// Secret: node IDs bound to certificates, one connection per pair (the
// tie-break).
func newMTLSCluster(t *testing.T, mutate func(*TCPConfig)) *tcpCluster {
	pool, issue := testCA(t, "cluster CA")
	return newTCPCluster(t, 0, func(cfg *TCPConfig) {
		cfg.Secret = nil
		cfg.TLS = mtlsConfig(pool, issue(cfg.NodeID))
		if mutate != nil {
			mutate(cfg)
		}
	})
}

// noDial starts node id of c without Resolve: it never dials, and its
// calls use the connections peers dialled, which with a Secret alone takes
// Insecure (TestSecurityNoResolveImpostor).
func (c *tcpCluster) noDial(t *testing.T, id string) *TCP {
	t.Helper()
	cfg := c.config(t, id)
	cfg.Resolve, cfg.Insecure = nil, true
	return c.start(t, cfg)
}

func TestTCPMutualTLS(t *testing.T) {
	defer goleak.VerifyNone(t)
	pool, issue := testCA(t, "cluster CA")
	otherPool, otherIssue := testCA(t, "rogue CA")
	var logs syncBuffer
	c := newTCPCluster(t, 0, nil)
	defer c.CloseAll()
	secret := []byte("0123456789abcdef0123456789abcdef")
	mk := func(id string, tc *tls.Config) *TCP {
		cfg := c.config(t, id)
		cfg.TLS = tc
		cfg.Secret = secret
		cfg.Logger = bufLogger(&logs).With("test-node", id)
		return c.start(t, cfg)
	}
	a := mk("a", mtlsConfig(pool, issue("a")))
	b := mk("b", mtlsConfig(pool, issue("b")))
	b.Handle(1, echo)
	ctx := testCtx(t)
	if got, err := a.Request(ctx, "b", 1, []byte("over tls")); err != nil || string(got) != "a:over tls" {
		t.Fatalf("mutual TLS request: %q, %v", got, err)
	}
	// The connection really is TLS.
	b.mu.Lock()
	for cn := range b.conns {
		if _, ok := cn.nc.(*tls.Conn); !ok {
			t.Errorf("connection is %T, want *tls.Conn", cn.nc)
		}
	}
	b.mu.Unlock()

	// A node whose certificate another CA signed is refused both ways.
	rogue := mk("r", mtlsConfig(otherPool, otherIssue("r")))
	rogue.Handle(1, echo)
	if _, err := rogue.Request(ctx, "b", 1, nil); !errors.Is(err, ErrUnreachable) || !errors.Is(err, ErrHandshake) {
		t.Fatalf("rogue -> b: %v", err)
	}
	if _, err := a.Request(ctx, "r", 1, nil); !errors.Is(err, ErrHandshake) {
		t.Fatalf("a -> rogue: %v", err)
	}
	// A node without TLS is refused.
	plain := c.config(t, "p")
	plain.Secret = secret
	p := c.start(t, plain)
	if _, err := p.Request(ctx, "b", 1, nil); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("plain -> b: %v", err)
	}
	eventually(t, "refusal logged", func() bool {
		return strings.Contains(logs.String(), "refused inbound connection") && strings.Contains(logs.String(), "tls")
	})
	eventually(t, "TLS refusals counted", func() bool { return b.Stats().RefusedBy[RefuseTLS] >= 1 })
}

func TestTCPSecret(t *testing.T) {
	defer goleak.VerifyNone(t)
	var logs syncBuffer
	c := newTCPCluster(t, 0, nil)
	defer c.CloseAll()
	mk := func(id string, secret string) *TCP {
		cfg := c.config(t, id)
		cfg.Secret = []byte(secret)
		cfg.Insecure = secret == "" // the node without a secret
		cfg.Logger = bufLogger(&logs).With("test-node", id)
		n := c.start(t, cfg)
		n.Handle(1, echo)
		return n
	}
	good := "a shared secret of 32 bytes ...."
	a := mk("a", good)
	mk("b", good)
	wrong := mk("w", "another secret of 32 bytes .....")
	none := mk("n", "")
	ctx := testCtx(t)
	if _, err := a.Request(ctx, "b", 1, nil); err != nil {
		t.Fatalf("same secret: %v", err)
	}
	for _, tc := range []struct {
		from *TCP
		to   string
	}{{wrong, "b"}, {a, "w"}, {none, "b"}, {a, "n"}} {
		_, err := tc.from.Request(ctx, tc.to, 1, nil)
		if !errors.Is(err, ErrUnreachable) || !errors.Is(err, ErrHandshake) {
			t.Errorf("%s -> %s: %v, want ErrUnreachable and ErrHandshake", tc.from.LocalID(), tc.to, err)
		}
	}
	eventually(t, "refusal logged", func() bool {
		return strings.Contains(logs.String(), errSecretKey.Error())
	})
	// The refusal of a's dial is counted by w's accept side, which may finish
	// after a's Request has already failed.
	eventually(t, "stats of the node with the wrong secret", func() bool {
		st := wrong.Stats()
		return st.Refused > 0 && st.DialFailures > 0 && st.Dials >= st.DialFailures
	})
	if strings.Contains(logs.String(), good) {
		t.Fatal("the secret appears in the logs")
	}
	// A node answering for another ID is refused.
	c.mu.Lock()
	c.addrs["x"] = c.addrs["b"]
	c.mu.Unlock()
	if _, err := a.Request(ctx, "x", 1, nil); !errors.Is(err, ErrHandshake) {
		t.Fatalf("wrong node at the address: %v", err)
	}
}

// rawPeer dials node addr and completes the handshake by hand, as node id,
// with testSecret, speaking this build's protocol version.
func rawPeer(t *testing.T, addr, id, to string) net.Conn {
	t.Helper()
	return rawPeerVersion(t, addr, id, to, protoVersion)
}

// rawPeerVersion is rawPeer speaking protocol version max: 1 is a node of
// the first version, whose hello has no Max.
func rawPeerVersion(t *testing.T, addr, id, to string, max uint8) net.Conn {
	t.Helper()
	if max == 1 {
		max = 0 // version 1 did not send the field
	}
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	nc := linkAs(raw, testSecret)
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	cn := newNonce()
	if err := writeHello(nc, hello{Magic: helloMagic, Version: helloVersion, Max: max, Node: id, To: to, Nonce: cn}); err != nil {
		t.Fatal(err)
	}
	sh, err := readHello(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeHello(nc, hello{Proof: proof(testSecret, "client", cn, sh.Nonce, id, to)}); err != nil {
		t.Fatal(err)
	}
	if st, err := readHello(nc); err != nil || st.Status != statusOK {
		t.Fatalf("status %+v %v", st, err)
	}
	return nc
}

// expectClosed reads until the server closes nc.
func expectClosed(t *testing.T, nc net.Conn) {
	t.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, nc) // EOF (nil) or a reset: closed either way
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("connection not closed")
	}
}

func TestTCPGarbage(t *testing.T) {
	defer goleak.VerifyNone(t)
	var logs syncBuffer
	c := newTCPCluster(t, 0, func(cfg *TCPConfig) { cfg.Logger = bufLogger(&logs) })
	defer c.CloseAll()
	b := c.Node(t, "b")
	b.Handle(1, echo)
	addr := b.(*TCP).Addr()

	frame := func(h header, body []byte) []byte { return encodeFrame(h, body) }
	tooLong := binary.BigEndian.AppendUint32(nil, DefaultMaxMessageSize+maxHeaderLen+1)
	cases := []struct {
		name, log string
		handshake bool
		data      []byte
	}{
		{"garbage before handshake", "refused inbound connection", false, []byte("GET / HTTP/1.1\r\n\r\n")},
		{"huge hello", "refused inbound connection", false, []byte{0xff, 0xff, 0xff, 0xff}},
		{"garbage frame", "bad frame", true, []byte{0, 0, 0, 3, 1, 2, 3}},
		{"oversized frame", "frame too large", true, tooLong},
		{"bad flags", "bad flags", true, frame(header{flags: flagRequest | flagResponse, kind: 1}, nil)},
		{"kind 0", "kind 0", true, frame(header{flags: flagRequest}, nil)},
		{"empty frame", "empty frame", true, []byte{0, 0, 0, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var nc net.Conn
			if tc.handshake {
				nc = rawPeer(t, addr, "g", "b")
			} else {
				var err error
				if nc, err = net.Dial("tcp", addr); err != nil {
					t.Fatal(err)
				}
			}
			defer nc.Close()
			if _, err := nc.Write(tc.data); err != nil {
				t.Fatal(err)
			}
			expectClosed(t, nc)
			eventually(t, "reason logged", func() bool { return strings.Contains(logs.String(), tc.log) })
		})
	}
	// The node still serves well-behaved peers.
	a := c.Node(t, "a")
	if _, err := a.Request(testCtx(t), "b", 1, nil); err != nil {
		t.Fatal(err)
	}
	// A raw peer that speaks the protocol gets answers.
	nc := rawPeer(t, addr, "g", "b")
	defer nc.Close()
	if _, err := nc.Write(frame(header{flags: flagRequest, kind: 1, id: 7}, []byte("raw"))); err != nil {
		t.Fatal(err)
	}
	var lb [4]byte
	if _, err := io.ReadFull(nc, lb[:]); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, binary.BigEndian.Uint32(lb[:]))
	if _, err := io.ReadFull(nc, buf); err != nil {
		t.Fatal(err)
	}
	h, body, err := decodeFrame(buf, DefaultMaxMessageSize)
	if err != nil || h.flags != flagResponse || h.id != 7 || string(body) != "g:raw" {
		t.Fatalf("response %+v %q %v", h, body, err)
	}
}

// connCount returns how many connections n holds and the addresses of the
// one its peer slot uses.
func connCount(n *TCP, peerID string) (int, string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	slot := ""
	if p := n.peers[peerID]; p != nil && p.conn != nil {
		slot = p.conn.nc.LocalAddr().String() + ">" + p.conn.nc.RemoteAddr().String()
	}
	return len(n.conns), slot
}

func TestTCPSimultaneousDial(t *testing.T) {
	defer goleak.VerifyNone(t)
	for round := range 10 {
		simultaneousDialRound(t, round)
	}
}

func simultaneousDialRound(t *testing.T, round int) {
	c := newMTLSCluster(t, nil)
	defer c.CloseAll()
	a := c.Node(t, "a").(*TCP)
	b := c.Node(t, "b").(*TCP)
	a.Handle(1, echo)
	b.Handle(1, echo)
	ctx := testCtx(t)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Go(func() {
			from, to := a, "b"
			if i%2 == 1 {
				from, to = b, "a"
			}
			if _, err := from.Request(ctx, to, 1, nil); err != nil {
				errs <- fmt.Errorf("round %d %s->%s: %w", round, from.LocalID(), to, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// One connection remains, the same at both ends.
	eventually(t, "one connection per side", func() bool {
		na, sa := connCount(a, "b")
		nb, sb := connCount(b, "a")
		return na == 1 && nb == 1 && sa != "" && sb != ""
	})
	_, sa := connCount(a, "b")
	_, sb := connCount(b, "a")
	la, ra, _ := strings.Cut(sa, ">")
	lb, rb, _ := strings.Cut(sb, ">")
	if la != rb || ra != lb {
		t.Fatalf("round %d: a uses %s, b uses %s", round, sa, sb)
	}
	// Which one is kept depends on the timing: the tie-break (a's) when
	// both dials completed at once, otherwise the first one up, since an
	// inbound connection never takes over a live one (TCPStats.Kept).
	sa2, sb2 := a.Stats(), b.Stats()
	t.Logf("round %d: dials a=%d b=%d; stats a=%+v b=%+v", round, sa2.Dials, sb2.Dials, sa2, sb2)
}

func TestTCPBusy(t *testing.T) {
	defer goleak.VerifyNone(t)
	c := newTCPCluster(t, 0, func(cfg *TCPConfig) { cfg.MaxInflight, cfg.MaxQueued = 2, 3 })
	defer c.CloseAll()
	a, b := c.Node(t, "a"), c.Node(t, "b")
	release := make(chan struct{})
	started := make(chan struct{}, 16)
	b.Handle(1, func(hctx context.Context, _ string, _ []byte) ([]byte, error) {
		started <- struct{}{}
		select {
		case <-release:
		case <-hctx.Done():
		}
		return nil, nil
	})
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if _, err := a.Request(ctx, "b", 1, nil); err != nil {
				t.Error(err)
			}
		})
	}
	<-started
	<-started
	// Three more wait in the queue.
	for range 3 {
		wg.Go(func() {
			if _, err := a.Request(ctx, "b", 1, nil); err != nil {
				t.Error(err)
			}
		})
	}
	bt := b.(*TCP)
	eventually(t, "three queued", func() bool {
		bt.mu.Lock()
		defer bt.mu.Unlock()
		for cn := range bt.conns {
			cn.mu.Lock()
			n := len(cn.backlog)
			cn.mu.Unlock()
			return n == 3
		}
		return false
	})
	if _, err := a.Request(ctx, "b", 1, nil); !errors.Is(err, ErrBusy) {
		t.Fatalf("sixth request: %v, want ErrBusy", err)
	}
	if err := a.Send(ctx, "b", 1, nil); err != nil { // dropped by b
		t.Fatal(err)
	}
	eventually(t, "two messages shed", func() bool { return bt.Stats().Shed == 2 })
	close(release)
	wg.Wait()
	if _, err := a.Request(ctx, "b", 1, nil); err != nil {
		t.Fatalf("after the handlers finished: %v", err)
	}
}

func TestTCPReconnectBackoff(t *testing.T) {
	defer goleak.VerifyNone(t)
	clock := clockwork.NewFakeClock()
	// A port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close()
	var resolves atomic.Int32
	c := newTCPCluster(t, 0, nil)
	defer c.CloseAll()
	cfg := c.config(t, "a")
	cfg.Clock = clock
	cfg.ReconnectMin = time.Second
	cfg.ReconnectMax = 4 * time.Second
	cfg.Resolve = func(string) (string, error) {
		resolves.Add(1)
		return dead, nil
	}
	a := c.start(t, cfg)
	ctx := testCtx(t)
	fail := func(wantResolves int32) {
		t.Helper()
		if _, err := a.Request(ctx, "b", 1, nil); !errors.Is(err, ErrUnreachable) {
			t.Fatalf("got %v", err)
		}
		if got := resolves.Load(); got != wantResolves {
			t.Fatalf("dials: %d, want %d", got, wantResolves)
		}
	}
	fail(1)
	fail(1) // within the backoff: no dial
	clock.Advance(1250 * time.Millisecond)
	fail(2) // the first wait is at most 1.25 s
	clock.Advance(1400 * time.Millisecond)
	fail(2) // the second is at least 1.5 s
	clock.Advance(1200 * time.Millisecond)
	fail(3)
	for range 5 {
		clock.Advance(5 * time.Second) // capped at 4 s + 25%
		fail(resolves.Load() + 1)
	}
}

// The peer dying fails pending requests at once, without waiting for ctx.
func TestTCPPeerDeathFailsPending(t *testing.T) {
	defer goleak.VerifyNone(t)
	c := newTCPCluster(t, 0, nil)
	defer c.CloseAll()
	a := c.noDial(t, "a")
	nc := rawPeer(t, a.Addr(), "b", "a") // a's connection to "b"
	started := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		close(started)
		_, err := a.Request(context.Background(), "b", 1, nil)
		errc <- err
	}()
	<-started
	// Read the request from the raw connection, then die without answering.
	var lb [4]byte
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(nc, lb[:]); err != nil {
		t.Fatal(err)
	}
	_ = nc.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrUnreachable) {
			t.Fatalf("got %v", err)
		}
	case <-testCtx(t).Done():
		t.Fatal("pending request did not fail when the peer died")
	}
}

// A retired connection (replaced by the tie-break, or by ReloadTLS)
// drains: a request in flight on it completes, then it closes on both
// sides.
func TestTCPRetireDrains(t *testing.T) {
	defer goleak.VerifyNone(t)
	c := newMTLSCluster(t, nil)
	defer c.CloseAll()
	a := c.Node(t, "a").(*TCP)
	b := c.Node(t, "b").(*TCP)
	a.Handle(1, echo)
	b.Handle(1, echo)
	release := make(chan struct{})
	started := make(chan struct{})
	a.Handle(2, func(hctx context.Context, from string, body []byte) ([]byte, error) {
		close(started)
		select {
		case <-release:
		case <-hctx.Done():
			return nil, hctx.Err()
		}
		return []byte("slow done"), nil
	})
	ctx := testCtx(t)
	// b dials first: the only connection is the non-preferred one.
	if _, err := b.Request(ctx, "a", 1, nil); err != nil {
		t.Fatal(err)
	}
	slow := make(chan error, 1)
	go func() {
		got, err := b.Request(ctx, "a", 2, nil)
		if err == nil && string(got) != "slow done" {
			err = fmt.Errorf("got %q", got)
		}
		slow <- err
	}()
	<-started
	// a retires its connections (as ReloadTLS does); the next call dials.
	a.retireAll()
	// New calls use the new connection both ways while the old one drains.
	if _, err := a.Request(ctx, "b", 1, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Request(ctx, "a", 1, nil); err != nil {
		t.Fatal(err)
	}
	if n, _ := connCount(a, "b"); n != 2 {
		t.Fatalf("a holds %d connections while one drains, want 2", n)
	}
	close(release)
	if err := <-slow; err != nil {
		t.Fatalf("request on the retired connection: %v", err)
	}
	eventually(t, "the retired connection closes", func() bool {
		na, _ := connCount(a, "b")
		nb, _ := connCount(b, "a")
		return na == 1 && nb == 1
	})
	_, sa := connCount(a, "b")
	if _, remote, _ := strings.Cut(sa, ">"); remote != b.Addr() {
		t.Fatalf("a kept %s, not the connection it dialled", sa)
	}
}

// A call that dials right after its node retired its connections, while
// the go-away is still held back on this side (a busy scheduler: CI saw
// it), is refused as duplicate by the peer, which still holds the old
// connection as live. The peer answers the go-away, once sent, with its
// own; that wakes the refused call, which dials again and succeeds (before,
// it waited out HandshakeTimeout and failed).
// With peerRetires, the peer retires the connection too while ours is held
// back: its go-away wakes the call the same way.
func TestTCPRedialWhileGoAwayHeldBack(t *testing.T) {
	for _, peerRetires := range []bool{false, true} {
		t.Run(fmt.Sprintf("peer retires=%v", peerRetires), func(t *testing.T) {
			redialWhileGoAwayHeldBack(t, peerRetires)
		})
	}
}

func redialWhileGoAwayHeldBack(t *testing.T, peerRetires bool) {
	defer goleak.VerifyNone(t)
	c := newMTLSCluster(t, func(cfg *TCPConfig) { cfg.HandshakeTimeout = 20 * time.Second })
	defer c.CloseAll()
	a := c.Node(t, "a").(*TCP)
	b := c.Node(t, "b").(*TCP)
	a.Handle(1, echo)
	b.Handle(1, echo)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	if _, err := b.Request(ctx, "a", 1, nil); err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	var held atomic.Bool
	holdFirst := func() { // a's own retirement only; later ones (answering b's go-away) go on
		if held.CompareAndSwap(false, true) {
			<-hold
		}
	}
	a.beforeRetire.Store(&holdFirst)
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	defer release()
	a.retireAll()
	done := make(chan error, 1)
	go func() {
		_, err := a.Request(ctx, "b", 1, nil)
		done <- err
	}()
	// b refuses the new dial while the old connection answers its probe.
	// Under load the probe may go unanswered in time, b then closes the
	// old connection and takes the new one: the case did not arise.
	refused := false
	eventually(t, "b to refuse a's new dial as duplicate, or the call to end", func() bool {
		refused = b.Stats().Kept >= 1
		return refused || len(done) > 0
	})
	if !refused {
		release()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		t.Skip("b took the new connection at once (its probe of the old one went unanswered): inconclusive")
	}
	if peerRetires {
		b.retireAll()
	} else {
		release()
	}
	if err := <-done; err != nil { // without the wake-up: "peer keeps its own connection" after HandshakeTimeout
		t.Fatalf("the call after the retirement: %v", err)
	}
}

// An inbound connection that never completes the handshake is closed after
// HandshakeTimeout and logged.
func TestTCPHandshakeTimeout(t *testing.T) {
	defer goleak.VerifyNone(t)
	var logs syncBuffer
	c := newTCPCluster(t, 0, func(cfg *TCPConfig) {
		cfg.HandshakeTimeout = 100 * time.Millisecond
		cfg.Logger = bufLogger(&logs)
	})
	defer c.CloseAll()
	b := c.Node(t, "b").(*TCP)
	nc, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	expectClosed(t, nc)
	eventually(t, "refusal logged", func() bool { return strings.Contains(logs.String(), "refused inbound connection") })
	eventually(t, "refusal counted as a timeout", func() bool { return b.Stats().RefusedBy[RefuseTimeout] == 1 })
}

// A probe (sent when a peer dials although we hold the preferred
// connection) is ignored by the receiver and counted as traffic.
func TestTCPProbeIgnored(t *testing.T) {
	defer goleak.VerifyNone(t)
	c := newTCPCluster(t, 0, nil)
	defer c.CloseAll()
	a := c.Node(t, "a").(*TCP)
	b := c.Node(t, "b").(*TCP)
	b.Handle(1, echo)
	ctx := testCtx(t)
	if _, err := a.Request(ctx, "b", 1, nil); err != nil {
		t.Fatal(err)
	}
	before := b.Stats()
	a.mu.Lock()
	cn := a.peers["b"].conn
	a.mu.Unlock()
	cn.probe()
	eventually(t, "probe received", func() bool { return b.Stats().FramesIn == before.FramesIn+1 })
	if got, err := a.Request(ctx, "b", 1, []byte("x")); err != nil || string(got) != "a:x" {
		t.Fatalf("after a probe: %q %v", got, err)
	}
	if st := a.Stats(); st.Conns != 1 || st.Dials != 1 || st.FramesOut != 3 || st.FramesIn != 2 {
		t.Fatalf("a's stats: %+v", st)
	}
}

// When the caller's node goes away, the connection closes and the
// handlers serving it see their context end.
func TestTCPConnCloseCancelsHandler(t *testing.T) {
	defer goleak.VerifyNone(t)
	c := newTCPCluster(t, 0, nil)
	defer c.CloseAll()
	a, b := c.Node(t, "a"), c.Node(t, "b")
	started := make(chan struct{})
	ended := make(chan error, 1)
	b.Handle(1, func(hctx context.Context, _ string, _ []byte) ([]byte, error) {
		close(started)
		<-hctx.Done()
		ended <- hctx.Err()
		return nil, nil
	})
	go func() { _, _ = a.Request(context.Background(), "b", 1, nil) }()
	<-started
	_ = a.Close()
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("handler ctx ended with %v", err)
		}
	case <-testCtx(t).Done():
		t.Fatal("handler context not cancelled when the connection closed")
	}
}

// serveV1 acts as a node of protocol version 1 on an established
// connection: it answers requests with "v1:" and the body, and ends (with
// an error on errs) at the first frame a version-1 decoder refuses, which
// would make such a node close the connection. It returns when nc closes.
func serveV1(nc net.Conn, errs chan<- error) {
	for {
		var lb [4]byte
		if _, err := io.ReadFull(nc, lb[:]); err != nil {
			return
		}
		buf := make([]byte, binary.BigEndian.Uint32(lb[:]))
		if _, err := io.ReadFull(nc, buf); err != nil {
			return
		}
		h, body, err := decodeFrame(buf, DefaultMaxMessageSize)
		switch {
		case err != nil:
		case h.flags == flagRequest:
			_, err = nc.Write(encodeFrame(header{flags: flagResponse, id: h.id}, append([]byte("v1:"), body...)))
		case h.flags&^flagError == flagResponse, h.flags == flagOneWay, h.flags == flagGoAway:
		default:
			err = fmt.Errorf("a version-1 node closes the connection on flags 0x%x", h.flags)
		}
		if err != nil {
			errs <- err
			return
		}
	}
}

// acceptV1 answers one dial on ln as node id of protocol version 1 (its
// hello has no Max), with testSecret.
func acceptV1(ln net.Listener, id string) (net.Conn, error) { return acceptVersion(ln, id, 0) }

// acceptVersion is acceptV1 sending max in its hello (0: none, version 1).
func acceptVersion(ln net.Listener, id string, max uint8) (net.Conn, error) {
	raw, err := ln.Accept()
	if err != nil {
		return nil, err
	}
	link, err := secretTLS(testSecret)
	if err != nil {
		return nil, err
	}
	nc := tls.Server(raw, link)
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	defer nc.SetDeadline(time.Time{})
	ch, err := readHello(nc)
	if err != nil {
		return nil, err
	}
	sn := newNonce()
	if err := writeHello(nc, hello{Magic: helloMagic, Version: 1, Max: max, Node: id, Nonce: sn, Proof: proof(testSecret, "server", ch.Nonce, sn, ch.Node, id)}); err != nil {
		return nil, err
	}
	if _, err := readHello(nc); err != nil {
		return nil, err
	}
	return nc, writeHello(nc, hello{Status: statusOK})
}

// Rolling upgrade: a node of protocol version 1 (no ping or pong frames)
// stays connected to this version through many IdleTimeouts, whichever
// side dialled, and never receives a frame it would refuse.
func TestTCPVersion1Peer(t *testing.T) {
	for _, dir := range []string{"v1 dials", "v1 dialled"} {
		t.Run(dir, func(t *testing.T) {
			defer goleak.VerifyNone(t)
			const idle = 50 * time.Millisecond
			c := newTCPCluster(t, 0, func(cfg *TCPConfig) { cfg.IdleTimeout = idle })
			defer c.CloseAll()
			var a *TCP
			if dir == "v1 dials" {
				a = c.noDial(t, "a") // so that it calls over the connection old dialled
			} else {
				a = c.Node(t, "a").(*TCP)
			}
			ctx := testCtx(t)
			var old net.Conn
			if dir == "v1 dials" {
				old = rawPeerVersion(t, a.Addr(), "old", "a", 1)
				_ = old.SetDeadline(time.Time{})
			} else {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
				c.mu.Lock()
				c.addrs["old"] = ln.Addr().String()
				c.mu.Unlock()
				accepted := make(chan error, 1)
				go func() {
					var err error
					old, err = acceptV1(ln, "old")
					accepted <- err
				}()
				if err := a.Send(ctx, "old", 1, nil); err != nil { // dials
					t.Fatal(err)
				}
				if err := <-accepted; err != nil {
					t.Fatal(err)
				}
			}
			defer old.Close()
			errs := make(chan error, 1)
			done := make(chan struct{})
			go func() {
				defer close(done)
				serveV1(old, errs)
			}()
			if got, err := a.Request(ctx, "old", 1, []byte("x")); err != nil || string(got) != "v1:x" {
				t.Fatalf("request to the version-1 node: %q %v", got, err)
			}
			// An observation window, not a wait for a state: a version-2
			// peer would be pinged after one IdleTimeout and the version-1
			// node would close the connection at the ping.
			select {
			case err := <-errs:
				t.Fatal(err)
			case <-time.After(10 * idle):
			}
			before := a.Stats()
			if got, err := a.Request(ctx, "old", 1, []byte("y")); err != nil || string(got) != "v1:y" {
				t.Fatalf("request after 10 IdleTimeouts: %q %v", got, err)
			}
			if st := a.Stats(); st.Conns != 1 || st.Dials != before.Dials {
				t.Fatalf("the connection did not survive: %+v", st)
			}
			select {
			case err := <-errs:
				t.Fatal(err)
			default:
			}
			_ = old.Close()
			<-done
		})
	}
}

// Versions: the lower of both sides' is used; a hello without Max is from
// version 1.
func TestNegotiate(t *testing.T) {
	for _, tc := range []struct {
		h    hello
		want uint8
	}{
		{hello{Version: 1}, 1},
		{hello{Version: 1, Max: 2}, 2},
		{hello{Version: 1, Max: 9}, protoVersion},
	} {
		if got := negotiate(tc.h); got != tc.want {
			t.Errorf("negotiate(%+v) = %d, want %d", tc.h, got, tc.want)
		}
	}
}

// TestTCPConfigValidateEvery: Validate reports every rule a config breaks, in one error.
func TestTCPConfigValidateEvery(t *testing.T) {
	c := DefaultTCPConfig() // no NodeID, neither Secret nor TLS
	c.DialTimeout, c.WriteQueue = -1, -1
	err := c.Validate()
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Validate = %v, want ErrInvalidConfig", err)
	}
	for _, field := range []string{"NodeID", "neither Secret nor TLS", "DialTimeout", "WriteQueue"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("Validate = %v, does not name %s", err, field)
		}
	}
}
