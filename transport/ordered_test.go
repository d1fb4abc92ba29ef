package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"
)

const (
	kindOrdered Kind = 200
	kindOther   Kind = 201
)

func ordered(t *testing.T, tr Transport) OrderedHandler {
	t.Helper()
	o, ok := tr.(OrderedHandler)
	if !ok {
		t.Fatalf("%T does not implement OrderedHandler", tr)
	}
	return o
}

// seqBody encodes a producer and its sequence number.
func seqBody(producer, seq int) []byte {
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, uint32(producer)), uint32(seq))
}

// orderChecker is an ordered handler that records, per sender and
// producer, the last sequence number seen, and fails on anything out of
// order or on two calls at once.
type orderChecker struct {
	t       *testing.T
	running atomic.Int32
	mu      sync.Mutex
	last    map[string]map[int]int // sender → producer → last seq
	count   atomic.Int64
	errs    []string
}

func newOrderChecker(t *testing.T) *orderChecker {
	return &orderChecker{t: t, last: map[string]map[int]int{}}
}

func (o *orderChecker) handle(_ context.Context, from string, body []byte) ([]byte, error) {
	if o.running.Add(1) != 1 {
		o.fail("two ordered handlers ran at once")
	}
	defer o.running.Add(-1)
	p, s := int(binary.BigEndian.Uint32(body)), int(binary.BigEndian.Uint32(body[4:]))
	o.mu.Lock()
	m := o.last[from]
	if m == nil {
		m = map[int]int{}
		o.last[from] = m
	}
	if prev, ok := m[p]; ok && s <= prev || !ok && s != 0 {
		o.errs = append(o.errs, fmt.Sprintf("from %s producer %d: seq %d after %d (seen %v)", from, p, s, prev, ok))
	}
	m[p] = s
	o.mu.Unlock()
	o.count.Add(1)
	return nil, nil
}

func (o *orderChecker) fail(msg string) {
	o.mu.Lock()
	o.errs = append(o.errs, msg)
	o.mu.Unlock()
}

func (o *orderChecker) check() {
	o.t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.errs) > 0 {
		o.t.Fatalf("%d ordering errors, first: %s", len(o.errs), o.errs[0])
	}
}

// TestOrderedArrival: many goroutines on two senders send one-way messages
// of an ordered kind (and, on one of them, requests of it) at once; the
// receiver handles the messages of each sender one at a time and every
// producer's messages in the order it sent them.
func TestOrderedArrival(t *testing.T) {
	for _, f := range factories {
		t.Run(f.name, func(t *testing.T) {
			defer goleak.VerifyNone(t)
			c := f.new(t, 1024)
			defer c.CloseAll()
			ctx := testCtx(t)
			a, b, r := c.Node(t, "a"), c.Node(t, "b"), c.Node(t, "r")
			oc := newOrderChecker(t)
			// Two senders share the handler: it sees their lanes
			// concurrently, so count per sender with its own checker.
			perSender := map[string]*orderChecker{"a": newOrderChecker(t), "b": newOrderChecker(t)}
			ordered(t, r).HandleOrdered(kindOrdered, func(ctx context.Context, from string, body []byte) ([]byte, error) {
				oc.count.Add(1)
				return perSender[from].handle(ctx, from, body)
			})
			const producers, each = 8, 400
			var wg sync.WaitGroup
			for _, s := range []Transport{a, b} {
				for p := range producers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := range each {
							var err error
							if s == a && p == 0 && i%10 == 5 { // requests of the kind queue in the same lane
								_, err = s.Request(ctx, "r", kindOrdered, seqBody(p, i))
							} else {
								err = s.Send(ctx, "r", kindOrdered, seqBody(p, i))
							}
							if err != nil {
								t.Errorf("send: %v", err)
								return
							}
						}
					}()
				}
			}
			wg.Wait()
			eventually(t, "every message handled", func() bool { return oc.count.Load() == 2*producers*each })
			for _, pc := range perSender {
				pc.check()
			}
		})
	}
}

// TestOrderedBlockedHandler: an ordered handler that blocks holds up the
// later messages of its kind from that connection only: other kinds from
// the same sender, and the same kind from another sender, are handled
// meanwhile. Once it returns, its queue is handled in order.
func TestOrderedBlockedHandler(t *testing.T) {
	for _, f := range factories {
		t.Run(f.name, func(t *testing.T) {
			defer goleak.VerifyNone(t)
			c := f.new(t, 1024)
			defer c.CloseAll()
			ctx := testCtx(t)
			a, b, r := c.Node(t, "a"), c.Node(t, "b"), c.Node(t, "r")
			release := make(chan struct{})
			blocked := make(chan struct{})
			checkA := newOrderChecker(t)
			var fromB atomic.Int64
			ordered(t, r).HandleOrdered(kindOrdered, func(hctx context.Context, from string, body []byte) ([]byte, error) {
				if from == "b" {
					fromB.Add(1)
					return nil, nil
				}
				if binary.BigEndian.Uint32(body[4:]) == 0 {
					close(blocked)
					select {
					case <-release:
					case <-hctx.Done():
					}
				}
				return checkA.handle(hctx, from, body)
			})
			r.Handle(kindOther, echo)
			const queued = 100
			for i := range queued {
				if err := a.Send(ctx, "r", kindOrdered, seqBody(0, i)); err != nil {
					t.Fatal(err)
				}
			}
			<-blocked
			// Other kinds from a, and the ordered kind from b, go on.
			for i := range 20 {
				if _, err := a.Request(ctx, "r", kindOther, []byte{byte(i)}); err != nil {
					t.Fatalf("request of another kind while an ordered handler blocks: %v", err)
				}
				if err := b.Send(ctx, "r", kindOrdered, seqBody(0, i)); err != nil {
					t.Fatal(err)
				}
			}
			eventually(t, "b's messages handled", func() bool { return fromB.Load() == 20 })
			if n := checkA.count.Load(); n != 0 {
				t.Fatalf("%d of a's ordered messages handled while the first blocks", n)
			}
			close(release)
			eventually(t, "a's queue handled", func() bool { return checkA.count.Load() == queued })
			checkA.check()
		})
	}
}

// TestOrderedCloseWhileBlocked: Close cancels a blocked ordered handler,
// drops its queue and leaves no goroutine behind; a request waiting in the
// queue fails.
func TestOrderedCloseWhileBlocked(t *testing.T) {
	for _, f := range factories {
		t.Run(f.name, func(t *testing.T) {
			defer goleak.VerifyNone(t)
			c := f.new(t, 1024)
			defer c.CloseAll()
			ctx := testCtx(t)
			a, r := c.Node(t, "a"), c.Node(t, "r")
			blocked := make(chan struct{})
			var once sync.Once
			ordered(t, r).HandleOrdered(kindOrdered, func(hctx context.Context, _ string, _ []byte) ([]byte, error) {
				once.Do(func() { close(blocked) })
				<-hctx.Done()
				return nil, hctx.Err()
			})
			for i := range 50 {
				if err := a.Send(ctx, "r", kindOrdered, seqBody(0, i)); err != nil {
					t.Fatal(err)
				}
			}
			done := make(chan error, 1)
			go func() {
				_, err := a.Request(ctx, "r", kindOrdered, seqBody(0, 50))
				done <- err
			}()
			<-blocked
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err == nil {
				t.Fatal("a request queued behind a blocked ordered handler succeeded after Close")
			}
		})
	}
}

// TestTCPOrderedQueueBound: a blocked ordered handler's queue holds at most
// MaxQueued messages and half of MaxQueuedBytes; beyond that messages of
// its kind are shed (requests with ErrBusy) and counted, while other kinds
// keep their share of the connection's budget.
func TestTCPOrderedQueueBound(t *testing.T) {
	defer goleak.VerifyNone(t)
	c := newTCPCluster(t, 0, func(cfg *TCPConfig) {
		cfg.MaxQueued = 8
		cfg.MaxQueuedBytes = 64 << 10
	})
	defer c.CloseAll()
	ctx := testCtx(t)
	a, r := c.Node(t, "a"), c.Node(t, "r").(*TCP)
	release := make(chan struct{})
	blocked := make(chan struct{})
	var once sync.Once
	r.HandleOrdered(kindOrdered, func(hctx context.Context, _ string, _ []byte) ([]byte, error) {
		once.Do(func() { close(blocked) })
		select {
		case <-release:
		case <-hctx.Done():
		}
		return nil, nil
	})
	r.Handle(kindOther, echo)
	if err := a.Send(ctx, "r", kindOrdered, nil); err != nil {
		t.Fatal(err)
	}
	<-blocked
	// The queue takes 8 more; further messages are shed.
	for range 8 {
		if err := a.Send(ctx, "r", kindOrdered, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Request(ctx, "r", kindOrdered, nil); !errors.Is(err, ErrBusy) {
		t.Fatalf("request beyond a full ordered queue: %v, want ErrBusy", err)
	}
	if got := r.Stats().Shed; got == 0 {
		t.Fatal("shed not counted")
	}
	// Other kinds still run, with bodies the ordered queue cannot take.
	big := make([]byte, 20<<10)
	for range 3 {
		if _, err := a.Request(ctx, "r", kindOther, big); err != nil {
			t.Fatalf("request of another kind while the ordered queue is full: %v", err)
		}
	}
	close(release)
}

// TestTCPOrderedByteBound: an ordered queue holds at most half of
// MaxQueuedBytes (an empty queue takes any message).
func TestTCPOrderedByteBound(t *testing.T) {
	defer goleak.VerifyNone(t)
	c := newTCPCluster(t, 0, func(cfg *TCPConfig) { cfg.MaxQueuedBytes = 64 << 10 })
	defer c.CloseAll()
	ctx := testCtx(t)
	a, r := c.Node(t, "a"), c.Node(t, "r").(*TCP)
	release := make(chan struct{})
	blocked := make(chan struct{})
	var once sync.Once
	r.HandleOrdered(kindOrdered, func(hctx context.Context, _ string, _ []byte) ([]byte, error) {
		once.Do(func() { close(blocked) })
		select {
		case <-release:
		case <-hctx.Done():
		}
		return nil, nil
	})
	body := make([]byte, 10<<10)
	if err := a.Send(ctx, "r", kindOrdered, body); err != nil {
		t.Fatal(err)
	}
	<-blocked
	for range 2 { // 30 KiB of 32
		if err := a.Send(ctx, "r", kindOrdered, body); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Request(ctx, "r", kindOrdered, body); !errors.Is(err, ErrBusy) {
		t.Fatalf("request beyond half the byte budget: %v, want ErrBusy", err)
	}
	if got := r.Stats().ShedBytes; got == 0 {
		t.Fatal("byte shed not counted")
	}
	close(release)
}

// TestMemOrderedDelay: a link delay keeps the order of an ordered kind,
// also when the delay shrinks between two messages (the later one waits
// for the earlier).
func TestMemOrderedDelay(t *testing.T) {
	defer goleak.VerifyNone(t)
	clk := clockwork.NewFakeClock()
	n := &MemNetwork{Clock: clk}
	a, _ := n.Node("a")
	r, _ := n.Node("r")
	defer a.Close()
	defer r.Close()
	oc := newOrderChecker(t)
	r.HandleOrdered(kindOrdered, oc.handle)
	ctx := testCtx(t)
	n.SetLink("a", "r", LinkConfig{Delay: 10 * time.Millisecond})
	for i := range 50 {
		if i == 25 {
			n.SetLink("a", "r", LinkConfig{Delay: time.Millisecond})
		}
		if err := a.Send(ctx, "r", kindOrdered, seqBody(0, i)); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(2 * time.Millisecond) // the short delays are due: they bring the long ones with them
	eventually(t, "delayed messages handled", func() bool { return oc.count.Load() == 50 })
	oc.check()
	if err := n.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if h := n.Held(); h != 0 {
		t.Fatalf("%d messages held after delivery", h)
	}
}

// TestMemOrderedManual: in manual mode the test still reorders, drops
// and duplicates messages of an ordered kind explicitly; the receiver
// handles them one at a time in the order they are delivered.
func TestMemOrderedManual(t *testing.T) {
	defer goleak.VerifyNone(t)
	n := &MemNetwork{}
	a, _ := n.Node("a")
	r, _ := n.Node("r")
	defer a.Close()
	defer r.Close()
	var mu sync.Mutex
	var got []int
	r.HandleOrdered(kindOrdered, func(_ context.Context, _ string, body []byte) ([]byte, error) {
		mu.Lock()
		got = append(got, int(binary.BigEndian.Uint32(body[4:])))
		mu.Unlock()
		return nil, nil
	})
	ctx := testCtx(t)
	n.SetManual(true)
	for i := range 4 {
		if err := a.Send(ctx, "r", kindOrdered, seqBody(0, i)); err != nil {
			t.Fatal(err)
		}
	}
	p := n.Pending()
	for _, step := range []func() error{
		func() error { return n.Deliver(p[3].ID) },
		func() error { return n.Duplicate(p[1].ID) },
		func() error { return n.Drop(p[2].ID) },
		func() error { return n.Deliver(p[1].ID) },
		func() error { return n.Deliver(p[0].ID) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
		if err := n.WaitIdle(ctx); err != nil { // one at a time: the order is the test's
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(got) != "[3 1 1 0]" {
		t.Fatalf("handled %v, want [3 1 1 0]", got)
	}
}
