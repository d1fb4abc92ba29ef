package raftstore

import (
	"context"
	"errors"
	"sync"

	"github.com/lni/dragonboat/v4"
)

// Log retention around streamed snapshots.
//
// A replica that is too far behind gets the state streamed at the
// leader's applied index S, then needs the log from S+1. Dragonboat's own
// automatic snapshots compact the log every SnapshotEntries entries to
// CompactionOverhead entries behind the snapshot, whatever is streaming:
// when streaming takes longer than those entries take to write (small
// settings, a large state, steady writes), every snapshot is stale once
// installed, the leader sends another, and the replica never catches up.
//
// So the Node takes the snapshots itself (Dragonboat's are off), every
// SnapshotEntries applied entries, and asks each to keep enough log: the
// configured overhead, and besides, from every stream in flight, and for a
// while after a stream ended, from its index. "A while" is counted in
// entries: as many again as were written during the stream (plus the
// overhead), enough for the receiver to replicate what it missed while
// the stream was running. A receiver slower than that gets a new
// snapshot, with a new window as long as its stream took. retention is
// that bookkeeping: plain code, no goroutine, no clock.
type retention struct {
	overhead uint64

	mu        sync.Mutex
	streaming bool         // a stream is in flight (Dragonboat streams one at a time)
	from      uint64       // its index
	keep      []keepWindow // after a stream: keep the log from `from` until applied reaches `until`
}

type keepWindow struct{ from, until uint64 }

// maxKeepWindows bounds the windows remembered (streams are rare: one per
// lagging replica at a time).
const maxKeepWindows = 16

// streamStarted records a stream of the state at index (PrepareSnapshot).
func (r *retention) streamStarted(index uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.streaming { // its end was not reported: keep its log as if it ended now
		r.endLocked(index)
	}
	r.streaming, r.from = true, index
}

// streamSent records that the stream in flight was sent (or aborted) when
// applied was reached: its receiver has as many entries again to catch up
// from its index, twice over, before the log may go.
func (r *retention) streamSent(applied uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.streaming {
		r.endLocked(applied)
		r.streaming = false
	}
}

func (r *retention) endLocked(applied uint64) {
	written := applied - min(applied, r.from)
	if len(r.keep) == maxKeepWindows {
		r.keep = r.keep[1:]
	}
	r.keep = append(r.keep, keepWindow{from: r.from, until: applied + 2*written + r.overhead})
}

// compactionOverhead is how many entries a snapshot at applied must keep
// behind it.
func (r *retention) compactionOverhead(applied uint64) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	keep := r.overhead
	from := func(index uint64) {
		if index < applied {
			keep = max(keep, applied-index+r.overhead)
		}
	}
	if r.streaming {
		from(r.from)
	}
	live := r.keep[:0]
	for _, w := range r.keep {
		if applied < w.until {
			from(w.from)
			live = append(live, w)
		}
	}
	r.keep = live
	return keep
}

// snapshotLoop takes a snapshot each time the state machine says another
// SnapshotEntries entries were applied, keeping the log that retention
// asks for. It runs until the node closes.
func (n *Node) snapshotLoop() {
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-n.sm.snapDue:
		}
		n.takeSnapshot()
	}
}

func (n *Node) takeSnapshot() {
	applied := n.sm.applied.Load()
	overhead := n.sm.retention.compactionOverhead(applied)
	// An overhead of 0 is only ever the configured one (CompactionOverhead
	// 0): then the replica's own setting says the same.
	opt := dragonboat.SnapshotOption{OverrideCompactionOverhead: overhead > 0, CompactionOverhead: overhead}
	ctx, cancel := context.WithTimeout(n.ctx, n.attemptTimeout())
	defer cancel()
	_, err := n.nh.SyncRequestSnapshot(ctx, n.cfg.ShardID, opt)
	switch {
	case err == nil:
		n.log.Debug("raftstore: snapshot", "applied", applied, "keep", overhead)
	case errors.Is(err, dragonboat.ErrRejected), n.ctx.Err() != nil:
		// one exists at this index already, or closing
	default:
		n.log.Warn("raftstore: snapshot failed; the next one is due after another SnapshotEntries entries", "applied", applied, "err", err)
	}
}
