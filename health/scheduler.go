package health

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/muster-io/muster/internal/randx"
	"github.com/muster-io/muster/model"
)

// Scheduler runs the active checks of a set of targets and reports their flips. It is the
// driver of the pure core in core.go: one goroutine owns the clock and the timer, and each
// check runs in a goroutine of its own, at most Config.MaxConcurrent at a time.
//
// Its methods are safe for concurrent use.
type Scheduler struct {
	cfg      Config
	clock    clockwork.Clock
	logger   *slog.Logger
	checkers [numKinds]Checker
	owned    []io.Closer // built-in checkers, closed by Close

	mu      sync.Mutex // guards core, started and closed
	core    *core
	started bool
	closed  bool
	// closeDone is closed when Close has finished.
	closeDone chan struct{}

	wake    chan struct{}      // pokes the driver after Set and Remove
	results chan completion    // finished checks, to the driver
	settle  chan chan struct{} // Settle's requests, to the driver

	ctx    context.Context // owned by the scheduler: made by NewScheduler, cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type completion struct {
	slot, gen uint32
	res       Result
}

// NewScheduler validates cfg, copies it and returns a Scheduler with no targets. It starts
// nothing; call Start. It reports an error wrapping [ErrInvalidConfig] for an invalid cfg.
func NewScheduler(cfg Config) (*Scheduler, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	src := randx.Source(cfg.Rand)
	s := &Scheduler{
		cfg:     cfg,
		clock:   cfg.Clock,
		logger:  logger,
		core:    newCore(&cfg, src),
		wake:    make(chan struct{}, 1),
		results: make(chan completion, cfg.MaxConcurrent),
		settle:  make(chan chan struct{}),

		closeDone: make(chan struct{}),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())

	given := func(t model.CheckType) Checker {
		if c := cfg.Checkers[t]; c != nil {
			return c
		}
		return nil
	}
	if c := given(model.CheckTCP); c != nil {
		s.checkers[kindTCP] = c
	} else {
		tc := cfg.TCP
		if tc.Clock == nil {
			tc.Clock = cfg.Clock
		}
		c, err := NewTCPChecker(tc)
		if err != nil {
			return nil, err
		}
		s.checkers[kindTCP] = c
	}
	if c := given(model.CheckHTTP); c != nil {
		s.checkers[kindHTTP] = c
	} else {
		hc := cfg.HTTP
		if hc.Clock == nil {
			hc.Clock = cfg.Clock
		}
		c, err := NewHTTPChecker(hc)
		if err != nil {
			return nil, err
		}
		s.checkers[kindHTTP] = c
		s.owned = append(s.owned, c)
	}
	if c := given(model.CheckMySQL); c != nil {
		s.checkers[kindMySQL] = c
	} else {
		s.checkers[kindMySQL] = noMySQL{}
	}
	return s, nil
}

// Start starts the scheduler's goroutine; the checks of targets already set begin. The
// goroutines run until Close, whatever happens to ctx, which is only checked for being
// done already. It returns [ErrClosed] after Close and [ErrStarted] on a second call.
func (s *Scheduler) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return ErrClosed
	case s.started:
		return ErrStarted
	}
	s.started = true
	s.goFunc(s.run)
	return nil
}

// Close stops the scheduler: no new check starts, the running ones are cancelled, and Close
// waits for every goroutine before closing the built-in checkers. No OnTransition call is made
// after it returns. It is idempotent: every call returns nil once the scheduler is closed.
func (s *Scheduler) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.closeDone
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	defer close(s.closeDone)
	s.cancel()
	s.wg.Wait()
	s.closeOwned()
	return nil
}

func (s *Scheduler) closeOwned() {
	for _, c := range s.owned {
		if err := c.Close(); err != nil {
			s.logger.Warn("health: closing a checker", "err", err)
		}
	}
	s.owned = nil
}

// goFunc runs f in a goroutine that Close waits for.
func (s *Scheduler) goFunc(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// Set adds the target of key, or updates it. healthy is the instance's current known state:
// a new target starts from it (so a node that takes over an instance does not flip it again),
// and an existing target whose state differs adopts it, with its counts reset and any hold
// ended (the caller, who stores the state, is the authority). A new target is checked at
// once; a changed config applies from the next check. A target whose check type is NONE (or
// unknown) is kept, with the given state, but never checked. Set after Close does nothing.
func (s *Scheduler) Set(key model.InstanceKey, target Target, healthy bool) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	poke := s.core.set(key, target, healthy, s.clock.Now().UnixNano())
	s.mu.Unlock()
	if poke {
		s.poke()
	}
}

// Remove drops the target of key. No check of it starts afterwards; one already running
// completes unseen, without a transition.
func (s *Scheduler) Remove(key model.InstanceKey) {
	s.mu.Lock()
	s.core.remove(key)
	s.mu.Unlock()
}

// Status returns the status of key's target, and false if it has none.
func (s *Scheduler) Status(key model.InstanceKey) (Status, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.core.get(key)
}

// Len returns the number of targets.
func (s *Scheduler) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.core.index)
}

// Settle runs every check due at the clock's current time and returns once it has run: the
// contract of every driver's Settle (distro.Replicator.Settle, registry.Internals.Settle). It
// never moves the clock and never starts a check before its time. It returns when the
// scheduler is idle at that time: every check due by then has been started and has completed,
// and the OnTransition calls they caused have returned. With a fake clock, a test advances the
// clock and calls Settle. With a checker that blocks, Settle waits for ctx. It returns ctx's
// error, [ErrClosed] once closed and [ErrNotStarted] before Start (the targets set are due, but
// nothing runs them yet).
func (s *Scheduler) Settle(ctx context.Context) error {
	s.mu.Lock()
	started, closed := s.started, s.closed
	s.mu.Unlock()
	switch {
	case closed:
		return ErrClosed
	case !started:
		return ErrNotStarted
	}
	done := make(chan struct{})
	select {
	case s.settle <- done:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.ctx.Done():
		return ErrClosed
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.ctx.Done():
		return ErrClosed
	}
}

func (s *Scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run is the driver: it dispatches due checks, arms the timer for the next one, and
// processes completions, one event at a time.
func (s *Scheduler) run() {
	timer := s.clock.NewTimer(time.Hour)
	defer timer.Stop()
	var (
		jobs    []job
		waiters []chan struct{}
	)
	max := s.cfg.MaxConcurrent
	for {
		s.mu.Lock()
		now := s.clock.Now().UnixNano()
		jobs = s.core.dispatch(now, max, jobs[:0])
		next, armed := s.core.next(max)
		idle := s.core.running == 0
		s.mu.Unlock()

		for i := range jobs {
			j := jobs[i]
			s.goFunc(func() { s.check(j) })
			jobs[i] = job{} // drop the target's references
		}
		if idle && len(waiters) > 0 {
			for _, w := range waiters {
				close(w)
			}
			clear(waiters)
			waiters = waiters[:0]
		}
		if armed {
			timer.Reset(time.Duration(next - now))
		} else {
			timer.Stop()
		}

		select {
		case <-s.ctx.Done():
			return
		case <-timer.Chan():
		case <-s.wake:
		case w := <-s.settle:
			waiters = append(waiters, w)
		case c := <-s.results:
			s.complete(c)
			// Take the other finished checks too, before dispatching again.
			for more := true; more; {
				select {
				case c := <-s.results:
					s.complete(c)
				default:
					more = false
				}
			}
		}
	}
}

// complete feeds a result to the core and reports the flip it caused.
func (s *Scheduler) complete(c completion) {
	s.mu.Lock()
	tr, flipped := s.core.complete(c.slot, c.gen, c.res, s.clock.Now().UnixNano())
	s.mu.Unlock()
	if !flipped {
		return
	}
	s.logger.Info("health: instance flipped", "instance", tr.key.String(), "healthy", tr.healthy,
		"reason", tr.status.Last.Reason, "damped", tr.status.Damped)
	if s.cfg.OnTransition != nil {
		s.cfg.OnTransition(tr.key, tr.healthy, tr.status)
	}
}

// check runs one job and hands its result to the driver.
func (s *Scheduler) check(j job) {
	// CheckTimeout bounds sockets and custom checkers in real time: context's timer is the
	// documented exception to the injected clock.
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.CheckTimeout)
	res := s.safeCheck(ctx, s.checkers[j.kind], *j.target)
	cancel()
	select {
	case s.results <- completion{slot: j.slot, gen: j.gen, res: res}:
	case <-s.ctx.Done():
	}
}

// safeCheck runs c.Check, turning a panic into an ordinary failure.
func (s *Scheduler) safeCheck(ctx context.Context, c Checker, t Target) (res Result) {
	defer func() {
		if r := recover(); r != nil {
			s.logger.Error("health: checker panicked", "addr", t.Addr(), "panic", r)
			res = Result{Reason: fmt.Sprintf("checker panicked: %v", r)}
		}
	}()
	return c.Check(ctx, t)
}
