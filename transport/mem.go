package transport

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
)

// DefaultMaxMessageSize is the largest body (request, response or one-way)
// a transport accepts unless configured otherwise: 4 MiB.
const DefaultMaxMessageSize = 4 << 20

// LinkConfig shapes one direction of a link in a [MemNetwork].
type LinkConfig struct {
	// DropRate is the probability in [0, 1] that a message is lost,
	// drawn from the network's seeded source.
	DropRate float64
	// Delay holds every message for this long on the network's clock
	// before it is delivered.
	Delay time.Duration
}

// LinkStats counts the traffic of one direction of a link in a
// [MemNetwork]: requests, one-way messages and responses the network
// accepted from the sender (including those it then dropped), and their
// body bytes.
type LinkStats struct {
	Messages uint64 // messages offered to the link
	Bytes    uint64 // their body bytes (no framing)
	Dropped  uint64 // messages lost to the drop rate, Drop, a partition or a closed receiver after being accepted
}

// Envelope is a message held by a [MemNetwork] in manual-delivery mode.
type Envelope struct {
	ID      uint64 // unique within the network, increasing in send order
	From    string
	To      string
	Kind    Kind
	Body    []byte // a copy; modifying it does not change what is delivered
	Request bool   // true for a request (its caller waits), false for a one-way message
}

// MemNetwork connects in-memory transports, one per node ID, with fault
// injection: partitions, isolation, per-link drop rate and delay, and a
// manual-delivery mode in which the test decides what is delivered, when,
// in which order and how many times.
//
// The zero value is ready to use. Set the exported fields before the first
// call and do not change them afterwards (use [MemNetwork.SetSeed] to
// reseed later). All methods are safe for concurrent use.
//
// See the package documentation for the delivery rules.
type MemNetwork struct {
	// Clock runs link delays; nil means the real clock.
	Clock clockwork.Clock
	// Seed seeds the source of drop decisions. The same seed, the same
	// send order and the same link configuration give the same drops.
	Seed uint64
	// MaxMessageSize is the largest body accepted, in bytes; 0 means
	// DefaultMaxMessageSize. Larger bodies fail with ErrTooLarge.
	MaxMessageSize int

	mu       sync.Mutex
	inited   bool
	clock    clockwork.Clock
	maxSize  int
	rng      *rand.Rand
	nodes    map[string]*MemTransport
	cuts     map[memLink]struct{} // directed pairs that cannot talk
	isolated map[string]struct{}
	links    map[memLink]LinkConfig
	stats    map[memLink]*LinkStats
	manual   bool
	queue    []*memMsg
	nextID   uint64
	changed  chan struct{} // closed and replaced whenever the queue grows

	// In flight: see InFlight. busy is the count; a WaitIdle that has to
	// wait makes idle (under busyMu), and the busyAdd that brings busy to 0
	// closes it. Without a waiter a message costs two atomic adds.
	busy    atomic.Int64
	waiters atomic.Int32
	busyMu  sync.Mutex
	idle    chan struct{}
}

type memLink struct{ from, to string }

// memMsg is a message in flight.
type memMsg struct {
	env      Envelope
	deadline time.Time // the caller's ctx deadline, zero if none
	call     *memCall  // nil for one-way messages
	h        Handler   // the handler dispatch found for an unordered kind; nil otherwise, and serve looks it up
	taken    bool      // taken from MemTransport.delayed for delivery (guarded by the receiver's mu)
}

// memCall is the caller's side of a request. done has room for one
// result; later results (from duplicates) are discarded.
type memCall struct {
	done chan memResult

	// state is 0, callCounted (the caller counts as in flight, see
	// MemNetwork.InFlight) or callGone (the caller has returned).
	state atomic.Int32
}

const (
	callCounted int32 = 1 + iota
	callGone
)

// enter counts the waiting caller as in flight once its request reaches a
// handler, unless it has returned already or counts already (a duplicate).
// The handler's own count is held (dispatch adds it first), so undoing a
// lost race here never brings InFlight to 0.
func (c *memCall) enter(n *MemNetwork) {
	if c.state.Load() != 0 {
		return
	}
	n.busyAdd(1)
	if !c.state.CompareAndSwap(0, callCounted) {
		n.busyAdd(-1)
	}
}

// leave records that the caller has returned, with the response or not.
func (c *memCall) leave(n *MemNetwork) {
	if c.state.Swap(callGone) == callCounted {
		n.busyAdd(-1)
	}
}

type memResult struct {
	body []byte
	err  error
}

func (c *memCall) finish(body []byte, err error) {
	select {
	case c.done <- memResult{body, err}:
	default:
	}
}

func (m *memMsg) fail(err error) {
	if m.call != nil {
		m.call.finish(nil, err)
	}
}

// initLocked applies the zero-value defaults. n.mu must be held.
func (n *MemNetwork) initLocked() {
	if n.inited {
		return
	}
	n.inited = true
	n.clock = n.Clock
	if n.clock == nil {
		n.clock = clockwork.NewRealClock()
	}
	n.maxSize = n.MaxMessageSize
	if n.maxSize <= 0 {
		n.maxSize = DefaultMaxMessageSize
	}
	n.rng = rand.New(rand.NewPCG(n.Seed, n.Seed^0x9e3779b97f4a7c15))
	n.nodes = make(map[string]*MemTransport)
	n.cuts = make(map[memLink]struct{})
	n.isolated = make(map[string]struct{})
	n.links = make(map[memLink]LinkConfig)
	n.stats = make(map[memLink]*LinkStats)
	n.changed = make(chan struct{})
}

// SetSeed reseeds the source of drop decisions.
func (n *MemNetwork) SetSeed(seed uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.initLocked()
	n.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// Node creates the transport of node id. It fails with ErrNodeExists while
// an open transport has that ID; once that one is closed the ID can be
// created again, which models a restart (messages in flight to the old
// incarnation may reach the new one, as with a reused address).
func (n *MemNetwork) Node(id string) (*MemTransport, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: node ID must not be empty", ErrInvalidConfig)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.initLocked()
	if _, ok := n.nodes[id]; ok {
		return nil, fmt.Errorf("%w: %q", ErrNodeExists, id)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &MemTransport{
		net:    n,
		id:     id,
		ctx:    ctx,
		cancel: cancel,
		timers: make(map[*memMsg]clockwork.Timer),
	}
	n.nodes[id] = t
	return t, nil
}

// Partition cuts the link between a and b in both directions. Messages
// already in flight between them (delayed or queued) are lost when they
// come due.
func (n *MemNetwork) Partition(a, b string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.initLocked()
	n.cuts[memLink{a, b}] = struct{}{}
	n.cuts[memLink{b, a}] = struct{}{}
}

// PartitionOneWay cuts only the direction from → to.
func (n *MemNetwork) PartitionOneWay(from, to string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.initLocked()
	n.cuts[memLink{from, to}] = struct{}{}
}

// Isolate cuts id off from every other node, in both directions, until
// Heal. A node can still send to itself.
func (n *MemNetwork) Isolate(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.initLocked()
	n.isolated[id] = struct{}{}
}

// Heal removes every partition and isolation. Link configurations
// (SetLink) are kept.
func (n *MemNetwork) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.initLocked()
	clear(n.cuts)
	clear(n.isolated)
}

// SetLink configures the direction from → to. The zero LinkConfig restores
// a perfect link.
func (n *MemNetwork) SetLink(from, to string, cfg LinkConfig) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.initLocked()
	if cfg == (LinkConfig{}) {
		delete(n.links, memLink{from, to})
		return
	}
	n.links[memLink{from, to}] = cfg
}

// Stats returns the traffic counted on the direction from → to.
func (n *MemNetwork) Stats(from, to string) LinkStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.initLocked()
	if s := n.stats[memLink{from, to}]; s != nil {
		return *s
	}
	return LinkStats{}
}

// TotalStats returns the sum of the traffic on every link.
func (n *MemNetwork) TotalStats() LinkStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	var sum LinkStats
	for _, s := range n.stats {
		sum.Messages += s.Messages
		sum.Bytes += s.Bytes
		sum.Dropped += s.Dropped
	}
	return sum
}

// ResetStats sets every link's counters to zero.
func (n *MemNetwork) ResetStats() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.initLocked()
	clear(n.stats)
}

// InFlight returns how many messages are being handled: each message
// handed to its receiver counts until its handler returns and, for a
// request, until its caller has the response (or has given up). Messages
// held by the network (a link delay on the clock, the manual-delivery
// queue) do not count until they are delivered: they wait for the test, not
// for the nodes. A test that must know when the nodes are done with what
// was sent waits for 0 (WaitIdle) instead of for a quiet moment.
func (n *MemNetwork) InFlight() int { return int(n.busy.Load()) }

// Held returns how many messages the network holds back: on a link delay,
// waiting for the clock, or in the manual-delivery queue, waiting for the
// test. Their senders may be waiting for them too.
func (n *MemNetwork) Held() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	held := len(n.queue)
	for _, t := range n.nodes { // lock order: n.mu, then t.mu
		t.mu.Lock()
		held += len(t.timers)
		t.mu.Unlock()
	}
	return held
}

// WaitIdle blocks until InFlight is 0 or ctx ends.
func (n *MemNetwork) WaitIdle(ctx context.Context) error {
	n.waiters.Add(1)
	defer n.waiters.Add(-1)
	for {
		n.busyMu.Lock()
		if n.busy.Load() == 0 {
			n.busyMu.Unlock()
			return nil
		}
		if n.idle == nil {
			n.idle = make(chan struct{})
		}
		idle := n.idle
		n.busyMu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// busyAdd changes the in-flight count by d. Bringing it to 0 wakes the
// waiting WaitIdles; they check the count again, so a wake-up that comes
// late, after the count rose again, costs them a loop and nothing else.
// The waiter count is raised before a WaitIdle reads busy, so a busyAdd
// that reads no waiter brought busy to 0 before that read.
func (n *MemNetwork) busyAdd(d int) {
	if n.busy.Add(int64(d)) != 0 || d > 0 || n.waiters.Load() == 0 {
		return
	}
	n.busyMu.Lock()
	if n.idle != nil {
		close(n.idle)
		n.idle = nil
	}
	n.busyMu.Unlock()
}

// SetManual turns manual-delivery mode on or off. While on, every request
// and one-way message (not responses) is queued instead of delivered,
// regardless of drop rate and delay; the test inspects the queue with
// Pending and releases messages with Deliver, Drop, Duplicate and
// DeliverAll. Turning it off leaves queued messages queued.
func (n *MemNetwork) SetManual(on bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.initLocked()
	n.manual = on
}

// Pending returns the queued messages in send order.
func (n *MemNetwork) Pending() []Envelope {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]Envelope, len(n.queue))
	for i, m := range n.queue {
		out[i] = m.env
		out[i].Body = slices.Clone(m.env.Body)
	}
	return out
}

// WaitPending blocks until at least count messages are queued or ctx
// ends, and returns the queue. Handlers run in goroutines, so a test
// stepping through a protocol uses it to wait for the next message.
func (n *MemNetwork) WaitPending(ctx context.Context, count int) ([]Envelope, error) {
	for {
		n.mu.Lock()
		n.initLocked()
		ready := len(n.queue) >= count
		ch := n.changed
		n.mu.Unlock()
		if ready {
			return n.Pending(), nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return n.Pending(), ctx.Err()
		}
	}
}

// take removes the queued message id.
func (n *MemNetwork) take(id uint64) (*memMsg, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, m := range n.queue {
		if m.env.ID == id {
			n.queue = slices.Delete(n.queue, i, i+1)
			return m, nil
		}
	}
	return nil, fmt.Errorf("%w: %d", ErrNotPending, id)
}

// Deliver removes message id from the queue and delivers it now. If its
// receiver is unreachable (partitioned, isolated, closed) the message is
// lost, a waiting request fails with ErrUnreachable, and Deliver returns
// an error wrapping ErrUnreachable.
func (n *MemNetwork) Deliver(id uint64) error {
	m, err := n.take(id)
	if err != nil {
		return err
	}
	return n.deliver(m)
}

// Drop removes message id from the queue without delivering it. A
// request's caller fails with ErrUnreachable.
func (n *MemNetwork) Drop(id uint64) error {
	m, err := n.take(id)
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.statLocked(m.env.From, m.env.To).Dropped++
	n.mu.Unlock()
	m.fail(fmt.Errorf("%w: message %d dropped", ErrUnreachable, id))
	return nil
}

// Duplicate delivers a copy of message id now and leaves the original
// queued. For a request the first response reaches the caller; later ones
// are discarded.
func (n *MemNetwork) Duplicate(id uint64) error {
	n.mu.Lock()
	var orig *memMsg
	for _, m := range n.queue {
		if m.env.ID == id {
			orig = m
			break
		}
	}
	if orig == nil {
		n.mu.Unlock()
		return fmt.Errorf("%w: %d", ErrNotPending, id)
	}
	cp := *orig
	cp.env.Body = slices.Clone(orig.env.Body)
	st := n.statLocked(cp.env.From, cp.env.To)
	st.Messages++
	st.Bytes += uint64(len(cp.env.Body))
	n.mu.Unlock()
	return n.deliver(&cp)
}

// DeliverAll delivers every message queued at the time of the call, in
// send order, and returns how many it took from the queue. Messages sent
// meanwhile (by the handlers it starts) stay queued.
func (n *MemNetwork) DeliverAll() int {
	n.mu.Lock()
	q := n.queue
	n.queue = nil
	n.mu.Unlock()
	for _, m := range q {
		_ = n.deliver(m) // an unreachable receiver fails the caller; nothing to report
	}
	return len(q)
}

func (n *MemNetwork) statLocked(from, to string) *LinkStats {
	l := memLink{from, to}
	s := n.stats[l]
	if s == nil {
		s = new(LinkStats)
		n.stats[l] = s
	}
	return s
}

// reachLocked explains why from cannot reach to, or returns "".
func (n *MemNetwork) reachLocked(from, to string) string {
	t := n.nodes[to]
	switch {
	case t == nil:
		return "unknown or closed node"
	case from == to:
		return ""
	case hasKey(n.isolated, from):
		return "sender isolated"
	case hasKey(n.isolated, to):
		return "receiver isolated"
	case hasKey(n.cuts, memLink{from, to}):
		return "partitioned"
	}
	return ""
}

func hasKey[K comparable](m map[K]struct{}, k K) bool {
	_, ok := m[k]
	return ok
}

// send accepts a message from → to: queues it (manual mode), drops it,
// schedules it after the link delay, or delivers it now.
func (n *MemNetwork) send(from *MemTransport, to string, kind Kind, body []byte, deadline time.Time, call *memCall) error {
	n.mu.Lock()
	n.initLocked()
	if len(body) > n.maxSize {
		n.mu.Unlock()
		return fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(body), n.maxSize)
	}
	if why := n.reachLocked(from.id, to); why != "" {
		n.mu.Unlock()
		return fmt.Errorf("%w: %s -> %s: %s", ErrUnreachable, from.id, to, why)
	}
	n.nextID++
	m := &memMsg{
		env:      Envelope{ID: n.nextID, From: from.id, To: to, Kind: kind, Body: slices.Clone(body), Request: call != nil},
		deadline: deadline,
		call:     call,
	}
	st := n.statLocked(from.id, to)
	st.Messages++
	st.Bytes += uint64(len(body))
	if n.manual {
		n.queue = append(n.queue, m)
		close(n.changed)
		n.changed = make(chan struct{})
		n.mu.Unlock()
		return nil
	}
	cfg := n.links[memLink{from.id, to}]
	if cfg.DropRate > 0 && n.rng.Float64() < cfg.DropRate {
		st.Dropped++
		n.mu.Unlock()
		if call != nil {
			return fmt.Errorf("%w: %s -> %s: request dropped", ErrUnreachable, from.id, to)
		}
		return nil
	}
	dst := n.nodes[to]
	if cfg.Delay > 0 {
		dst.schedule(n.clock, cfg.Delay, m) // lock order: n.mu, then t.mu
		n.mu.Unlock()
		return nil
	}
	n.mu.Unlock()
	dst.dispatch(m)
	return nil
}

// deliver hands m to its receiver if it is reachable now.
func (n *MemNetwork) deliver(m *memMsg) error {
	n.mu.Lock()
	why := n.reachLocked(m.env.From, m.env.To)
	dst := n.nodes[m.env.To]
	if why != "" {
		n.statLocked(m.env.From, m.env.To).Dropped++
	}
	n.mu.Unlock()
	if why != "" {
		err := fmt.Errorf("%w: %s -> %s: %s", ErrUnreachable, m.env.From, m.env.To, why)
		m.fail(err)
		return err
	}
	dst.dispatch(m)
	return nil
}

// respond carries a handler's result back to the caller. Responses are
// neither delayed, dropped nor queued, but a partition or a closed caller
// loses them.
func (n *MemNetwork) respond(m *memMsg, body []byte, err error) {
	n.mu.Lock()
	why := n.reachLocked(m.env.To, m.env.From)
	st := n.statLocked(m.env.To, m.env.From)
	st.Messages++
	st.Bytes += uint64(len(body))
	if why != "" {
		st.Dropped++
	}
	n.mu.Unlock()
	if why != "" {
		m.call.finish(nil, fmt.Errorf("%w: response %s -> %s: %s", ErrUnreachable, m.env.To, m.env.From, why))
		return
	}
	m.call.finish(body, err)
}

func (n *MemNetwork) remove(t *MemTransport) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.nodes[t.id] == t {
		delete(n.nodes, t.id)
	}
}

// MemTransport is one node's endpoint on a [MemNetwork]. It implements
// [Transport]; create it with [MemNetwork.Node].
type MemTransport struct {
	net    *MemNetwork
	id     string
	ctx    context.Context // cancelled by Close; parent of handler contexts
	cancel context.CancelFunc

	handlers handlerTable

	// closed is set by Close under mu. A goroutine is added to wg only under mu with closed
	// false (dispatch, queue), and Close waits for wg after setting it: nothing starts after
	// Close began, and Close waits for everything that did. Reads outside mu (Request, Send,
	// serve) are only checks.
	mu      sync.Mutex
	closed  atomic.Bool
	timers  map[*memMsg]clockwork.Timer // delayed messages addressed to this node
	delayed map[string][]*memMsg        // per sender, the delayed messages of ordered kinds, in send order
	lanes   map[memLaneKey]*memLane     // per sender and ordered kind, the messages waiting for its handler
	wg      sync.WaitGroup

	// orderMu is held while delayed messages of ordered kinds are taken
	// from delayed and dispatched, so that two timers firing at once
	// dispatch them in send order. Lock order: orderMu, n.mu, t.mu.
	orderMu sync.Mutex
}

type memLaneKey struct {
	from string
	kind Kind
}

// memLane is the queue of one sender's messages of one ordered kind.
type memLane struct {
	q       []*memMsg
	running bool // a laneLoop serves it
}

var _ Transport = (*MemTransport)(nil)

// LocalID returns the node ID.
func (t *MemTransport) LocalID() string { return t.id }

// MaxMessageSize returns the network's MaxMessageSize (see SizeLimiter).
func (t *MemTransport) MaxMessageSize() int {
	t.net.mu.Lock()
	defer t.net.mu.Unlock()
	t.net.initLocked()
	return t.net.maxSize
}

// Handle installs h for kind, replacing any earlier handler; a nil h
// removes it.
func (t *MemTransport) Handle(kind Kind, h Handler) { t.handlers.set(kind, h, false) }

// HandleOrdered installs h for kind and makes the kind ordered (see
// [OrderedHandler]): messages of kind from one sender are handled one at a
// time in the order the network hands them over (see the package
// documentation, MemNetwork).
func (t *MemTransport) HandleOrdered(kind Kind, h Handler) { t.handlers.set(kind, h, true) }

func (t *MemTransport) handler(kind Kind) Handler { return t.handlers.get(kind) }

func (t *MemTransport) isClosed() bool { return t.closed.Load() }

// Request sends body to node `to` and waits for the response. An
// unreachable peer (unknown, closed, partitioned, isolated) fails at once
// with ErrUnreachable, and so does a request lost to the link's drop rate
// or to Drop. See [Transport.Request].
func (t *MemTransport) Request(ctx context.Context, to string, kind Kind, body []byte) ([]byte, error) {
	if t.isClosed() {
		return nil, ErrClosed
	}
	if kind == 0 {
		return nil, fmt.Errorf("%w: kind 0 is invalid", ErrNoHandler)
	}
	if err := expired(ctx); err != nil {
		return nil, err
	}
	deadline, _ := ctx.Deadline()
	call := &memCall{done: make(chan memResult, 1)}
	if err := t.net.send(t, to, kind, body, deadline, call); err != nil {
		return nil, err
	}
	// The network counts the message now (dispatched: in flight; or held), and the caller from
	// when a handler takes it until leave: the hooks hand the caller over without a gap.
	h := callHooksFrom(ctx)
	if h.Sent != nil {
		h.Sent()
	}
	defer func() {
		if h.Returned != nil {
			h.Returned()
		}
		call.leave(t.net)
	}()
	select {
	case r := <-call.done:
		if r.err != nil {
			if err := expired(ctx); err != nil {
				return nil, err // the handler most likely failed because our deadline passed
			}
		}
		return r.body, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.ctx.Done():
		return nil, ErrClosed
	}
}

// Send sends body to node `to` without waiting. An unreachable peer
// (unknown, closed, partitioned, isolated) fails at once with
// ErrUnreachable; a message lost to the drop rate returns nil. See
// [Transport.Send].
func (t *MemTransport) Send(ctx context.Context, to string, kind Kind, body []byte) error {
	if t.isClosed() {
		return ErrClosed
	}
	if kind == 0 {
		return fmt.Errorf("%w: kind 0 is invalid", ErrNoHandler)
	}
	if err := expired(ctx); err != nil {
		return err
	}
	return t.net.send(t, to, kind, body, time.Time{}, nil)
}

// Close closes the transport and removes the node from the network:
// requests it is waiting for fail with ErrClosed, requests addressed to it
// fail with ErrUnreachable, running handlers see their context cancelled.
// It waits for the handlers to return and is idempotent.
func (t *MemTransport) Close() error {
	t.mu.Lock()
	if t.closed.Load() {
		t.mu.Unlock()
		t.wg.Wait()
		return nil
	}
	t.closed.Store(true)
	timers := t.timers
	t.timers = nil
	t.delayed = nil
	t.mu.Unlock()

	t.cancel()
	t.net.remove(t)
	for m, tm := range timers {
		if tm.Stop() {
			m.fail(fmt.Errorf("%w: %s closed", ErrUnreachable, t.id))
		}
	}
	t.wg.Wait()
	return nil
}

// schedule delivers m to t after d on clock.
func (t *MemTransport) schedule(clock clockwork.Clock, d time.Duration, m *memMsg) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed.Load() {
		m.fail(fmt.Errorf("%w: %s closed", ErrUnreachable, t.id))
		return
	}
	if t.handlers.ordered(m.env.Kind) {
		if t.delayed == nil {
			t.delayed = make(map[string][]*memMsg)
		}
		t.delayed[m.env.From] = append(t.delayed[m.env.From], m)
		t.timers[m] = clock.AfterFunc(d, func() { t.fireOrdered(m) })
		return
	}
	t.timers[m] = clock.AfterFunc(d, func() {
		t.mu.Lock()
		_, ok := t.timers[m]
		delete(t.timers, m)
		closed := t.closed.Load()
		t.mu.Unlock()
		switch {
		case ok:
			_ = t.net.deliver(m) // failures reach the caller through m
		case closed: // fired while Close ran, too late for Stop
			m.fail(fmt.Errorf("%w: %s closed", ErrUnreachable, t.id))
		}
	})
}

// fireOrdered delivers the delayed message m of an ordered kind when its
// timer fires, and before it every message of an ordered kind its sender
// sent earlier and the network still holds (their delay may be longer if
// the link changed meanwhile): delays never reorder an ordered kind.
func (t *MemTransport) fireOrdered(m *memMsg) {
	t.orderMu.Lock()
	defer t.orderMu.Unlock()
	t.mu.Lock()
	if t.closed.Load() {
		taken := m.taken // if not, Close found its timer fired already and left it to us
		t.mu.Unlock()
		if !taken {
			m.fail(fmt.Errorf("%w: %s closed", ErrUnreachable, t.id))
		}
		return
	}
	q := t.delayed[m.env.From]
	i := slices.Index(q, m)
	if i < 0 {
		t.mu.Unlock()
		return // delivered already, ahead of its timer
	}
	due := slices.Clone(q[:i+1])
	if i+1 == len(q) {
		delete(t.delayed, m.env.From)
	} else {
		t.delayed[m.env.From] = slices.Delete(q, 0, i+1)
	}
	for _, d := range due {
		d.taken = true
		if tm := t.timers[d]; tm != nil && d != m {
			tm.Stop()
		}
		delete(t.timers, d)
	}
	t.mu.Unlock()
	for _, d := range due {
		_ = t.net.deliver(d) // failures reach the caller through d
	}
}

// dispatch runs m's handler in a goroutine owned by t.
func (t *MemTransport) dispatch(m *memMsg) {
	n := t.net
	n.busyAdd(1) // the handler
	if m.call != nil {
		m.call.enter(n)
	}
	e := t.handlers.lookup(m.env.Kind)
	if e.ordered {
		t.queue(m)
		return
	}
	t.mu.Lock()
	if t.closed.Load() {
		t.mu.Unlock()
		n.busyAdd(-1)
		m.fail(fmt.Errorf("%w: %s closed", ErrUnreachable, t.id))
		return
	}
	t.wg.Add(1) // under t.mu, not closed: Close waits for it
	t.mu.Unlock()
	m.h = e.h
	go t.serveOwned(m)
}

// serveOwned serves m, for Close's count.
func (t *MemTransport) serveOwned(m *memMsg) {
	defer t.wg.Done()
	t.serve(m)
}

// queue appends m, of an ordered kind, to its sender's lane, and starts
// the lane's loop if it is not running. Lanes are not bounded: the
// MemNetwork sheds nothing.
func (t *MemTransport) queue(m *memMsg) {
	k := memLaneKey{m.env.From, m.env.Kind}
	t.mu.Lock()
	if t.closed.Load() {
		t.mu.Unlock()
		t.net.busyAdd(-1)
		m.fail(fmt.Errorf("%w: %s closed", ErrUnreachable, t.id))
		return
	}
	if t.lanes == nil {
		t.lanes = make(map[memLaneKey]*memLane)
	}
	l := t.lanes[k]
	if l == nil {
		l = &memLane{}
		t.lanes[k] = l
	}
	l.q = append(l.q, m)
	if l.running {
		t.mu.Unlock()
		return
	}
	l.running = true
	t.wg.Add(1) // under t.mu, not closed: Close waits for it
	t.mu.Unlock()
	go func() {
		defer t.wg.Done()
		t.laneLoop(k, l)
	}()
}

// laneLoop serves l's messages in order until its queue is empty. Once t
// is closed, what is queued fails (requests with ErrUnreachable).
func (t *MemTransport) laneLoop(k memLaneKey, l *memLane) {
	t.mu.Lock()
	for len(l.q) > 0 {
		m := l.q[0]
		l.q[0] = nil
		l.q = l.q[1:]
		closed := t.closed.Load()
		t.mu.Unlock()
		if closed {
			t.net.busyAdd(-1)
			m.fail(fmt.Errorf("%w: %s closed", ErrUnreachable, t.id))
		} else {
			t.serve(m) // its handler is looked up when served: it may have been removed
		}
		t.mu.Lock()
	}
	l.running = false
	delete(t.lanes, k) // an idle lane holds nothing
	t.mu.Unlock()
}

// serve runs m's handler: the one dispatch found, else its kind's now
// (none: ErrNoHandler for a request).
func (t *MemTransport) serve(m *memMsg) {
	h := m.h
	if h == nil {
		h = t.handler(m.env.Kind)
	}
	defer t.net.busyAdd(-1)
	if m.call == nil {
		if h != nil {
			_, _ = h(t.ctx, m.env.From, m.env.Body) // one-way: results are discarded
		}
		return
	}
	if h == nil {
		t.net.respond(m, nil, fmt.Errorf("%w: node %s kind %d", ErrNoHandler, t.id, m.env.Kind))
		return
	}
	ctx, cancel := t.ctx, context.CancelFunc(func() {})
	if !m.deadline.IsZero() {
		ctx, cancel = context.WithDeadline(t.ctx, m.deadline)
	}
	resp, err := h(ctx, m.env.From, m.env.Body)
	cancel()
	switch {
	case t.isClosed():
		m.fail(fmt.Errorf("%w: %s closed", ErrUnreachable, t.id))
	case err != nil:
		t.net.respond(m, nil, &RemoteError{Node: t.id, Msg: err.Error()})
	case len(resp) > t.net.maxSize:
		t.net.respond(m, nil, fmt.Errorf("%w: response of %d bytes from %s, limit %d", ErrTooLarge, len(resp), t.id, t.net.maxSize))
	default:
		t.net.respond(m, slices.Clone(resp), nil)
	}
}

// expired returns ctx's error if it ended or its deadline has passed (the
// timer may not have fired yet when a peer's handler, holding the same
// deadline, already gave up). Deadlines are real time, so this compares
// with the wall clock.
func expired(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}
