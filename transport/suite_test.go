package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// cluster creates the transports of one test and closes them all.
type cluster interface {
	// Node creates node id, or re-creates it after it was closed.
	Node(t *testing.T, id string) Transport
	// CloseAll closes every transport created.
	CloseAll()
}

// factories run the shared suite over every implementation.
var factories = []struct {
	name string
	new  func(t *testing.T, maxSize int) cluster
}{
	{"mem", func(t *testing.T, maxSize int) cluster { return &memCluster{net: &MemNetwork{MaxMessageSize: maxSize}} }},
	{"tcp", func(t *testing.T, maxSize int) cluster { return newTCPCluster(t, maxSize, nil) }},
}

type memCluster struct {
	net   *MemNetwork
	nodes []*MemTransport
}

func (c *memCluster) Node(t *testing.T, id string) Transport {
	t.Helper()
	n, err := c.net.Node(id)
	if err != nil {
		t.Fatal(err)
	}
	c.nodes = append(c.nodes, n)
	return n
}

func (c *memCluster) CloseAll() {
	for _, n := range c.nodes {
		_ = n.Close()
	}
}

type tcpCluster struct {
	maxSize int
	mutate  func(*TCPConfig)
	mu      sync.Mutex
	addrs   map[string]string
	nodes   []*TCP
}

func newTCPCluster(_ *testing.T, maxSize int, mutate func(*TCPConfig)) *tcpCluster {
	return &tcpCluster{maxSize: maxSize, mutate: mutate, addrs: map[string]string{}}
}

func (c *tcpCluster) resolve(id string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.addrs[id]
	if !ok {
		return "", fmt.Errorf("unknown node %q", id)
	}
	return a, nil
}

func testLogger(t *testing.T, id string) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})).With("test-node", id)
}

// testSecret is the shared secret of test clusters.
var testSecret = []byte("muster transport test secret, 32b")

func (c *tcpCluster) config(t *testing.T, id string) TCPConfig {
	cfg := DefaultTCPConfig()
	cfg.NodeID = id
	cfg.Secret = testSecret
	cfg.Resolve = c.resolve
	cfg.ReconnectMin = 5 * time.Millisecond
	cfg.ReconnectMax = 50 * time.Millisecond
	cfg.Logger = testLogger(t, id)
	if c.maxSize > 0 {
		cfg.MaxFrameSize = c.maxSize
	}
	if c.mutate != nil {
		c.mutate(&cfg)
	}
	return cfg
}

func (c *tcpCluster) Node(t *testing.T, id string) Transport {
	t.Helper()
	return c.start(t, c.config(t, id))
}

func (c *tcpCluster) start(t *testing.T, cfg TCPConfig) *TCP {
	t.Helper()
	n, err := NewTCP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.addrs[cfg.NodeID] = n.Addr()
	c.nodes = append(c.nodes, n)
	c.mu.Unlock()
	return n
}

func (c *tcpCluster) CloseAll() {
	for _, n := range c.nodes {
		_ = n.Close()
	}
}

func echo(ctx context.Context, from string, body []byte) ([]byte, error) {
	return append([]byte(from+":"), body...), nil
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds or 10 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestSuite runs the behaviour every Transport shares over each
// implementation.
func TestSuite(t *testing.T) {
	tests := []struct {
		name string
		fn   func(t *testing.T, c cluster)
	}{
		{"RequestResponse", suiteRequestResponse},
		{"OneWay", suiteOneWay},
		{"RemoteError", suiteRemoteError},
		{"NoHandler", suiteNoHandler},
		{"Deadline", suiteDeadline},
		{"Concurrent", suiteConcurrent},
		{"Close", suiteClose},
		{"CloseCancelsHandlers", suiteCloseCancelsHandlers},
		{"PeerRestart", suitePeerRestart},
		{"TooLarge", suiteTooLarge},
		{"Self", suiteSelf},
		{"BodiesNotShared", suiteBodiesNotShared},
	}
	for _, f := range factories {
		for _, tc := range tests {
			t.Run(f.name+"/"+tc.name, func(t *testing.T) {
				defer goleak.VerifyNone(t)
				c := f.new(t, 1024)
				defer c.CloseAll()
				tc.fn(t, c)
			})
		}
	}
}

func suiteRequestResponse(t *testing.T, c cluster) {
	ctx := testCtx(t)
	a, b := c.Node(t, "a"), c.Node(t, "b")
	b.Handle(7, echo)
	a.Handle(7, echo)
	for i := range 3 {
		got, err := a.Request(ctx, "b", 7, []byte(fmt.Sprint("x", i)))
		if err != nil || string(got) != fmt.Sprint("a:x", i) {
			t.Fatalf("a->b #%d: %q, %v", i, got, err)
		}
	}
	// The connection carries requests both ways.
	got, err := b.Request(ctx, "a", 7, []byte("y"))
	if err != nil || string(got) != "b:y" {
		t.Fatalf("b->a: %q, %v", got, err)
	}
	// Handler replacement takes effect.
	b.Handle(7, func(context.Context, string, []byte) ([]byte, error) { return []byte("v2"), nil })
	if got, err := a.Request(ctx, "b", 7, nil); err != nil || string(got) != "v2" {
		t.Fatalf("after replacing the handler: %q, %v", got, err)
	}
	// An empty response is fine.
	b.Handle(8, func(context.Context, string, []byte) ([]byte, error) { return nil, nil })
	if got, err := a.Request(ctx, "b", 8, []byte("z")); err != nil || len(got) != 0 {
		t.Fatalf("empty response: %q, %v", got, err)
	}
}

func suiteOneWay(t *testing.T, c cluster) {
	ctx := testCtx(t)
	a, b := c.Node(t, "a"), c.Node(t, "b")
	got := make(chan string, 10)
	b.Handle(3, func(_ context.Context, from string, body []byte) ([]byte, error) {
		got <- from + ":" + string(body)
		return []byte("ignored"), errors.New("ignored too")
	})
	for i := range 5 {
		if err := a.Send(ctx, "b", 3, []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	for range 5 {
		select {
		case s := <-got:
			seen[s] = true
		case <-ctx.Done():
			t.Fatal("one-way message not delivered")
		}
	}
	for i := range 5 {
		if !seen[fmt.Sprint("a:", i)] {
			t.Fatalf("missing message %d: %v", i, seen)
		}
	}
	// No handler: silently discarded, the sender gets nil.
	if err := a.Send(ctx, "b", 4, []byte("nobody")); err != nil {
		t.Fatalf("send to a kind without handler: %v", err)
	}
}

func suiteRemoteError(t *testing.T, c cluster) {
	ctx := testCtx(t)
	a, b := c.Node(t, "a"), c.Node(t, "b")
	b.Handle(9, func(context.Context, string, []byte) ([]byte, error) {
		return []byte("dropped"), errors.New("boom")
	})
	_, err := a.Request(ctx, "b", 9, nil)
	var re *RemoteError
	if !errors.As(err, &re) || re.Node != "b" || re.Msg != "boom" {
		t.Fatalf("got %v (%T), want *RemoteError from b saying boom", err, err)
	}
}

func suiteNoHandler(t *testing.T, c cluster) {
	ctx := testCtx(t)
	a, b := c.Node(t, "a"), c.Node(t, "b")
	b.Handle(1, echo)
	if _, err := a.Request(ctx, "b", 2, nil); !errors.Is(err, ErrNoHandler) {
		t.Fatalf("got %v, want ErrNoHandler", err)
	}
	b.Handle(1, nil) // removes it
	if _, err := a.Request(ctx, "b", 1, nil); !errors.Is(err, ErrNoHandler) {
		t.Fatalf("after removing: got %v, want ErrNoHandler", err)
	}
	if _, err := a.Request(ctx, "b", 0, nil); err == nil {
		t.Fatal("kind 0 accepted")
	}
}

func suiteDeadline(t *testing.T, c cluster) {
	a, b := c.Node(t, "a"), c.Node(t, "b")
	type seen struct {
		hasDeadline bool
		left        time.Duration
		err         error
	}
	saw := make(chan seen, 1)
	b.Handle(5, func(ctx context.Context, _ string, _ []byte) ([]byte, error) {
		dl, ok := ctx.Deadline()
		<-ctx.Done()
		saw <- seen{ok, time.Until(dl), ctx.Err()}
		return nil, ctx.Err()
	})
	// A first request without deadline-sensitive work sets up the connection.
	b.Handle(6, echo)
	if _, err := a.Request(testCtx(t), "b", 6, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := a.Request(ctx, "b", 5, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want context.DeadlineExceeded", err)
	}
	select {
	case s := <-saw:
		if !s.hasDeadline || s.left > time.Second {
			t.Fatalf("handler ctx deadline: %+v, want one within 200 ms", s)
		}
		if s.err == nil {
			t.Fatal("handler ctx not ended")
		}
	case <-testCtx(t).Done():
		t.Fatal("handler ctx never ended")
	}
	// An expired ctx fails before sending.
	if _, err := a.Request(ctx, "b", 6, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("expired ctx: %v", err)
	}
}

func suiteConcurrent(t *testing.T, c cluster) {
	ctx := testCtx(t)
	a, b := c.Node(t, "a"), c.Node(t, "b")
	b.Handle(1, echo)
	a.Handle(1, echo)
	const workers, each = 16, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			from, to, self := a, "b", "a"
			if w%2 == 1 {
				from, to, self = b, "a", "b"
			}
			for i := range each {
				body := fmt.Sprintf("%d-%d", w, i)
				got, err := from.Request(ctx, to, 1, []byte(body))
				if err != nil {
					errs <- err
					return
				}
				if string(got) != self+":"+body {
					errs <- fmt.Errorf("request %s got %q", body, got)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func suiteClose(t *testing.T, c cluster) {
	ctx := testCtx(t)
	a, b := c.Node(t, "a"), c.Node(t, "b")
	started := make(chan struct{})
	release := make(chan struct{})
	b.Handle(1, func(context.Context, string, []byte) ([]byte, error) {
		close(started)
		<-release
		return nil, nil
	})
	done := make(chan error, 1)
	go func() {
		_, err := a.Request(ctx, "b", 1, nil)
		done <- err
	}()
	<-started
	// Closing the caller fails its pending request with ErrClosed.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("pending request after caller Close: %v, want ErrClosed", err)
	}
	close(release)
	if err := a.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
	if _, err := a.Request(ctx, "b", 1, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Request after Close: %v", err)
	}
	if err := a.Send(ctx, "b", 1, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close: %v", err)
	}
	if a.LocalID() != "a" {
		t.Fatal("LocalID")
	}
}

func suiteCloseCancelsHandlers(t *testing.T, c cluster) {
	ctx := testCtx(t)
	a, b := c.Node(t, "a"), c.Node(t, "b")
	started := make(chan struct{})
	cancelled := make(chan struct{})
	b.Handle(1, func(hctx context.Context, _ string, _ []byte) ([]byte, error) {
		close(started)
		<-hctx.Done()
		close(cancelled)
		return nil, hctx.Err()
	})
	done := make(chan error, 1)
	go func() {
		_, err := a.Request(ctx, "b", 1, nil)
		done <- err
	}()
	<-started
	if err := b.Close(); err != nil { // returns only after the handler did
		t.Fatal(err)
	}
	select {
	case <-cancelled:
	default:
		t.Fatal("Close returned before the handler saw its context end")
	}
	if err := <-done; !errors.Is(err, ErrUnreachable) {
		t.Fatalf("request to a node that closed: %v, want ErrUnreachable", err)
	}
	if _, err := a.Request(ctx, "b", 1, nil); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("request to a closed node: %v, want ErrUnreachable", err)
	}
}

func suitePeerRestart(t *testing.T, c cluster) {
	ctx := testCtx(t)
	a, b := c.Node(t, "a"), c.Node(t, "b")
	b.Handle(1, echo)
	if _, err := a.Request(ctx, "b", 1, nil); err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
	if _, err := a.Request(ctx, "b", 1, nil); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("request to a closed peer: %v, want ErrUnreachable", err)
	}
	b2 := c.Node(t, "b")
	b2.Handle(1, func(context.Context, string, []byte) ([]byte, error) { return []byte("new"), nil })
	var got []byte
	eventually(t, "a reaches the restarted b", func() bool {
		var err error
		got, err = a.Request(ctx, "b", 1, nil)
		if err != nil && !errors.Is(err, ErrUnreachable) {
			t.Fatalf("unexpected error: %v", err)
		}
		return err == nil
	})
	if string(got) != "new" {
		t.Fatalf("got %q from the restarted node", got)
	}
	// And the restarted node reaches a.
	a.Handle(2, echo)
	if got, err := b2.Request(ctx, "a", 2, []byte("hi")); err != nil || string(got) != "b:hi" {
		t.Fatalf("b2->a: %q, %v", got, err)
	}
}

func suiteTooLarge(t *testing.T, c cluster) { // the factory sets a 1 KiB limit
	ctx := testCtx(t)
	a, b := c.Node(t, "a"), c.Node(t, "b")
	b.Handle(1, echo)
	b.Handle(2, func(context.Context, string, []byte) ([]byte, error) { return make([]byte, 2048), nil })
	big := make([]byte, 1025)
	if _, err := a.Request(ctx, "b", 1, big); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Request: %v, want ErrTooLarge", err)
	}
	if err := a.Send(ctx, "b", 1, big); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Send: %v, want ErrTooLarge", err)
	}
	if _, err := a.Request(ctx, "b", 2, nil); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("large response: %v, want ErrTooLarge", err)
	}
	// The limit itself is fine (echo adds "a:", so send 1022 bytes), and the
	// connection still works.
	got, err := a.Request(ctx, "b", 1, make([]byte, 1022))
	if err != nil || len(got) != 1024 {
		t.Fatalf("at the limit: %d bytes, %v", len(got), err)
	}
}

func suiteSelf(t *testing.T, c cluster) {
	ctx := testCtx(t)
	a := c.Node(t, "a")
	a.Handle(1, echo)
	if got, err := a.Request(ctx, "a", 1, []byte("me")); err != nil || string(got) != "a:me" {
		t.Fatalf("self request: %q, %v", got, err)
	}
}

func suiteBodiesNotShared(t *testing.T, c cluster) {
	ctx := testCtx(t)
	a, b := c.Node(t, "a"), c.Node(t, "b")
	resp := []byte("response")
	gotBody := make(chan []byte, 1)
	b.Handle(1, func(_ context.Context, _ string, body []byte) ([]byte, error) {
		gotBody <- body
		return resp, nil
	})
	body := []byte("request")
	got, err := a.Request(ctx, "b", 1, body)
	if err != nil {
		t.Fatal(err)
	}
	recv := <-gotBody
	body[0], resp[0] = 'X', 'X'
	if !bytes.Equal(recv, []byte("request")) || !bytes.Equal(got, []byte("response")) {
		t.Fatalf("bodies shared between sender and receiver: %q %q", recv, got)
	}
}
