package raftstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/lni/dragonboat/v4"
	pb "github.com/lni/dragonboat/v4/raftpb"
	"github.com/muster-io/muster/model"
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
// snapshot, with a new window as long as its stream took.
//
// Installing a large state can take longer than streaming it (Badger
// rewritten, the index and the listener rebuilt; Dragonboat drops the
// receiver's Replicate messages meanwhile), and a receiver that was still
// installing when that window closed found the log compacted past its
// snapshot, and got another stream, installed as slowly (SIGKILL rounds
// with 16-entry snapshots: restarts ready in 12–41 s, three streams each;
// TestSlowInstallCatchesUp). So where the receiver's messages are seen
// (over Config.Transport, see heard), the window then goes on keeping the
// log from what the receiver acknowledged, for as long as it is heard
// from (within receiverHold entries: a receiver that died does not hold
// the log), up to receiverHold + 16 windows of entries. retention is that
// bookkeeping: plain code, no goroutine, no clock.
type retention struct {
	overhead uint64
	// acks: the receivers' messages are reported (heard); without them a
	// window lasts its entries only.
	acks bool

	mu        sync.Mutex
	streaming bool                // a stream is in flight (Dragonboat streams one at a time)
	from      uint64              // its index
	compacted uint64              // the last compaction index handed out
	keep      []keepWindow        // after a stream
	peers     map[uint64]peerSeen // replica → what it last said
}

// A keepWindow keeps the log from `from` until applied reaches `until`;
// with the receivers heard, then from what replica `to` acknowledged
// while it is heard from (within receiverHold entries), until applied
// reaches `limit`.
type keepWindow struct{ from, until, limit, to uint64 }

// peerSeen is what retention knows of a replica: the highest index it
// acknowledged, and the applied index when it was last heard from.
type peerSeen struct{ acked, heardAt uint64 }

// maxKeepWindows bounds the windows remembered (streams are rare: one per
// lagging replica at a time).
const maxKeepWindows = 16

// receiverHold is how many applied entries without a message from a
// stream's receiver let its window close (a heartbeat answer comes every
// RTT); a window lasts at most receiverHold + receiverWindows times its
// entries.
const (
	receiverHold    = 1024
	receiverWindows = 16
)

// streamStarted records a stream of the state at index (PrepareSnapshot).
// inStream reports whether a stream is in flight.
func (r *retention) inStream() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.streaming
}

func (r *retention) streamStarted(index uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.streaming { // its end was not reported: keep its log as if it ended now
		r.endLocked(index, 0)
	}
	r.streaming, r.from = true, index
}

// streamSent records that the stream in flight to replica `to` was sent
// (or aborted, to 0) when applied was reached: its receiver has as many
// entries again to catch up from its index, twice over, before the log
// may go, and more while it is heard from and behind.
func (r *retention) streamSent(applied, to uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.streaming {
		r.endLocked(applied, to)
		r.streaming = false
	}
}

func (r *retention) endLocked(applied, to uint64) {
	written := applied - min(applied, r.from)
	if len(r.keep) == maxKeepWindows {
		r.keep = r.keep[1:]
	}
	window := 2*written + r.overhead
	r.keep = append(r.keep, keepWindow{from: r.from, until: applied + window, limit: applied + receiverHold + receiverWindows*window, to: to})
}

// heard records a message from replica when applied was reached, and the
// highest index it acknowledged in it (0 if none).
func (r *retention) heard(replica, acked, applied uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.peers == nil {
		r.peers = map[uint64]peerSeen{}
	}
	p := r.peers[replica]
	p.acked, p.heardAt = max(p.acked, acked), max(p.heardAt, applied)
	r.peers[replica] = p
}

// compactTo returns the index up to which a snapshot at applied may
// compact the log, whose entries up to floor are gone already; false if
// that would not let any more of it go. The index never goes back
// (Dragonboat panics when a compaction goes below one still pending), so
// it is recorded here as soon as it is handed out, whether or not the
// snapshot then succeeds.
func (r *retention) compactTo(applied, floor uint64) (uint64, bool) {
	// One critical section: a stream that starts between computing what to
	// keep and handing out the index would not be kept.
	r.mu.Lock()
	defer r.mu.Unlock()
	keep := r.keepBehindLocked(applied)
	r.compacted = max(r.compacted, floor)
	if applied <= keep || applied-keep <= r.compacted {
		return 0, false
	}
	r.compacted = applied - keep
	return r.compacted, true
}

// keepBehindLocked is how many entries a snapshot at applied must keep
// behind it. r.mu is held.
func (r *retention) keepBehindLocked(applied uint64) uint64 {
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
		p := r.peers[w.to]
		switch {
		case applied < w.until:
			from(w.from)
		case r.acks && w.to != 0 && applied < w.limit && applied < p.heardAt+receiverHold:
			// Its acknowledgements can run ahead of its install: they are
			// its log's, and its state machine may still be installing, its
			// new entries dropped meanwhile, needed again after.
			from(max(w.from, p.acked))
		default:
			continue
		}
		live = append(live, w)
	}
	r.keep = live
	return keep
}

// snapshotLoop takes a snapshot each time the state machine says
// SnapshotEntries entries were applied past the last snapshot, keeping
// the log that retention asks for; after a failed one it waits an attempt
// timeout before the next try. It runs until the node closes.
//
// The schedule counts from the last snapshot the replica holds (taken,
// received, or found in its log at a restart), not from its start: a
// replica restarted more often than every SnapshotEntries entries still
// takes snapshots, so a restart replays at most about SnapshotEntries
// entries of its log. (Counted from the start, such a replica never took
// one: its log was never compacted and each restart replayed all of it,
// longer every time: TestRestartsStillTakeSnapshots.)
func (n *Node) snapshotLoop() {
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-n.sm.snapDue:
		}
		if !n.takeSnapshot() && !n.wait(n.attemptTimeout()) {
			return
		}
	}
}

// wait waits d on the node's clock; false if the node closed meanwhile.
func (n *Node) wait(d time.Duration) bool {
	t := n.pace.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.Chan():
		return true
	case <-n.ctx.Done():
		return false
	}
}

// noCompaction, as a snapshot's CompactionOverhead, keeps the whole log.
const noCompaction = math.MaxUint64

// takeSnapshot takes a snapshot if one is due; false if it failed and
// should be tried again.
func (n *Node) takeSnapshot() bool {
	lr, err := n.nh.GetLogReader(n.cfg.ShardID)
	if err != nil {
		return n.ctx.Err() != nil
	}
	if last := lr.Snapshot().Index; last > n.sm.snapAt.Load() {
		n.sm.snapAt.Store(last) // received, or taken before a restart
	}
	applied := n.sm.applied.Load()
	if applied < n.sm.snapAt.Load()+n.cfg.SnapshotEntries {
		return true // not due
	}
	// Dragonboat compacts by itself too: to CompactionOverhead behind a
	// snapshot this replica recovered from. Never ask for less than what
	// its log already let go.
	var floor uint64
	if first, _ := lr.GetRange(); first > 0 {
		floor = first - 1
	}
	opt := dragonboat.SnapshotOption{OverrideCompactionOverhead: true}
	to, compact := n.sm.retention.compactTo(applied, floor)
	if compact {
		opt.CompactionIndex = to
	} else {
		// The log must stay as it is (a stream needs it); the snapshot
		// still bounds what a restart replays.
		opt.CompactionOverhead = noCompaction
	}
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.ProposeTimeout)
	defer cancel()
	_, err = n.nh.SyncRequestSnapshot(ctx, n.cfg.ShardID, opt)
	switch {
	case err == nil, errors.Is(err, dragonboat.ErrRejected):
		// taken, or one exists at this index already
		n.sm.snapAt.Store(max(n.sm.snapAt.Load(), applied))
		n.log.Debug("raftstore: snapshot", "applied", applied, "compact_to", to, "compact", compact)
		return true
	case n.ctx.Err() != nil:
		return true // closing
	case errors.Is(err, dragonboat.ErrSystemBusy):
		n.log.Debug("raftstore: snapshot busy; trying again", "applied", applied)
		return false
	default:
		// Slow (the save may still complete, which the next try sees in
		// the log reader), or failed. While a stream is in flight
		// Dragonboat saves nothing for the shard (one snapshot job at a
		// time), so a timeout then is expected, not a failure.
		if (errors.Is(err, dragonboat.ErrTimeout) || errors.Is(err, context.DeadlineExceeded)) && n.sm.retention.inStream() {
			n.log.Debug("raftstore: snapshot waits for a stream; trying again", "applied", applied)
			return false
		}
		n.log.Warn("raftstore: snapshot failed; trying again", "applied", applied, "err", err)
		return false
	}
}

// receives tracks the snapshot streams a replica receives over a Muster
// transport, to clean up after abandoned ones. Dragonboat keeps the
// directory of a stream that stopped half-way (its sender gave up, or
// started a newer one) for 15 minutes, and up to 128 of them: under a
// catch-up that keeps failing they pile up (the field report counted 330
// directories, 142 MB). Chunks of one stream arrive in order; when the
// first chunk of another stream arrives, or Dragonboat refuses a chunk,
// the stream in progress is abandoned: its directory is removed at once,
// and its later chunks are refused before Dragonboat sees them (it would
// panic writing into the removed directory). Deliveries are serialized.
type receives struct {
	dir    string       // Dragonboat's NodeHostDir
	check  bool         // check the state machine's records in each stream (streamCheck)
	limits model.Limits // the node's, for check

	mu        sync.Mutex   // held while a chunk is handed to Dragonboat
	cur       streamKey    // the stream in progress; zero if none
	curCheck  *streamCheck // its check, with check
	abandoned []streamKey
}

// streamKey names a received stream: its sender replica and index.
type streamKey struct{ from, index uint64 }

// maxAbandoned bounds the abandoned streams remembered.
const maxAbandoned = 64

// deliver hands chunk c to Dragonboat through onChunk, unless it belongs to
// an abandoned stream, or (with check) its records fail streamCheck, which
// abandons the stream; taken is false if it was not taken, err says why
// the check refused it.
func (r *receives) deliver(c *pb.Chunk, onChunk func(pb.Chunk) bool) (taken, abandoned bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := streamKey{c.From, c.Index}
	if c.ChunkId == 0 {
		r.abandoned = slices.DeleteFunc(r.abandoned, func(k streamKey) bool { return k == key }) // sent again from the start
		if r.cur != (streamKey{}) && r.cur != key {
			r.abandonLocked(r.cur)
		}
		r.cur = key
		r.curCheck = &streamCheck{scan: recordScanner{limits: r.limits}}
	} else if slices.Contains(r.abandoned, key) {
		return false, true, nil
	}
	if r.check {
		if r.cur != key || r.curCheck == nil {
			// Not the stream in progress (its first chunk was not seen):
			// Dragonboat refuses it too, but its records cannot be checked.
			return false, false, fmt.Errorf("chunk %d of a stream whose first chunk was not received", c.ChunkId)
		}
		if err := r.curCheck.chunk(c); err != nil {
			r.abandonLocked(key)
			r.cur, r.curCheck = streamKey{}, nil
			return false, false, err
		}
	}
	taken = onChunk(*c)
	if r.cur == key && (!taken || c.IsLastChunk()) {
		if !taken {
			r.abandonLocked(key)
		}
		r.cur, r.curCheck = streamKey{}, nil
	}
	return taken, false, nil
}

// abandonLocked removes the directory of stream k and refuses its chunks
// from now on.
func (r *receives) abandonLocked(k streamKey) {
	if len(r.abandoned) == maxAbandoned {
		r.abandoned = r.abandoned[1:]
	}
	r.abandoned = append(r.abandoned, k)
	name := fmt.Sprintf("snapshot-%016X-%d.receiving", k.index, k.from)
	_ = filepath.WalkDir(r.dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == name {
			_ = os.RemoveAll(p)
			return filepath.SkipDir
		}
		return nil
	})
}
