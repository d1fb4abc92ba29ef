package raftstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/lni/dragonboat/v4"
)

type proposal struct {
	enc  []byte              // the normalized command's encoding
	done chan proposalResult // buffered: the worker never blocks on it
	// at is when Propose was called (Config.Clock), for Stats.ProposeLatency.
	at time.Time
	// gone is set when Propose has returned without the outcome (ctx, its
	// bounded wait, Close): the batcher leaves it out if it has not taken it yet.
	gone atomic.Bool
}

// proposalResult is a proposal's outcome: the batcher sets res.Index and
// code, the command's result code, which Propose (holding the command)
// turns into res.Rejected.
type proposalResult struct {
	res  Result
	code byte
	err  error
}

// Propose validates cmd, commits it through Raft and returns its outcome
// once the local replica has applied it. Result.Rejected is set when the
// state rules refused the command (identically on every replica); the error
// is for everything else: *model.ValidationError, ErrNoLeader when
// ProposeTimeout passed since the call without a leader or quorum (or, on a
// follower, with the command committed but not yet applied there),
// ErrClosed, or ctx's error.
//
// Concurrent calls are packed into one Raft entry (group commit). Temporary
// Dragonboat errors are retried within ProposeTimeout. Every entry carries a
// unique ID and the state machine applies an ID once, so a retry after an
// attempt that timed out but did commit returns the first outcome instead
// of applying the batch again. When ctx ends first, or with ErrNoLeader or
// ErrClosed, the command may still be applied later (or never: a command still queued
// when its call returns is left out).
func (n *Node) Propose(ctx context.Context, cmd Command) (Result, error) {
	if err := n.running(); err != nil {
		return Result{}, err
	}
	cmd.Normalize()
	if err := cmd.ValidateFields(n.cfg.Limits); err != nil {
		return Result{}, err
	}
	enc, err := cmd.Marshal()
	if err != nil {
		return Result{}, err
	}
	if err := checkSize(len(enc)); err != nil {
		return Result{}, err
	}
	p := &proposal{at: n.clock.Now(), enc: enc, done: make(chan proposalResult, 1)}
	// The bounded wait runs from this call, not from when the batcher takes
	// p: the entry ahead of it may be in its own bounded wait. Dragonboat is
	// a real-time engine: the bound is real time.
	wctx, cancel := context.WithTimeout(ctx, n.cfg.ProposeTimeout)
	defer cancel()
	select {
	case n.queue <- p:
	case <-wctx.Done():
		return Result{}, n.boundedErr(ctx, nil)
	case <-n.done:
		return Result{}, ErrClosed
	}
	select {
	case r := <-p.done:
		if r.err == nil {
			r.res.Rejected = rejection(r.code, &cmd)
		}
		return r.res, r.err
	case <-wctx.Done():
		p.gone.Store(true)
		return Result{}, n.boundedErr(ctx, nil)
	case <-n.done:
		p.gone.Store(true)
		return Result{}, ErrClosed
	}
}

// batchLoop takes a waiting proposal, adds every other one already queued
// (up to MaxBatch and maxEntryBytes), and proposes them as one entry. One
// entry per node is in flight at a time: while it commits, new commands
// queue up and go out together as the next one (group commit). More in
// flight made each entry slower than it saved: Dragonboat's cost is per
// entry, and the entries of all nodes share the leader's rounds (see
// docs/raft-records.md, Batching).
//
// Once an entry's callers have their results, many of them come straight
// back with their next command, but waking them takes a while on a busy
// machine. Proposing at once would send the few that made it, and the rest
// would wait out that whole entry, so the callers would split into cohorts
// that alternate. For Config.BatchWait after answering an entry, the loop
// therefore waits for as many commands as that entry answered plus those
// queued when it did, and proposes as soon as they are in (or the entry is
// full). A command that arrives after the window closed goes out at once.
func (n *Node) batchLoop() {
	var (
		carry     *proposal
		batch     = make([]*proposal, 0, n.cfg.MaxBatch)
		fwds      []*forward // entries of followers that go with this one (forward.go)
		encs      = make([][]byte, 0, n.cfg.MaxBatch)
		size      int
		expect    int                          // commands to wait for while the window is open
		expectFwd int                          // and followers' entries
		fwders    forwarders                   // the followers that forwarded lately (forward.go)
		open      bool                         // the window after the last entry's answers is open
		window    = n.pace.NewTimer(time.Hour) // Dragonboat's pace, not Config.Clock
	)
	window.Stop()
	defer window.Stop()
	// add puts p in the batch and reports whether the batch is full.
	add := func(p *proposal) bool {
		if n.abandoned(p) {
			return false
		}
		if len(batch) > 0 && size+len(p.enc) > maxEntryBytes {
			carry = p
			return true
		}
		size += len(p.enc)
		batch = append(batch, p)
		return len(batch) >= n.cfg.MaxBatch
	}
	// takeFwd adds a follower's entry to the round (forward.go).
	takeFwd := func(f *forward) {
		if !f.gone.Load() {
			fwds = append(fwds, f)
		}
	}
	for {
		batch, size = batch[:0], 0
		clear(fwds)
		fwds = fwds[:0]
		if p := carry; p != nil { // it waited out the entry before it
			carry = nil
			add(p)
		}
		for len(batch) == 0 && len(fwds) == 0 {
			select {
			case p := <-n.queue:
				add(p)
			case f := <-n.fwd:
				takeFwd(f)
			case <-window.Chan():
				open = false
			case <-n.ctx.Done():
				n.failClosed(nil, carry)
				return
			}
		}
		waited, expired := false, false
	fill:
		for carry == nil && len(batch) < n.cfg.MaxBatch {
			select {
			case p := <-n.queue:
				add(p)
				continue
			case f := <-n.fwd:
				takeFwd(f)
				continue
			default:
			}
			if !open || len(batch) >= expect && len(fwds) >= expectFwd {
				break
			}
			select {
			case <-window.Chan(): // it closed before this wait began: none
				open = false
				break fill
			default:
			}
			waited = true
			select {
			case p := <-n.queue:
				add(p)
			case f := <-n.fwd:
				takeFwd(f)
			case <-window.Chan():
				open, expired = false, true
				break fill
			case <-n.ctx.Done():
				break fill
			}
		}
		if n.ctx.Err() != nil { // closed: propose nothing more
			n.failClosed(batch, carry)
			n.failForwarded(fwds)
			return
		}
		if waited {
			n.stats.batchWaited(expired)
		}
		encs = encs[:0]
		for _, p := range batch {
			encs = append(encs, p.enc)
		}
		// This node's entry and the followers' that fit with it go as one
		// merged entry (forward.go); the others each as its own, proposed
		// first without waiting, so that Dragonboat takes them in one step.
		var own []byte
		if len(batch) > 0 {
			own = encodeEntry(n.nextEntryID(), encs)
		}
		expectFwd = fwders.note(fwds)
		merged, rest := n.mergeForwarded(own, len(batch), fwds, len(fwds) > 0 && n.guard != nil && fwders.allMerge(n.guard.members(), n.cfg.ReplicaID))
		states := n.proposeForwarded(rest)
		var (
			index uint64
			codes []byte
			err   error
		)
		switch {
		case len(merged.fwds) > 0:
			index, codes, err = n.proposeBounded(merged.entry)
			codes, err = merged.answer(index, codes, err, own != nil)
		case own != nil:
			index, codes, err = n.commitEntry(own)
		}
		if len(batch) > 0 {
			n.stats.entryDone(err)
		}
		// The window opens as the answers go out: a caller back before
		// the loop is done answering is in the queue and in this batch, so
		// count the queue first.
		expect = min(len(batch)+len(n.queue), n.cfg.MaxBatch)
		if n.cfg.BatchWait > 0 {
			window.Reset(n.cfg.BatchWait)
			open = true
		}
		for i, p := range batch {
			var r proposalResult
			switch {
			case err != nil:
				r.err = err
			case i < len(codes):
				r.res, r.code = Result{Index: index}, codes[i]
			default:
				r.err = fmt.Errorf("%w: result of index %d has %d codes for %d commands", ErrCorrupt, index, len(codes), len(batch))
			}
			n.stats.proposalDone(n.clock.Since(p.at), r)
			p.done <- r
		}
		clear(batch)
		n.answerForwarded(rest, states)
	}
}

// failClosed answers batch, carry and whatever is still queued with
// ErrClosed, once Close has cancelled the loop: their callers have returned
// ErrClosed already (Close closes n.done first).
func (n *Node) failClosed(batch []*proposal, carry *proposal) {
	fail := func(p *proposal) {
		n.stats.proposalDone(n.clock.Since(p.at), proposalResult{err: ErrClosed})
		p.done <- proposalResult{err: ErrClosed}
	}
	for _, p := range batch {
		fail(p)
	}
	if carry != nil {
		fail(carry)
	}
	for {
		select {
		case p := <-n.queue:
			fail(p)
		default:
			return
		}
	}
}

// abandoned reports whether p's caller has returned without its outcome
// (counted as a failed proposal): p is left out of the entries.
func (n *Node) abandoned(p *proposal) bool {
	if !p.gone.Load() {
		return false
	}
	n.stats.proposalDone(n.clock.Since(p.at), proposalResult{err: ErrNoLeader})
	return true
}

// nextEntryID returns a new entry ID: the node's random nonce and the next
// sequence number.
func (n *Node) nextEntryID() entryID {
	var id entryID
	copy(id[:8], n.nonce[:])
	binary.BigEndian.PutUint64(id[8:], n.seq.Add(1))
	return id
}

// proposeBounded is proposeEntry within ProposeTimeout.
func (n *Node) proposeBounded(entry []byte) (uint64, []byte, error) {
	// Dragonboat is a real-time engine: the bounded wait uses real time.
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.ProposeTimeout)
	defer cancel()
	return n.proposeEntry(ctx, entry)
}

// proposeEntry commits one entry, retrying temporary errors until ctx
// (within n.ctx) ends, and returns its index and per-command result codes.
func (n *Node) proposeEntry(ctx context.Context, entry []byte) (uint64, []byte, error) {
	session := n.nh.GetNoOPSession(n.cfg.ShardID)
	var last error
	for {
		if n.ctx.Err() != nil {
			return 0, nil, ErrClosed
		}
		actx, acancel := context.WithTimeout(ctx, n.attemptTimeout())
		res, err := n.nh.SyncPropose(actx, session, entry)
		acancel()
		if err == nil {
			return res.Value, res.Data, nil
		}
		if n.ctx.Err() != nil {
			// Closed while it was in flight: it may still commit.
			return 0, nil, ErrClosed
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			err = dragonboat.ErrTimeout
		}
		if !retryable(err) {
			return 0, nil, fmt.Errorf("raftstore: propose: %w", err)
		}
		last = err
		if !n.backoff(ctx) {
			return 0, nil, n.boundedErr(n.ctx, last)
		}
		n.stats.attemptFailed(errors.Is(err, dragonboat.ErrTimeout))
	}
}
