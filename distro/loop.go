package distro

import (
	"time"

	"github.com/muster-io/muster/model"
)

// run is the main loop. Each pass runs, under one hold of r.mu, the jobs due at the clock's
// time, one line each, delivers the Store calls they queued, starts the sends and the verify
// rounds they chose, and sleeps until the earliest next due time or a poke (a write, a
// membership change, a finished send or verify round, Flush, the end of the load). What wakes
// it, and the job that runs:
//
//	wakes it                                    job
//	a sync task due (merge window, backoff)     takeSyncsLocked: one batch per peer
//	the sync queue going quiet after Flush      releaseFlushesLocked
//	the verify tick (every VerifyInterval)      verifyTickLocked: verify rounds, tombstone
//	                                            expiry, deferred adoptions
//	an orphan deadline (OrphanTimeout)          orphansLocked: removes a gone node's records
func (r *Replicator) run() {
	for {
		r.mu.Lock()
		now := r.clk.Now()
		syncs := r.takeSyncsLocked(now)
		r.releaseFlushesLocked(now, len(syncs) > 0)
		verifies := r.verifyTickLocked(now)
		wake := wakeTime{at: r.nextVerify}
		wake.add(r.orphansLocked(now))
		wake.add(r.sched.next())
		r.mu.Unlock()
		r.drain()

		for _, b := range syncs {
			r.goBusy(func() { r.sendSync(b.peer, b.keys, b.recs) })
		}
		for _, p := range verifies {
			r.goBusy(func() { r.verify(p) })
		}
		if !r.sleepLoop(wake.at, len(syncs) > 0 || len(verifies) > 0) {
			return
		}
	}
}

// wakeTime is the earliest time the run loop must wake up at.
type wakeTime struct{ at time.Time }

// add moves w to t if ok and t is earlier.
func (w *wakeTime) add(t time.Time, ok bool) {
	if ok && t.Before(w.at) {
		w.at = t
	}
}

// syncBatch is one sync message to send: records this node owns, and their keys as the sync
// schedule knows them.
type syncBatch struct {
	peer string
	keys []string
	recs []Record
}

// takeSyncsLocked takes the sync tasks due at now and turns them into one batch per peer, up to
// MaxBatch records and maxBatchBytes of payload; the rest of a peer's keys go back to the
// schedule, due now. A key no longer held, or no longer this node's, is left out (no echo);
// a peer left with nothing to send is marked done at once.
func (r *Replicator) takeSyncsLocked(now time.Time) []syncBatch {
	var out []syncBatch
	for peer, keys := range r.sched.take(now, r.cfg.MaxBatch) {
		// keys is ours: the batch's keys are filtered into it in place.
		b := syncBatch{peer: peer, keys: keys[:0], recs: make([]Record, 0, len(keys))}
		size := 0
		for i, k := range keys {
			e := r.tab.get(k)
			if e == nil || !e.held() || e.owner.id != r.self {
				continue // no longer ours: whoever owns it now syncs it (no echo)
			}
			if size += len(e.payload()); size > maxBatchBytes && len(b.recs) > 0 {
				for _, rest := range keys[i:] { // the rest goes in the next batch
					r.sched.addAt(peer, rest, now)
				}
				break
			}
			b.keys = append(b.keys, k)
			b.recs = append(b.recs, e.record())
		}
		if len(b.recs) == 0 {
			r.sched.done(peer, nil, true, now, r.rnd)
			continue
		}
		out = append(out, b)
	}
	return out
}

// releaseFlushesLocked returns the Flush calls waiting for the sync queue once it is quiet:
// nothing is being sent (sending is false) and nothing is due or in flight.
func (r *Replicator) releaseFlushesLocked(now time.Time, sending bool) {
	if len(r.flushed) == 0 || sending || !r.sched.quiet(now) {
		return
	}
	for _, ch := range r.flushed {
		close(ch)
	}
	r.flushed = nil
}

// verifyTickLocked does the work of the verify tick, if it is due at now, and schedules the
// next one: it returns the peers to start a verify round with (once ready, every live peer
// without a round in flight), expires tombstones older than TombstoneTTL and adopts the beat
// records noted since the last tick (adoptLater), and takes over the deletions noted since then
// (deleteLater).
func (r *Replicator) verifyTickLocked(now time.Time) (peers []string) {
	if now.Before(r.nextVerify) {
		return nil
	}
	r.nextVerify = now.Add(r.cfg.VerifyInterval)
	if r.ready {
		for _, p := range r.members {
			if p != r.self && !r.verifying[p] {
				r.verifying[p] = true
				peers = append(peers, p)
			}
		}
	}
	r.tab.expire(now.Add(-r.cfg.TombstoneTTL))
	r.adoptDeferredLocked()
	r.deleteDeferredLocked()
	return peers
}

// adoptDeferredLocked adopts the beat records of keys HRW assigns here but written by another
// live node (on the other side of a partition, or before it saw this node join), noted on
// receipt in adoptLater: O(such records).
func (r *Replicator) adoptDeferredLocked() {
	for k := range r.adoptLater {
		r.adoptScanKeyLocked(k)
	}
	clear(r.adoptLater)
}

// sleepLoop puts the run loop to sleep until wake or a poke; it reports false on Close. When
// wake has passed, the loop runs again at once if its pass started work (started), else it
// waits for a poke (a send or a verify round that ends) or a short tick: every peer is busy.
func (r *Replicator) sleepLoop(wake time.Time, started bool) bool {
	now := r.clk.Now()
	d := wake.Sub(now)
	if d <= 0 {
		if started {
			return true
		}
		d = time.Millisecond
	}
	return r.sleepUntil(now, d, true)
}

// orphansLocked removes, once this node is ready, the records still owned by members that left
// more than OrphanTimeout ago, and returns the next time it has work.
func (r *Replicator) orphansLocked(now time.Time) (next time.Time, ok bool) {
	if !r.ready {
		return time.Time{}, false
	}
	for owner, at := range r.leftAt {
		if _, alive := r.memberSet[owner]; alive {
			delete(r.leftAt, owner)
			continue
		}
		o := r.tab.owners[owner]
		if o == nil || o.live == 0 {
			// Nothing of its is held here. Forget it, and when it last verified, once its
			// records' tombstones have expired everywhere as well (node IDs come and go with
			// hosts). Its records reach this node again only if it rejoins (a member again) or
			// from this node's own load (finishLoad starts their clock); offerLocked restarts the
			// clock for any other.
			if !at.Add(r.cfg.OrphanTimeout + r.cfg.TombstoneTTL).After(now) {
				delete(r.leftAt, owner)
				delete(r.renewedAt, owner)
			}
			continue
		}
		due := at.Add(r.cfg.OrphanTimeout)
		if due.After(now) {
			if !ok || due.Before(next) {
				next, ok = due, true
			}
			continue
		}
		// Sessions die with their owner. Beat records were handed to their new HRW owner when
		// the owner left; one still owned by it now was never taken over (the adopter's store
		// dropped it, or views disagreed): it is removed the same way, locally, and yields to
		// any newer version.
		n := 0
		r.tab.all(func(e *entry) bool {
			if e.live() && e.owner.id == owner {
				r.emitLocked(storeEvent{op: evApply, rec: r.tab.orphan(e, now)})
				n++
			}
			return true
		})
		r.log.Info("distro: removed orphaned records", "owner", owner, "records", n)
		r.stats.orphansRemoved.Add(uint64(n))
	}
	return next, ok
}

// sendSync sends one batch to peer, reports the outcome to the sync schedule (a failure is
// retried after a backoff) and pokes the run loop.
func (r *Replicator) sendSync(peer string, keys []string, recs []Record) {
	body, err := model.Marshal(syncMsg{Records: wires(recs)})
	if err == nil {
		ctx, cancel := r.requestCtx()
		_, err = r.request(ctx, peer, kindSync, body)
		cancel()
	}
	r.stats.syncSent(len(recs), err == nil)
	r.mu.Lock()
	d := r.sched.done(peer, keys, err == nil, r.clk.Now(), r.rnd)
	r.mu.Unlock()
	if err != nil && r.ctx.Err() == nil {
		r.log.Debug("distro: sync failed, will retry", "peer", peer, "records", len(recs), "retry_in", d, "err", err)
	}
	r.poke()
}
