package distro

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/muster-io/muster/internal/logx"
	"github.com/muster-io/muster/internal/randx"
	"github.com/muster-io/muster/transport"
)

// maxBatchBytes caps the payload bytes of one sync, repair or snapshot message (well under the
// transports' 4 MiB frame limit).
const maxBatchBytes = 1 << 20

// maxVerifyVersions caps the versions one verify answer carries; buckets beyond it are repaired
// in later rounds.
const maxVerifyVersions = 16384

// Replicator is the driver of Distro replication on one node: it owns the goroutines, the clock
// and the transport handlers around the pure core (table, syncSched, hrwOwner).
//
// All methods are safe for concurrent use. Put, Delete, Get, Range, Owner and Members never
// block on the network.
type Replicator struct {
	cfg  Config
	clk  clockwork.Clock
	log  *slog.Logger
	self string
	// epoch is this incarnation's revision floor: the clock at New, in microseconds since
	// 1970 (see nextRevLocked).
	epoch uint64

	mu         sync.Mutex
	rnd        *rand.Rand
	tab        *table
	sched      *syncSched
	members    []string          // live, sorted, self included
	memberSet  map[string]Member // live, self included
	leftAt     map[string]time.Time
	renewedAt  map[string]time.Time // last verify received from each owner
	verifying  map[string]bool      // peers with a verify round in flight
	adoptLater map[string]struct{}  // beat record keys HRW assigns here, received from a live non-owner
	nextVerify time.Time
	started    bool
	closed     bool
	ready      bool
	readyCh    chan struct{}
	events     []storeEvent
	draining   bool
	// emitted and delivered count the Store calls queued and those drain has carried out
	// (or dropped after Close), in queue order; delivery is broadcast on drained (on mu), so
	// that a goroutine can wait for its own events when another goroutine is the one draining.
	emitted, delivered uint64
	drained            sync.Cond
	loadBuf            []Record  // finishLoad's list for its next evApplyLoaded (drain hands it back)
	pageBufs           sync.Pool // of *[]Record: handleSnapshot's lists of a page's records
	refused            int       // records refused because the sender was not their owner (tests assert 0)
	// nonMember counts messages refused because their sender was not a current member.
	nonMember int
	stats     counters // see Stats (stats.go)
	// deleteLater are beat record keys HRW assigns here whose live record a live non-owner sent,
	// refused because this node holds a newer deletion of another owner's (noteRefusedLocked).
	deleteLater map[string]struct{}

	kick chan struct{}
	// amu guards act, what the goroutines are doing (see Settle). It is never held while taking
	// mu.
	amu sync.Mutex
	act activity
	// flushed holds Flush calls waiting for the sync queue to go quiet.
	flushed []chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc
	unsub   func()
	wg      sync.WaitGroup
}

type storeEvent struct {
	op      uint8 // evApply, evAdopt, evMembers, evRemove, evApplyLoaded
	rec     Record
	renewed time.Time
	members []string
	loaded  *loadedList // evApplyLoaded
}

// loadedList is what an evApplyLoaded delivers: records of the table's as they were when the
// table's change count was gen.
type loadedList struct {
	recs []Record
	gen  uint64
}

const (
	evApply uint8 = iota + 1
	evAdopt
	evMembers
	// evRemove is an Apply of a tombstone carrying the version of a foreign record the Store was
	// given, replaced during the load by a record it will not be given (a tombstone, or this
	// node's own from a previous incarnation). It is never stale: whatever replaced the removed
	// version, the Store must not keep it.
	evRemove
	// evApplyLoaded is an Apply of each of recs, loaded records handed over by finishLoad: one
	// event for a few thousand, delivered as one ApplyBatch to a BatchStore.
	evApplyLoaded
)

// New validates cfg and returns a Replicator. It starts nothing.
func New(cfg Config) (*Replicator, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &Replicator{cfg: cfg, self: cfg.NodeID}
	r.clk = cfg.Clock
	if r.clk == nil {
		r.clk = clockwork.NewRealClock()
	}
	r.log = cfg.Logger
	if r.log == nil {
		r.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	r.log = logx.WithNode(r.log, r.self)
	r.epoch = epochAt(r.clk.Now())
	r.rnd = rand.New(randx.Source(cfg.Rand))
	r.tab = newTable(cfg.Buckets)
	r.tab.self = r.self
	r.sched = newSyncSched(max(cfg.SyncDelay, 0), cfg.RetryMin, cfg.RetryMax)
	r.sched.nb = cfg.Buckets // fresh tasks per bucket: verify leaves those buckets out
	r.members = []string{r.self}
	r.memberSet = map[string]Member{r.self: {ID: r.self}}
	r.leftAt = map[string]time.Time{}
	r.renewedAt = map[string]time.Time{}
	r.verifying = map[string]bool{}
	r.adoptLater = map[string]struct{}{}
	r.deleteLater = map[string]struct{}{}
	r.readyCh = make(chan struct{})
	r.drained.L = &r.mu
	r.kick = make(chan struct{}, 1)
	r.act.init()
	return r, nil
}

// Start registers the transport handlers, subscribes to membership and starts loading from the
// peers in the background; the node becomes Ready when the load ends (see the package doc). ctx
// is not retained: Close stops everything.
func (r *Replicator) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return ErrClosed
	}
	if r.started {
		r.mu.Unlock()
		return ErrStarted
	}
	r.started = true
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.nextVerify = r.clk.Now().Add(r.cfg.VerifyInterval)
	r.setHandlers(true) // under mu, so that a Close under way removes them (Handle does not block)
	r.mu.Unlock()

	// Subscribe first, then read the list: no change can fall between the two.
	unsub := r.cfg.Membership.Subscribe(r.onMembers)
	r.mu.Lock()
	r.unsub = unsub
	r.mu.Unlock()
	r.onMembers(r.cfg.Membership.Members())

	r.goBusy(r.run)
	r.goBusy(r.load)
	return nil
}

// setHandlers installs (on) or removes the handlers of distro's message kinds on the transport.
func (r *Replicator) setHandlers(on bool) {
	for _, k := range []struct {
		kind transport.Kind
		h    transport.Handler
	}{
		{kindSync, r.handleSync},
		{kindVerify, r.handleVerify},
		{kindRepair, r.handleRepair},
		{kindSnapshot, r.handleSnapshot},
		{kindConsistency, r.handleConsistency},
	} {
		if !on {
			k.h = nil
		}
		r.cfg.Transport.Handle(k.kind, k.h)
	}
}

// Close stops the replicator and waits for its goroutines. Calls after it fail with ErrClosed.
// It removes the handlers Start installed (peers then get transport.ErrNoHandler; a handler
// already running answers ErrClosed), but does not close the transport or the membership
// (they are the caller's): a replicator started on the same transport afterwards must be
// started after Close returns. Idempotent.
func (r *Replicator) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		r.wg.Wait()
		return nil
	}
	r.closed = true
	r.drained.Broadcast() // a finishLoad waiting for delivery gives up
	if r.started {
		r.setHandlers(false)
	}
	unsub, cancel := r.unsub, r.cancel
	r.mu.Unlock()
	if unsub != nil {
		unsub()
	}
	if cancel != nil {
		cancel()
	}
	r.wg.Wait()
	return nil
}

// Flush sends every change still waiting in its merge window (SyncDelay)
// or in a retry backoff now, and returns once each has been sent to every
// peer or has failed once, or when ctx ends. A node shutting down gracefully
// calls it after its last writes (the registry tombstones its sessions), so
// that its peers learn of them at once instead of after OrphanTimeout. It
// blocks; it fails with ErrClosed after Close.
func (r *Replicator) Flush(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return ErrClosed
	}
	if r.ctx == nil { // not started: nothing was sent, nothing to wait for
		r.mu.Unlock()
		return nil
	}
	r.sched.flush(r.clk.Now())
	ch := make(chan struct{})
	r.flushed = append(r.flushed, ch)
	r.mu.Unlock()
	r.poke()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-r.ctx.Done():
		return ErrClosed
	}
}

// goFunc runs fn in a goroutine tracked by the wait group.
func (r *Replicator) goFunc(fn func()) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		fn()
	}()
}

// Ready reports whether the startup load finished.
func (r *Replicator) Ready() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ready
}

// WaitReady blocks until the node is ready, ctx ends or the replicator closes.
func (r *Replicator) WaitReady(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return ErrClosed
	}
	ch, done := r.readyCh, r.ctx
	r.mu.Unlock()
	var doneCh <-chan struct{}
	if done != nil {
		doneCh = done.Done()
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-doneCh:
		return ErrClosed
	}
}

// Owner returns the HRW (rendezvous) owner of key among the live members: the owner of the beat
// record of that key, and of any work keyed the same way (the registry places an instance's
// health checks on the owner of its beat record key).
func (r *Replicator) Owner(key string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return hrwOwner(r.members, key)
}

// Members returns the live members, sorted, self included.
func (r *Replicator) Members() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.members)
}

// Put records a change this node made to a record it owns: revision = held revision + 1, and
// at least this incarnation's epoch (the clock at New in microseconds: a node that restarted
// never writes a version of its previous incarnation again, see nextRevLocked), Owner = self;
// it stores it and schedules its sync to every peer. For KindBeat it fails with
// ErrNotOwner when HRW names another node; a session key held live by another live node also
// fails with ErrNotOwner. It never blocks on the network.
func (r *Replicator) Put(kind Kind, key string, payload []byte) (Record, error) {
	rec := Record{Key: key, Kind: kind, Owner: r.self, Revision: 1, Payload: payload}
	if err := rec.validate(); err != nil {
		return Record{}, err
	}
	return r.write(rec)
}

// Delete writes a tombstone for key (same ownership rule as Put) and syncs it. It fails with
// ErrNotFound if no live record is held for key.
func (r *Replicator) Delete(key string) (Record, error) {
	r.mu.Lock()
	e := r.tab.get(key)
	if e == nil || !e.live() {
		r.mu.Unlock()
		return Record{}, fmt.Errorf("%w: %q", ErrNotFound, key)
	}
	rec := Record{Key: key, Kind: e.kind, Owner: r.self, Revision: 1, Deleted: true}
	r.mu.Unlock()
	return r.write(rec)
}

func (r *Replicator) write(rec Record) (Record, error) {
	r.mu.Lock()
	rec, err := r.writeLocked(rec)
	r.mu.Unlock()
	if err == nil {
		r.poke()
	}
	return rec, err
}

// writeLocked is write under r.mu, without the poke.
func (r *Replicator) writeLocked(rec Record) (Record, error) {
	rec, err := r.versionOwnLocked(rec)
	if err != nil {
		return Record{}, err
	}
	r.installOwnLocked(rec)
	return rec, nil
}

// versionOwnLocked checks that this node may write rec (ownership) and gives it its revision:
// the held one + 1.
func (r *Replicator) versionOwnLocked(rec Record) (Record, error) {
	if r.closed {
		return Record{}, ErrClosed
	}
	e := r.tab.get(rec.Key)
	switch rec.Kind {
	case KindBeat:
		if o := hrwOwner(r.members, rec.Key); o != r.self {
			return Record{}, fmt.Errorf("%w: %q is owned by %s", ErrNotOwner, rec.Key, o)
		}
	case KindSession:
		if e != nil && e.live() && e.owner.id != r.self {
			if _, alive := r.memberSet[e.owner.id]; alive {
				return Record{}, fmt.Errorf("%w: %q is owned by %s", ErrNotOwner, rec.Key, e.owner.id)
			}
		}
	}
	if e != nil {
		rec.Revision = e.rev + 1
	}
	rec.Revision = r.nextRevLocked(rec.Revision)
	return rec, nil
}

// nextRevLocked returns the revision this node writes when it needs at least rev: rev, or more
// if this node forgot a record of its own at rev or above (table.forgot), and never below this
// incarnation's epoch. One version never names two states:
//
//   - After its tombstone expired here, a key's history may start again, while a peer that
//     received or loaded the tombstone later still holds it.
//   - A node that restarts has lost every version it wrote. Its load gets them back from its
//     peers, but not from a peer it cannot reach (a partition), nor one it never synced (it
//     died first). Every revision it writes is at least its epoch, the clock at its start in
//     microseconds, and the previous incarnation's revisions were below it: they counted up
//     by one a write from that incarnation's own, earlier, epoch (a key is not written a
//     million times a second), or from a peer's version (whose epoch was its start time,
//     earlier too). So a restart reuses no version unless it comes back sooner than the clock
//     skew between the nodes, or its clock was set back by more than it was down. Then
//     verify still repairs it: a peer's copy of the version with another payload has another
//     checksum in the digest (payloadSum), and the owner moves past it.
//
// The epoch needs no disk (distro's state is in memory; a persisted counter would not survive a
// lost disk or a fresh container) and no new wire field: it is in the revision, so the new
// incarnation's versions are simply newer, and its first writes win at once everywhere, as a
// random incarnation ID could not (it would order the two incarnations at random, and a
// peer would keep the old state until verify moved past it). Microseconds keep revisions below
// 2^53, exact as JSON numbers, until the year 2255.
func (r *Replicator) nextRevLocked(rev uint64) uint64 {
	return max(rev, r.tab.forgot+1, r.epoch)
}

// epochAt is the revision floor of an incarnation started at t (see nextRevLocked): t in
// microseconds since 1970, at least 1.
func epochAt(t time.Time) uint64 {
	return uint64(max(t.UnixMicro(), 1))
}

// Change is one write of a Write batch: a Put of Payload, or, with Delete,
// a Delete (Payload unused).
type Change struct {
	Kind    Kind
	Key     string
	Payload []byte
	Delete  bool
}

// Write makes each change as Put or Delete would, under one hold of the
// replicator's lock, so that their syncs leave together (in the same
// batches, up to MaxBatch records each): a peer gets them in one message.
// They share one sync task per peer, also when one of the keys already had
// a change waiting (syncSched.addGroup): the earliest of their tasks. A
// ready set larger than MaxBatch records, or maxBatchBytes, still leaves in
// several messages.
// errs is nil when every change was written, else it holds each change's
// error (nil for those written) — those of Put and Delete. It never blocks
// on the network.
func (r *Replicator) Write(changes []Change) (errs []error) {
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(changes))
		}
		errs[i] = err
	}
	recs := make([]Record, len(changes))
	for i, c := range changes {
		recs[i] = Record{Key: c.Key, Kind: c.Kind, Owner: r.self, Revision: 1, Payload: c.Payload}
		if c.Delete { // its kind is the held record's (below)
			recs[i].Kind, recs[i].Payload, recs[i].Deleted = KindSession, nil, true
		}
		if err := recs[i].validate(); err != nil {
			fail(i, err)
		}
	}
	var keys []string // the keys written, whose syncs leave together (syncSched.addGroup)
	r.mu.Lock()
	now := r.clk.Now()
	for i, c := range changes {
		if errs != nil && errs[i] != nil {
			continue
		}
		if c.Delete {
			e := r.tab.get(c.Key)
			if e == nil || !e.live() {
				fail(i, fmt.Errorf("%w: %q", ErrNotFound, c.Key))
				continue
			}
			recs[i].Kind = e.kind
		}
		rec, err := r.versionOwnLocked(recs[i])
		if err != nil {
			fail(i, err)
			continue
		}
		r.storeOwnLocked(rec, now)
		keys = append(keys, rec.Key)
	}
	if len(keys) > 0 {
		for _, p := range r.members {
			if p != r.self {
				r.sched.addGroup(p, keys, now)
			}
		}
	}
	r.mu.Unlock()
	if len(keys) > 0 {
		r.poke()
	}
	return errs
}

// installOwnLocked stores a record this node wrote and schedules its sync to every peer.
func (r *Replicator) installOwnLocked(rec Record) {
	now := r.clk.Now()
	r.storeOwnLocked(rec, now)
	for _, p := range r.members {
		if p != r.self {
			r.sched.add(p, rec.Key, now)
		}
	}
}

// storeOwnLocked stores a record this node wrote, without scheduling its sync.
func (r *Replicator) storeOwnLocked(rec Record, now time.Time) {
	r.tab.install(rec, now)
	r.tab.get(rec.Key).local = true
}

// Get returns the record held for key: live, or a tombstone (Deleted) still remembered.
func (r *Replicator) Get(key string) (Record, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.tab.get(key)
	if e == nil || !e.held() {
		return Record{}, false
	}
	return e.record(), true
}

// Range calls fn for every held record, tombstones included, until fn returns false. It works on
// a copy taken at the call, so fn may call the Replicator.
func (r *Replicator) Range(fn func(Record) bool) {
	r.mu.Lock()
	recs := make([]Record, 0, r.tab.len())
	r.tab.all(func(e *entry) bool {
		if e.held() {
			recs = append(recs, e.record())
		}
		return true
	})
	r.mu.Unlock()
	for _, rec := range recs {
		if !fn(rec) {
			return
		}
	}
}

// poke wakes the run loop. The loop counts as busy (see Settle) before poke returns.
func (r *Replicator) poke() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
	r.amu.Lock()
	r.wakeLoopLocked()
	r.amu.Unlock()
}

// emitLocked queues a Store call; drain delivers it.
func (r *Replicator) emitLocked(ev storeEvent) {
	r.events = append(r.events, ev)
	r.emitted++
}

// drainUntilLocked delivers the Store calls queued so far, or waits for the goroutine that is
// draining to deliver them, and returns once they are (or the Replicator is closed). The
// caller holds mu; it is released while waiting. finishLoad relies on it: drain returns at
// once when another goroutine drains, and the node must not be ready before its Store holds
// what it loaded.
func (r *Replicator) drainUntilLocked() {
	want := r.emitted
	for r.delivered < want && !r.closed {
		if !r.draining {
			r.mu.Unlock()
			r.drain()
			r.mu.Lock()
			continue
		}
		r.drained.Wait()
	}
}

// drain delivers queued Store calls, one at a time and in queue order, without holding r.mu. If
// another goroutine is draining, it delivers ours too. After Close no new call starts.
func (r *Replicator) drain() {
	r.mu.Lock()
	if r.draining {
		r.mu.Unlock()
		return
	}
	r.draining = true
	for len(r.events) > 0 && !r.closed {
		evs := r.events
		r.events = nil
		r.mu.Unlock()
		bs, batched := r.cfg.Store.(BatchStore)
		var run []Record // consecutive Apply calls, for a BatchStore
		flush := func() {
			if len(run) > 0 {
				bs.ApplyBatch(run)
				run = run[:0]
			}
		}
		var spare []Record // an evApplyLoaded's list, delivered: finishLoad's next
		for i, ev := range evs {
			if ev.op == evApplyLoaded {
				recs := ev.loaded.recs
				if batched {
					flush()
					if recs := r.fresh(ev.loaded); len(recs) > 0 {
						bs.ApplyBatch(recs)
					}
				} else {
					for _, rec := range recs {
						if !r.stale(storeEvent{op: evApply, rec: rec}) {
							r.cfg.Store.Apply(rec)
						}
					}
				}
				clear(recs[:cap(recs)]) // the list is kept: no records with it
				spare = recs[:0]
				continue
			}
			if (ev.op == evApply || ev.op == evAdopt) && r.stale(ev) {
				continue
			}
			if batched && (ev.op == evApply || ev.op == evRemove) {
				if run == nil {
					run = make([]Record, 0, len(evs)-i) // grown once, not by doubling
				}
				run = append(run, ev.rec)
				continue
			}
			if batched {
				flush()
			}
			switch ev.op {
			case evApply, evRemove:
				r.cfg.Store.Apply(ev.rec)
			case evAdopt:
				r.cfg.Store.Adopt(ev.rec, ev.renewed)
			case evMembers:
				r.cfg.Store.MembersChanged(ev.members)
			}
		}
		if batched {
			flush()
		}
		r.mu.Lock()
		if spare != nil && !r.ready { // (finishLoad drops it before ready)
			r.loadBuf = spare
		}
		r.delivered += uint64(len(evs))
		r.drained.Broadcast()
	}
	if r.closed { // what is left is never delivered: nobody waits for it
		r.delivered += uint64(len(r.events))
		r.events = nil
	}
	r.draining = false
	r.drained.Broadcast()
	r.mu.Unlock()
}

// fresh drops, in place, the records of an evApplyLoaded that are stale (see stale), under one
// hold of the lock; what is left is delivered together, as a run of Apply events is. If the
// table has not changed since the list was taken, none is.
func (r *Replicator) fresh(l *loadedList) []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tab.changes == l.gen {
		return l.recs
	}
	out := l.recs[:0]
	for _, rec := range l.recs {
		if !r.staleLocked(evApply, rec) {
			out = append(out, rec)
		}
	}
	return out
}

// stale reports whether a queued Apply or Adopt was overtaken, before its delivery, by a newer
// version of its key (received, or written by the Store itself, e.g. after an earlier Adopt):
// delivering it would show the Store an older state after a newer one.
//
// A deletion overtaken by a version that is not live (a newer tombstone, or an orphan marker)
// is not stale: the newer deletion was queued only if it replaced a live version (offerLocked),
// so the overtaken one is the only word the Store gets that the live version it was last given
// is gone; dropped, the Store would keep that version for good. Delivered, it comes before
// anything queued after it (version order), and is at worst a deletion of a version the Store
// no longer holds (a later deletion, queued after a live version that was itself overtaken,
// removes that one too), which it ignores.
func (r *Replicator) stale(ev storeEvent) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.staleLocked(ev.op, ev.rec)
}

func (r *Replicator) staleLocked(op uint8, rec Record) bool {
	e := r.tab.get(rec.Key)
	if e == nil {
		return op == evAdopt // an expired tombstone: a deletion is still worth delivering
	}
	if !e.version().sameVersion(rec) {
		return op != evApply || !rec.Deleted || e.live() // a deletion overtaken by a deletion is not
	}
	return op == evAdopt && !e.live()
}

// offerLocked installs a record received from a peer if it is newer than what is held, and
// queues the Store call. It reports whether it was installed.
func (r *Replicator) offerLocked(rec Record, now time.Time) bool {
	if rec.Owner == r.self {
		return false // this node's own records come only from its load (offerLoadedLocked)
	}
	if !r.tab.accepts(rec) {
		r.noteRefusedLocked(rec)
		return false
	}
	prev, had := r.tab.install(rec, now)
	if !rec.Deleted {
		r.emitLocked(storeEvent{op: evApply, rec: rec})
	} else if had && prev.live() {
		// The Store is handed the payload of the version the tombstone removes (Store.Apply);
		// the table holds the tombstone as it came, without one.
		rec.Payload = prev.payload()
		r.emitLocked(storeEvent{op: evApply, rec: rec})
	}
	if _, alive := r.memberSet[rec.Owner]; !alive {
		if _, ok := r.leftAt[rec.Owner]; !ok {
			r.leftAt[rec.Owner] = now
		}
	}
	// A beat record whose HRW owner is this node, written by a node that left: take it over
	// at once. (One written by a live node that still thinks it owns the key is taken over
	// by the scan of the next verify tick: views that disagree for a moment, as when a join
	// is not yet known everywhere, do not bounce the key at network speed.)
	if r.ready && rec.Kind == KindBeat && !rec.Deleted {
		if _, alive := r.memberSet[rec.Owner]; !alive {
			r.adoptScanKeyLocked(rec.Key)
		} else if hrwOwner(r.members, rec.Key) == r.self {
			r.adoptLater[rec.Key] = struct{}{}
		}
	}
	return true
}

// noteRefusedLocked notes, for the next verify tick (deleteDeferredLocked), a live beat record
// that a live node sent of a key HRW assigns here, refused because this node holds a newer
// deletion of it by another owner: a tombstone, or an orphan marker. The sender owns its record
// and keeps sending it (this node's digest lacks it), but nothing shows it the deletion: its
// verify hears only of the versions of its own records and of the keys HRW assigns to it, and
// the deletion's owner may have forgotten it (its tombstone expired first, or it restarted), or
// left. Left so, the record would stay live on its writer, and on every node that takes it once
// its own tombstone expired, until TombstoneTTL had passed everywhere; then it would come back
// to life here too.
func (r *Replicator) noteRefusedLocked(rec Record) {
	if !r.ready || rec.Kind != KindBeat || rec.Deleted {
		return
	}
	e := r.tab.get(rec.Key)
	if e == nil || e.live() || e.owner.id == r.self {
		return // a live record, or this node's own tombstone, which its own verify sends
	}
	if _, alive := r.memberSet[rec.Owner]; alive && hrwOwner(r.members, rec.Key) == r.self {
		r.deleteLater[rec.Key] = struct{}{}
	}
}

// deleteDeferredLocked takes over, as this node's own tombstone, the deletion of each key noted
// by noteRefusedLocked, if HRW still assigns the key here and it still holds another owner's
// deletion: at a revision above it, so that it replaces, everywhere, the live records it is
// newer than (they were refused for that), and its own verify and syncs carry it to every node.
// The Store is not told: it holds no live record of the key (the deletion replaced it).
func (r *Replicator) deleteDeferredLocked() {
	for k := range r.deleteLater {
		e := r.tab.get(k)
		if e == nil || e.live() || e.owner.id == r.self || hrwOwner(r.members, k) != r.self {
			continue
		}
		// k is the key of a record received from a peer, which shares an allocation with that
		// record's payload (joinKeyPayload): the tombstone, its TTL long, keeps a copy.
		rec := Record{Key: strings.Clone(k), Kind: KindBeat, Owner: r.self, Deleted: true, Revision: r.nextRevLocked(e.rev + 1)}
		r.installOwnLocked(rec)
		r.log.Debug("distro: took over the deletion of a beat record a peer still holds live", "record", rec.String(), "was", e.record().String())
	}
	clear(r.deleteLater)
}

// offerLoadedLocked installs a record from a peer's snapshot during the startup load if it is
// newer than what is held. The Store hears of it only in finishLoad, from the merged result of
// all snapshots: an intermediate version (a peer's stale copy that another peer's newer record,
// perhaps a tombstone of this node's previous incarnation, replaces) never reaches it. A record
// the Store was already given (applied from a sync during the load) is removed from it if the
// loaded one will not replace it there (a tombstone, or a record of this node's own). A record
// this incarnation already wrote (a Put before ready) is the Store's own newest state: it stays
// and moves past the loaded version, so it wins everywhere. kh is keyHash(rec.Key).
func (r *Replicator) offerLoadedLocked(rec Record, kh uint64, now time.Time) {
	e, frag := r.tab.getHashed(rec.Key, kh)
	if !acceptsOver(e, rec) {
		return
	}
	if e != nil && e.local {
		nr := e.record()
		nr.Revision = r.nextRevLocked(rec.Revision + 1)
		r.installOwnLocked(nr)
		return
	}
	ne, prev, had := r.tab.installOver(rec, kh, frag, e, now)
	ne.loaded = true
	told := had && !prev.loaded && prev.live() && prev.owner.id != r.self
	if told && (rec.Deleted || rec.Owner == r.self) {
		gone := prev.record()
		gone.Deleted = true // with prev's payload: what it removes (Store.Apply)
		r.emitLocked(storeEvent{op: evRemove, rec: gone})
	}
}

// renewedLocked is the last time this node knew e alive: its receipt or the owner's last verify.
func (r *Replicator) renewedLocked(e *entry) time.Time {
	t := r.tab.recvAt(e)
	if v := r.renewedAt[e.owner.id]; v.After(t) {
		t = v
	}
	return t
}

// adoptScanLocked hands the Store every live beat record whose HRW owner is this node but whose
// Owner is another (it left, or this node's join moved the key here).
func (r *Replicator) adoptScanLocked() {
	r.tab.all(func(e *entry) bool {
		r.adoptEntryLocked(e)
		return true
	})
}

func (r *Replicator) adoptScanKeyLocked(key string) {
	if e := r.tab.get(key); e != nil {
		r.adoptEntryLocked(e)
	}
}

func (r *Replicator) adoptEntryLocked(e *entry) {
	if !e.live() || e.kind != KindBeat || e.owner.id == r.self {
		return
	}
	if hrwOwner(r.members, e.key) != r.self {
		e.adopting = false // if the key comes back here before a new version, adopt it again
		return
	}
	if e.adopting {
		return
	}
	e.adopting = true
	r.stats.adoptions.Add(1)
	r.emitLocked(storeEvent{op: evAdopt, rec: e.record(), renewed: r.renewedLocked(e)})
}

// onMembers is the membership callback.
func (r *Replicator) onMembers(ms []Member) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	now := r.clk.Now()
	set := make(map[string]Member, len(ms)+1)
	for _, m := range ms {
		if m.ID != "" {
			set[m.ID] = m
		}
	}
	if _, ok := set[r.self]; !ok {
		set[r.self] = Member{ID: r.self}
	}
	ids := sortedIDs(ms, r.self)
	changed := !slices.Equal(ids, r.members)
	for id := range r.memberSet {
		if _, ok := set[id]; !ok {
			r.sched.dropPeer(id)
			delete(r.verifying, id)
			r.leftAt[id] = now
			r.log.Info("distro: member left", "member", id)
		}
	}
	for id := range set {
		if _, ok := r.memberSet[id]; !ok && id != r.self {
			r.log.Info("distro: member joined", "member", id)
		}
		delete(r.leftAt, id)
	}
	r.members, r.memberSet = ids, set
	if changed {
		if r.ready {
			r.adoptScanLocked()
		}
		r.emitLocked(storeEvent{op: evMembers, members: slices.Clone(ids)})
	}
	r.mu.Unlock()
	r.drain()
	r.poke()
}

func (r *Replicator) requestCtx() (context.Context, context.CancelFunc) {
	// A real-time network deadline: the transport's request timeout, not protocol time.
	return context.WithTimeout(r.ctx, r.cfg.RequestTimeout)
}

// admit checks, before a handler decodes anything, that the sender may act: this replicator is
// open and from (the node ID the transport authenticated) is a current member. Messages from
// anyone else are refused with ErrNotMember and counted; their bodies are never decoded.
func (r *Replicator) admit(kind string, from string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.admitLocked(kind, from)
}

func (r *Replicator) admitLocked(kind string, from string) error {
	if r.closed {
		return ErrClosed
	}
	if _, ok := r.memberSet[from]; !ok || from == "" {
		r.nonMember++
		r.log.Debug("distro: refused a message from a node that is not a member", "kind", kind, "from", from)
		return ErrNotMember
	}
	return nil
}

func (r *Replicator) handleSync(_ context.Context, from string, body []byte) ([]byte, error) {
	if err := r.admit("sync", from); err != nil {
		return nil, err
	}
	recs, err := decodeSync(body)
	if err != nil {
		r.log.Warn("distro: bad sync message", "from", from, "err", err)
		r.stats.malformed.Add(1)
		return nil, err
	}
	r.mu.Lock()
	if err := r.admitLocked("sync", from); err != nil { // membership may have changed while decoding
		r.mu.Unlock()
		return nil, err
	}
	r.offerFromLocked(from, recs, r.clk.Now())
	r.stats.syncsReceived.Add(1)
	r.mu.Unlock()
	r.drain()
	return nil, nil
}

// offerFromLocked offers records a peer sent (sync or repair): each must be
// owned by that peer (single writer); others are refused and counted.
func (r *Replicator) offerFromLocked(from string, recs []Record, now time.Time) {
	for _, rec := range recs {
		if rec.Owner != from {
			r.log.Warn("distro: refused a record sent by a node that does not own it", "from", from, "record", rec.String())
			r.refused++
			continue
		}
		rec.Owner = from // the same bytes: one string held for all of the sender's records, not one each
		r.stats.offered(r.offerLocked(rec, now))
	}
}
