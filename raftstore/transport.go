package raftstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
	"github.com/muster-io/muster/transport"
)

// The message kinds of Raft traffic on a Muster transport (see
// transport.Kind for the ranges).
const (
	// KindRaftMessages carries a pb.MessageBatch, one way.
	KindRaftMessages transport.Kind = 96
	// KindRaftChunk carries one pb.Chunk of a snapshot, as a request: the
	// next chunk is sent once the peer has taken this one, so chunks arrive
	// in order and a refused one stops the stream.
	KindRaftChunk transport.Kind = 97
)

// Bounds on one send over the Muster transport. Dragonboat's connection
// calls carry no context; a send that cannot finish in time fails, and
// Dragonboat reports the peer unreachable to Raft and connects again later.
const (
	messageSendTimeout = 2 * time.Second
	chunkSendTimeout   = 10 * time.Second
)

var errChunkRefused = errors.New("raftstore: snapshot chunk refused")

// muxFactory makes Dragonboat send its Raft messages and snapshots over a
// Muster transport (Config.Transport) instead of its own TCP transport.
// Addresses are the transport's node IDs.
type muxFactory struct{ t transport.Transport }

func (f muxFactory) Create(_ config.NodeHostConfig, onMessages raftio.MessageHandler, onChunk raftio.ChunkHandler) raftio.ITransport {
	return &muxTransport{t: f.t, onMessages: onMessages, onChunk: onChunk}
}

// Validate accepts any node ID.
func (muxFactory) Validate(addr string) bool { return addr != "" }

// muxTransport is the raftio.ITransport of muxFactory. It installs the
// handlers of its two kinds on Start and removes them on Close; the
// transport itself belongs to the caller.
type muxTransport struct {
	t          transport.Transport
	onMessages raftio.MessageHandler
	onChunk    raftio.ChunkHandler
	closed     atomic.Bool
}

func (m *muxTransport) Name() string { return "muster" }

func (m *muxTransport) Start() error {
	m.t.Handle(KindRaftMessages, func(_ context.Context, _ string, body []byte) ([]byte, error) {
		if m.closed.Load() {
			return nil, ErrClosed
		}
		var b pb.MessageBatch
		if err := b.Unmarshal(body); err != nil {
			return nil, fmt.Errorf("raftstore: bad message batch: %w", err)
		}
		m.onMessages(b)
		return nil, nil
	})
	m.t.Handle(KindRaftChunk, func(_ context.Context, _ string, body []byte) ([]byte, error) {
		if m.closed.Load() {
			return nil, ErrClosed
		}
		var c pb.Chunk
		if err := c.Unmarshal(body); err != nil {
			return nil, fmt.Errorf("raftstore: bad snapshot chunk: %w", err)
		}
		if !m.onChunk(c) {
			return nil, errChunkRefused
		}
		return nil, nil
	})
	return nil
}

func (m *muxTransport) Close() error {
	m.closed.Store(true)
	m.t.Handle(KindRaftMessages, nil)
	m.t.Handle(KindRaftChunk, nil)
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

func (c *muxConn) SendMessageBatch(b pb.MessageBatch) error {
	body, err := b.Marshal()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), messageSendTimeout)
	defer cancel()
	return c.m.t.Send(ctx, c.to, KindRaftMessages, body)
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
