package raftstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/transport"
)

// The message kinds of Raft traffic on a Muster transport (see
// transport.Kind for the ranges).
const (
	// KindRaftMessages carries a pb.MessageBatch: one way, or as a request
	// when a batch too large for one message is sent in pieces. It is an
	// ordered kind where the transport offers one (transport.OrderedHandler):
	// batches from a peer reach Dragonboat in the order they were sent, as
	// over Dragonboat's own TCP transport. Delivered concurrently, Replicate
	// messages overtook each other under load; the follower rejected the
	// later ones (a gap in its log) and each rejection sent the leader back
	// to probing.
	KindRaftMessages transport.Kind = 96
	// KindRaftChunk carries one pb.Chunk of a snapshot, as a request: the
	// next chunk is sent once the peer has taken this one, so chunks arrive
	// in order and a refused one stops the stream. (It is not an ordered
	// kind: the sender orders a stream already, and streams of different
	// shards to one peer need not wait for each other's disk writes.)
	KindRaftChunk transport.Kind = 97
)

// Bounds on one send over the Muster transport. Dragonboat's connection
// calls carry no context; a send that cannot finish in time fails, and
// Dragonboat reports the peer unreachable to Raft and connects again later.
// (Deadlines are real time, as Dragonboat's are.)
const (
	messageSendTimeout = 2 * time.Second
	chunkSendTimeout   = 10 * time.Second
)

// minTransportMessage is the smallest message size limit a transport may
// have to carry Raft: a snapshot chunk (2 MiB of data, Dragonboat's fixed
// chunk size) with its metadata.
const minTransportMessage = 2<<20 + 64<<10

var (
	errChunkRefused  = errors.New("raftstore: snapshot chunk refused")
	errEntryTooLarge = errors.New("raftstore: a Raft entry is larger than the transport's message limit")
)

// messageLimit returns the largest body t accepts.
func messageLimit(t transport.Transport) int {
	if l, ok := t.(transport.SizeLimiter); ok {
		return l.MaxMessageSize()
	}
	return transport.DefaultMaxMessageSize
}

// muxFactory makes Dragonboat send its Raft messages and snapshots over a
// Muster transport (Config.Transport) instead of its own TCP transport.
// Addresses are the transport's node IDs.
// Inbound traffic passes the guard's checks first.
type muxFactory struct {
	t      transport.Transport
	guard  *guard
	limits model.Limits // for the records of received snapshots
	// propose handles KindRaftPropose: a follower's entry (forward.go).
	propose transport.Handler
}

func (f muxFactory) Create(nhc config.NodeHostConfig, onMessages raftio.MessageHandler, onChunk raftio.ChunkHandler) raftio.ITransport {
	return &muxTransport{t: f.t, guard: f.guard, limit: messageLimit(f.t), onMessages: onMessages, onChunk: onChunk, onPropose: f.propose,
		receives: receives{dir: nhc.NodeHostDir, check: true, limits: f.limits}}
}

// Validate accepts any node ID.
func (muxFactory) Validate(addr string) bool { return addr != "" }

// muxTransport is the raftio.ITransport of muxFactory. It installs the
// handlers of its two kinds on Start and removes them on Close, which waits
// for the calls into Dragonboat already under way: Dragonboat tears the
// NodeHost down right after. The transport itself belongs to the caller.
type muxTransport struct {
	t          transport.Transport
	guard      *guard
	limit      int
	onMessages raftio.MessageHandler
	onChunk    raftio.ChunkHandler
	onPropose  transport.Handler // nil: KindRaftPropose is not handled
	receives   receives          // the snapshot streams being received

	mu       sync.Mutex // guards closed and the Add of inflight
	closed   bool
	inflight sync.WaitGroup // handler calls into Dragonboat
}

func (m *muxTransport) Name() string { return "muster" }

// enter registers a handler call; false once closed.
func (m *muxTransport) enter() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.inflight.Add(1)
	return true
}

func (m *muxTransport) Start() error {
	if o, ok := m.t.(transport.OrderedHandler); ok {
		o.HandleOrdered(KindRaftMessages, m.handler(m.deliverBatch))
	} else {
		m.t.Handle(KindRaftMessages, m.handler(m.deliverBatch)) // a wrapper: no order (Raft copes, more slowly under load)
	}
	m.t.Handle(KindRaftChunk, m.handler(m.deliverChunk))
	if m.onPropose != nil {
		m.t.Handle(KindRaftPropose, func(ctx context.Context, from string, body []byte) ([]byte, error) {
			if !m.enter() {
				return nil, ErrClosed
			}
			defer m.inflight.Done()
			return m.onPropose(ctx, from, body)
		})
	}
	return nil
}

// deliverBatch hands a batch from peer to Dragonboat if it passes the
// guard's checks. Its wire format is walked first (walkBatch): Dragonboat's
// decoder would allocate without bound.
func (m *muxTransport) deliverBatch(peer string, body []byte) error {
	if _, err := walkBatch(body); err != nil {
		if errors.Is(err, errBatchTooLarge) {
			return m.guard.drop(dropOversized, "message batch: %v", err)
		}
		return m.guard.drop(dropMalformed, "message batch: %v", err)
	}
	var b pb.MessageBatch
	if err := unmarshal(&b, body); err != nil {
		return m.guard.drop(dropMalformed, "message batch: %v", err)
	}
	if err := m.guard.checkBatch(&b, peer); err != nil {
		return err
	}
	m.guard.noteSenders(&b)
	m.guard.batches.Add(1)
	m.onMessages(b)
	return nil
}

// deliverChunk hands a snapshot chunk from peer to Dragonboat if it passes
// the guard's checks.
func (m *muxTransport) deliverChunk(peer string, body []byte) error {
	if err := walkChunk(body); err != nil {
		if errors.Is(err, errBatchTooLarge) {
			return m.guard.drop(dropOversized, "snapshot chunk: %v", err)
		}
		return m.guard.drop(dropMalformed, "snapshot chunk: %v", err)
	}
	var c pb.Chunk
	if err := unmarshal(&c, body); err != nil {
		return m.guard.drop(dropMalformed, "snapshot chunk: %v", err)
	}
	if err := m.guard.checkChunk(&c, peer); err != nil {
		return err
	}
	taken, abandoned, err := m.receives.deliver(&c, m.onChunk)
	switch {
	case err != nil:
		return m.guard.drop(dropChunk, "snapshot stream (index %d from %d): %v", c.Index, c.From, err)
	case abandoned:
		return m.guard.drop(dropChunk, "chunk %d of an abandoned stream (index %d from %d)", c.ChunkId, c.Index, c.From)
	case !taken:
		return errChunkRefused
	}
	m.guard.chunks.Add(1)
	return nil
}

// unmarshal decodes a peer's bytes with Dragonboat's decoder, which is
// not written for hostile input: a panic in it is an error here (it runs on
// the transport's goroutine, not Dragonboat's).
func unmarshal(v interface{ Unmarshal([]byte) error }, body []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("decoder panic: %v", r)
		}
	}()
	return v.Unmarshal(body)
}

// handler wraps deliver, which hands a body to Dragonboat, so that Close
// can refuse new calls and wait for those under way.
func (m *muxTransport) handler(deliver func(peer string, body []byte) error) transport.Handler {
	return func(_ context.Context, from string, body []byte) ([]byte, error) {
		if !m.enter() {
			return nil, ErrClosed
		}
		defer m.inflight.Done()
		return nil, deliver(from, body)
	}
}

// Close removes the handlers and waits for those running. A transport
// shared by a later Node must get that Node's handlers after this Close.
func (m *muxTransport) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.t.Handle(KindRaftMessages, nil)
	m.t.Handle(KindRaftChunk, nil)
	if m.onPropose != nil {
		m.t.Handle(KindRaftPropose, nil)
	}
	m.inflight.Wait()
	return nil
}

func (m *muxTransport) GetConnection(_ context.Context, target string) (raftio.IConnection, error) {
	return &muxConn{m: m, to: target}, nil
}

func (m *muxTransport) GetSnapshotConnection(_ context.Context, target string) (raftio.ISnapshotConnection, error) {
	return &muxConn{m: m, to: target}, nil
}

// muxConn sends to one peer. Dragonboat uses a connection from one
// goroutine at a time.
type muxConn struct {
	m  *muxTransport
	to string
}

func (c *muxConn) Close() {}

// SendMessageBatch sends b one way. A batch over the transport's limit (a
// lagging follower's catch-up can reach 64 MiB) goes in pieces that fit,
// each a request answered once the peer has handled it, so that the pieces
// arrive in order.
func (c *muxConn) SendMessageBatch(b pb.MessageBatch) error {
	ctx, cancel := context.WithTimeout(context.Background(), messageSendTimeout)
	defer cancel()
	if b.Size() <= c.m.limit {
		body, err := b.Marshal()
		if err != nil {
			return err
		}
		return c.m.t.Send(ctx, c.to, KindRaftMessages, body)
	}
	pieces, err := splitBatch(b, c.m.limit)
	if err != nil {
		return err
	}
	for _, p := range pieces {
		body, err := p.Marshal()
		if err != nil {
			return err
		}
		if _, err := c.m.t.Request(ctx, c.to, KindRaftMessages, body); err != nil {
			return err
		}
	}
	return nil
}

func (c *muxConn) SendChunk(chunk pb.Chunk) error {
	body, err := chunk.Marshal()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), chunkSendTimeout)
	defer cancel()
	_, err = c.m.t.Request(ctx, c.to, KindRaftChunk, body)
	return err
}

// pieceOverhead bounds what a message adds to a batch's encoding besides
// its own bytes (field tag and length).
const pieceOverhead = 16

// splitBatch splits b into batches that encode to at most limit bytes,
// keeping the order of its messages. A Replicate message too large on its
// own is split by entries into several, each naming the entry before its
// first as LogIndex and LogTerm, as Raft allows. It fails only if a single
// entry does not fit.
func splitBatch(b pb.MessageBatch, limit int) ([]pb.MessageBatch, error) {
	header := b
	header.Requests = nil
	base := header.Size()
	var out []pb.MessageBatch
	cur, size := header, base
	for _, m := range b.Requests {
		pieces, err := splitMessage(m, limit-base-pieceOverhead)
		if err != nil {
			return nil, err
		}
		for _, p := range pieces {
			ps := p.Size() + pieceOverhead
			if len(cur.Requests) > 0 && size+ps > limit {
				out = append(out, cur)
				cur, size = header, base
			}
			cur.Requests = append(cur.Requests, p)
			size += ps
		}
	}
	if len(cur.Requests) > 0 {
		out = append(out, cur)
	}
	return out, nil
}

// splitMessage splits a Replicate message into messages of at most limit
// bytes; any other message is returned as it is if it fits.
func splitMessage(m pb.Message, limit int) ([]pb.Message, error) {
	if m.Size() <= limit {
		return []pb.Message{m}, nil
	}
	if m.Type != pb.Replicate {
		return nil, fmt.Errorf("%w: a %s message of %d bytes, limit %d", errEntryTooLarge, m.Type, m.Size(), limit)
	}
	empty := m
	empty.Entries = nil
	base := empty.Size()
	var out []pb.Message
	piece, size := empty, base
	for _, e := range m.Entries {
		es := e.Size() + pieceOverhead
		if base+es > limit {
			return nil, fmt.Errorf("%w: entry %d has %d bytes, limit %d", errEntryTooLarge, e.Index, e.Size(), limit)
		}
		if len(piece.Entries) > 0 && size+es > limit {
			out = append(out, piece)
			last := piece.Entries[len(piece.Entries)-1]
			piece, size = empty, base
			piece.LogIndex, piece.LogTerm = last.Index, last.Term
		}
		piece.Entries = append(piece.Entries, e)
		size += es
	}
	return append(out, piece), nil
}
