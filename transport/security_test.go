package transport

// Each test here performs one attack of issue 12 over real loopback TCP and
// asserts that it fails.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// dialFrom connects to addr from source IP src (any 127.x.y.z works on
// Linux loopback), so that tests can act as several hosts.
func dialFrom(src, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	if src != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
	}
	return d.Dial("tcp", addr)
}

// linkAs wraps nc, a raw client connection, in the TLS a transport with
// a Secret and no TLS runs, keyed by secret (nil: nc itself, plaintext):
// the handshake runs on the first write.
func linkAs(nc net.Conn, secret []byte) net.Conn {
	if secret == nil {
		return nc
	}
	cfg, err := secretTLS(secret)
	if err != nil {
		panic(err)
	}
	return tls.Client(nc, cfg)
}

// handshakeAs runs the client handshake by hand on nc, as node id towards
// node `to`, proving secret (none if nil); it returns the server's status.
func handshakeAs(nc net.Conn, id, to string, secret []byte) (uint8, error) {
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	defer nc.SetDeadline(time.Time{})
	cn := newNonce()
	if err := writeHello(nc, hello{Magic: helloMagic, Version: helloVersion, Max: protoVersion, Node: id, To: to, Nonce: cn}); err != nil {
		return 0, err
	}
	sh, err := readHello(nc)
	if err != nil {
		return 0, err
	}
	var p []byte
	if secret != nil {
		p = proof(secret, "client", cn, sh.Nonce, id, to)
	}
	if err := writeHello(nc, hello{Proof: p}); err != nil {
		return 0, err
	}
	st, err := readHello(nc)
	if err != nil {
		return 0, err
	}
	return st.Status, nil
}

// countingHandler counts its calls and the peers they came from.
type countingHandler struct {
	mu    sync.Mutex
	calls map[string]int
}

func (h *countingHandler) handle(_ context.Context, from string, body []byte) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.calls == nil {
		h.calls = map[string]int{}
	}
	h.calls[from]++
	return append([]byte("ok:"), body...), nil
}

func (h *countingHandler) total() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.calls {
		n += c
	}
	return n
}

// heapInuse returns the live heap after a collection.
func heapInuse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// peakHeap samples HeapInuse (without forcing collections) until stop is
// closed and returns the highest value seen.
func peakHeap(stop <-chan struct{}) <-chan uint64 {
	out := make(chan uint64, 1)
	go func() {
		var peak uint64
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-stop:
				out <- peak
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return out
}

// Attack: an anonymous peer at the defaults. The defaults are refused, and
// with a Secret a peer without it cannot make a handler run.
func TestSecurityAnonymousPeer(t *testing.T) {
	defer goleak.VerifyNone(t)
	cfg := DefaultTCPConfig()
	cfg.NodeID = "n1"
	err := cfg.Validate()
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Validate accepted a config with neither Secret nor TLS: %v", err)
	}
	for _, w := range []string{"Secret", "TLS", "Insecure"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the error does not name %s: %v", w, err)
		}
	}
	if _, err := NewTCP(cfg); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("NewTCP accepted the defaults: %v", err)
	}
	// TLS that verifies no client certificate, without a Secret, is
	// anonymous too.
	cfg.TLS = &tls.Config{}
	if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "RequireAndVerifyClientCert") {
		t.Fatalf("Validate accepted TLS without client authentication: %v", err)
	}
	cfg.Insecure = true
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Insecure is the explicit way out: %v", err)
	}

	// With a Secret: a peer without it (no proof, a wrong proof, or frames
	// without any handshake) never reaches a handler.
	c := newTCPCluster(t, 0, nil)
	defer c.CloseAll()
	n1 := c.Node(t, "n1").(*TCP)
	var h countingHandler
	n1.Handle(1, h.handle)
	req := encodeFrame(header{flags: flagRequest, kind: 1, id: 1}, []byte("inject"))
	attempts := []struct {
		name   string
		secret []byte
	}{{"plaintext, no proof", nil}, {"wrong secret", []byte("not the cluster's secret, 32 b.")}}
	for _, a := range attempts {
		nc, err := dialFrom("", n1.Addr())
		if err != nil {
			t.Fatal(err)
		}
		nc = linkAs(nc, a.secret)
		if st, err := handshakeAs(nc, "x", "n1", a.secret); err == nil {
			t.Errorf("%s: handshake accepted, status %d", a.name, st)
		}
		_, _ = nc.Write(req) // may fail: the server closed the connection
		expectClosed(t, nc)
		_ = nc.Close()
	}
	// Frames straight away, no handshake.
	nc, err := dialFrom("", n1.Addr())
	if err != nil {
		t.Fatal(err)
	}
	_, _ = nc.Write(req)
	expectClosed(t, nc)
	_ = nc.Close()
	eventually(t, "three refusals", func() bool { return n1.Stats().Refused >= 3 })
	// Each fails the link's TLS: the plaintext hello and the bare frames
	// are no TLS, and with a wrong secret the client refuses n1's link
	// certificate (derived from another key) and aborts.
	if st := n1.Stats(); st.RefusedBy[RefuseTLS] != 3 || st.Accepted != 0 {
		t.Errorf("refusals by reason %v (tls 3 expected), accepted %d", st.RefusedBy, st.Accepted)
	}
	if n := h.total(); n != 0 {
		t.Fatalf("the handler ran %d times for peers without the secret", n)
	}
	// A member with the secret is served (the handler works).
	n2 := c.Node(t, "n2")
	if _, err := n2.Request(testCtx(t), "n1", 1, nil); err != nil || h.total() != 1 {
		t.Fatalf("member: %v, %d calls", err, h.total())
	}
	if st := n1.Stats(); st.Accepted != 1 || st.Conns != 1 || st.FramesIn == 0 || st.BytesIn == 0 || st.BytesOut == 0 {
		t.Errorf("after a member's request: %+v", st)
	}
}

// Attack: a holder of the secret claims the ID of a node, to receive the
// calls meant for it. Without certificates binding node IDs, a node sends
// its calls only over connections it dialled to the address Resolve gives:
// the impostor's connection is accepted (it proved the secret, and may
// make calls of its own) but never becomes the path to the node it claims,
// whoever dialled the live connection, and the calls keep reaching the
// real node.
func TestSecurityImpostorKeepsNoPath(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, dialer := range []string{"n1", "n2"} { // who dialled the live connection
		t.Run("dialled by "+dialer, func(t *testing.T) {
			c := newTCPCluster(t, 0, nil)
			defer c.CloseAll()
			n1 := c.Node(t, "n1").(*TCP)
			n2 := c.Node(t, "n2").(*TCP)
			var h1, h2 countingHandler
			n1.Handle(1, h1.handle)
			n2.Handle(1, h2.handle)
			ctx := testCtx(t)
			if dialer == "n1" {
				_, err := n1.Request(ctx, "n2", 1, nil)
				if err != nil {
					t.Fatal(err)
				}
			} else if _, err := n2.Request(ctx, "n1", 1, nil); err != nil {
				t.Fatal(err)
			}
			// The impostor has the secret and claims to be n1.
			raw, err := dialFrom("127.0.0.3", n2.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			imp := linkAs(raw, testSecret)
			st, err := handshakeAs(imp, "n1", "n2", testSecret)
			if err != nil || st != statusOK {
				t.Fatalf("the impostor's connection: status %d, %v (it holds the secret: accepted, for its own calls)", st, err)
			}
			// n2's requests to n1 all reach the real n1; none waits on the
			// impostor's connection (which answers nothing).
			before := h1.total()
			for i := range 5 {
				got, err := n2.Request(ctx, "n1", 1, []byte{byte(i)})
				if err != nil || string(got) != "ok:"+string([]byte{byte(i)}) {
					t.Fatalf("n2 -> n1 #%d: %q %v", i, got, err)
				}
			}
			if got := h1.total() - before; got != 5 {
				t.Fatalf("the real n1 served %d of 5 requests", got)
			}
			if k := n2.Stats().Kept; k != 0 {
				t.Fatalf("Kept = %d: no duplicate refusal without certificates", k)
			}
		})
	}
}

// Attack: a member holding a valid certificate for n3 claims to be n2,
// both as a client (dialling n1 as "n2") and as a server (answering n1's
// dial to "n2"). Both are refused, with the Secret set too.
func TestSecurityCertIdentity(t *testing.T) {
	defer goleak.VerifyNone(t)
	pool, issue := testCA(t, "cluster CA")
	var logs syncBuffer
	c := newTCPCluster(t, 0, nil)
	defer c.CloseAll()
	mk := func(id string, cert tls.Certificate) *TCP {
		cfg := c.config(t, id)
		cfg.TLS = mtlsConfig(pool, cert)
		cfg.Logger = bufLogger(&logs).With("test-node", id)
		return c.start(t, cfg)
	}
	n1 := mk("n1", issue("n1"))
	var h countingHandler
	n1.Handle(1, h.handle)
	ctx := testCtx(t)

	// n3's certificate, claiming n2, dialling n1.
	imp := mk("n2", issue("n3"))
	imp.Handle(1, h.handle)
	if _, err := imp.Request(ctx, "n1", 1, []byte("as n2")); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("impostor -> n1: %v, want ErrUnreachable", err)
	}
	eventually(t, "identity refusal logged by n1", func() bool {
		return strings.Contains(logs.String(), ErrIdentity.Error()) && strings.Contains(logs.String(), `peer claims \"n2\"`)
	})
	if h.total() != 0 {
		t.Fatal("n1 served the impostor")
	}
	// n1 dialling "n2" reaches the impostor's listener: n1 refuses it.
	if _, err := n1.Request(ctx, "n2", 1, nil); !errors.Is(err, ErrIdentity) || !errors.Is(err, ErrHandshake) {
		t.Fatalf("n1 -> impostor: %v, want ErrIdentity", err)
	}
	if h.total() != 0 {
		t.Fatal("the impostor was served")
	}
	// The real n2 gets through both ways.
	c.mu.Lock()
	delete(c.addrs, "n2")
	c.mu.Unlock()
	_ = imp.Close()
	n2 := mk("n2", issue("n2"))
	n2.Handle(1, h.handle)
	if _, err := n2.Request(ctx, "n1", 1, nil); err != nil {
		t.Fatalf("n2 -> n1: %v", err)
	}
	n1.retireAll()
	eventually(t, "n1 reaches n2", func() bool { _, err := n1.Request(ctx, "n2", 1, nil); return err == nil })
}

// Without a Secret, mutual TLS is what authenticates, and a certificate
// naming another node is still refused; a custom VerifyPeerID applies.
func TestSecurityCertIdentityNoSecret(t *testing.T) {
	defer goleak.VerifyNone(t)
	pool, issue := testCA(t, "cluster CA")
	c := newTCPCluster(t, 0, nil)
	defer c.CloseAll()
	var verified atomic.Int32
	mk := func(id, cn string) *TCP {
		cfg := c.config(t, id)
		cfg.Secret = nil
		cfg.TLS = mtlsConfig(pool, issue(cn))
		cfg.VerifyPeerID = func(node string, cert *x509.Certificate) error {
			verified.Add(1)
			return DefaultVerifyPeerID(node, cert)
		}
		return c.start(t, cfg)
	}
	n1 := mk("n1", "n1")
	n1.Handle(1, echo)
	n2 := mk("n2", "n2")
	ctx := testCtx(t)
	if _, err := n2.Request(ctx, "n1", 1, nil); err != nil {
		t.Fatal(err)
	}
	if verified.Load() != 2 { // each side checked the other
		t.Fatalf("VerifyPeerID ran %d times, want 2", verified.Load())
	}
	imp := mk("n4", "n3")
	if _, err := imp.Request(ctx, "n1", 1, nil); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("n3's certificate as n4: %v", err)
	}
}

func TestDefaultVerifyPeerID(t *testing.T) {
	u, _ := url.Parse("spiffe://muster/n5")
	cert := &x509.Certificate{DNSNames: []string{"n2", "n2.cluster.local"}, URIs: []*url.URL{u}}
	cert.Subject.CommonName = "n1"
	for _, tc := range []struct {
		node string
		ok   bool
	}{
		{"n1", true}, {"n2", true}, {"n2.cluster.local", true}, {"spiffe://muster/n5", true},
		{"n3", false}, {"N1", false}, {"", false}, {"n5", false},
	} {
		err := DefaultVerifyPeerID(tc.node, cert)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrIdentity)) {
			t.Errorf("%q: %v, want ok=%v", tc.node, err, tc.ok)
		}
	}
	if err := DefaultVerifyPeerID("n1", nil); !errors.Is(err, ErrIdentity) {
		t.Errorf("nil certificate: %v", err)
	}
}

// Attack: 1,000 connections that never send a byte, from one host and
// from ten, while a real peer (another address) dials. The per-address
// cap closes most at once, the real peer is served, and the held ones are
// closed by the handshake deadline.
func TestSecurityIdleConnectionFlood(t *testing.T) {
	defer goleak.VerifyNone(t)
	// 20 and 300 hosts can fill MaxHandshakes (16 x 16 = 256) although each
	// stays under MaxHandshakesPerIP; the real peer's handshake then takes
	// the slot of the oldest pending one of the busiest address.
	for _, hosts := range []int{1, 10, 20, 300} {
		t.Run(fmt.Sprintf("%d hosts", hosts), func(t *testing.T) {
			c := newTCPCluster(t, 0, func(cfg *TCPConfig) { cfg.HandshakeTimeout = 3 * time.Second })
			defer c.CloseAll()
			b := c.Node(t, "b").(*TCP)
			b.Handle(1, echo)
			const total = 1000
			conns := make([]net.Conn, 0, total)
			defer func() {
				for _, nc := range conns {
					_ = nc.Close()
				}
			}()
			for i := range total {
				h := i % hosts // 127.0.1.1 ... 127.0.2.50
				nc, err := dialFrom(fmt.Sprintf("127.0.%d.%d", 1+h/250, 1+h%250), b.Addr())
				if err != nil {
					t.Fatalf("attacker dial %d: %v", i, err)
				}
				conns = append(conns, nc)
			}
			cfg := DefaultTCPConfig()
			held := min(total, hosts*cfg.MaxHandshakesPerIP, cfg.MaxHandshakes)
			eventually(t, "the surplus closed at once", func() bool { return b.Stats().Limited == total-uint64(held) })
			// The real peer, from 127.0.0.1, is served while the held
			// connections still wait for their deadline.
			a := c.Node(t, "a")
			if got, err := a.Request(testCtx(t), "b", 1, []byte("hi")); err != nil || string(got) != "a:hi" {
				t.Fatalf("real peer during the flood: %q %v", got, err)
			}
			evicted := 0
			if held == cfg.MaxHandshakes {
				evicted = 1 // the real peer's handshake took one slot
			}
			if l := b.Stats().Limited; l != total-uint64(held)+uint64(evicted) {
				t.Fatalf("Limited = %d, want %d", l, total-held+evicted)
			}
			b.hmu.Lock()
			still := b.hsTotal
			b.hmu.Unlock()
			if still < held-evicted {
				t.Fatalf("%d of the flood's %d handshakes still held when the real peer was served: the test did not overlap them", still, held-evicted)
			}
			// Every attacker connection ends: the surplus at once, the rest
			// at the handshake deadline.
			for _, nc := range conns {
				expectClosed(t, nc)
			}
			eventually(t, "held ones refused at the deadline", func() bool { return b.Stats().Refused == uint64(held-evicted) })
			b.hmu.Lock()
			left := b.hsTotal
			b.hmu.Unlock()
			if left != 0 {
				t.Fatalf("%d handshake slots still taken", left)
			}
		})
	}
}

// stallFrame is a frame header declaring the largest body and a few bytes
// of it.
func stallFrame() []byte {
	f := binary.BigEndian.AppendUint32(nil, DefaultMaxMessageSize+maxHeaderLen)
	return append(f, 0x95, flagOneWay, 1, 0, 0, 0, 'x')
}

// Attack: 32 members (they hold the secret) each declare a 4 MiB frame
// and stall. The server holds no 4 MiB buffer for them, and closes them
// by the idle deadline.
func TestSecurityStalledFrame(t *testing.T) {
	defer goleak.VerifyNone(t)
	var logs syncBuffer
	c := newTCPCluster(t, 0, func(cfg *TCPConfig) {
		cfg.IdleTimeout = 300 * time.Millisecond
		cfg.Logger = bufLogger(&logs)
	})
	defer c.CloseAll()
	b := c.Node(t, "b").(*TCP)
	var h countingHandler
	b.Handle(1, h.handle)
	const n = 32
	base := heapInuse()
	stop := make(chan struct{})
	peak := peakHeap(stop)
	conns := make([]net.Conn, n)
	for i := range conns {
		nc, err := dialFrom("", b.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc = linkAs(nc, testSecret)
		if st, err := handshakeAs(nc, fmt.Sprint("s", i), "b", testSecret); err != nil || st != statusOK {
			t.Fatalf("handshake %d: %d %v", i, st, err)
		}
		if _, err := nc.Write(stallFrame()); err != nil {
			t.Fatal(err)
		}
		conns[i] = nc
	}
	for _, nc := range conns {
		expectClosed(t, nc) // by the idle deadline: 2 to 3 IdleTimeouts
	}
	close(stop)
	grew := int64(<-peak) - int64(base)
	t.Logf("%d stalled 4 MiB frames: peak heap in use +%.1f MiB (old behaviour: +%d MiB)", n, float64(grew)/(1<<20), n*4)
	if grew > n<<20 { // 1 MiB per connection; buffering the declared size takes 4
		t.Fatalf("heap grew by %d bytes for %d stalled frames", grew, n)
	}
	if !strings.Contains(logs.String(), "peer silent within a frame") {
		t.Fatal("the reason is not logged")
	}
	if h.total() != 0 {
		t.Fatal("a handler ran")
	}
	eventually(t, "all closed", func() bool { return b.Stats().Conns == 0 })
}

// Attack: a flood of hostile connections from 16 hosts: oversized frame
// lengths, garbage, huge hellos, idle ones, and members stalling in
// 4 MiB frames, all at once, while a real peer keeps calling. It reports
// the peak heap and bounds it.
func TestSecurityHostileFlood(t *testing.T) {
	defer goleak.VerifyNone(t)
	c := newTCPCluster(t, 0, func(cfg *TCPConfig) {
		cfg.IdleTimeout = 300 * time.Millisecond
		cfg.HandshakeTimeout = time.Second
	})
	defer c.CloseAll()
	b := c.Node(t, "b").(*TCP)
	var h countingHandler
	b.Handle(1, h.handle)
	a := c.Node(t, "a")
	a.Handle(1, echo)
	ctx := testCtx(t)
	if _, err := a.Request(ctx, "b", 1, nil); err != nil {
		t.Fatal(err)
	}
	base := heapInuse()
	stop := make(chan struct{})
	peak := peakHeap(stop)
	const hosts, perHost = 16, 40 // 640 connections
	var wg sync.WaitGroup
	var stalled, served atomic.Int64
	var cmu sync.Mutex
	var conns []net.Conn
	defer func() {
		for _, nc := range conns {
			_ = nc.Close()
		}
	}()
	for hi := range hosts {
		wg.Go(func() {
			src := fmt.Sprintf("127.0.2.%d", hi+1)
			for i := range perHost {
				nc, err := dialFrom(src, b.Addr())
				if err != nil {
					t.Error(err)
					return
				}
				cmu.Lock()
				conns = append(conns, nc)
				cmu.Unlock()
				switch i % 5 {
				case 0: // a hello declaring 4 GiB
					_, _ = nc.Write([]byte{0xff, 0xff, 0xff, 0xff})
				case 1: // garbage
					_, _ = nc.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
				case 2: // nothing at all
				case 3, 4: // a member stalling in a 4 MiB frame, or one too long
					nc := linkAs(nc, testSecret)
					st, err := handshakeAs(nc, fmt.Sprintf("f%d-%d", hi, i), "b", testSecret)
					if err != nil || st != statusOK {
						continue // refused at a limit: fine
					}
					f := stallFrame()
					if i%5 == 4 {
						binary.BigEndian.PutUint32(f, DefaultMaxMessageSize+maxHeaderLen+1)
					} else {
						stalled.Add(1)
					}
					_, _ = nc.Write(f)
				}
			}
		})
	}
	// The real peer keeps calling during the flood.
	for range 50 {
		if _, err := a.Request(ctx, "b", 1, nil); err != nil {
			t.Fatalf("real peer during the flood: %v", err)
		}
		served.Add(1)
	}
	wg.Wait()
	// The attackers hold their connections until the server closes them:
	// at once, at the handshake deadline or at the idle deadline.
	for _, nc := range conns {
		expectClosed(t, nc)
	}
	eventually(t, "the flood's connections closed", func() bool { return b.Stats().Conns == 1 })
	close(stop)
	grew := int64(<-peak) - int64(base)
	t.Logf("flood of %d connections from %d hosts (%d stalled 4 MiB frames): peak heap in use +%.1f MiB; real peer served %d/50; stats %+v",
		hosts*perHost, hosts, stalled.Load(), float64(grew)/(1<<20), served.Load(), b.Stats())
	if grew > 64<<20 {
		t.Fatalf("heap grew by %.1f MiB", float64(grew)/(1<<20))
	}
	if n := h.total(); n != 51 {
		t.Fatalf("handler ran %d times, want the real peer's 51", n)
	}
}

// Attack (accidental): a dial to a port nothing listens on, in the
// ephemeral range, that the kernel connects to itself (TCP simultaneous
// open). The dialler drops it at once, freeing the port.
func TestSecuritySelfConnect(t *testing.T) {
	defer goleak.VerifyNone(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr)
	_ = ln.Close()
	c := newTCPCluster(t, 0, nil)
	defer c.CloseAll()
	cfg := c.config(t, "a")
	cfg.Resolve = func(string) (string, error) { return port.String(), nil }
	a := c.start(t, cfg)
	var selfConns atomic.Int32
	a.dialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		// What the kernel does by chance: the local port is the target's.
		d := net.Dialer{LocalAddr: port}
		nc, err := d.DialContext(ctx, network, addr)
		if err == nil && nc.LocalAddr().String() == nc.RemoteAddr().String() {
			selfConns.Add(1)
		}
		return nc, err
	}
	_, err = a.Request(testCtx(t), "b", 1, nil)
	if !errors.Is(err, ErrUnreachable) || !errors.Is(err, ErrSelfConnect) {
		t.Fatalf("got %v, want ErrUnreachable and ErrSelfConnect", err)
	}
	if selfConns.Load() != 1 {
		t.Fatalf("the dial made %d self-connections; the attack did not happen", selfConns.Load())
	}
	if st := a.Stats(); st.Conns != 0 || st.DialFailures != 1 {
		t.Fatalf("stats %+v", st)
	}
	// The port is free again for the node that owns it.
	ln2, err := net.Listen("tcp", port.String())
	if err != nil {
		t.Fatalf("the port is still taken: %v", err)
	}
	_ = ln2.Close()
}

// Idle members are not harmed by the idle deadline: pings keep their
// connection up, with no redial, for many IdleTimeouts.
func TestTCPIdleKeepalive(t *testing.T) {
	defer goleak.VerifyNone(t)
	c := newTCPCluster(t, 0, func(cfg *TCPConfig) { cfg.IdleTimeout = 50 * time.Millisecond })
	defer c.CloseAll()
	a := c.Node(t, "a").(*TCP)
	b := c.Node(t, "b").(*TCP)
	b.Handle(1, echo)
	ctx := testCtx(t)
	if _, err := a.Request(ctx, "b", 1, nil); err != nil {
		t.Fatal(err)
	}
	// 20 pings and pongs each way take at least 10 IdleTimeouts.
	eventually(t, "pings exchanged", func() bool { return a.Stats().FramesIn >= 21 && b.Stats().FramesIn >= 21 })
	if _, err := a.Request(ctx, "b", 1, nil); err != nil {
		t.Fatal(err)
	}
	if sa, sb := a.Stats(), b.Stats(); sa.Dials != 1 || sb.Dials != 0 || sa.Conns != 1 || sb.Conns != 1 {
		t.Fatalf("the idle connection did not survive: a %+v b %+v", sa, sb)
	}
}

// A peer that answers nothing (not even pings) is disconnected after at
// most three IdleTimeouts, and pending requests fail.
func TestTCPIdleDeadline(t *testing.T) {
	defer goleak.VerifyNone(t)
	c := newTCPCluster(t, 0, func(cfg *TCPConfig) { cfg.IdleTimeout = 100 * time.Millisecond })
	defer c.CloseAll()
	a := c.noDial(t, "a")                // calls over the connection z dialled
	nc := rawPeer(t, a.Addr(), "z", "a") // completes the handshake, then never reads nor writes
	defer nc.Close()
	// Without the idle deadline the request would wait for testCtx (10 s)
	// and fail with its deadline instead.
	_, err := a.Request(testCtx(t), "z", 1, nil)
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "idle") {
		t.Fatalf("got %v, want ErrUnreachable (idle)", err)
	}
}

// Certificates rotate on running transports while requests flow: first
// trust in a new CA, then certificates from it, then the old CA is
// dropped; after each step connections are re-established with the new
// configuration and no request fails.
func TestTCPReloadTLS(t *testing.T) {
	defer goleak.VerifyNone(t)
	oldCA, oldPool, oldIssue := testCACert(t, "old CA")
	newCA, newPool, newIssue := testCACert(t, "new CA")
	both := x509.NewCertPool()
	both.AddCert(oldCA)
	both.AddCert(newCA)
	c := newTCPCluster(t, 0, nil)
	defer c.CloseAll()
	ids := []string{"a", "b", "c"}
	nodes := map[string]*TCP{}
	newCerts := map[string]tls.Certificate{}
	for _, id := range ids {
		cfg := c.config(t, id)
		cfg.Secret = nil // mutual TLS alone authenticates
		cfg.TLS = mtlsConfig(oldPool, oldIssue(id))
		nodes[id] = c.start(t, cfg)
		nodes[id].Handle(1, echo)
		newCerts[id] = newIssue(id)
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	var wg sync.WaitGroup
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	for _, from := range ids {
		for _, to := range ids {
			if from == to {
				continue
			}
			wg.Go(func() {
				for ctx.Err() == nil {
					rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
					_, err := nodes[from].Request(rctx, to, 1, []byte("x"))
					rcancel()
					switch {
					case err == nil:
						ok.Add(1)
					case ctx.Err() != nil:
					default:
						failed.Add(1)
						firstErr.CompareAndSwap(nil, fmt.Errorf("%s -> %s: %w", from, to, err))
					}
				}
			})
		}
	}
	step := func(name string, cfg func(id string) *tls.Config) {
		t.Helper()
		for _, id := range ids {
			if err := nodes[id].ReloadTLS(cfg(id)); err != nil {
				t.Fatalf("%s: %s: %v", name, id, err)
			}
		}
		// Requests keep succeeding after the switch.
		target := ok.Load() + 300
		eventually(t, name+": requests after the switch", func() bool { return ok.Load() >= target })
	}
	step("trust both CAs", func(id string) *tls.Config { return mtlsConfig(both, oldIssue(id)) })
	step("certificates from the new CA", func(id string) *tls.Config { return mtlsConfig(both, newCerts[id]) })
	step("drop the old CA", func(id string) *tls.Config { return mtlsConfig(newPool, newCerts[id]) })
	cancel()
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d requests failed (%d succeeded); first: %v", n, ok.Load(), firstErr.Load())
	}
	// The connections now open present certificates from the new CA, once
	// the retired ones (n.conns holds them while they drain) have closed.
	eventually(t, "only connections with new certificates", func() bool {
		for _, id := range ids {
			n := nodes[id]
			n.mu.Lock()
			for cn := range n.conns {
				tc, isTLS := cn.nc.(*tls.Conn)
				if !isTLS {
					n.mu.Unlock()
					t.Fatalf("%s: plain connection", id)
				}
				st := tc.ConnectionState()
				if len(st.PeerCertificates) == 0 || st.PeerCertificates[0].Issuer.CommonName != "new CA" {
					n.mu.Unlock()
					return false
				}
			}
			n.mu.Unlock()
		}
		return true
	})
	t.Logf("%d requests succeeded over three reloads", ok.Load())
	// Without TLS there is nothing to reload.
	plain := c.config(t, "p")
	pt, err := NewTCP(plain)
	if err != nil {
		t.Fatal(err)
	}
	if err := pt.ReloadTLS(&tls.Config{}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("ReloadTLS without TLS: %v", err)
	}
	if err := nodes["a"].ReloadTLS(&tls.Config{}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("ReloadTLS with a config that authenticates nobody: %v", err)
	}
	_ = pt.Close()
}

// A restarted node whose previous connection the peer still holds (its
// host's reset is what reveals it as dead) gets through on its first dial:
// the held connection is probed (a ping), and once it closes the new one is
// installed, with no failed call.
func TestTCPInboundAfterStaleConn(t *testing.T) {
	for _, version := range []uint8{1, protoVersion} {
		t.Run(fmt.Sprintf("version %d", version), func(t *testing.T) { inboundAfterStaleConn(t, version) })
	}
}

// inboundAfterStaleConn: the held connection is of the given protocol
// version; version 1 gets the version-1 probe (a no-op frame), never a
// ping.
func inboundAfterStaleConn(t *testing.T, version uint8) {
	defer goleak.VerifyNone(t)
	c := newTCPCluster(t, 0, nil)
	defer c.CloseAll()
	b := c.noDial(t, "b") // takes inbound connections as its path (no Resolve)
	b.Handle(1, echo)
	// The old incarnation of a: a connection b holds.
	old := rawPeerVersion(t, b.Addr(), "a", "b", version)
	defer old.Close()
	eventually(t, "b holds the old connection", func() bool { n, slot := connCount(b, "a"); return n == 1 && slot != "" })
	// When the probe arrives on it, the old connection dies, as a
	// restarted host's reset would make it.
	probed := make(chan error, 1)
	go func() {
		var lb [4]byte
		_, err := io.ReadFull(old, lb[:])
		if err == nil {
			buf := make([]byte, binary.BigEndian.Uint32(lb[:]))
			if _, err = io.ReadFull(old, buf); err == nil {
				var h header
				want := header{flags: flagPing}
				if version == 1 {
					want = header{flags: flagResponse} // to request 0: ignored
				}
				if h, _, err = decodeFrame(buf, 0); err == nil && h != want {
					err = fmt.Errorf("first frame %+v, want the probe %+v", h, want)
				}
			}
		}
		_ = old.Close()
		probed <- err
	}()
	a := c.Node(t, "a")
	if got, err := a.Request(testCtx(t), "b", 1, []byte("new")); err != nil || string(got) != "a:new" {
		t.Fatalf("the restarted node's first request: %q %v", got, err)
	}
	if err := <-probed; err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); st.Kept != 0 {
		t.Fatalf("the new connection was refused: %+v", st)
	}
}

// TLS for privacy with the Secret for authentication: a client without a
// certificate is accepted because it proves the Secret, and refused
// without it.
func TestTCPServerTLSWithSecret(t *testing.T) {
	defer goleak.VerifyNone(t)
	pool, issue := testCA(t, "cluster CA")
	c := newTCPCluster(t, 0, nil)
	defer c.CloseAll()
	mk := func(id string, secret []byte) *TCP {
		cfg := c.config(t, id)
		cfg.Secret = secret
		cfg.Insecure = secret == nil
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{issue(id)}, RootCAs: pool, MinVersion: tls.VersionTLS13}
		cfg.SecretIdentity = secret != nil // explicitly: no client certificates, the Secret identifies
		return c.start(t, cfg)
	}
	b := mk("b", testSecret)
	b.Handle(1, echo)
	ctx := testCtx(t)
	if _, err := mk("a", testSecret).Request(ctx, "b", 1, nil); err != nil {
		t.Fatalf("with the secret: %v", err)
	}
	if _, err := mk("x", nil).Request(ctx, "b", 1, nil); !errors.Is(err, ErrHandshake) {
		t.Fatalf("without the secret: %v", err)
	}
}

// Certificates also rotate through GetCertificate and
// GetClientCertificate, without ReloadTLS: every new handshake asks for
// the current one.
func TestTCPGetCertificateRotation(t *testing.T) {
	defer goleak.VerifyNone(t)
	pool, issue := testCA(t, "cluster CA")
	c := newTCPCluster(t, 0, nil)
	defer c.CloseAll()
	certs := map[string]*atomic.Pointer[tls.Certificate]{}
	nodes := map[string]*TCP{}
	for _, id := range []string{"a", "b"} {
		cur := new(atomic.Pointer[tls.Certificate])
		first := issue(id)
		cur.Store(&first)
		certs[id] = cur
		cfg := c.config(t, id)
		cfg.Secret = nil
		cfg.TLS = &tls.Config{
			GetCertificate:       func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cur.Load(), nil },
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cur.Load(), nil },
			RootCAs:              pool, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13,
		}
		nodes[id] = c.start(t, cfg)
		nodes[id].Handle(1, echo)
	}
	ctx := testCtx(t)
	serial := func() string {
		nodes["a"].mu.Lock()
		defer nodes["a"].mu.Unlock()
		for cn := range nodes["a"].conns {
			return cn.nc.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber.String()
		}
		return ""
	}
	if _, err := nodes["a"].Request(ctx, "b", 1, nil); err != nil {
		t.Fatal(err)
	}
	before := serial()
	next := issue("b")
	certs["b"].Store(&next)
	nodes["a"].retireAll() // the next handshake picks the new certificate up
	if _, err := nodes["a"].Request(ctx, "b", 1, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "one connection", func() bool { return nodes["a"].Stats().Conns == 1 })
	leaf, err := x509.ParseCertificate(next.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if after := serial(); after == before || after != leaf.SerialNumber.String() {
		t.Fatalf("b's certificate serial %s before, %s after the rotation", before, after)
	}
}

// Fault: a node restarts on a new address while its peer still holds its
// old connection, which nothing will ever reset (simulated by a raw node
// that answered the peer's dial and then went silent). The new
// incarnation's first request gets through, over its own connection; its
// arrival makes b probe the held one, whose ping gets no answer in 250 ms,
// so b closes it, and b's next call dials the new address.
func TestSecurityRestartOnNewAddress(t *testing.T) {
	defer goleak.VerifyNone(t)
	c := newTCPCluster(t, 0, nil)
	defer c.CloseAll()
	b := c.Node(t, "b").(*TCP)
	b.Handle(1, echo)
	// The old incarnation of a: it answers b's dial, then goes silent.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c.mu.Lock()
	c.addrs["a"] = ln.Addr().String()
	c.mu.Unlock()
	accepted := make(chan net.Conn, 1)
	go func() {
		nc, err := acceptVersion(ln, "a", protoVersion)
		if err != nil {
			t.Error(err)
		}
		accepted <- nc
	}()
	if err := b.Send(testCtx(t), "a", 1, nil); err != nil { // dials the old a
		t.Fatal(err)
	}
	old := <-accepted
	if old == nil {
		t.FailNow()
	}
	defer old.Close()
	eventually(t, "b holds the old connection", func() bool { n, slot := connCount(b, "a"); return n == 1 && slot != "" })
	a := c.Node(t, "a") // the new incarnation, on a new port
	a.Handle(1, echo)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if got, err := a.Request(ctx, "b", 1, []byte("new")); err != nil || string(got) != "a:new" {
		t.Fatalf("the restarted node's first request: %q %v", got, err)
	}
	expectClosed(t, old)
	if st := b.Stats(); st.Kept != 0 {
		t.Fatalf("the new connection was refused: %+v", st)
	}
	// b's requests now reach the new a.
	if got, err := b.Request(testCtx(t), "a", 1, nil); err != nil || string(got) != "b:" {
		t.Fatalf("b -> new a: %q %v", got, err)
	}
}

// A refusal kept as duplicate (with mutual TLS, a second process holding
// n1's certificate, while the first one's connection answers the probe)
// is logged at Warn by both sides.
func TestSecurityDuplicateLoggedBothSides(t *testing.T) {
	defer goleak.VerifyNone(t)
	var logs syncBuffer
	c := newMTLSCluster(t, func(cfg *TCPConfig) { cfg.Logger = bufLogger(&logs).With("test-node", cfg.NodeID) })
	defer c.CloseAll()
	n1 := c.Node(t, "n1").(*TCP)
	n2 := c.Node(t, "n2").(*TCP)
	n2.Handle(1, echo)
	ctx := testCtx(t)
	if _, err := n1.Request(ctx, "n2", 1, nil); err != nil {
		t.Fatal(err)
	}
	cfg := c.config(t, "n1") // the second process: n1's certificate, another port
	cfg.Logger = bufLogger(&logs).With("test-node", "impostor")
	imp, err := NewTCP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := imp.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer imp.Close()
	ictx, cancel := context.WithTimeout(ctx, time.Second) // it would wait HandshakeTimeout for n2's dial
	defer cancel()
	if _, err := imp.Request(ictx, "n2", 1, nil); err == nil {
		t.Fatal("the impostor's request reached n2")
	}
	if k := n2.Stats().Kept; k != 1 {
		t.Fatalf("Kept = %d, want 1", k)
	}
	out := logs.String()
	for _, want := range []string{
		"level=WARN msg=\"refused inbound connection as duplicate",
		"level=WARN msg=\"peer refused our connection as duplicate",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in the logs:\n%s", want, out)
		}
	}
}

// Attack: a member floods 1 MiB one-way messages at a handler that does
// not return. Without a byte budget, MaxQueued (16,384) such messages
// would be held (16 GiB); the receiver holds about MaxQueuedBytes (64 MiB),
// sheds the rest (counted in ShedBytes) and answers a request with ErrBusy.
func TestSecurityQueuedBytesFlood(t *testing.T) {
	defer goleak.VerifyNone(t)
	c := newTCPCluster(t, 0, func(cfg *TCPConfig) { cfg.MaxInflight = 1 })
	defer c.CloseAll()
	a := c.Node(t, "a").(*TCP)
	b := c.Node(t, "b").(*TCP)
	release := make(chan struct{})
	b.Handle(1, func(hctx context.Context, _ string, _ []byte) ([]byte, error) {
		select {
		case <-release:
		case <-hctx.Done():
		}
		return nil, nil
	})
	ctx := testCtx(t)
	if err := a.Send(ctx, "b", 2, nil); err != nil { // connect: the base heap includes the connection
		t.Fatal(err)
	}
	eventually(t, "connected", func() bool { return b.Stats().FramesIn >= 1 })
	base := heapInuse()
	const n, size = 200, 1 << 20 // 200 MiB
	body := make([]byte, size)
	in := b.Stats().FramesIn
	for i := range n {
		if err := a.Send(ctx, "b", 1, body); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	eventually(t, "every frame received", func() bool { return b.Stats().FramesIn >= in+n })
	grew := int64(heapInuse()) - int64(base)
	budget := DefaultTCPConfig().MaxQueuedBytes
	t.Logf("heap +%.1f MiB holding the flood (budget %d MiB)", float64(grew)/(1<<20), budget>>20)
	if grew > int64(budget)+24<<20 {
		t.Fatalf("heap grew by %d MiB, budget %d MiB", grew>>20, budget>>20)
	}
	st := b.Stats()
	if held := n - int(st.ShedBytes); st.ShedBytes != st.Shed || held > budget/size || held < budget/size-1 {
		t.Fatalf("shed %d (for bytes %d) of %d: want all but the %d MiB budget", st.Shed, st.ShedBytes, n, budget>>20)
	}
	if _, err := a.Request(ctx, "b", 1, []byte("x")); !errors.Is(err, ErrBusy) {
		t.Fatalf("request over the budget: %v, want ErrBusy", err)
	}
	close(release)
	eventually(t, "the backlog drains", func() bool {
		_, err := a.Request(ctx, "b", 2, nil) // no handler: answered at once once admitted
		return errors.Is(err, ErrNoHandler)
	})
}
