package raftstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/lni/dragonboat/v4"
	"github.com/muster-io/muster/transport"
	"github.com/vmihailenco/msgpack/v5"
)

// KindRaftPropose carries a follower's entry to the leader, as a request:
// the leader proposes it in its own next round and answers with its index
// and result codes once it has applied it (see forwardEntry).
const KindRaftPropose transport.Kind = 98

// Forwarding.
//
// Each node's batcher packs its callers' commands into one entry at a time.
// A follower's entry used to go to Dragonboat on the follower, which hands
// it to the leader as a Propose message when it arrives: three nodes made
// three entries a round, each with its own log write on every replica, its
// own Replicate and its own apply. Now a follower sends its entry to the
// leader over Config.Transport; the leader's batcher proposes the entries
// that reached it with its own as one merged entry: one log write, one
// Replicate and one apply a round on each replica.
//
// The entry is unchanged, its ID too, so nothing about its outcome changes:
// when the leader does not take it (no leader known, the leader unreachable
// or no longer the leader, no answer within an attempt's bound), the
// follower proposes the same entry itself, as before, and the state
// machine applies an entry ID once (a forwarded entry that did commit
// answers the retry with its first outcome). A follower answers its
// callers only once its own listener has the entry, as a local proposal
// does: a Register on any node is visible on that node when it returns.
// Once the leader has answered, the entry is not proposed again: a
// follower that does not apply it in time answers ErrNoLeader.

// forward is an entry a follower sent to this node, the leader, waiting in
// the batcher's queue.
type forward struct {
	from   uint64 // the follower's replica ID
	merges bool   // it applies merged entries (capMerged)
	entry  []byte
	done   chan forwardResult // buffered: the batcher never blocks on it
	gone   atomic.Bool        // the handler returned: leave it out if not proposed yet
}

type forwardResult struct {
	index uint64
	codes []byte
	err   error
}

// errNotLeader answers a forwarded entry that reached a replica that is not
// the leader: the follower proposes the entry itself.
var errNotLeader = errors.New("raftstore: not the leader")

// A KindRaftPropose request is the sender's capabilities (one byte), its
// replica ID (8 bytes, big-endian) and the entry; the answer is the index
// (8 bytes) and the entry's codes.
const (
	forwardHeaderLen = 1 + 8
	answerHeaderLen  = 8
	// capMerged: the sender applies merged entries (mergedVersion). The
	// leader merges only while every other member says so (forwarders.allMerge).
	capMerged = 1
)

// maxForwardsPerSender bounds the entries one follower may have queued or
// in flight at the leader (it has one at a time; a retry may overlap):
// what a member can make the leader hold.
const maxForwardsPerSender = 2

var errForwardBusy = errors.New("raftstore: too many entries of this replica in flight at the leader")

// forwarded is the KindRaftPropose handler: it checks the sender (a member
// of the shard on the peer's authenticated node) and the entry's form and
// size, queues the entry for the batcher, and answers with its outcome.
func (n *Node) forwarded(ctx context.Context, peer string, body []byte) ([]byte, error) {
	if n.state.Load() != stateStarted { // Dragonboat's transport starts before the batcher
		return nil, errNotLeader
	}
	if len(body) < forwardHeaderLen+entryHdrLen {
		return nil, n.guard.drop(dropMalformed, "forwarded entry of %d bytes", len(body))
	}
	caps, from, entry := body[0], binary.BigEndian.Uint64(body[1:]), body[forwardHeaderLen:]
	if err := n.guard.checkSender(from, peer); err != nil {
		return nil, err
	}
	switch {
	case entry[0] != entryVersion:
		return nil, n.guard.drop(dropMalformed, "forwarded entry of version %d", entry[0])
	case len(entry) > maxForwardedEntry:
		return nil, n.guard.drop(dropOversized, "forwarded entry of %d bytes, limit %d", len(entry), maxForwardedEntry)
	}
	if !n.IsLeader() {
		return nil, errNotLeader
	}
	if !n.fwdSlots.take(from) {
		return nil, errForwardBusy
	}
	defer n.fwdSlots.give(from)
	// The entry outlives the call (Dragonboat's log holds it): a copy of
	// the transport's body.
	f := &forward{from: from, merges: caps&capMerged != 0, entry: bytes.Clone(entry), done: make(chan forwardResult, 1)}
	select {
	case n.fwd <- f:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-n.ctx.Done():
		return nil, ErrClosed
	}
	select {
	case r := <-f.done:
		if r.err != nil {
			return nil, r.err
		}
		return append(binary.BigEndian.AppendUint64(make([]byte, 0, answerHeaderLen+len(r.codes)), r.index), r.codes...), nil
	case <-ctx.Done():
		f.gone.Store(true)
		return nil, ctx.Err()
	case <-n.ctx.Done():
		f.gone.Store(true)
		return nil, ErrClosed
	}
}

// fwdSlots counts the forwarded entries of each sender at the leader.
type fwdSlots struct {
	mu sync.Mutex
	n  map[uint64]int
}

func (s *fwdSlots) take(from uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[from] >= maxForwardsPerSender {
		return false
	}
	if s.n == nil {
		s.n = make(map[uint64]int)
	}
	s.n[from]++
	return true
}

func (s *fwdSlots) give(from uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[from]--; s.n[from] <= 0 {
		delete(s.n, from)
	}
}

// maxForwardedEntry bounds a forwarded entry: what encodeEntry makes of
// maxEntryBytes of commands (its header and the array's).
const maxForwardedEntry = entryHdrLen + 5 + maxEntryBytes

// commitEntry commits entry, this node's next one: through the leader when
// this replica is a follower over a Muster transport, else (or when the
// leader did not take it) through Dragonboat here.
func (n *Node) commitEntry(entry []byte) (uint64, []byte, error) {
	// One bound for all of it, the forward, the wait for the local apply
	// and the proposal here, as for a proposal alone: its callers' own.
	// Dragonboat is a real-time engine: the bound is real time.
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.ProposeTimeout)
	defer cancel()
	if index, codes, taken, err := n.forwardEntry(ctx, entry); taken {
		return index, codes, err
	}
	return n.proposeEntry(ctx, entry)
}

// forwardEntry sends entry to the leader and, once the leader has
// committed it, waits for this replica's listener to have it too (as a
// local proposal does). taken is false when the leader did not answer with
// the entry committed (no leader known, unreachable, refused, no answer
// within an attempt): the caller then proposes the same entry here, whose
// ID makes a second apply answer with the first's outcome. Once the leader
// answered, the entry is not proposed again: a replica slow to apply it
// gets ErrNoLeader when ctx ends (ProposeTimeout, its callers' own bound).
func (n *Node) forwardEntry(ctx context.Context, entry []byte) (index uint64, codes []byte, taken bool, err error) {
	if n.cfg.Transport == nil || n.cfg.noForward {
		return 0, nil, false, nil
	}
	leader, known := n.Leader()
	if !known || leader == n.cfg.ReplicaID {
		return 0, nil, false, nil
	}
	to := n.guard.members()[leader]
	if to == "" {
		return 0, nil, false, nil
	}
	// One attempt's bound for the leader's answer, on real time as
	// Dragonboat's.
	actx, cancel := context.WithTimeout(ctx, n.attemptTimeout())
	body := make([]byte, 0, forwardHeaderLen+len(entry))
	body = binary.BigEndian.AppendUint64(append(body, capMerged), n.cfg.ReplicaID)
	resp, err := n.cfg.Transport.Request(actx, to, KindRaftPropose, append(body, entry...))
	cancel()
	if err == nil && len(resp) < answerHeaderLen {
		err = fmt.Errorf("%w: answer of %d bytes", errBadForward, len(resp))
	}
	if err != nil {
		n.stats.forwardFallbacks.Add(1)
		n.log.Debug("raftstore: the leader did not take an entry; proposing it here", "leader", leader, "err", err)
		return 0, nil, false, nil
	}
	n.stats.forwardTaken.Add(1)
	index, codes = binary.BigEndian.Uint64(resp), resp[answerHeaderLen:]
	if err := n.sm.waitPublished(ctx, index); err != nil {
		if n.ctx.Err() != nil {
			return 0, nil, true, ErrClosed
		}
		return 0, nil, true, fmt.Errorf("%w: entry %d committed, not applied on this replica within %v", ErrNoLeader, index, n.cfg.ProposeTimeout)
	}
	return index, codes, true, nil
}

var errBadForward = errors.New("raftstore: malformed answer to a forwarded entry")

// proposeForwarded proposes the forwarded entries fwds, each as its own
// entry, without waiting: Dragonboat takes them in the same step as the
// batcher's own entry proposed right after. answerForwarded collects their
// outcomes.
func (n *Node) proposeForwarded(fwds []*forward) []*dragonboat.RequestState {
	if len(fwds) == 0 {
		return nil
	}
	session := n.nh.GetNoOPSession(n.cfg.ShardID)
	states := make([]*dragonboat.RequestState, len(fwds))
	for i, f := range fwds {
		if f.gone.Load() {
			continue
		}
		rs, err := n.nh.Propose(session, f.entry, n.attemptTimeout())
		if err != nil {
			f.done <- forwardResult{err: fmt.Errorf("raftstore: propose a forwarded entry: %w", err)}
			continue
		}
		n.stats.forwardedIn.Add(1)
		states[i] = rs
	}
	return states
}

// answerForwarded hands each forwarded entry its outcome: index and codes
// once the leader applied it, or the error (the follower then proposes it
// itself).
func (n *Node) answerForwarded(fwds []*forward, states []*dragonboat.RequestState) {
	for i, rs := range states {
		if rs == nil {
			continue
		}
		var r forwardResult
		select {
		case res := <-rs.ResultC():
			if res.Completed() {
				v := res.GetResult()
				r.index, r.codes = v.Value, v.Data
			} else {
				r.err = fmt.Errorf("raftstore: a forwarded entry was not committed (%s)", outcome(res))
			}
			rs.Release() // only once it has its result: Dragonboat reuses it
		case <-n.ctx.Done():
			r.err = ErrClosed
		}
		fwds[i].done <- r
	}
}

// failForwarded answers forwarded entries with ErrClosed: the node closed
// before it proposed them.
func (n *Node) failForwarded(fwds []*forward) {
	for _, f := range fwds {
		f.done <- forwardResult{err: ErrClosed}
	}
	for {
		select {
		case f := <-n.fwd:
			f.done <- forwardResult{err: ErrClosed}
		default:
			return
		}
	}
}

// outcome names a request result that did not complete.
func outcome(r dragonboat.RequestResult) string {
	switch {
	case r.Timeout():
		return "timed out"
	case r.Dropped():
		return "dropped"
	case r.Terminated():
		return "terminated"
	case r.Aborted():
		return "aborted"
	case r.Rejected():
		return "rejected"
	}
	return "not completed"
}

// forwardQueue is the capacity of the batcher's queue of forwarded entries:
// a follower has one entry in flight at a time.
const forwardQueue = 64

// forwarders is what the leader's batcher remembers of the followers that
// forwarded lately: the round each last did, and whether it applies merged
// entries. The batcher's goroutine only.
type forwarders struct {
	round int
	seen  map[uint64]forwarder
}

type forwarder struct {
	round  int
	merges bool
}

// note records a round's forwarded entries, forgets the followers that
// forwarded in neither it nor the one before, and returns how many remain:
// they come back with their next entries, and the next round waits for
// them, so that their entries go in one round rather than alternate.
func (fs *forwarders) note(fwds []*forward) int {
	fs.round++
	if fs.seen == nil {
		fs.seen = make(map[uint64]forwarder)
	}
	for _, f := range fwds {
		fs.seen[f.from] = forwarder{round: fs.round, merges: f.merges}
	}
	for id, f := range fs.seen {
		if f.round+1 < fs.round {
			delete(fs.seen, id)
		}
	}
	return len(fs.seen)
}

// allMerge reports whether every other member of the shard (members, self
// left out) forwarded in this round or the one before saying it applies
// merged entries (capMerged), which a version before them would skip as
// undecodable, and so diverge. Until then the leader proposes the
// followers' entries each as its own.
func (fs *forwarders) allMerge(members map[uint64]string, self uint64) bool {
	need := 0
	for id := range members {
		if id == self {
			continue
		}
		need++
		if f, ok := fs.seen[id]; !ok || !f.merges {
			return false
		}
	}
	return need > 0
}

// merge is a merged entry of this node's commands and followers' entries.
type merge struct {
	entry []byte // a merged entry, or a follower's as it is when it is all
	fwds  []*forward
}

// mergeForwarded merges own (ownCmds commands; nil for none) with the
// forwarded entries that fit in one entry's bounds; rest are the others.
// Without any that fit, merged has no fwds and rest is fwds.
func (n *Node) mergeForwarded(own []byte, ownCmds int, fwds []*forward, canMerge bool) (merged merge, rest []*forward) {
	if len(fwds) == 0 || !canMerge || n.cfg.noMerge {
		return merge{}, fwds
	}
	parts, size, cmds := make([][]byte, 0, 1+len(fwds)), len(own), ownCmds
	if own != nil {
		parts = append(parts, own)
	}
	for _, f := range fwds {
		k, ok := entryCommands(f.entry)
		if f.gone.Load() || !ok || len(parts) == maxMergedParts || size+len(f.entry) > maxEntryBytes || cmds+k > maxBatchCommands {
			rest = append(rest, f)
			continue
		}
		parts, size, cmds = append(parts, f.entry), size+len(f.entry), cmds+k
		merged.fwds = append(merged.fwds, f)
	}
	if len(merged.fwds) == 0 {
		return merge{}, fwds
	}
	if len(parts) == 1 {
		merged.entry = parts[0] // one follower's entry alone: as it is
	} else {
		merged.entry = encodeMerged(parts)
		n.stats.merged.Add(1)
	}
	n.stats.forwardedIn.Add(uint64(len(merged.fwds)))
	return merged, rest
}

// answer hands the merged followers' entries their part of the outcome of
// the merged entry (index, data: each part's codes after their count, see
// stateMachine.Update; err) and returns this node's: the first part's
// codes when own is set.
func (m merge) answer(index uint64, data []byte, err error, own bool) ([]byte, error) {
	if !own && len(m.fwds) == 1 { // one follower's entry, proposed as it is
		m.fwds[0].done <- forwardResult{index: index, codes: data, err: err}
		return nil, nil
	}
	parts := make([][]byte, 0, 1+len(m.fwds))
	for rest := data; err == nil && len(rest) > 0; {
		if len(rest) < 2 || int(binary.BigEndian.Uint16(rest)) > len(rest)-2 {
			err = fmt.Errorf("%w: result of merged entry %d: malformed", ErrCorrupt, index)
			break
		}
		k := int(binary.BigEndian.Uint16(rest))
		parts, rest = append(parts, rest[2:2+k]), rest[2+k:]
	}
	want := len(m.fwds)
	if own {
		want++
	}
	if err == nil && len(parts) != want {
		err = fmt.Errorf("%w: result of merged entry %d has %d parts for %d", ErrCorrupt, index, len(parts), want)
	}
	for i, f := range m.fwds {
		if err != nil {
			f.done <- forwardResult{err: err}
			continue
		}
		f.done <- forwardResult{index: index, codes: parts[len(parts)-len(m.fwds)+i]}
	}
	if err != nil || !own {
		return nil, err
	}
	return parts[0], nil
}

// entryCommands reads the count of commands of an entry from its array
// header (encodeEntry writes it with msgpack's encoder).
func entryCommands(entry []byte) (int, bool) {
	if len(entry) < entryHdrLen || entry[0] != entryVersion {
		return 0, false
	}
	dec := msgpack.GetDecoder()
	defer msgpack.PutDecoder(dec)
	dec.Reset(bytes.NewReader(entry[entryHdrLen:]))
	k, err := dec.DecodeArrayLen()
	return k, err == nil && k >= 0 && k <= maxBatchCommands
}
