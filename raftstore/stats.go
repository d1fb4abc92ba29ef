package raftstore

import (
	"sync/atomic"
	"time"

	"github.com/lni/dragonboat/v4/raftio"

	"github.com/muster-io/muster/internal/metric"
)

// Histogram is a snapshot of a fixed-bucket latency histogram (see Stats.ProposeLatency):
// per-bucket counts, their total and their sum. The registry's histograms share the type.
type Histogram = metric.HistogramSnapshot

// Stats are the counters of a [Node] since it was created, and gauges of its state now,
// returned by [Node.Stats]. Counters (uint64) only grow.
type Stats struct {
	// Proposals counts the commands Propose accepted (valid, queued) that reached an outcome:
	// ProposalsFailed of them failed (ErrNoLeader after ProposeTimeout, ErrClosed, a
	// Dragonboat error) and ProposalsRejected were committed but refused by the state rules
	// (Result.Rejected, identical on every replica). The rest committed and applied.
	Proposals         uint64
	ProposalsFailed   uint64
	ProposalsRejected uint64
	// Entries counts the Raft entries proposed: commands are packed into entries (group
	// commit), so Proposals / Entries is the mean batch size. EntriesFailed of them failed.
	Entries       uint64
	EntriesFailed uint64
	// BatchWaitsFilled and BatchWaitsExpired count the entries whose batcher waited, after
	// answering the entry before, for its callers to come back (Config.BatchWait): filled
	// when the wait ended before the window closed (the commands it waited for came, or the
	// entry filled up), expired when the window closed first and the entry went with fewer
	// commands. A wait that Close ended proposes nothing and counts in neither.
	BatchWaitsFilled  uint64
	BatchWaitsExpired uint64
	// EntryRetries counts the attempts to commit an entry that failed with a temporary
	// error and were tried again (no leader yet, busy, dropped, timed out);
	// EntryAttemptsTimedOut of them had waited out the whole attempt (two election
	// timeouts) without an answer: a stall of the entry's callers.
	EntryRetries          uint64
	EntryAttemptsTimedOut uint64
	// EntriesForwarded counts the entries of this replica, a follower, that it sent to the
	// leader to go in the leader's rounds (over Config.Transport, see "Forwarding" in
	// doc.go); ForwardFallbacks of them the leader did not take (unreachable or no longer
	// the leader, no answer in time) and they were proposed here after all, their ID
	// unchanged. Both are also in Entries. EntriesForwardedIn counts the
	// followers' entries this replica, the leader, proposed; MergedEntries the Raft entries
	// it proposed that carried followers' entries with its own or with each other's (one
	// log write and one apply for all).
	EntriesForwarded   uint64
	ForwardFallbacks   uint64
	EntriesForwardedIn uint64
	MergedEntries      uint64
	// CommitWritesDeferred counts the updates of the Raft log that changed only the commit
	// index and were held back for the replica's next write (Config.SyncCommitIndex off),
	// about one per entry on each replica, the leader included: nearly each is a
	// synchronous write saved (a held state that a snapshot record or Close later writes
	// on its own saves none).
	CommitWritesDeferred uint64
	// LogWrites counts the synchronous writes of the Raft log (each one fsync of its WAL):
	// entries, hard states, snapshot records, and held states written before a snapshot
	// record or on Close. Proposals / LogWrites summed over the replicas is the commands
	// the cluster made durable per fsync. Counted by the commit-index wrapper: 0 when
	// LazyCommit is false.
	LogWrites uint64
	// LazyCommit reports whether the commit-index wrapper of the Raft log is on (see "The
	// commit index" in doc.go): false with Config.SyncCommitIndex, before Start, or when
	// this binary's Dragonboat is not the version the wrapper's go:linkname was checked
	// against (Start then logs a Warn saying so); CommitWritesDeferred then stays 0.
	LazyCommit bool
	// ProposeLatency is the time from a Propose call to its outcome (commit and local apply,
	// or failure), measured on Config.Clock (a fake clock in tests measures nothing).
	ProposeLatency Histogram

	// LeaderChanges counts the leader changes this replica observed: each time the leader
	// it knows changed, to another replica or to none (an election started).
	LeaderChanges uint64
	LeaderID      uint64 // the leader this replica knows now; 0 for none
	Term          uint64 // the term of that knowledge
	IsLeader      bool   // LeaderID is this replica

	// Applied is the last index applied to the local state machine; LastIndex is the last
	// index of the local log (appended, committed or not yet); ApplyLag is LastIndex −
	// Applied: entries this replica holds but has not applied. A follower that keeps a large
	// lag applies slower than the leader commits. All zero before Start.
	Applied   uint64
	LastIndex uint64
	ApplyLag  uint64

	SnapshotsCreated   uint64 // snapshots this replica took (the Node's and Dragonboat's own)
	SnapshotsSent      uint64 // snapshot streams sent to lagging replicas and completed
	SnapshotsAborted   uint64 // snapshot streams sent that were aborted
	SnapshotsReceived  uint64 // snapshot streams received from the leader
	SnapshotsRecovered uint64 // snapshots this replica restored its state from

	// Inbound is the Raft traffic received over Config.Transport (see InboundStats).
	Inbound InboundStats
}

// stats holds a Node's counters: atomics, updated from Propose's batchers and Dragonboat's
// event goroutines, which must never block.
type stats struct {
	proposals, proposalsFailed, proposalsRejected atomic.Uint64
	entries, entriesFailed                        atomic.Uint64
	batchWaitsFilled, batchWaitsExpired           atomic.Uint64
	entryRetries, entryTimeouts                   atomic.Uint64
	forwardTaken, forwardFallbacks, forwardedIn   atomic.Uint64
	merged                                        atomic.Uint64
	commitDeferred, logWrites                     atomic.Uint64
	lazyCommit                                    atomic.Bool
	latency                                       *metric.Histogram

	leaderChanges atomic.Uint64
	leader        atomic.Uint64
	term          atomic.Uint64
	shardID       uint64 // set before Start; LeaderUpdated of other shards is ignored

	snapCreated, snapSent, snapAborted, snapReceived, snapRecovered atomic.Uint64
}

func newStats(shardID uint64) *stats { return &stats{latency: metric.NewHistogram(), shardID: shardID} }

// proposalDone counts one command's outcome after took.
func (s *stats) proposalDone(took time.Duration, r proposalResult) {
	s.proposals.Add(1)
	switch {
	case r.err != nil:
		s.proposalsFailed.Add(1)
	case r.code != codeOK:
		s.proposalsRejected.Add(1)
	}
	if s.latency != nil {
		s.latency.Observe(took)
	}
}

// batchWaited counts an entry whose batcher waited for returning callers.
func (s *stats) batchWaited(expired bool) {
	if expired {
		s.batchWaitsExpired.Add(1)
	} else {
		s.batchWaitsFilled.Add(1)
	}
}

// attemptFailed counts an attempt of an entry that failed with a temporary error (timedOut:
// it waited out its bound) and is tried again.
func (s *stats) attemptFailed(timedOut bool) {
	s.entryRetries.Add(1)
	if timedOut {
		s.entryTimeouts.Add(1)
	}
}

func (s *stats) entryDone(err error) {
	s.entries.Add(1)
	if err != nil {
		s.entriesFailed.Add(1)
	}
}

// LeaderUpdated implements raftio.IRaftEventListener. Dragonboat calls it on its own
// goroutine; it does not block.
func (s *stats) LeaderUpdated(info raftio.LeaderInfo) {
	if info.ShardID != s.shardID {
		return
	}
	s.term.Store(info.Term)
	if s.leader.Swap(info.LeaderID) != info.LeaderID {
		s.leaderChanges.Add(1)
	}
}

// events wraps the node's system event listener to count snapshots.
func (s *stats) events(inner nodeEvents) raftio.ISystemEventListener {
	return statsEvents{nodeEvents: inner, s: s}
}

type statsEvents struct {
	nodeEvents
	s *stats
}

func (e statsEvents) SnapshotCreated(raftio.SnapshotInfo)  { e.s.snapCreated.Add(1) }
func (e statsEvents) SnapshotReceived(raftio.SnapshotInfo) { e.s.snapReceived.Add(1) }

func (e statsEvents) SnapshotRecovered(i raftio.SnapshotInfo) {
	e.s.snapRecovered.Add(1)
	e.nodeEvents.SnapshotRecovered(i)
}

func (e statsEvents) SendSnapshotCompleted(i raftio.SnapshotInfo) {
	e.s.snapSent.Add(1)
	e.nodeEvents.SendSnapshotCompleted(i)
}

func (e statsEvents) SendSnapshotAborted(i raftio.SnapshotInfo) {
	e.s.snapAborted.Add(1)
	e.nodeEvents.SendSnapshotAborted(i)
}

// Stats returns the node's counters and gauges. It is safe for concurrent use, also before
// Start and after Close (the index gauges are then zero).
func (n *Node) Stats() Stats {
	s := n.stats
	fellBack := s.forwardFallbacks.Load()
	taken := s.forwardTaken.Load() // read once: EntriesForwarded − ForwardFallbacks never goes down
	st := Stats{
		Proposals:             s.proposals.Load(),
		ProposalsFailed:       s.proposalsFailed.Load(),
		ProposalsRejected:     s.proposalsRejected.Load(),
		Entries:               s.entries.Load(),
		EntriesFailed:         s.entriesFailed.Load(),
		BatchWaitsFilled:      s.batchWaitsFilled.Load(),
		BatchWaitsExpired:     s.batchWaitsExpired.Load(),
		EntryRetries:          s.entryRetries.Load(),
		EntryAttemptsTimedOut: s.entryTimeouts.Load(),
		EntriesForwarded:      taken + fellBack,
		ForwardFallbacks:      fellBack,
		EntriesForwardedIn:    s.forwardedIn.Load(),
		MergedEntries:         s.merged.Load(),
		CommitWritesDeferred:  s.commitDeferred.Load(),
		LogWrites:             s.logWrites.Load(),
		LazyCommit:            s.lazyCommit.Load(),
		LeaderChanges:         s.leaderChanges.Load(),
		LeaderID:              s.leader.Load(),
		Term:                  s.term.Load(),
		SnapshotsCreated:      s.snapCreated.Load(),
		SnapshotsSent:         s.snapSent.Load(),
		SnapshotsAborted:      s.snapAborted.Load(),
		SnapshotsReceived:     s.snapReceived.Load(),
		SnapshotsRecovered:    s.snapRecovered.Load(),
		Inbound:               n.InboundStats(),
	}
	if s.latency != nil {
		st.ProposeLatency = s.latency.Snapshot()
	}
	st.IsLeader = st.LeaderID != 0 && st.LeaderID == n.cfg.ReplicaID
	if n.running() != nil {
		return st
	}
	st.Applied = n.sm.applied.Load()
	if lr, err := n.nh.GetLogReader(n.cfg.ShardID); err == nil {
		_, last := lr.GetRange()
		st.LastIndex = last
		if last > st.Applied {
			st.ApplyLag = last - st.Applied
		}
	}
	return st
}
