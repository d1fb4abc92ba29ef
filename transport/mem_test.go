package transport

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"
)

// memNodes creates nodes on n and closes them when the test ends.
func memNodes(t *testing.T, n *MemNetwork, ids ...string) []*MemTransport {
	t.Helper()
	out := make([]*MemTransport, len(ids))
	for i, id := range ids {
		tr, err := n.Node(id)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = tr
	}
	return out
}

func closeAll(ts []*MemTransport) {
	for _, tr := range ts {
		_ = tr.Close()
	}
}

func TestMemNodeIDs(t *testing.T) {
	defer goleak.VerifyNone(t)
	var n MemNetwork
	if _, err := n.Node(""); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("empty ID: %v", err)
	}
	a, err := n.Node("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Node("a"); !errors.Is(err, ErrNodeExists) {
		t.Fatalf("duplicate ID: %v", err)
	}
	_ = a.Close()
	a2, err := n.Node("a")
	if err != nil {
		t.Fatalf("re-create after close: %v", err)
	}
	_ = a2.Close()
}

func TestMemPartitionHealIsolate(t *testing.T) {
	defer goleak.VerifyNone(t)
	var n MemNetwork
	ns := memNodes(t, &n, "a", "b", "c")
	defer closeAll(ns)
	a, b, c := ns[0], ns[1], ns[2]
	got := make(chan string, 10)
	for _, tr := range ns {
		tr.Handle(1, echo)
		tr.Handle(2, func(_ context.Context, from string, _ []byte) ([]byte, error) {
			got <- from
			return nil, nil
		})
	}
	ctx := testCtx(t)
	reach := func(from *MemTransport, to string) bool {
		_, err := from.Request(ctx, to, 1, nil)
		if err != nil && !errors.Is(err, ErrUnreachable) {
			t.Fatalf("%s->%s: %v", from.LocalID(), to, err)
		}
		return err == nil
	}
	type pair struct {
		from *MemTransport
		to   string
	}
	check := func(stage string, want map[pair]bool) {
		t.Helper()
		for p, w := range want {
			if r := reach(p.from, p.to); r != w {
				t.Fatalf("%s: %s->%s reachable=%v, want %v", stage, p.from.LocalID(), p.to, r, w)
			}
		}
	}
	n.Partition("a", "b")
	check("partition a|b", map[pair]bool{{a, "b"}: false, {b, "a"}: false, {a, "c"}: true, {c, "b"}: true, {a, "a"}: true})
	if err := a.Send(ctx, "b", 2, nil); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Send across a partition: %v", err)
	}
	n.Heal()
	check("healed", map[pair]bool{{a, "b"}: true, {b, "a"}: true})

	n.Isolate("c")
	check("isolate c", map[pair]bool{{a, "c"}: false, {c, "a"}: false, {c, "b"}: false, {a, "b"}: true, {c, "c"}: true})
	n.Heal()
	check("healed again", map[pair]bool{{a, "c"}: true, {c, "b"}: true})

	n.PartitionOneWay("a", "b")
	check("one way a->b", map[pair]bool{{a, "b"}: false, {b, "a"}: false}) // the response way back is cut
	if err := b.Send(ctx, "a", 2, nil); err != nil {
		t.Fatalf("b->a one-way: %v", err)
	}
	if from := <-got; from != "b" {
		t.Fatalf("got one-way from %q", from)
	}
	n.Heal()

	if _, err := a.Request(ctx, "nobody", 1, nil); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("unknown node: %v", err)
	}
}

// A partition that starts while a message is delayed loses it.
func TestMemPartitionLosesInFlight(t *testing.T) {
	defer goleak.VerifyNone(t)
	clock := clockwork.NewFakeClock()
	n := MemNetwork{Clock: clock}
	ns := memNodes(t, &n, "a", "b")
	defer closeAll(ns)
	ns[1].Handle(1, echo)
	n.SetLink("a", "b", LinkConfig{Delay: time.Second})
	ctx := testCtx(t)
	done := make(chan error, 1)
	go func() {
		_, err := ns[0].Request(ctx, "b", 1, nil)
		done <- err
	}()
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	n.Partition("a", "b")
	clock.Advance(time.Second)
	if err := <-done; !errors.Is(err, ErrUnreachable) {
		t.Fatalf("delayed request across a new partition: %v", err)
	}
	if s := n.Stats("a", "b"); s.Messages != 1 || s.Dropped != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestMemDropRate(t *testing.T) {
	defer goleak.VerifyNone(t)
	const seed, sent, rate = 42, 4000, 0.3
	t.Logf("seed: %d", seed)
	run := func() (uint64, []int) {
		n := MemNetwork{Seed: seed}
		ns := memNodes(t, &n, "a", "b")
		defer closeAll(ns)
		var mu sync.Mutex
		var got []int
		ns[1].Handle(1, func(_ context.Context, _ string, body []byte) ([]byte, error) {
			var i int
			_, _ = fmt.Sscan(string(body), &i)
			mu.Lock()
			got = append(got, i)
			mu.Unlock()
			return nil, nil
		})
		n.SetLink("a", "b", LinkConfig{DropRate: rate})
		ctx := testCtx(t)
		for i := range sent {
			if err := ns[0].Send(ctx, "b", 1, []byte(fmt.Sprint(i))); err != nil {
				t.Fatal(err)
			}
		}
		st := n.Stats("a", "b")
		if st.Messages != sent {
			t.Fatalf("stats %+v", st)
		}
		eventually(t, "every undropped message handled", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(got) == int(st.Messages-st.Dropped)
		})
		mu.Lock()
		defer mu.Unlock()
		seen := make([]int, sent)
		for _, i := range got {
			seen[i]++
		}
		return st.Dropped, seen
	}
	dropped, seen := run()
	// Binomial(4000, 0.3): mean 1200, sd ≈ 29; allow 5 sd.
	if math.Abs(float64(dropped)-sent*rate) > 5*math.Sqrt(sent*rate*(1-rate)) {
		t.Fatalf("dropped %d of %d at rate %v", dropped, sent, rate)
	}
	dropped2, seen2 := run()
	if dropped2 != dropped || fmt.Sprint(seen) != fmt.Sprint(seen2) {
		t.Fatalf("same seed, different drops: %d vs %d", dropped, dropped2)
	}
	// Requests lost to the drop rate fail at once.
	n := MemNetwork{Seed: seed}
	ns := memNodes(t, &n, "a", "b")
	defer closeAll(ns)
	ns[1].Handle(1, echo)
	n.SetLink("a", "b", LinkConfig{DropRate: 1})
	if _, err := ns[0].Request(testCtx(t), "b", 1, nil); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("dropped request: %v", err)
	}
	n.SetLink("a", "b", LinkConfig{})
	if _, err := ns[0].Request(testCtx(t), "b", 1, nil); err != nil {
		t.Fatalf("after resetting the link: %v", err)
	}
}

func TestMemDelayFakeClock(t *testing.T) {
	defer goleak.VerifyNone(t)
	clock := clockwork.NewFakeClock()
	n := MemNetwork{Clock: clock}
	ns := memNodes(t, &n, "a", "b")
	defer closeAll(ns)
	a, b := ns[0], ns[1]
	arrived := make(chan string, 1)
	b.Handle(1, func(_ context.Context, _ string, body []byte) ([]byte, error) {
		arrived <- string(body)
		return nil, nil
	})
	n.SetLink("a", "b", LinkConfig{Delay: 5 * time.Second})
	ctx := testCtx(t)
	if err := a.Send(ctx, "b", 1, []byte("late")); err != nil {
		t.Fatal(err)
	}
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(4 * time.Second)
	select {
	case <-arrived:
		t.Fatal("delivered before the delay passed")
	default:
	}
	clock.Advance(time.Second)
	select {
	case got := <-arrived:
		if got != "late" {
			t.Fatalf("got %q", got)
		}
	case <-ctx.Done():
		t.Fatal("not delivered after the delay")
	}
	// The other direction is not delayed.
	a.Handle(2, echo)
	if _, err := b.Request(ctx, "a", 2, nil); err != nil {
		t.Fatal(err)
	}
	// Closing the receiver fails a delayed request at once.
	b.Handle(3, echo)
	done := make(chan error, 1)
	go func() {
		_, err := a.Request(ctx, "b", 3, nil)
		done <- err
	}()
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
	if err := <-done; !errors.Is(err, ErrUnreachable) {
		t.Fatalf("delayed request to a closing node: %v", err)
	}
}

func TestMemManualDelivery(t *testing.T) {
	defer goleak.VerifyNone(t)
	var n MemNetwork
	ns := memNodes(t, &n, "a", "b")
	defer closeAll(ns)
	a, b := ns[0], ns[1]
	var mu sync.Mutex
	var order []string
	handled := make(chan struct{}, 10)
	b.Handle(1, func(_ context.Context, _ string, body []byte) ([]byte, error) {
		mu.Lock()
		order = append(order, string(body))
		mu.Unlock()
		handled <- struct{}{}
		return []byte("re:" + string(body)), nil
	})
	n.SetManual(true)
	ctx := testCtx(t)
	for _, s := range []string{"m1", "m2", "m3"} {
		if err := a.Send(ctx, "b", 1, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	resp := make(chan string, 1)
	go func() {
		got, err := a.Request(ctx, "b", 1, []byte("r1"))
		if err != nil {
			resp <- "error: " + err.Error()
			return
		}
		resp <- string(got)
	}()
	p, err := n.WaitPending(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(p) != 4 || string(p[0].Body) != "m1" || p[0].From != "a" || p[0].To != "b" || p[0].Kind != 1 || p[0].Request || !p[3].Request {
		t.Fatalf("pending: %+v", p)
	}
	select {
	case <-handled:
		t.Fatal("a message was delivered in manual mode")
	default:
	}
	// Reorder: m3, then the request, then m1; duplicate m1; drop m2.
	wait := func() {
		select {
		case <-handled:
		case <-ctx.Done():
			t.Fatal("not handled")
		}
	}
	for _, id := range []uint64{p[2].ID, p[3].ID} {
		if err := n.Deliver(id); err != nil {
			t.Fatal(err)
		}
		wait()
	}
	if got := <-resp; got != "re:r1" {
		t.Fatalf("response: %q (responses are not queued)", got)
	}
	if err := n.Duplicate(p[0].ID); err != nil {
		t.Fatal(err)
	}
	wait()
	if err := n.Deliver(p[0].ID); err != nil {
		t.Fatal(err)
	}
	wait()
	if err := n.Drop(p[1].ID); err != nil {
		t.Fatal(err)
	}
	if err := n.Deliver(p[1].ID); !errors.Is(err, ErrNotPending) {
		t.Fatalf("deliver a dropped message: %v", err)
	}
	mu.Lock()
	if got := fmt.Sprint(order); got != "[m3 r1 m1 m1]" {
		t.Fatalf("handled %s", got)
	}
	mu.Unlock()
	if len(n.Pending()) != 0 {
		t.Fatal("queue not empty")
	}

	// A dropped request fails its caller with ErrUnreachable.
	go func() {
		_, err := a.Request(ctx, "b", 1, []byte("r2"))
		resp <- fmt.Sprint(err)
	}()
	p, _ = n.WaitPending(ctx, 1)
	_ = n.Drop(p[0].ID)
	if got := <-resp; got != fmt.Sprintf("%v: message %d dropped", ErrUnreachable, p[0].ID) {
		t.Fatalf("dropped request: %s", got)
	}

	// Delivering across a partition fails; DeliverAll delivers the rest.
	_ = a.Send(ctx, "b", 1, []byte("x"))
	_ = a.Send(ctx, "b", 1, []byte("y"))
	p, _ = n.WaitPending(ctx, 2)
	n.Partition("a", "b")
	if err := n.Deliver(p[0].ID); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("deliver across a partition: %v", err)
	}
	n.Heal()
	if got := n.DeliverAll(); got != 1 {
		t.Fatalf("DeliverAll delivered %d", got)
	}
	wait()
	n.SetManual(false)
	if _, err := a.Request(ctx, "b", 1, []byte("auto")); err != nil {
		t.Fatal(err)
	}
}

func TestMemStats(t *testing.T) {
	defer goleak.VerifyNone(t)
	var n MemNetwork
	ns := memNodes(t, &n, "a", "b")
	defer closeAll(ns)
	ns[1].Handle(1, func(context.Context, string, []byte) ([]byte, error) { return make([]byte, 10), nil })
	ctx := testCtx(t)
	for range 3 {
		if _, err := ns[0].Request(ctx, "b", 1, make([]byte, 100)); err != nil {
			t.Fatal(err)
		}
	}
	if s := n.Stats("a", "b"); s != (LinkStats{Messages: 3, Bytes: 300}) {
		t.Fatalf("a->b %+v", s)
	}
	if s := n.Stats("b", "a"); s != (LinkStats{Messages: 3, Bytes: 30}) {
		t.Fatalf("b->a %+v", s)
	}
	if s := n.TotalStats(); s != (LinkStats{Messages: 6, Bytes: 330}) {
		t.Fatalf("total %+v", s)
	}
	n.ResetStats()
	if s := n.TotalStats(); s != (LinkStats{}) {
		t.Fatalf("after reset %+v", s)
	}
}

// TestMemInFlight: a message counts from its delivery until its handler has
// returned and, for a request, until the caller has the response; a message
// held on a link delay or in the manual queue does not count until it is
// delivered; WaitIdle returns once nothing is in flight.
func TestMemInFlight(t *testing.T) {
	defer goleak.VerifyNone(t)
	clk := clockwork.NewFakeClock()
	n := &MemNetwork{Clock: clk}
	ns := memNodes(t, n, "a", "b")
	defer closeAll(ns)
	a, b := ns[0], ns[1]
	release := make(chan struct{})
	entered := make(chan struct{}, 4)
	b.Handle(1, func(ctx context.Context, _ string, body []byte) ([]byte, error) {
		entered <- struct{}{}
		<-release
		return body, nil
	})
	ctx := context.Background()
	idle := func(want bool) {
		t.Helper()
		if got := n.InFlight() == 0; got != want {
			t.Fatalf("InFlight = %d, want idle %v", n.InFlight(), want)
		}
	}
	idle(true)

	// A one-way message counts while its handler runs.
	if err := a.Send(ctx, "b", 1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	<-entered
	idle(false)
	release <- struct{}{}
	if err := n.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}

	// A request counts until its caller returns.
	done := make(chan error, 1)
	go func() { _, err := a.Request(ctx, "b", 1, []byte("y")); done <- err }()
	<-entered
	if got := n.InFlight(); got != 2 {
		t.Fatalf("InFlight = %d with a request's handler running, want 2 (handler and caller)", got)
	}
	release <- struct{}{}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := n.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}

	// Held on a link delay: not in flight until the clock delivers it.
	n.SetLink("a", "b", LinkConfig{Delay: time.Second})
	go func() { _, err := a.Request(ctx, "b", 1, []byte("z")); done <- err }()
	if err := clk.BlockUntilContext(ctx, 1); err != nil { // the delay's timer
		t.Fatal(err)
	}
	idle(true)
	if got := n.Held(); got != 1 {
		t.Fatalf("Held = %d with a message on a link delay, want 1", got)
	}
	clk.Advance(time.Second)
	<-entered
	idle(false)
	release <- struct{}{}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := n.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	n.SetLink("a", "b", LinkConfig{})

	// Queued in manual mode: not in flight until delivered.
	n.SetManual(true)
	if err := a.Send(ctx, "b", 1, []byte("m")); err != nil {
		t.Fatal(err)
	}
	idle(true)
	if got := n.Held(); got != 1 {
		t.Fatalf("Held = %d with a message queued, want 1", got)
	}
	if got := n.DeliverAll(); got != 1 {
		t.Fatalf("DeliverAll = %d", got)
	}
	<-entered
	idle(false)
	release <- struct{}{}
	if err := n.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}

	// WaitIdle gives up with its context.
	if err := a.Send(ctx, "b", 1, nil); err != nil {
		t.Fatal(err)
	}
	n.DeliverAll()
	<-entered
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if err := n.WaitIdle(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitIdle with a handler blocked: %v", err)
	}
	release <- struct{}{}
	if err := n.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
}
