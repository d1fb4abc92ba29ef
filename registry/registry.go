package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/muster-io/muster/health"
	"github.com/muster-io/muster/internal/logx"
	"github.com/muster-io/muster/internal/randx"
	"github.com/muster-io/muster/model"
)

// lifecycle states.
const (
	stateNew = iota
	stateRunning
	stateClosed
)

// Registry is the engine: an in-memory index of services and instances, kept
// by publishers (sessions and heartbeats), by the persistent store, and by
// the lease and clean-up timers. See the package documentation.
type Registry struct {
	cfg   Config
	clock clockwork.Clock
	log   *slog.Logger
	store store

	// The mode, fixed by New. cluster: ephemeral data is replicated
	// (Config.Replicator), and a beat publisher is owned by the
	// rendezvous-hash owner of its ip:port; see replicate.go and
	// forward.go. sharedCP: persistent data is in a replicated Store
	// (Config.Store), whose leader proposes clean-ups; see raft.go.
	cluster    bool
	sharedCP   bool
	replicator Replicator // solo when standalone
	trans      Transport  // nil when standalone

	serving atomic.Bool // queries are answered (ready, or ServeBeforeReady)

	// Active health checks (nil when disabled); see checks.go.
	checks    *health.Scheduler
	hw        healthWrites
	wasLeader bool // the Raft leadership last seen by checksLeaderChanged; guarded by mu

	randMu sync.Mutex
	rand   *rand.Rand

	state atomic.Int32 // stateNew, stateRunning or stateClosed; written under mu

	// svcGen counts additions to and removals from services; snap is a
	// copy of services taken at some generation. While the two agree, a
	// query reads snap without taking mu (see Query).
	svcGen atomic.Uint64
	snap   atomic.Pointer[serviceSnapshot]
	stale  atomic.Int64 // queries that found snap stale since it was last rebuilt

	// mu guards everything below it, the index and its timers.
	mu sync.RWMutex
	// core is the index: services, slots, patches and their countdowns
	// (core.go, core_replica.go). The rest of the Registry reaches it
	// only through its methods, and carries out what they report
	// (drive.go); boundary_test.go checks that no other file reads its
	// fields.
	core    index
	encBuf  []byte          // replicateSession's encoding of a record, before its one allocation (instRecordChange)
	journal journal         // the latest instance events, for Explain (history.go)
	members map[string]bool // the replicator's members as last told (MembersChanged), for the journal

	timer   clockwork.Timer // wakes the housekeeper; nil before Start
	timerAt time.Time       // when timer fires

	watch watchState

	ready    chan struct{}   // closed once the registry serves
	stop     chan struct{}   // closed by Close
	runCtx   context.Context // cancelled by Close, right after stop: bounds the background work
	runStop  context.CancelFunc
	settles  chan chan struct{} // Settle's requests to the housekeeper
	handling bool               // Start installed the forward and lease handlers; guarded by mu
	sends    pending            // lease handovers being sent (see takeover.go)
	wg       sync.WaitGroup
	closeErr error
	closeMu  sync.Mutex

	run uint64 // this run's Cursor.Run: random, drawn by New

	stats       *stats // counters for Stats, written without mu
	beatsServed uint64 // heartbeats served as the owner, for Stats; guarded by mu
}

// New validates cfg and returns a registry that is not started yet.
func New(cfg Config) (*Registry, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &Registry{
		cfg:     cfg,
		clock:   cfg.Clock,
		log:     cfg.Logger,
		core:    newIndex(cfg.Limits, cfg.EmptyServiceTTL, cfg.PatchTTL),
		ready:   make(chan struct{}),
		stop:    make(chan struct{}),
		settles: make(chan chan struct{}),
	}
	if r.clock == nil {
		r.clock = clockwork.NewRealClock()
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	r.log = logx.WithNode(r.log, cfg.NodeID)
	r.rand = rand.New(randx.Source(cfg.Rand))
	r.run = randx.Run()
	r.store = &memStore{r: r}
	r.replicator = solo{id: cfg.NodeID}
	r.watch.init()
	r.stats = newStats()
	if cfg.HistoryEvents > 0 {
		r.journal = newJournal(cfg.HistoryEvents)
	}
	env := Env{NodeID: cfg.NodeID, Clock: r.clock, Logger: r.log, Limits: r.cfg.Limits.model()}
	if cfg.Replicator != nil {
		renv := env
		renv.Rand = rand.NewPCG(r.rand.Uint64(), r.rand.Uint64())
		d, err := cfg.Replicator(renv, distroStore{r})
		if err == nil && d == nil {
			err = errors.New("Config.Replicator returned no replicator")
		}
		if err != nil {
			return nil, fmt.Errorf("registry: %w", err)
		}
		r.cluster, r.replicator, r.trans = true, d, cfg.Transport
	}
	// Standalone nothing replicates: the index records no replication
	// effects.
	r.core.configure(cfg.watchHistory(), cfg.HistoryEvents > 0, !r.cluster)
	if cfg.HealthChecks != nil {
		hc := *cfg.HealthChecks
		hrand := rand.NewPCG(r.rand.Uint64(), r.rand.Uint64())
		if hc.Clock == nil {
			hc.Clock = r.clock
		}
		if hc.Logger == nil {
			hc.Logger = r.log
		}
		if hc.Rand == nil {
			hc.Rand = hrand
		}
		hc.OnTransition = r.onTransition
		if hc.Checkers[model.CheckMySQL] == nil {
			// Said at construction, not at the first MYSQL check (issue 29).
			r.log.Info("health checks are on without a MySQL checker: a cluster with a MYSQL check will fail its checks; put one (package health/mysqlcheck) in HealthChecks.Checkers (registry/node does)")
		}
		sched, err := health.NewScheduler(hc)
		if err != nil {
			return nil, fmt.Errorf("registry: %w", err)
		}
		r.checks = sched
		r.hw.pending = make(map[model.InstanceKey]bool)
		r.hw.wake = make(chan struct{}, 1)
	}
	if cfg.Store != nil {
		cp, err := cfg.Store(env, storeFeed{r})
		if err == nil && cp == nil {
			err = errors.New("Config.Store returned no store")
		}
		if err != nil {
			_ = r.replicator.Close()
			return nil, fmt.Errorf("registry: %w", err)
		}
		r.sharedCP = true
		r.store = &raftStore{r: r, cp: cp}
	}
	return r, nil
}

// Start starts the registry's goroutines. A standalone registry is ready as
// soon as Start returns; a node of a cluster once it has loaded the data of
// its peers (see Ready and WaitReady). The context only bounds Start itself;
// the registry runs until Close.
func (r *Registry) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.mu.Lock()
	switch r.state.Load() {
	case stateRunning:
		r.mu.Unlock()
		return ErrStarted
	case stateClosed:
		r.mu.Unlock()
		return ErrClosed
	}
	r.state.Store(stateRunning)
	r.runCtx, r.runStop = context.WithCancel(context.Background())
	r.timer = r.clock.NewTimer(r.cfg.SweepInterval)
	r.timerAt = r.now().Add(r.cfg.SweepInterval)
	r.goFunc(r.housekeeper)
	r.goFunc(r.notifier)
	if r.checks != nil {
		if err := r.checks.Start(ctx); err != nil {
			r.mu.Unlock()
			_ = r.Close()
			return fmt.Errorf("registry: starting health checks: %w", err)
		}
		r.goFunc(r.healthWriter)
	}
	if r.cfg.ServeBeforeReady {
		r.serving.Store(true)
	}
	r.mu.Unlock()

	if !r.cluster && !r.sharedCP {
		r.becomeReady("standalone")
		return nil
	}
	if err := r.store.Start(ctx); err != nil {
		_ = r.Close()
		return fmt.Errorf("registry: starting the persistent store: %w", err)
	}
	if r.cluster && !r.startLocked(func() {
		r.trans.Handle(kindForward, r.serveForward)
		r.trans.Handle(kindLeases, r.serveLeases)
		r.handling = true
	}) {
		return ErrClosed
	}
	if err := r.replicator.Start(ctx); err != nil {
		_ = r.Close()
		return fmt.Errorf("registry: starting replication: %w", err)
	}
	if !r.startLocked(func() { r.goFunc(r.awaitReady) }) {
		return ErrClosed
	}
	return nil
}

// startLocked runs f, a step of Start, under mu unless a Close has begun
// meanwhile (the store can take seconds to start): then it reports false
// and f does not run, so a Close never misses what Start set up.
func (r *Registry) startLocked(f func()) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state.Load() == stateClosed {
		return false
	}
	f()
	return true
}

// awaitReady marks the registry ready once replication has loaded from the
// peers and the raft store has applied what was committed when it started.
func (r *Registry) awaitReady() {
	ctx := r.runCtx
	for {
		err := r.store.WaitReady(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil || errors.Is(err, ErrClosed) {
			return
		}
		r.log.Info("waiting for the persistent store to catch up", "err", err)
	}
	if err := r.replicator.WaitReady(ctx); err != nil {
		return
	}
	r.becomeReady("cluster")
}

// becomeReady opens the registry to queries.
func (r *Registry) becomeReady(mode string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state.Load() != stateRunning {
		return
	}
	r.serving.Store(true)
	close(r.ready)
	r.log.Info("registry ready", "mode", mode)
}

// now reads the registry's clock.
func (r *Registry) now() time.Time { return r.clock.Now() }

// goFunc runs f in a goroutine that Close waits for.
func (r *Registry) goFunc(f func()) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		f()
	}()
}

// Close stops the registry: new calls fail with ErrClosed, sessions end,
// watchers are closed, and Close returns once every goroutine the registry
// started has returned. It is idempotent.
func (r *Registry) Close() error {
	r.closeMu.Lock()
	defer r.closeMu.Unlock()
	r.handOver()
	r.mu.Lock()
	if r.state.Load() == stateClosed {
		r.mu.Unlock()
		return r.closeErr
	}
	r.state.Store(stateClosed)
	r.serving.Store(false)
	handling := r.handling
	if r.timer != nil {
		r.timer.Stop()
	}
	sessions := slices.Collect(r.core.allSessions())
	r.mu.Unlock()
	if handling { // peers' writes and leases now get ErrNoHandler
		r.trans.Handle(kindForward, nil)
		r.trans.Handle(kindLeases, nil)
	}

	close(r.stop)
	if r.runStop != nil {
		r.runStop()
	}
	r.wg.Wait()
	if r.checks != nil {
		_ = r.checks.Close()
	}
	if err := r.replicator.Close(); err != nil {
		r.log.Warn("closing replication", "err", err)
	}
	for _, p := range sessions {
		p.session().end()
	}
	r.watch.closeAll(r, ErrClosed)
	r.closeErr = r.store.Close()
	r.log.Info("registry closed")
	return r.closeErr
}

// handOver ends this node's sessions and sends their removal to the peers
// before a cluster node closes (see Config.HandoverTimeout).
func (r *Registry) handOver() {
	if !r.cluster || r.cfg.HandoverTimeout <= 0 {
		return
	}
	r.mu.Lock()
	if r.state.Load() != stateRunning {
		r.mu.Unlock()
		return
	}
	n := 0
	for p := range r.core.allSessions() {
		r.core.endSession(p, "session closed", r.leaseStart())
		r.carryOut()
		n++
	}
	r.mu.Unlock()
	if n == 0 {
		return
	}
	// Real time: the peers' answers do not follow the registry's clock.
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.HandoverTimeout)
	defer cancel()
	if err := r.replicator.Flush(ctx); err != nil {
		r.log.Warn("handing over the sessions at close", "sessions", n, "err", err)
		return
	}
	r.log.Info("sessions handed over at close", "sessions", n)
}

// Done returns a channel that is closed when the registry closes (Close
// has begun: new calls fail with ErrClosed). A host selects on it to stop
// what it runs around the registry.
func (r *Registry) Done() <-chan struct{} { return r.stop }

// Ready reports whether the registry serves queries.
func (r *Registry) Ready() bool {
	select {
	case <-r.ready:
		return r.state.Load() == stateRunning
	default:
		return false
	}
}

// WaitReady blocks until the registry serves queries, ctx ends, or the
// registry is closed.
func (r *Registry) WaitReady(ctx context.Context) error {
	select {
	case <-r.ready:
		if !r.Ready() {
			return ErrClosed
		}
		return nil
	case <-r.stop:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// NodeID returns the configured node ID.
func (r *Registry) NodeID() string { return r.cfg.NodeID }

// checkWrite reports whether the registry accepts writes.
func (r *Registry) checkWrite() error {
	switch r.state.Load() {
	case stateRunning:
		return nil
	case stateClosed:
		return ErrClosed
	}
	return ErrNotReady
}

// checkRead reports whether the registry serves reads: it is running and
// ready, or configured to serve before.
func (r *Registry) checkRead() error {
	if err := r.checkWrite(); err != nil {
		return err
	}
	if !r.serving.Load() {
		return ErrNotReady
	}
	return nil
}

func (r *Registry) randFloat() float64 {
	r.randMu.Lock()
	defer r.randMu.Unlock()
	return r.rand.Float64()
}

func (r *Registry) randUint64() uint64 {
	r.randMu.Lock()
	defer r.randMu.Unlock()
	return r.rand.Uint64()
}

// leaseStart is when a lease started now starts: now. (What an expiry
// starts, the index core starts from the expired deadline itself, so that
// a chain of deadlines, a beat lease's expiry and then its patch's
// countdown, adds up exactly however late the housekeeper runs: see
// index.expire.) The caller holds mu.
func (r *Registry) leaseStart() time.Time { return r.now() }

// wakeAt makes the housekeeper wake no later than t. The caller holds mu, so
// the timer is re-armed before the write that needs it returns: a test that
// advances a fake clock right after a write cannot slip past the deadline.
func (r *Registry) wakeAt(t time.Time) {
	if r.timer == nil || !t.Before(r.timerAt) {
		return
	}
	r.armTimer(t)
}

// housekeeper runs the timers: beat and session leases, empty services and
// orphaned patches. It sleeps until the earliest deadline, or SweepInterval
// at most, and also runs when Settle asks.
func (r *Registry) housekeeper() {
	for {
		var done chan struct{}
		select {
		case <-r.stop:
			return
		case <-r.timer.Chan():
		case done = <-r.settles:
		}
		r.housekeep()
		if done != nil {
			close(done)
		}
	}
}

// housekeep handles every deadline that has passed and re-arms the timer.
func (r *Registry) housekeep() {
	orphans := r.runDue()
	// Dropping patches goes through the store, outside the lock.
	for _, key := range orphans {
		err := r.store.Apply(context.Background(), model.Command{Op: model.OpRemovePatch, Key: key}, model.Origin{Expiry: true})
		if err == nil || errors.Is(err, ErrClosed) {
			continue
		}
		if !errors.Is(err, errNotLeader) {
			r.log.Warn("dropping an orphaned patch failed; counting down again", "instance", key.String(), "err", err)
		}
		r.mu.Lock()
		if _, sl := r.core.lookup(key); sl == nil && r.core.hasPatch(key) {
			r.core.startPatchCountdown(key, r.leaseStart())
			r.carryOut()
		}
		r.mu.Unlock()
	}
	r.checksLeaderChanged()
	r.rearm()
}

// runDue processes every deadline that has passed. It returns the patches
// whose instance has been gone for PatchTTL.
func (r *Registry) runDue() []model.InstanceKey {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state.Load() != stateRunning {
		return nil
	}
	r.timerAt = time.Time{} // until rearm, writers leave the timer alone
	orphans := r.core.expire(r.now())
	r.carryOut()
	return orphans
}

// rearm sets the timer to the earliest deadline, SweepInterval at most.
func (r *Registry) rearm() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state.Load() != stateRunning {
		return
	}
	now := r.now()
	next := now.Add(r.cfg.SweepInterval)
	if t, ok := r.core.next(); ok && t.Before(next) {
		next = t
	}
	r.armTimer(next)
}

// armTimer sets the timer to fire at next. The caller holds mu.
//
// A timer takes a duration, computed from a reading of the clock; if the
// clock jumps between that reading and the reset (a test advancing a fake
// clock), the timer would fire late by the jump. So the clock is read again
// after the reset, and the timer armed again if it moved by more than a
// millisecond, which a real clock does not do in that time.
func (r *Registry) armTimer(next time.Time) {
	r.timerAt = next
	for {
		now := r.now()
		r.timer.Reset(next.Sub(now))
		if r.now().Sub(now) < time.Millisecond {
			return
		}
	}
}
