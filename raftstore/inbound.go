package raftstore

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// errInbound is returned to a peer whose Raft batch or snapshot chunk was
// dropped by the inbound checks (see guard).
var errInbound = errors.New("raftstore: inbound Raft traffic refused")

// InboundStats counts the Raft traffic that arrived over Config.Transport:
// what was handed to Dragonboat and what the inbound checks dropped, by
// the first rule it broke. A dropped batch or chunk never reaches
// Dragonboat. All zero without Config.Transport (Dragonboat's own TCP
// transport does its own, weaker, checks).
type InboundStats struct {
	Batches uint64 // message batches handed to Dragonboat
	Chunks  uint64 // snapshot chunks handed to Dragonboat

	Dropped    uint64 // every dropped batch or chunk, the sum of the below
	Malformed  uint64 // not a decodable batch or chunk, or an empty batch
	Oversized  uint64 // decoding it would allocate more than 16× its size (plus slack), or too many messages, entries or membership entries
	Deployment uint64 // another DeploymentID or transport binary version
	Shard      uint64 // a shard this node does not host
	Target     uint64 // To (or a chunk's ReplicaID) is not this node's replica
	Sender     uint64 // From is 0, this replica, or not a member of the shard
	Peer       uint64 // the authenticated peer is not the node of From, or the batch names another source
	Type       uint64 // a message type that never travels between nodes (local, InstallSnapshot)
	Chunk      uint64 // a snapshot chunk's own fields (file path, counts, file info, membership) or the records of its stream
}

// Reasons a batch or chunk is dropped, the indices of guard.counts.
const (
	dropMalformed = iota
	dropOversized
	dropDeployment
	dropShard
	dropTarget
	dropSender
	dropPeer
	dropType
	dropChunk
	numDrops
)

var dropNames = [numDrops]string{"malformed", "oversized", "deployment", "shard", "target", "sender", "peer", "type", "chunk"}

// maxPinned bounds the replicas learned from traffic while the shard's
// membership is not known yet.
const maxPinned = 64

// guard checks every Raft batch and snapshot chunk that arrives over a
// Muster transport before Dragonboat sees it. Dragonboat trusts its peers:
// a message with To = 0 panics, a source address that differs from the one
// it knows for a replica panics ("inconsistent target"), a chunk with a
// crafted file path or shape panics or writes where it should not. The
// guard passes on only traffic for this deployment, shard and replica, of
// the types that travel between nodes, from a current member of the shard
// whose node is the authenticated transport peer.
//
// Membership is Dragonboat's, cached: it is read again after Dragonboat
// reports a change (MembershipChanged, NodeReady, SnapshotRecovered). Until
// the shard's membership is known (a replica that is starting, joining, or
// starting from its directory), the replicas Dragonboat was started with
// (the initial members of a new shard, or those its bootstrap record
// names on a restart: expect) are pinned to their nodes, and any other
// replica ID to the first authenticated peer that sends as it; the batch
// must name that peer as its source. Without the first, a member could
// send as another initial member's replica in that window, and Dragonboat,
// which already holds that replica's address, panics.
//
// All methods are safe for concurrent use.
type guard struct {
	did, shard, replica uint64

	stale  atomic.Bool                                      // membership changed since it was read
	view   atomic.Pointer[map[uint64]string]                // replica ID → node ID; nil until known
	source atomic.Pointer[func() (map[uint64]string, bool)] // reads Dragonboat's membership

	pinMu  sync.Mutex
	pinned map[uint64]string // while the membership is unknown

	batches, chunks atomic.Uint64
	counts          [numDrops]atomic.Uint64

	// heard, if set, is told of every batch that passed: its sender, and
	// the highest index it acknowledged in it (a ReplicateResp that does
	// not reject: its sender holds the log up to LogIndex), or 0. Snapshot
	// retention waits for a stream's receiver while it is heard from.
	heard func(replica, acked uint64)
}

// noteSenders reports the senders of b, which passed checkBatch, and their
// acknowledgements to g.heard.
func (g *guard) noteSenders(b *pb.MessageBatch) {
	if g.heard == nil {
		return
	}
	var from, index uint64
	for i := range b.Requests {
		m := &b.Requests[i]
		if m.From != from && from != 0 {
			g.heard(from, index)
			index = 0
		}
		from = m.From
		if m.Type == pb.ReplicateResp && !m.Reject {
			index = max(index, m.LogIndex)
		}
	}
	if from != 0 {
		g.heard(from, index)
	}
}

func newGuard(did, shard, replica uint64) *guard {
	g := &guard{did: did, shard: shard, replica: replica, pinned: map[uint64]string{}}
	g.stale.Store(true)
	return g
}

// expect pins the replicas of members (replica ID → node ID), those
// Dragonboat starts with, to their nodes, until the membership is known.
// It is called before Dragonboat starts the replica.
func (g *guard) expect(members map[uint64]string) {
	g.pinMu.Lock()
	defer g.pinMu.Unlock()
	for id, node := range members {
		if id != g.replica && id != 0 && node != "" {
			g.pinned[id] = node
		}
	}
}

// setNodeHost makes the guard read its membership from nh.
func (g *guard) setNodeHost(nh *dragonboat.NodeHost) {
	load := func() (map[uint64]string, bool) {
		nhi := nh.GetNodeHostInfo(dragonboat.NodeHostInfoOption{SkipLogInfo: true})
		if nhi == nil {
			return nil, false
		}
		for _, si := range nhi.ShardInfoList {
			if si.ShardID == g.shard && !si.Pending && len(si.Replicas) > 0 {
				return si.Replicas, true // a fresh copy per change: never written again
			}
		}
		return nil, false
	}
	g.source.Store(&load)
	g.stale.Store(true)
}

// members returns the shard's membership, nil while it is not known.
func (g *guard) members() map[uint64]string {
	if g.stale.Load() && g.stale.CompareAndSwap(true, false) {
		if load := g.source.Load(); load != nil {
			if m, ok := (*load)(); ok {
				g.view.Store(&m)
			} else if g.view.Load() == nil {
				g.stale.Store(true) // not known yet: read again next time
			}
		} else {
			g.stale.Store(true)
		}
	}
	if v := g.view.Load(); v != nil {
		return *v
	}
	return nil
}

// drop counts a refusal and returns the error for the peer.
func (g *guard) drop(reason int, format string, args ...any) error {
	g.counts[reason].Add(1)
	return fmt.Errorf("%w: %s: %s", errInbound, dropNames[reason], fmt.Sprintf(format, args...))
}

// checkSender checks that replica from is a member whose node is peer.
func (g *guard) checkSender(from uint64, peer string) error {
	if from == 0 || from == g.replica {
		return g.drop(dropSender, "from replica %d", from)
	}
	if m := g.members(); m != nil {
		addr, ok := m[from]
		if !ok {
			return g.drop(dropSender, "replica %d is not a member of shard %d", from, g.shard)
		}
		if addr != peer {
			return g.drop(dropPeer, "replica %d is node %q, not the peer %q", from, addr, peer)
		}
		return nil
	}
	g.pinMu.Lock()
	defer g.pinMu.Unlock()
	if addr, ok := g.pinned[from]; ok {
		if addr != peer {
			return g.drop(dropPeer, "replica %d was first heard from node %q, not the peer %q", from, addr, peer)
		}
		return nil
	}
	if len(g.pinned) >= maxPinned {
		return g.drop(dropSender, "too many unknown replicas")
	}
	g.pinned[from] = peer
	return nil
}

// networkTypes are the message types Dragonboat sends between nodes; the
// others are local (ticks, elections, unreachable and snapshot status
// notices, and InstallSnapshot, which a received snapshot becomes only
// after its chunks have been checked and saved), or Quiesce, which only
// a shard with quiescence (never enabled here) sends.
//
// NoOP is a replica's answer to a leader's message of a lower term: it
// carries the replica's term back, so that the stale leader steps down.
// With CheckQuorum and PreVote that is how a replica that became a
// candidate at a higher term while the others kept their leader gets back
// in: they ignore its votes (they are in the leader's lease) and it
// ignores the leader's messages (a lower term). Dropped here, it never got
// back: it stayed out of the cluster, alive and behind, until the leader
// changed for another reason (TestStaleLeaderHearsHigherTerm; a CI run of
// TestKilledReplicaCatchesUp showed a replica stuck so).
var networkTypes = func() (ok [pb.LogQuery + 1]bool) {
	for _, t := range []pb.MessageType{
		pb.Propose, pb.Replicate, pb.ReplicateResp, pb.RequestVote, pb.RequestVoteResp,
		pb.Heartbeat, pb.HeartbeatResp, pb.ReadIndex, pb.ReadIndexResp,
		pb.SnapshotReceived, pb.LeaderTransfer, pb.TimeoutNow, pb.RateLimit,
		pb.RequestPreVote, pb.RequestPreVoteResp, pb.NoOP,
	} {
		ok[t] = true
	}
	return ok
}()

// checkBatch checks a batch from the authenticated peer.
func (g *guard) checkBatch(b *pb.MessageBatch, peer string) error {
	switch {
	case b.DeploymentId != g.did:
		return g.drop(dropDeployment, "deployment %d", b.DeploymentId)
	case b.BinVer != raftio.TransportBinVersion:
		return g.drop(dropDeployment, "binary version %d", b.BinVer)
	case b.SourceAddress != peer:
		return g.drop(dropPeer, "source %q from the peer %q", b.SourceAddress, peer)
	case len(b.Requests) == 0:
		return g.drop(dropMalformed, "no messages")
	}
	for i := range b.Requests {
		m := &b.Requests[i]
		switch {
		case m.ShardID != g.shard:
			return g.drop(dropShard, "shard %d", m.ShardID)
		case m.To != g.replica:
			return g.drop(dropTarget, "to replica %d", m.To)
		case int(m.Type) >= len(networkTypes) || !networkTypes[m.Type]:
			return g.drop(dropType, "message type %d", m.Type)
		}
		if err := g.checkSender(m.From, peer); err != nil {
			return err
		}
	}
	return nil
}

// snapshotFilename is the name Dragonboat gives a streamed snapshot's file.
func snapshotFilename(index uint64) string { return fmt.Sprintf("snapshot-%016X.gbsnap", index) }

// checkChunk checks a snapshot chunk from the authenticated peer. An
// on-disk state machine's snapshot is streamed: one file, named after its
// index, no external files, no witness, each chunk's size its data's, no
// file size (a stream has none).
func (g *guard) checkChunk(c *pb.Chunk, peer string) error {
	switch {
	case c.DeploymentId != g.did:
		return g.drop(dropDeployment, "deployment %d", c.DeploymentId)
	case c.BinVer != raftio.TransportBinVersion:
		return g.drop(dropDeployment, "binary version %d", c.BinVer)
	case c.ShardID != g.shard:
		return g.drop(dropShard, "shard %d", c.ShardID)
	case c.ReplicaID != g.replica:
		return g.drop(dropTarget, "to replica %d", c.ReplicaID)
	case c.Index == 0:
		return g.drop(dropChunk, "index 0")
	case c.Filepath != snapshotFilename(c.Index):
		return g.drop(dropChunk, "file path %q", c.Filepath)
	case c.HasFileInfo || c.FileInfo.Filepath != "" || c.Witness:
		return g.drop(dropChunk, "external file or witness snapshot")
	case c.ChunkCount == pb.PoisonChunkCount || c.FileChunkId != c.ChunkId:
		return g.drop(dropChunk, "chunk %d (file chunk %d) of %d", c.ChunkId, c.FileChunkId, c.ChunkCount)
	case c.ChunkCount != 0 && c.ChunkCount != pb.LastChunkCount && c.ChunkId >= c.ChunkCount:
		return g.drop(dropChunk, "chunk %d of %d", c.ChunkId, c.ChunkCount)
	case c.ChunkSize != uint64(len(c.Data)) || c.FileSize != 0:
		return g.drop(dropChunk, "chunk size %d for %d bytes, file size %d", c.ChunkSize, len(c.Data), c.FileSize)
	case c.OnDiskIndex > c.Index:
		return g.drop(dropChunk, "on-disk index %d past index %d", c.OnDiskIndex, c.Index)
	}
	if err := g.checkSender(c.From, peer); err != nil {
		return err
	}
	return g.checkMembership(&c.Membership)
}

// checkMembership checks a snapshot's membership against the known one: a
// replica's node never changes (Dragonboat panics on one that does).
func (g *guard) checkMembership(sm *pb.Membership) error {
	known := g.members()
	for _, set := range []map[uint64]string{sm.Addresses, sm.NonVotings, sm.Witnesses} {
		for id, addr := range set {
			if id == 0 || addr == "" {
				return g.drop(dropChunk, "membership entry %d %q", id, addr)
			}
			if k, ok := known[id]; ok && k != addr {
				return g.drop(dropChunk, "membership names replica %d node %q, known as %q", id, addr, k)
			}
		}
	}
	return nil
}

func (g *guard) stats() InboundStats {
	s := InboundStats{
		Batches:    g.batches.Load(),
		Chunks:     g.chunks.Load(),
		Malformed:  g.counts[dropMalformed].Load(),
		Oversized:  g.counts[dropOversized].Load(),
		Deployment: g.counts[dropDeployment].Load(),
		Shard:      g.counts[dropShard].Load(),
		Target:     g.counts[dropTarget].Load(),
		Sender:     g.counts[dropSender].Load(),
		Peer:       g.counts[dropPeer].Load(),
		Type:       g.counts[dropType].Load(),
		Chunk:      g.counts[dropChunk].Load(),
	}
	s.Dropped = s.Malformed + s.Oversized + s.Deployment + s.Shard + s.Target + s.Sender + s.Peer + s.Type + s.Chunk
	return s
}

// nodeEvents receives Dragonboat's system events: membership changes
// mark the guard's membership stale (guard may be nil); the end of a
// snapshot stream (completed or aborted) goes to retention. Dragonboat
// calls it on its event goroutine; it does not block.
type nodeEvents struct {
	guard *guard
	sm    *stateMachine
}

func (e nodeEvents) stale() {
	if e.guard != nil {
		e.guard.stale.Store(true)
	}
}

func (e nodeEvents) streamEnded(to uint64) {
	if e.sm != nil {
		e.sm.retention.streamSent(e.sm.applied.Load(), to)
	}
}

func (e nodeEvents) MembershipChanged(raftio.NodeInfo)           { e.stale() }
func (e nodeEvents) NodeReady(raftio.NodeInfo)                   { e.stale() }
func (e nodeEvents) SnapshotRecovered(raftio.SnapshotInfo)       { e.stale() }
func (e nodeEvents) SendSnapshotCompleted(i raftio.SnapshotInfo) { e.streamEnded(i.ReplicaID) }
func (e nodeEvents) SendSnapshotAborted(raftio.SnapshotInfo)     { e.streamEnded(0) } // not installed: no wait for its receiver
func (nodeEvents) NodeHostShuttingDown()                         {}
func (nodeEvents) NodeUnloaded(raftio.NodeInfo)                  {}
func (nodeEvents) NodeDeleted(raftio.NodeInfo)                   {}
func (nodeEvents) ConnectionEstablished(raftio.ConnectionInfo)   {}
func (nodeEvents) ConnectionFailed(raftio.ConnectionInfo)        {}
func (nodeEvents) SendSnapshotStarted(raftio.SnapshotInfo)       {}
func (nodeEvents) SnapshotReceived(raftio.SnapshotInfo)          {}
func (nodeEvents) SnapshotCreated(raftio.SnapshotInfo)           {}
func (nodeEvents) SnapshotCompacted(raftio.SnapshotInfo)         {}
func (nodeEvents) LogCompacted(raftio.EntryInfo)                 {}
func (nodeEvents) LogDBCompacted(raftio.EntryInfo)               {}
