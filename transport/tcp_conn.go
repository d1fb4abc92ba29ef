package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// errRetired: the connection stopped taking new calls; use the peer's
// current one.
var errRetired = errors.New("transport: connection retired")

// conn is one handshaken, multiplexed connection to a peer.
type conn struct {
	t      *TCP
	nc     net.Conn
	tlsCfg *tls.Config // the TLS configuration of its handshake; nil without TLS
	peer   string
	dialer string          // the node that dialled it
	pings  bool            // protocol version 2 or later: the peer answers pings
	ctx    context.Context // cancelled on close; parent of handler contexts
	cancel context.CancelFunc
	wq     chan []byte   // frames for the writer; nil means flush and close
	send1  chan struct{} // one token: orders request and one-way frames against the go-away

	// handlerWG counts the serveLoop goroutines the reader started; the
	// reader waits for them before it returns (not lanes: goFunc's).
	handlerWG sync.WaitGroup

	// listening is set while a takeover probe waits for a frame: the
	// reader then closes heard at the next frame. The reader loads it at
	// every frame: the padding keeps it off mu's cache line, which the
	// handlers write all the time.
	listening atomic.Bool
	_         [64]byte

	mu        sync.Mutex
	heard     chan struct{} // see listening
	pending   map[uint64]chan memResult
	nextID    uint64
	handlers  int // handler slots in use (serveLoop goroutines)
	backlog   []inbound
	lanes     map[Kind]*lane // the queues of ordered kinds, created on their first message
	serving   int            // lanes with a running laneLoop
	held      int            // body bytes of the messages running or queued, lanes included (MaxQueuedBytes)
	closed    bool           // close ran
	retired   bool           // no new outbound calls; go-away sent
	goaway    bool           // the peer sent go-away
	finishing bool           // the close marker is queued
}

func (t *TCP) newConn(nc net.Conn, peer, dialer string, version uint8) *conn {
	ctx, cancel := context.WithCancel(t.ctx)
	return &conn{
		t:       t,
		nc:      nc,
		peer:    peer,
		dialer:  dialer,
		pings:   version >= 2,
		ctx:     ctx,
		cancel:  cancel,
		wq:      make(chan []byte, t.cfg.WriteQueue),
		send1:   make(chan struct{}, 1),
		pending: make(map[uint64]chan memResult),
	}
}

// preferred reports whether c is the connection the tie-break keeps: the
// one dialled by the lower node ID.
func (c *conn) preferred() bool {
	return c.dialer == min(c.peer, c.t.cfg.NodeID)
}

// start runs the reader and the writer.
func (c *conn) start() {
	if !c.t.goFunc(c.readLoop) {
		c.close("transport closed")
		return
	}
	if !c.t.goFunc(c.writeLoop) {
		c.close("transport closed")
	}
}

// close closes the connection at once: pending requests fail with
// ErrUnreachable and handlers see their context cancelled.
func (c *conn) close(reason string) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	pending := c.pending
	c.pending = nil
	c.mu.Unlock()

	c.t.unslot(c, true) // first, so that new calls dial instead of retrying c
	c.cancel()
	_ = c.nc.Close()
	err := fmt.Errorf("%w: %s: connection closed: %s", ErrUnreachable, c.peer, reason)
	for _, ch := range pending {
		ch <- memResult{nil, err}
	}
	c.t.log.Debug("connection closed", "peer", c.peer, "reason", reason)
}

// lockSend takes the send token. If c closed meanwhile it returns
// errRetired: nothing was sent, the caller retries on the peer's current
// connection (or dials).
func (c *conn) lockSend(ctx context.Context) error {
	select {
	case c.send1 <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.ctx.Done():
		return errRetired
	}
}

func (c *conn) unlockSend() { <-c.send1 }

// enqueue queues frame f for the writer. If c closed meanwhile it returns
// errRetired: f was not sent.
func (c *conn) enqueue(ctx context.Context, f []byte) error {
	select {
	case c.wq <- f:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.ctx.Done():
		return errRetired
	}
}

// ping queues a ping if the write queue has room (if it has none, frames
// are leaving anyway).
func (c *conn) ping() {
	select {
	case c.wq <- encodeFrame(header{flags: flagPing}, nil):
	default:
	}
}

// probe queues a no-op frame (a response to request 0, which receivers
// ignore) if the write queue has room.
func (c *conn) probe() {
	select {
	case c.wq <- encodeFrame(header{flags: flagResponse}, nil):
	default:
	}
}

// demandLiveness sends a ping (waiting for room in the write queue up to
// ctx) and returns a channel closed when the next frame arrives on c, a
// pong or anything else: proof that the peer is alive. Only for a peer that
// answers pings.
func (c *conn) demandLiveness(ctx context.Context) <-chan struct{} {
	c.mu.Lock()
	if c.heard == nil {
		c.heard = make(chan struct{})
	}
	heard := c.heard
	c.mu.Unlock()
	c.listening.Store(true)
	_ = c.enqueue(ctx, encodeFrame(header{flags: flagPing}, nil))
	return heard
}

// heardFrame closes heard for a waiting takeover probe.
func (c *conn) heardFrame() {
	c.mu.Lock()
	if c.heard != nil {
		close(c.heard)
		c.heard = nil
	}
	c.listening.Store(false)
	c.mu.Unlock()
}

// request sends one request and waits for its response.
func (c *conn) request(ctx context.Context, kind Kind, body []byte) ([]byte, error) {
	var timeout uint64
	if dl, ok := ctx.Deadline(); ok {
		// The remaining time travels in the header so that the peer's
		// handler context ends with ours; contexts use real time.
		rem := time.Until(dl)
		if rem <= 0 {
			return nil, context.DeadlineExceeded
		}
		timeout = max(uint64(rem/time.Microsecond), 1)
	}
	if err := c.lockSend(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.closed || c.retired {
		c.mu.Unlock()
		c.unlockSend()
		return nil, errRetired
	}
	c.nextID++
	id := c.nextID
	ch := make(chan memResult, 1)
	c.pending[id] = ch
	c.mu.Unlock()
	err := c.enqueue(ctx, encodeFrame(header{flags: flagRequest, kind: kind, id: id, timeout: timeout}, body))
	c.unlockSend()
	if err != nil {
		c.forget(id)
		return nil, err
	}
	select {
	case r := <-ch:
		if r.err != nil {
			if err := expired(ctx); err != nil {
				return nil, err // the handler most likely failed because our deadline passed
			}
		}
		return r.body, r.err
	case <-ctx.Done():
		c.forget(id)
		return nil, ctx.Err()
	}
}

// send queues one one-way message.
func (c *conn) send(ctx context.Context, kind Kind, body []byte) error {
	if err := c.lockSend(ctx); err != nil {
		return err
	}
	defer c.unlockSend()
	c.mu.Lock()
	gone := c.closed || c.retired
	c.mu.Unlock()
	if gone {
		return errRetired
	}
	return c.enqueue(ctx, encodeFrame(header{flags: flagOneWay, kind: kind}, body))
}

func (c *conn) forget(id uint64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
	c.maybeFinish()
}

// retire stops new calls on c and tells the peer (go-away). c closes once
// both sides have sent go-away and nothing is in flight.
func (c *conn) retire() {
	if h := c.t.beforeRetire.Load(); h != nil {
		(*h)()
	}
	// Unslotted before the go-away goes out: a peer that answers it with
	// its own (and so lets a redial in) never finds c still in use here.
	c.t.unslot(c, false)
	if c.lockSend(context.Background()) != nil {
		return // closed
	}
	c.mu.Lock()
	already := c.retired
	c.retired = true
	c.mu.Unlock()
	if !already {
		_ = c.enqueue(context.Background(), encodeFrame(header{flags: flagGoAway}, nil))
	}
	c.unlockSend()
	if !already {
		c.t.log.Debug("connection retired", "peer", c.peer, "dialer", c.dialer)
	}
	c.maybeFinish()
}

// draining reports whether c is retired and its peer sent go-away: only
// then can a handler that ends let it finish. It spares a handler a second
// hold of c.mu per message, and relies on every place that sets retired or
// goaway calling maybeFinish afterwards (retire does, and the go-away frame
// calls retire). c.mu must be held.
func (c *conn) draining() bool { return c.retired && c.goaway }

// maybeFinish queues the close marker once c is drained.
func (c *conn) maybeFinish() {
	c.mu.Lock()
	if c.finishing || c.closed || !c.retired || !c.goaway || len(c.pending) > 0 || c.handlers > 0 || c.serving > 0 {
		c.mu.Unlock()
		return
	}
	c.finishing = true
	c.mu.Unlock()
	_ = c.enqueue(context.Background(), nil)
}

func (c *conn) writeLoop() {
	bw := bufio.NewWriterSize(c.nc, 64<<10)
	for {
		var f []byte
		select {
		case f = <-c.wq:
		case <-c.ctx.Done():
			return
		}
		for {
			if f == nil {
				_ = bw.Flush()
				c.close("drained after go-away")
				return
			}
			if _, err := bw.Write(f); err != nil {
				c.close("write: " + err.Error())
				return
			}
			c.t.stats.framesOut.Add(1)
			c.t.stats.bytesOut.Add(uint64(len(f)))
			select {
			case f = <-c.wq:
				continue
			default:
			}
			break
		}
		if err := bw.Flush(); err != nil { // the queue drained: flush the batch
			c.close("write: " + err.Error())
			return
		}
	}
}

// errIdle: nothing arrived for two IdleTimeouts, a ping included.
var errIdle = errors.New("transport: peer silent (no answer to a ping)")

// idleReader reads the connection under a read deadline of IdleTimeout,
// moved only when it passes (not per read, which would cost a timer update
// per frame): if bytes arrived since it was set, it is set again; if not,
// a ping goes out (every peer answers one) and, if the next IdleTimeout
// passes silent too, the read fails with errIdle. Only the reader
// goroutine uses it.
type idleReader struct {
	c      *conn
	idle   time.Duration
	active bool // bytes arrived since the deadline was set
	pinged bool // a ping is unanswered
}

func (r *idleReader) arm() {
	if !r.c.pings {
		return // a version-1 peer cannot answer a ping: no idle deadline, as in version 1
	}
	_ = r.c.nc.SetReadDeadline(time.Now().Add(r.idle)) // real time: a socket deadline
}

func (r *idleReader) Read(p []byte) (int, error) {
	for {
		n, err := r.c.nc.Read(p)
		timeout := err != nil && errors.Is(err, os.ErrDeadlineExceeded)
		if n > 0 {
			r.active = true
			if timeout {
				err = nil
			}
			return n, err
		}
		if !timeout {
			return n, err
		}
		switch {
		case r.active:
			r.active, r.pinged = false, false
		case !r.pinged:
			r.pinged = true
			r.c.ping()
		default:
			return 0, errIdle
		}
		r.arm()
	}
}

// frameChunk is the most a frame's buffer takes before its bytes arrive.
const frameChunk = 64 << 10

// readPayload reads an n-byte frame payload. A payload above frameChunk
// gets a buffer that doubles as its bytes arrive, so that a peer declaring
// a large frame and then stalling holds no more than about twice what it
// sent.
func readPayload(r io.Reader, n int) ([]byte, error) {
	if n <= frameChunk {
		buf := make([]byte, n)
		_, err := io.ReadFull(r, buf)
		return buf, err
	}
	buf := make([]byte, frameChunk)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	for have := len(buf); have < n; have = len(buf) {
		next := min(n, 2*have)
		grown := make([]byte, next)
		copy(grown, buf)
		buf = grown
		if _, err := io.ReadFull(r, buf[have:]); err != nil {
			return nil, err
		}
	}
	return buf, nil
}

func (c *conn) readLoop() {
	defer c.handlerWG.Wait()       // the handler goroutines it started (handle)
	defer c.close("reader exited") // first (a panic): the handlers' contexts end
	ir := &idleReader{c: c, idle: c.t.cfg.IdleTimeout}
	ir.arm()
	br := bufio.NewReaderSize(ir, 64<<10)
	maxLen := uint32(c.t.maxBody + maxHeaderLen)
	var lb [4]byte
	for {
		if _, err := io.ReadFull(br, lb[:]); err != nil {
			c.close(readReason(err))
			return
		}
		n := binary.BigEndian.Uint32(lb[:])
		if n > maxLen {
			c.t.log.Warn("closing connection: frame too large", "peer", c.peer, "bytes", n, "limit", maxLen)
			c.close(fmt.Sprintf("frame of %d bytes exceeds %d", n, maxLen))
			return
		}
		buf, err := readPayload(br, int(n))
		if err != nil {
			if errors.Is(err, errIdle) {
				c.t.log.Info("closing connection: peer silent within a frame", "peer", c.peer, "declared_bytes", n)
			}
			c.close(readReason(err))
			return
		}
		c.t.stats.framesIn.Add(1)
		c.t.stats.bytesIn.Add(uint64(4 + n))
		if c.listening.Load() {
			c.heardFrame()
		}
		h, body, err := decodeFrame(buf, c.t.maxBody)
		if err != nil {
			c.t.log.Warn("closing connection: bad frame", "peer", c.peer, "err", err)
			c.close(err.Error())
			return
		}
		c.handle(h, body)
	}
}

func readReason(err error) string {
	if errors.Is(err, io.EOF) {
		return "closed by peer"
	}
	if errors.Is(err, errIdle) {
		return "idle: " + err.Error()
	}
	return "read: " + err.Error()
}

// handle acts on one decoded frame; it runs on the reader goroutine.
func (c *conn) handle(h header, body []byte) {
	switch h.flags {
	case flagRequest, flagOneWay:
		m := inbound{h: h, body: body}
		if h.timeout > 0 {
			// The caller's remaining time, counted from receipt: a deadline
			// derived from the caller's ctx, so real time.
			m.deadline = time.Now().Add(time.Duration(min(h.timeout, uint64(1<<62)/1000)) * time.Microsecond) // real time
		}
		e := c.t.handlers.lookup(h.kind)
		if e.ordered {
			c.handleOrdered(m)
			return
		}
		size := len(body)
		c.mu.Lock()
		switch {
		case c.closed:
			c.mu.Unlock() // Close began: no new handler (the caller's request fails with the connection)
		case c.held > 0 && c.held+size > c.t.cfg.MaxQueuedBytes:
			held := c.held
			c.mu.Unlock()
			c.t.stats.shedBytes.Add(1)
			c.shed(h, "handler byte budget full: refusing requests with ErrBusy and dropping one-way messages",
				fmt.Sprintf("%d bytes held by handlers, limit %d", held, c.t.cfg.MaxQueuedBytes), "held_bytes", held, "bytes", size)
		case c.handlers < c.t.cfg.MaxInflight:
			c.handlers++
			c.held += size
			c.mu.Unlock()
			m.hd = e.h
			// The reader counts its handler goroutines itself and waits for
			// them before it returns (readLoop), so Close, which waits for the
			// reader, waits for them too: a message's goroutine takes neither
			// the transport's mutex nor its WaitGroup, which share a cache line
			// that every handler's end would write from another core.
			c.handlerWG.Add(1)
			go func() {
				defer c.handlerWG.Done()
				c.serveLoop(m)
			}()
		case len(c.backlog) < c.t.cfg.MaxQueued:
			c.backlog = append(c.backlog, m)
			c.held += size
			c.mu.Unlock()
		default:
			c.mu.Unlock()
			c.shed(h, "handler queue full: refusing requests with ErrBusy and dropping one-way messages",
				fmt.Sprintf("%d handlers running and %d messages queued", c.t.cfg.MaxInflight, c.t.cfg.MaxQueued))
		}
	case flagResponse, flagResponse | flagError:
		c.mu.Lock()
		ch := c.pending[h.id]
		delete(c.pending, h.id)
		c.mu.Unlock()
		if ch != nil { // nil: the caller gave up already
			if h.flags&flagError != 0 {
				ch <- memResult{nil, c.remoteErr(h.code, string(body))}
			} else {
				ch <- memResult{body, nil}
			}
		}
		c.maybeFinish()
	case flagGoAway:
		c.mu.Lock()
		c.goaway = true
		c.mu.Unlock()
		c.retire()
		// The peer unslots a connection before it sends its go-away, so it
		// no longer holds c as its connection to us: a dial it refused as
		// duplicate meanwhile (while our own go-away was on its way, or
		// because it retired c at the same time) can go again now.
		c.t.peerChanged(c.peer)
	case flagPing:
		select { // if the queue is full, frames are leaving anyway
		case c.wq <- encodeFrame(header{flags: flagPong}, nil):
		default:
		}
	}
}

// lane is the queue of one ordered kind on one connection (see
// OrderedHandler): its messages run one at a time, in arrival order, on a
// laneLoop goroutine that exists while the queue is not empty.
type lane struct {
	q       []inbound
	bytes   int  // body bytes of the queued and running messages
	running bool // a laneLoop serves it
}

// handleOrdered queues m on its kind's lane, or sheds it. A lane holds at
// most MaxQueued messages and half of MaxQueuedBytes (a message is always
// accepted by an empty lane), and its bytes count in the connection's
// MaxQueuedBytes as well: a blocked ordered handler leaves the other kinds
// at least half the byte budget. It runs on the reader goroutine.
func (c *conn) handleOrdered(m inbound) {
	size := len(m.body)
	c.mu.Lock()
	l := c.lanes[m.h.kind]
	if l == nil {
		if c.lanes == nil {
			c.lanes = make(map[Kind]*lane)
		}
		l = &lane{}
		c.lanes[m.h.kind] = l
	}
	busy := l.running || len(l.q) > 0
	switch {
	case busy && (l.bytes+size > c.t.cfg.MaxQueuedBytes/2 || c.held > 0 && c.held+size > c.t.cfg.MaxQueuedBytes):
		held := c.held
		c.mu.Unlock()
		c.t.stats.shedBytes.Add(1)
		c.shed(m.h, "ordered handler byte budget full: refusing requests with ErrBusy and dropping one-way messages",
			fmt.Sprintf("%d bytes held by handlers, limit %d", held, c.t.cfg.MaxQueuedBytes), "held_bytes", held, "bytes", size)
		return
	case len(l.q) >= c.t.cfg.MaxQueued:
		c.mu.Unlock()
		c.shed(m.h, "ordered handler queue full: refusing requests with ErrBusy and dropping one-way messages",
			fmt.Sprintf("%d messages queued for kind %d", len(l.q), m.h.kind))
		return
	}
	l.q = append(l.q, m)
	l.bytes += size
	c.held += size
	start := !l.running
	if start {
		l.running = true
		c.serving++
	}
	c.mu.Unlock()
	if start && !c.t.goFunc(func() { c.laneLoop(l) }) {
		c.mu.Lock()
		l.running = false
		c.serving--
		c.mu.Unlock()
	}
}

// laneLoop serves l's messages in order until its queue is empty or c
// closes (what is queued then is dropped with the connection).
func (c *conn) laneLoop(l *lane) {
	c.mu.Lock()
	for len(l.q) > 0 && !c.closed {
		m := l.q[0]
		l.q[0] = inbound{}
		l.q = l.q[1:]
		c.mu.Unlock()
		c.serve(m)
		c.mu.Lock()
		l.bytes -= len(m.body)
		c.held -= len(m.body)
	}
	if len(l.q) == 0 {
		l.q = nil // let the backing array go
	}
	l.running = false
	c.serving--
	c.mu.Unlock()
	c.maybeFinish()
}

// shed refuses (ErrBusy) or drops (one-way) a message the handler limits
// leave no room for, counted and logged with exponential spacing (1st,
// 2nd, 4th, ...) to bound the noise of an overload.
func (c *conn) shed(h header, logMsg, busyMsg string, attrs ...any) {
	if n := c.t.stats.shed.Add(1); n&(n-1) == 0 {
		c.t.log.Warn(logMsg, append([]any{"peer", c.peer, "kind", h.kind, "shed_total", n}, attrs...)...)
	}
	if h.flags == flagRequest {
		c.respondErr(h.id, codeBusy, busyMsg)
	}
}

func (c *conn) remoteErr(code uint64, msg string) error {
	switch code {
	case codeNoHandler:
		return fmt.Errorf("%w: %s: %s", ErrNoHandler, c.peer, msg)
	case codeTooLarge:
		return fmt.Errorf("%w: %s: %s", ErrTooLarge, c.peer, msg)
	case codeBusy:
		return fmt.Errorf("%w: %s: %s", ErrBusy, c.peer, msg)
	}
	return &RemoteError{Node: c.peer, Msg: msg}
}

func (c *conn) respondErr(id uint64, code uint64, msg string) {
	if len(msg) > c.t.maxBody {
		msg = msg[:c.t.maxBody]
	}
	_ = c.enqueue(c.ctx, encodeFrame(header{flags: flagResponse | flagError, id: id, code: code}, []byte(msg)))
}

// inbound is a request or one-way message waiting for a handler.
type inbound struct {
	h        header
	body     []byte
	deadline time.Time // zero: none
	// hd is the kind's handler as looked up on arrival, for a message
	// handed to a handler slot at once; nil otherwise (queued in the backlog
	// or a lane, or no handler then), and serve looks it up again, so a
	// handler removed meanwhile is not called.
	hd Handler
}

// serveLoop serves m, then queued messages until the backlog is empty. It
// holds one of the connection's MaxInflight handler slots.
func (c *conn) serveLoop(m inbound) {
	for {
		c.serve(m)
		c.mu.Lock()
		c.held -= len(m.body)
		if len(c.backlog) == 0 || c.closed {
			c.handlers--
			draining := c.draining()
			c.mu.Unlock()
			if draining {
				c.maybeFinish()
			}
			return
		}
		m = c.backlog[0]
		c.backlog[0] = inbound{}
		c.backlog = c.backlog[1:]
		c.mu.Unlock()
	}
}

// serve runs the handler for one request or one-way message.
func (c *conn) serve(m inbound) {
	h, body, hd := m.h, m.body, m.hd
	if hd == nil { // queued, or no handler on arrival: look again
		hd = c.t.handler(h.kind)
	}
	if h.flags == flagOneWay {
		if hd == nil {
			c.t.log.Debug("no handler for one-way message", "peer", c.peer, "kind", h.kind)
			return
		}
		_, _ = hd(c.ctx, c.peer, body) // one-way: results are discarded
		return
	}
	if hd == nil {
		c.respondErr(h.id, codeNoHandler, fmt.Sprintf("node %s has no handler for kind %d", c.t.cfg.NodeID, h.kind))
		return
	}
	ctx, cancel := c.ctx, context.CancelFunc(func() {})
	if !m.deadline.IsZero() {
		ctx, cancel = context.WithDeadline(c.ctx, m.deadline)
	}
	resp, err := hd(ctx, c.peer, body)
	cancel()
	switch {
	case err != nil:
		c.respondErr(h.id, codeRemote, err.Error())
	case len(resp) > c.t.maxBody:
		c.respondErr(h.id, codeTooLarge, fmt.Sprintf("response of %d bytes, limit %d", len(resp), c.t.maxBody))
	default:
		_ = c.enqueue(c.ctx, encodeFrame(header{flags: flagResponse, id: h.id}, resp))
	}
}
