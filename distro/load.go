package distro

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/transport"
)

// snapshotPage is the record budget of one snapshot page.
const snapshotPage = 4096

// loadApplyBatch is about how many loaded records finishLoad hands the Store at once (whole
// buckets: a list may be longer by one bucket's records).
const loadApplyBatch = 4096

// load pulls snapshots from every reachable peer, merging them by version, then makes the node
// ready. It retries unreachable peers until one answers or LoadTimeout passes; with none it
// declares this node the first one. A peer that refused because its membership does not list
// this node yet (ErrNotMember: this node has just joined) is retried until it answers or
// LoadTimeout passes, even once another peer answered: it is reachable and holds state.
//
// A cold cluster does not wait LoadTimeout: when, in two rounds in a row, every known peer answered
// that it is loading too (none unreachable, none refusing, none with a snapshot), no member holds
// state that this node could miss, and it is ready. One peer that does not answer keeps the rule:
// this node waits for it, or LoadTimeout.
func (r *Replicator) load() {
	start := r.clk.Now()
	deadline := start.Add(r.cfg.LoadTimeout)
	answered := map[string]bool{}
	ref := &loadRef{}
	cold, coldRounds := false, 0
	retry := min(r.cfg.LoadTimeout/10, 100*time.Millisecond)
	for {
		notYet := 0  // peers that refused this round because they do not list this node yet
		loading := 0 // peers that answered this round that they are loading too
		r.mu.Lock()
		var peers []string
		for _, p := range r.members {
			if p != r.self && !answered[p] {
				peers = append(peers, p)
			}
		}
		r.mu.Unlock()

		var wg sync.WaitGroup
		var mu sync.Mutex
		left := len(peers)
		for _, p := range peers {
			wg.Add(1)
			r.goBusy(func() {
				defer wg.Done()
				defer func() {
					// The last one to end counts the load as busy again before the load wakes
					// (see Settle): from its wg.Wait, the load is waiting for these goroutines.
					mu.Lock()
					left--
					last := left == 0
					mu.Unlock()
					if last {
						r.busyAdd(1)
					}
				}()
				err := r.loadFrom(p, ref)
				if err != nil {
					if r.ctx.Err() == nil {
						r.log.Info("distro: load from peer failed", "peer", p, "err", err)
					}
					mu.Lock()
					switch {
					case errors.Is(err, ErrNotMember):
						notYet++
					case errors.Is(err, ErrNotReady):
						loading++
					}
					mu.Unlock()
					return
				}
				mu.Lock()
				answered[p] = true
				mu.Unlock()
			})
		}
		if len(peers) > 0 {
			r.busyAdd(-1)
		}
		wg.Wait()
		if r.ctx.Err() != nil {
			return
		}
		if len(answered) > 0 && notYet == 0 {
			break // every peer known now was tried, at least one answered
		}
		if want := r.cfg.ColdStartMembers; want > 0 && len(answered) == 0 && len(peers)+1 >= want && loading == len(peers) {
			// Every member of a cluster of the size the host expects is loading too: a cold
			// cluster, nobody holds state. Two rounds in a row, a retry apart, so that a
			// member's answer is not a moment's.
			if coldRounds++; coldRounds >= 2 {
				cold = true
				break
			}
		} else {
			coldRounds = 0
		}
		if !r.clk.Now().Before(deadline) {
			break
		}
		if !r.sleepUntil(r.clk.Now(), retry, false) {
			return
		}
	}
	r.finishLoad(len(answered), cold, r.clk.Since(start))
}

// loadRef is what a load compares the peers' snapshots with, so that it pulls each record once
// rather than once per peer: the bucket sums of the first snapshot it merged whole (the
// primary's). Every other peer then sends only the buckets whose sums differ from those: a
// bucket whose sum is the same holds the same versions, which the load has (the same 64-bit
// sums verify trusts). The merge is the same as of every peer's whole snapshot.
type loadRef struct {
	mu      sync.Mutex
	primary string        // the peer being loaded whole, "" when none
	done    chan struct{} // closed when the primary's load ends
	sums    []byte        // once a primary's load succeeded: its sums, 8 bytes per bucket
}

// reference returns the sums, nil if there are none yet.
func (l *loadRef) reference() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sums
}

// claim makes peer the primary if there is none (and no reference yet); otherwise it returns
// the channel that closes when the current primary's load ends (nil if the reference is there).
func (l *loadRef) claim(peer string) (wait <-chan struct{}, primary bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.sums != nil:
		return nil, false
	case l.primary == "":
		l.primary, l.done = peer, make(chan struct{})
		return nil, true
	}
	return l.done, false
}

// finish ends the primary's load: with its sums if it succeeded and sent sums of every bucket,
// otherwise with none (the others then load whole, and a later round may pick another primary).
func (l *loadRef) finish(sums []byte, ok bool, nb int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ok && len(sums) == 8*nb {
		l.sums = sums
	}
	l.primary = ""
	close(l.done)
}

// loadFrom pages through peer's snapshot. A peer that is itself still loading has not answered
// (it fails with ErrNotReady): nodes restarting together never take each other's half-loaded
// state for the cluster's (see load for a whole cluster starting cold).
//
// Every peer's first page is taken whole. The first peer to answer is the primary: the rest of
// its snapshot is taken whole too, with the bucket sums of every page. The others wait for it,
// then take only the buckets whose sums differ from the primary's (loadRef); if it failed, they
// take everything.
func (r *Replicator) loadFrom(peer string, ref *loadRef) error {
	o := new(owners) // the IDs of the peer's records' owners, one string each
	if sums := ref.reference(); sums != nil {
		return r.loadPages(peer, 0, sums, nil, o)
	}
	var acc pageSums
	next, done, err := r.loadPage(peer, 0, nil, &acc, o)
	if err != nil {
		return err
	}
	wait, primary := ref.claim(peer)
	if primary {
		if !done {
			err = r.loadPages(peer, next, nil, &acc, o)
		}
		ref.finish(acc.sums, err == nil && acc.ok, r.cfg.Buckets)
		return err
	}
	if done {
		return nil
	}
	if wait != nil {
		select {
		case <-wait:
		case <-r.ctx.Done():
			return r.ctx.Err()
		}
	}
	return r.loadPages(peer, next, ref.reference(), nil, o)
}

// pageSums gathers the bucket sums of the pages of a whole snapshot, in bucket order.
type pageSums struct {
	sums []byte
	ok   bool // every page so far carried the sums of every bucket it covered
}

// loadPages takes pages from bucket from on until the last. It asks for each next page while
// it installs the current one (the peer encodes, the network carries and this node decodes the
// next page meanwhile), so a page's round trip is not added to its installation.
func (r *Replicator) loadPages(peer string, from uint32, ref []byte, acc *pageSums, o *owners) error {
	p := r.fetchPage(peer, from, ref, o)
	for {
		if p.err != nil {
			return p.err
		}
		next, done := p.m.Next, p.m.Done || p.m.Next <= from
		var ahead chan fetchedPage
		if !done {
			ahead = make(chan fetchedPage, 1)
			r.goBusy(func() {
				q := r.fetchPage(peer, next, ref, o) // the only decode under way: o is not shared
				// Counted for the loader before it wakes (see Settle): it does not count while
				// it waits below.
				r.busyAdd(1)
				ahead <- q
			})
		}
		r.installPage(peer, from, p, acc)
		if done {
			return nil
		}
		r.busyAdd(-1) // waiting: the fetch counts, and counts this goroutine again when it ends
		p, from = <-ahead, next
	}
}

// fetchedPage is a snapshot page as a peer sent it, decoded, or why there is none.
type fetchedPage struct {
	recs []Record
	khs  []uint64 // keyHash of each record's key, computed with the decoding (ahead of the install)
	m    snapResp
	err  error
}

// loadPage requests one page from bucket from (with ref, only the buckets that differ from
// it), offers its records and, if acc is set, gathers its sums. done is set after the last page.
func (r *Replicator) loadPage(peer string, from uint32, ref []byte, acc *pageSums, o *owners) (next uint32, done bool, err error) {
	p := r.fetchPage(peer, from, ref, o)
	if p.err != nil {
		return 0, false, p.err
	}
	r.installPage(peer, from, p, acc)
	return p.m.Next, p.m.Done || p.m.Next <= from, nil
}

// fetchPage requests and decodes the page from bucket from, its owner IDs taken from o.
func (r *Replicator) fetchPage(peer string, from uint32, ref []byte, o *owners) fetchedPage {
	body, err := model.Marshal(snapReq{From: from, Max: snapshotPage, Sums: ref})
	if err != nil {
		return fetchedPage{err: err}
	}
	ctx, cancel := r.requestCtx()
	resp, err := r.request(ctx, peer, kindSnapshot, body)
	cancel()
	var re *transport.RemoteError
	if errors.As(err, &re) && re.Msg == ErrNotReady.Error() {
		return fetchedPage{err: fmt.Errorf("%w: %s is loading too", ErrNotReady, peer)}
	}
	if errors.As(err, &re) && re.Msg == ErrNotMember.Error() {
		return fetchedPage{err: fmt.Errorf("%w: %s does not list this node yet", ErrNotMember, peer)}
	}
	if err != nil {
		return fetchedPage{err: err}
	}
	recs, m, err := decodePage(resp, o)
	if err != nil {
		return fetchedPage{err: err}
	}
	khs := make([]uint64, len(recs))
	for i := range recs {
		khs[i] = keyHash(recs[i].Key)
	}
	return fetchedPage{recs: recs, khs: khs, m: m}
}

// installPage offers the records of page p, which began at bucket from, and, if acc is set,
// gathers its sums.
func (r *Replicator) installPage(peer string, from uint32, p fetchedPage, acc *pageSums) {
	recs, m := p.recs, p.m
	if acc != nil {
		if from == 0 {
			acc.ok = true
		}
		if m.Next < from || len(m.Sums) != 8*int(m.Next-from) {
			acc.ok = false // a peer that sends no sums (an earlier version) cannot be the reference
		}
		if acc.ok {
			acc.sums = append(acc.sums, m.Sums...)
		}
	}
	r.mu.Lock()
	now := r.clk.Now()
	// A peer sends a bucket's records together: a run of records of one bucket that the table
	// holds nothing of yet (the load fills an empty table) sizes that bucket's entry set once
	// (reserve: the fewest slots that hold them within the load limit), instead of growing it
	// by 1.25× steps as they are installed.
	for i := 0; i < len(recs); {
		b, j := bucketOf(p.khs[i], r.cfg.Buckets), i+1
		for j < len(recs) && bucketOf(p.khs[j], r.cfg.Buckets) == b {
			j++
		}
		r.tab.reserve(b, j-i)
		i = j
	}
	for i, rec := range recs {
		r.offerLoadedLocked(rec, p.khs[i], now)
	}
	if acc != nil && acc.ok {
		// The sums become the reference the other peers leave buckets out
		// by: they must be those of the records the page carried. Sums that
		// are not (a faulty or hostile peer's, or a loader that held newer
		// records already) are not used: every peer then sends everything.
		for b := from; b < m.Next && int(b) < r.cfg.Buckets; b++ {
			if r.tab.bucketSum(int(b)) != binary.BigEndian.Uint64(m.Sums[8*int(b-from):]) {
				acc.ok = false
				r.log.Warn("distro: a snapshot's bucket sums do not match its records; loading whole snapshots from every peer", "peer", peer, "bucket", b)
				break
			}
		}
	}
	r.mu.Unlock()
	r.drain()
}

// finishLoad settles what the snapshots held and makes the node ready: records of this node's
// previous incarnation (sessions died with it: tombstoned; beats: adopted if HRW still names
// this node), owners that are not members (orphan clocks start now), beats to adopt.
func (r *Replicator) finishLoad(peers int, cold bool, took time.Duration) {
	// First the Store gets the merged result of the snapshots (each loaded foreign record, once,
	// at its final version), before the node is ready: a ready node's Store holds what it loaded.
	// In lists of about loadApplyBatch records, each one event (one ApplyBatch), delivered
	// before the next is gathered (drainUntilLocked: by this goroutine, or by the one draining
	// when a message's handler is): not a million events at once (~140 bytes each, in a queue
	// copied as it grows), and one list, handed back by drain, for them all. Between two lists
	// the lock is free: a record received meanwhile replaces its loaded version, is not loaded
	// any more, and reaches the Store as any received record does (after the loaded version if
	// that was in an earlier list: its event comes later in the queue).
	for b := 0; b < r.cfg.Buckets; {
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			return
		}
		recs := r.loadBuf
		r.loadBuf = nil
		if recs == nil {
			recs = make([]Record, 0, loadApplyBatch)
		}
		for ; b < r.cfg.Buckets && len(recs) < loadApplyBatch; b++ {
			r.tab.each(b, func(e *entry) bool {
				if e.loaded {
					e.loaded = false
					if e.live() && e.owner.id != r.self { // this node's own: settled below
						recs = append(recs, e.record())
					}
				}
				return true
			})
		}
		if len(recs) > 0 {
			r.emitLocked(storeEvent{op: evApplyLoaded, loaded: &loadedList{recs: recs, gen: r.tab.changes}})
		} else {
			r.loadBuf = recs
		}
		r.drainUntilLocked()
		r.mu.Unlock()
	}

	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.loadBuf = nil // the lists are delivered, or will be by the goroutine draining (it keeps none once ready)
	now := r.clk.Now()
	var stale []Record
	// One pass over the table: this node's records of a previous incarnation, and the foreign
	// beats HRW assigns to this node (adoptScanLocked's work, which no step below changes: the
	// tombstones below are of this node's own sessions, leftAt is not read by it).
	r.tab.all(func(e *entry) bool {
		if e.owner.id != r.self {
			r.adoptEntryLocked(e)
			return true
		}
		if !e.live() || e.local {
			return true // only records of a previous incarnation, loaded from peers
		}
		if e.kind == KindSession {
			stale = append(stale, e.record())
		} else if hrwOwner(r.members, e.key) == r.self && !e.adopting {
			e.adopting = true
			r.emitLocked(storeEvent{op: evAdopt, rec: e.record(), renewed: r.tab.recvAt(e)})
		}
		return true
	})
	for _, rec := range stale {
		rec.Revision = r.nextRevLocked(rec.Revision + 1)
		rec.Deleted, rec.Payload = true, nil
		// The loaded record's key shares an allocation with its payload (joinKeyPayload): the
		// tombstone, its TTL long, and its syncs keep a copy of the key, not the payload.
		rec.Key = strings.Clone(rec.Key)
		r.installOwnLocked(rec)
	}
	for owner := range r.tab.owners {
		if _, alive := r.memberSet[owner]; !alive {
			if _, ok := r.leftAt[owner]; !ok {
				r.leftAt[owner] = now
			}
		}
	}
	r.stats.loaded(took, peers, cold)
	r.ready = true
	close(r.readyCh)
	n := r.tab.len()
	r.mu.Unlock()
	if cold {
		r.log.Info("distro: every peer is loading too: ready as a node of a cold cluster", "waited", took)
	} else if peers == 0 {
		r.log.Info("distro: no reachable peer within LoadTimeout: ready as the first node", "waited", took)
	} else {
		r.log.Info("distro: loaded", "peers", peers, "records", n, "took", took, "own_sessions_tombstoned", len(stale))
	}
	r.drain()
	r.poke()
}

// handleSnapshot serves one page of every record this node holds (tombstones included), whole
// buckets from req.From on, with the page's bucket sums. With the loader's reference sums
// (req.Sums), buckets whose sum is the same as the reference's are left out.
func (r *Replicator) handleSnapshot(_ context.Context, from string, body []byte) ([]byte, error) {
	if err := r.admit("snapshot", from); err != nil {
		return nil, err
	}
	req, err := decodeSnapReq(body)
	if err != nil {
		r.log.Warn("distro: bad snapshot request", "from", from, "err", err)
		r.stats.malformed.Add(1)
		return nil, err
	}
	budget := int(min(max(req.Max, 1), snapshotPage))
	ref := req.Sums
	if len(ref) != 8*r.cfg.Buckets {
		ref = nil // none, or another bucket count: serve every bucket
	}
	r.mu.Lock()
	if err := r.admitLocked("snapshot", from); err != nil {
		r.mu.Unlock()
		return nil, err
	}
	if !r.ready {
		r.mu.Unlock()
		return nil, ErrNotReady
	}
	var recs []Record // from r.pageBufs once the page has a record
	var sums []byte
	b, size := int(req.From), 0
	for b < r.cfg.Buckets && len(recs) < budget && size < maxBatchBytes {
		sum := r.tab.bucketSum(b)
		if ref != nil && sum == binary.BigEndian.Uint64(ref[8*b:]) {
			b++ // the loader has exactly this bucket already
			continue
		}
		start := len(recs)
		r.tab.each(b, func(e *entry) bool {
			if e.held() {
				if recs == nil {
					recs = r.pageBuf()
				}
				recs = append(recs, e.record())
				size += len(e.payload())
			}
			return true
		})
		if len(recs) > budget && start > 0 {
			recs = recs[:start] // whole buckets only: this one opens the next page
			break
		}
		if len(recs) > maxSnapshotRecords { // one bucket alone beyond what a loader accepts
			r.mu.Unlock()
			r.log.Error("distro: a snapshot bucket holds more records than a page may carry: raise Buckets", "bucket", b, "records", len(recs), "max", maxSnapshotRecords)
			return nil, fmt.Errorf("%w: bucket %d holds %d records, more than a snapshot page's %d (raise Config.Buckets)", ErrInvalidConfig, b, len(recs), maxSnapshotRecords)
		}
		if ref == nil {
			sums = binary.BigEndian.AppendUint64(sums, sum)
		}
		b++
	}
	r.mu.Unlock()
	r.stats.snapshotPages.Add(1)
	// Encoded outside the lock, by hand (snapenc.go): the records are copies.
	out := encodeSnapshotPage(recs, uint32(b), b >= r.cfg.Buckets, sums)
	if recs != nil && cap(recs) <= 2*snapshotPage { // a list grown for one huge bucket is not kept
		clear(recs[:cap(recs)]) // no records kept with the list (those cut off past the page too)
		r.pageBufs.Put(&recs)
	}
	return out, nil
}

// pageBuf returns an empty list for a snapshot page's records (a page's copies are dropped as
// soon as it is encoded: the list is used again, for the loader's next page).
func (r *Replicator) pageBuf() []Record {
	if p, ok := r.pageBufs.Get().(*[]Record); ok {
		return (*p)[:0]
	}
	return make([]Record, 0, snapshotPage)
}
