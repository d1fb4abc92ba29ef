package distro

import (
	"sync/atomic"
	"time"
)

// Stats are the counters of a [Replicator] since it was created, and a few gauges of its
// state now, returned by [Replicator.Stats]. Counters (uint64) only grow. Records count
// individual records; "messages" count transport requests.
type Stats struct {
	// Ready reports whether the startup load finished (see Replicator.Ready).
	Ready bool
	// LoadDuration is how long the startup load took, on Config.Clock (0 before ready).
	LoadDuration time.Duration
	// LoadPeers is the number of peers whose snapshots the load merged; ColdStart is set when
	// the node became ready as a member of a cold cluster (every peer loading too).
	LoadPeers int
	ColdStart bool

	Members      int // live members, self included
	Records      int // records held: live ones and tombstones, of every owner
	LiveRecords  int // of Records, the live ones
	OwnedRecords int // of Records, those this node owns (it syncs and verifies them)
	PendingSyncs int // (record, peer) sync tasks waiting for their merge window, a retry or a send

	SyncsSent       uint64 // sync messages a peer acknowledged
	SyncRecordsSent uint64 // records in them
	SyncFailures    uint64 // sync messages that failed (retried with backoff unless the peer left)
	SyncsReceived   uint64 // sync messages received from members

	// Records received in syncs and repairs, and what became of them.
	RecordsReceived  uint64 // every record in a sync or repair from a member
	RecordsApplied   uint64 // installed: newer than the version held
	RefusedStale     uint64 // ignored: not newer than the version held (duplicates, reordering, late retries, echoes)
	RefusedNotOwner  uint64 // refused: the sender is not the record's owner (single writer)
	RefusedNotMember uint64 // messages of any kind refused because their sender is not a current member
	Malformed        uint64 // messages from members that failed to decode (refused; the sender is logged)

	VerifyRounds     uint64 // verify rounds this node ran as owner that a peer answered
	VerifyFailures   uint64 // verify rounds that failed (unreachable peer, peer not ready, bad answer)
	DivergentBuckets uint64 // buckets the peers reported differing, summed over the rounds
	VerifyAnswered   uint64 // digests of other owners this node answered
	RepairRecords    uint64 // records this node sent in verify repairs (missing or older on the peer, or moved past the peer's version)
	RepairDrops      uint64 // records this node told peers to drop (it no longer holds them)
	RepairsReceived  uint64 // repair messages received from owners
	// VersionConflicts counts versions of this node's records that a peer held live with
	// another payload (another checksum): two states under one version, which a restart with
	// the clock set back can make. Each one is moved past (and logged); it should stay 0.
	VersionConflicts uint64

	OrphansRemoved uint64 // records removed after their owner left and OrphanTimeout passed
	Adoptions      uint64 // beat records handed to Store.Adopt (their HRW owner is now this node)
	SnapshotPages  uint64 // snapshot pages served to loading peers
}

// counters are the Replicator's atomic counters: an increment is one atomic add, wherever it
// is made (with or without r.mu).
type counters struct {
	syncsSent, syncRecordsSent, syncFailures, syncsReceived atomic.Uint64
	recordsReceived, recordsApplied, refusedStale           atomic.Uint64
	malformed                                               atomic.Uint64
	verifyRounds, verifyFailures, divergentBuckets          atomic.Uint64
	verifyAnswered, repairRecords, repairDrops              atomic.Uint64
	repairsReceived, versionConflicts                       atomic.Uint64
	orphansRemoved, adoptions, snapshotPages                atomic.Uint64
	loadDuration                                            atomic.Int64
	loadPeers                                               atomic.Int64
	coldStart                                               atomic.Bool
}

func (c *counters) syncSent(records int, ok bool) {
	if ok {
		c.syncsSent.Add(1)
		c.syncRecordsSent.Add(uint64(records))
	} else {
		c.syncFailures.Add(1)
	}
}

// offered counts a received record and whether it was installed.
func (c *counters) offered(applied bool) {
	c.recordsReceived.Add(1)
	if applied {
		c.recordsApplied.Add(1)
	} else {
		c.refusedStale.Add(1)
	}
}

func (c *counters) verified(divergent int) {
	c.verifyRounds.Add(1)
	c.divergentBuckets.Add(uint64(divergent))
}

func (c *counters) repairPlanned(records, drops int) {
	c.repairRecords.Add(uint64(records))
	c.repairDrops.Add(uint64(drops))
}

func (c *counters) loaded(took time.Duration, peers int, cold bool) {
	c.loadDuration.Store(int64(took))
	c.loadPeers.Store(int64(peers))
	c.coldStart.Store(cold)
}

// Stats returns the replicator's counters and gauges. It takes the replicator's lock briefly
// (for the gauges, O(owners + peers)); it is safe for concurrent use, also after Close.
func (r *Replicator) Stats() Stats {
	c := &r.stats
	s := Stats{
		LoadDuration:     time.Duration(c.loadDuration.Load()),
		LoadPeers:        int(c.loadPeers.Load()),
		ColdStart:        c.coldStart.Load(),
		SyncsSent:        c.syncsSent.Load(),
		SyncRecordsSent:  c.syncRecordsSent.Load(),
		SyncFailures:     c.syncFailures.Load(),
		SyncsReceived:    c.syncsReceived.Load(),
		RecordsReceived:  c.recordsReceived.Load(),
		RecordsApplied:   c.recordsApplied.Load(),
		RefusedStale:     c.refusedStale.Load(),
		Malformed:        c.malformed.Load(),
		VerifyRounds:     c.verifyRounds.Load(),
		VerifyFailures:   c.verifyFailures.Load(),
		DivergentBuckets: c.divergentBuckets.Load(),
		VerifyAnswered:   c.verifyAnswered.Load(),
		RepairRecords:    c.repairRecords.Load(),
		RepairDrops:      c.repairDrops.Load(),
		RepairsReceived:  c.repairsReceived.Load(),
		VersionConflicts: c.versionConflicts.Load(),
		OrphansRemoved:   c.orphansRemoved.Load(),
		Adoptions:        c.adoptions.Load(),
		SnapshotPages:    c.snapshotPages.Load(),
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s.Ready = r.ready
	s.Members = len(r.members)
	s.RefusedNotOwner = uint64(r.refused)
	s.RefusedNotMember = uint64(r.nonMember)
	for id, o := range r.tab.owners {
		s.Records += o.held
		s.LiveRecords += o.live
		if id == r.self {
			s.OwnedRecords = o.held
		}
	}
	s.PendingSyncs = r.sched.pending()
	return s
}
