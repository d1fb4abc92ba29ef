package distro

import (
	"context"

	"github.com/muster-io/muster/model"
)

// verify runs one anti-entropy round with peer: send the digest of the records this node owns,
// get back the differing buckets with the peer's versions in them, and repair: send what the
// peer lacks or holds older, tell it to drop what this node no longer holds, and bump past any
// version the peer holds that is newer than this node's own (a previous incarnation's).
func (r *Replicator) verify(peer string) {
	defer func() {
		r.mu.Lock()
		delete(r.verifying, peer)
		r.mu.Unlock()
	}()
	nb := r.cfg.Buckets
	r.mu.Lock()
	digest := encodeDigest(r.tab.digest(r.self), nb)
	skip := r.sched.freshBuckets(peer)
	r.mu.Unlock()
	body, err := model.Marshal(verifyReq{Digest: digest, Skip: skip})
	if err != nil {
		return
	}
	ctx, cancel := r.requestCtx()
	resp, err := r.request(ctx, peer, kindVerify, body)
	cancel()
	if err != nil {
		if r.ctx.Err() == nil {
			r.log.Debug("distro: verify failed", "peer", peer, "err", err)
		}
		r.stats.verifyFailures.Add(1)
		return
	}
	vr, err := decodeVerifyResp(resp, nb)
	if err != nil {
		r.log.Warn("distro: bad verify answer", "peer", peer, "err", err)
		r.stats.verifyFailures.Add(1)
		return
	}
	r.stats.verified(len(vr.Buckets))
	if len(vr.Buckets) == 0 {
		return
	}

	r.mu.Lock()
	recs, drops, bumped := r.repairPlanLocked(peer, vr)
	r.mu.Unlock()
	r.stats.repairPlanned(len(recs), len(drops))
	if bumped {
		r.poke()
	}
	r.log.Debug("distro: verify repair", "peer", peer, "buckets", len(vr.Buckets), "send", len(recs), "drop", len(drops), "bumped", bumped)
	r.sendRepair(r.ctx, peer, recs, drops)
}

// repairPlanLocked compares the peer's versions of this node's records in the differing buckets
// with this node's own records there.
func (r *Replicator) repairPlanLocked(peer string, vr verifyResp) (send []Record, drop []version, bumped bool) {
	nb := r.cfg.Buckets
	inB := make(map[int]bool, len(vr.Buckets))
	for _, b := range vr.Buckets {
		inB[int(b)] = true
	}
	theirs := make(map[string]version, len(vr.Versions))
	for _, v := range vr.Versions {
		if inB[bucketOf(keyHash(v.Key), nb)] {
			theirs[v.Key] = v
		}
	}
	var bumps []Record
	for b := range inB {
		r.tab.each(b, func(e *entry) bool {
			if !e.held() || e.owner.id != r.self {
				return true
			}
			v, ok := theirs[e.key]
			delete(theirs, e.key)
			held := Record{Revision: v.Rev, Owner: v.Owner}
			if v.Owner == "" {
				held.Owner = r.self // a peer that does not send owners reports only this node's records
			}
			switch {
			case (!ok || e.version().Newer(held)) && r.sched.fresh(peer, e.key):
				// Written after the digest, its first sync on its way: the sync carries it with
				// the other records of its write. Sent here, it would reach the peer alone (a
				// ReplaceService's deletion of the old instance without the new one, whose
				// bucket compared equal), and the peer would hold neither in between.
			case !ok:
				send = append(send, e.record())
			case e.version().Newer(held):
				send = append(send, e.record())
			case held.Newer(e.record()) || v.Deleted != e.deleted || !v.Deleted && v.Sum != 0 && v.Sum != e.sum:
				if !held.Newer(e.record()) && !v.Deleted && !e.deleted && v.Sum != e.sum {
					r.stats.versionConflicts.Add(1)
					r.log.Warn("distro: a peer holds this node's version of a record with another payload; moving past it", "peer", peer, "record", e.record().String())
				}
				// The peer holds a version of this key newer than this node's own: written by a
				// previous incarnation that this one never loaded, or by another node that owned
				// the key while views differed (a partition). Or it holds this very version in
				// another state (deleted, or another payload: its checksum differs): a previous
				// incarnation wrote it too (see nextRevLocked). This node owns the key now; it
				// moves past that version so its current state wins everywhere.
				nr := e.record()
				nr.Revision = r.nextRevLocked(v.Rev + 1)
				bumps = append(bumps, nr)
			}
			return true
		})
	}
	for _, nr := range bumps {
		r.installOwnLocked(nr)
		send = append(send, nr)
		bumped = true
	}
	for key, v := range theirs {
		e := r.tab.get(key)
		own := v.Owner == "" || v.Owner == r.self // a peer that sends no owners reports only this node's
		if e == nil || !e.held() || own && !supersededLive(e, v.Rev, r.self) {
			// This node no longer holds the peer's version: the peer's copy is dead. It holds
			// nothing of the key, or (a version of its own, which only it writes) another
			// owner's tombstone or older version instead.
			drop = append(drop, v)
		}
	}
	return send, drop, bumped
}

// supersededLive reports whether e, what this node holds of a key instead of version rev of its
// own (self's), is a live record of another owner, newer than that version. Only then does the
// node leave the peer's copy of its version to that record's owner, which holds it too: its
// verify sends it to the peer, which takes it over the copy. A drop first would show the peer's
// Store the key deleted between two live states. (If that owner left, this node turns the record
// into an orphan marker after OrphanTimeout, and drops the copy at its next verify.)
//
// Anything else the node holds there, it drops the peer's copy itself. A tombstone of another
// owner in particular: the owner forgets it a TombstoneTTL after writing it, but this node a
// TombstoneTTL after receiving it, which may be much later (a verify repair after a partition
// healed). Once the owner forgot it, its digest no longer shows that the peer lacks it, and left
// to that owner the peer's copy stayed live until this node's tombstone expired too (seed
// 7401411).
func supersededLive(e *entry, rev uint64, self string) bool {
	return e.live() && e.version().Newer(Record{Revision: rev, Owner: self})
}

// sendRepair sends records and drops to peer in messages of bounded size.
func (r *Replicator) sendRepair(ctx context.Context, peer string, recs []Record, drops []version) {
	for first := true; first || len(recs) > 0; first = false {
		n, size := 0, 0
		for n < len(recs) && n < r.cfg.MaxBatch && (n == 0 || size+len(recs[n].Payload) <= maxBatchBytes) {
			size += len(recs[n].Payload)
			n++
		}
		m := repairMsg{Records: wires(recs[:n])}
		recs = recs[n:]
		if first {
			m.Drop = drops
		}
		body, err := model.Marshal(m)
		if err != nil {
			return
		}
		rctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout) // real-time network deadline
		_, err = r.request(rctx, peer, kindRepair, body)
		cancel()
		if err != nil {
			r.log.Debug("distro: repair failed", "peer", peer, "err", err)
			return // the next verify round tries again
		}
	}
}

// handleVerify answers an owner's digest: the buckets where this node's copies of that owner's
// records differ, with their versions. It also renews those copies (the owner is alive).
func (r *Replicator) handleVerify(_ context.Context, from string, body []byte) ([]byte, error) {
	if err := r.admit("verify", from); err != nil {
		return nil, err
	}
	nb := r.cfg.Buckets
	sums, skip, err := decodeVerifyReq(body, nb)
	if err != nil {
		r.log.Warn("distro: bad verify request", "from", from, "err", err)
		r.stats.malformed.Add(1)
		return nil, err
	}
	r.mu.Lock()
	if err := r.admitLocked("verify", from); err != nil {
		r.mu.Unlock()
		return nil, err
	}
	if !r.ready {
		r.mu.Unlock()
		return nil, ErrNotReady
	}
	r.renewedAt[from] = r.clk.Now()
	mine := r.tab.digest(from)
	var resp verifyResp
	for b := 0; b < nb && len(resp.Versions) < maxVerifyVersions; b++ {
		for len(skip) > 0 && skip[0] < uint32(b) {
			skip = skip[1:] // out of order (the owner sends them sorted): ignored
		}
		if len(skip) > 0 && skip[0] == uint32(b) {
			skip = skip[1:] // the owner's syncs there are on their way: not compared this round
			continue
		}
		var m uint64
		if mine != nil {
			m = mine[b]
		}
		if m == sums[b] {
			continue
		}
		start := len(resp.Versions)
		r.tab.each(b, func(e *entry) bool {
			// Orphan markers count as deletions here: an owner that restarted without them
			// must move past their versions (it bumps), or its new writes would be refused.
			// A beat record written by another node while views differed (a partition) but
			// hashed to `from` now is reported too: if it is newer than the owner's, the owner
			// must move past it, or the two would refuse each other's versions for ever.
			if e.owner.id == from || e.kind == KindBeat && hrwOwner(r.members, e.key) == from {
				resp.Versions = append(resp.Versions, version{Key: e.key, Rev: e.rev, Deleted: e.deleted || e.orphan, Owner: e.owner.id, Sum: e.sum})
			}
			return true
		})
		if len(resp.Versions) > maxVerifyVersions {
			if len(resp.Buckets) > 0 {
				resp.Versions = resp.Versions[:start] // whole buckets: this one waits for the next round
				break
			}
			// One bucket alone beyond the cap: the owner sends the records whose versions are cut
			// off (as if this node lacked them; it refuses those that are not newer).
			resp.Versions = resp.Versions[:maxVerifyVersions]
		}
		resp.Buckets = append(resp.Buckets, uint32(b))
	}
	r.mu.Unlock()
	r.stats.verifyAnswered.Add(1)
	return model.Marshal(resp)
}

// handleRepair installs the records an owner sent after verify and drops the live copies it no
// longer holds (turned into orphan markers, so a stale copy of them is refused for a while).
func (r *Replicator) handleRepair(_ context.Context, from string, body []byte) ([]byte, error) {
	if err := r.admit("repair", from); err != nil {
		return nil, err
	}
	recs, drops, err := decodeRepair(body)
	if err != nil {
		r.log.Warn("distro: bad repair message", "from", from, "err", err)
		r.stats.malformed.Add(1)
		return nil, err
	}
	r.mu.Lock()
	if err := r.admitLocked("repair", from); err != nil {
		r.mu.Unlock()
		return nil, err
	}
	now := r.clk.Now()
	r.offerFromLocked(from, recs, now)
	r.stats.repairsReceived.Add(1)
	for _, d := range drops {
		e := r.tab.get(d.Key)
		if e == nil || e.owner.id != from || e.rev != d.Rev || !e.live() {
			// Tombstones and orphan markers stay until their TTL even if the owner forgot them:
			// they are what refuses a stale copy, and what shows an owner that lost its state
			// which version to move past.
			continue
		}
		r.emitLocked(storeEvent{op: evApply, rec: r.tab.orphan(e, now)})
	}
	r.mu.Unlock()
	r.drain()
	return nil, nil
}
