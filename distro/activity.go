package distro

import (
	"context"
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/muster-io/muster/transport"
)

// activity counts what this replicator's own goroutines (the run loop, the startup load, the
// sync, verify and load goroutines they start) are doing, so that Settle can tell when nothing
// of theirs can happen until the clock moves or a message arrives. A goroutine is busy while it
// runs; it is not busy while it sleeps on the clock until a time still ahead (a sleeper) or
// waits for the transport (a request on the network is the network's to count:
// transport.MemNetwork.InFlight). Every change is made before the change it stands for can be
// seen, so that busy never reads 0 while one of them is about to run: a goroutine is counted
// by whoever starts it, before it starts; a sleeper is woken (and counted) by whoever wakes it
// first, the clock's timer, a poke or Settle; a request counts again before its result is used.
type activity struct {
	// busy is the number of busy goroutines. idle is made by a Settle that has to wait and
	// closed (and dropped) when busy reaches 0: without a waiter, a move costs no channel.
	busy int
	idle chan struct{}
	// woke counts every move to busy; drained is its value when Settle last returned.
	woke, drained uint64
	// sleepers are the goroutines sleeping on the clock; loop is the run loop's, if it sleeps.
	sleepers map[*sleeper]struct{}
	loop     *sleeper
	// loopSleeper and loopTimer are the run loop's, reused from one sleep to the next (it
	// sleeps after every pass): a fresh wake channel only after one was closed.
	loopSleeper sleeper
	loopTimer   clockwork.Timer
}

// sleeper is a goroutine sleeping until the clock reaches at.
type sleeper struct {
	at     time.Time
	wake   chan struct{} // closed when woken by a poke or by Settle
	woken  bool
	closed bool // wake is closed
}

func (a *activity) init() {
	a.sleepers = map[*sleeper]struct{}{}
}

// addLocked changes the busy count by d. r.amu must be held.
func (a *activity) addLocked(d int) {
	if d > 0 {
		a.woke++
	}
	a.busy += d
	if a.busy == 0 && a.idle != nil {
		close(a.idle)
		a.idle = nil
	}
}

// wakeLocked makes s busy, unless it was woken already. r.amu must be held.
func (a *activity) wakeLocked(s *sleeper, closeWake bool) {
	if s.woken {
		return
	}
	s.woken = true
	delete(a.sleepers, s)
	if a.loop == s {
		a.loop = nil
	}
	a.addLocked(1)
	if closeWake {
		close(s.wake)
		s.closed = true
	}
}

func (r *Replicator) busyAdd(d int) {
	r.amu.Lock()
	r.act.addLocked(d)
	r.amu.Unlock()
}

// goBusy runs fn in a tracked goroutine that counts as busy from now until fn returns.
func (r *Replicator) goBusy(fn func()) {
	r.busyAdd(1)
	r.goFunc(func() {
		defer r.busyAdd(-1)
		fn()
	})
}

// request is Transport.Request from a busy goroutine: while the network counts the message
// (transport.CallHooks), the goroutine does not count as busy here. A transport that does not
// call the hooks leaves it busy until Request returns.
func (r *Replicator) request(ctx context.Context, peer string, kind transport.Kind, body []byte) ([]byte, error) {
	var sent, back bool // set on this goroutine, inside Request
	ctx = transport.WithCallHooks(ctx, transport.CallHooks{
		Sent:     func() { sent = true; r.busyAdd(-1) },
		Returned: func() { back = true; r.busyAdd(1) },
	})
	resp, err := r.cfg.Transport.Request(ctx, peer, kind, body)
	if sent && !back {
		r.busyAdd(1)
	}
	return resp, err
}

// sleepUntil makes a busy goroutine sleep until the clock reaches now+d, a poke (loop only) or
// Close; it reports false on Close. The run loop passes loop = true: a poke that came before it
// sleeps keeps it awake.
func (r *Replicator) sleepUntil(now time.Time, d time.Duration, loop bool) bool {
	r.amu.Lock()
	if loop && len(r.kick) > 0 {
		r.amu.Unlock()
		<-r.kick
		return true
	}
	var s *sleeper
	if loop {
		s = &r.act.loopSleeper
		s.at, s.woken = now.Add(d), false
		if s.wake == nil || s.closed {
			s.wake, s.closed = make(chan struct{}), false
		}
		r.act.loop = s
	} else {
		s = &sleeper{at: now.Add(d), wake: make(chan struct{})}
	}
	r.act.sleepers[s] = struct{}{}
	r.act.addLocked(-1)
	wake := s.wake
	r.amu.Unlock()
	// The timer is set after now was read, so it fires at s.at or later: Settle, which wakes
	// s once the clock reaches s.at, never wakes it before its time.
	var t clockwork.Timer
	var kick chan struct{}
	if loop {
		// Only the run loop uses loopTimer: no lock needed.
		if t = r.act.loopTimer; t == nil {
			t = r.clk.NewTimer(d)
			r.act.loopTimer = t
		} else {
			t.Reset(d)
		}
		kick = r.kick
	} else {
		t = r.clk.NewTimer(d)
	}
	ok := true
	select {
	case <-r.ctx.Done():
		ok = false
	case <-kick:
	case <-t.Chan():
	case <-wake:
	}
	if !t.Stop() {
		select { // a tick that fired but was not taken must not end the loop's next sleep
		case <-t.Chan():
		default:
		}
	}
	r.amu.Lock()
	r.act.wakeLocked(s, false)
	r.amu.Unlock()
	return ok
}

// wakeLoopLocked wakes the run loop if it sleeps (a poke). r.amu must be held.
func (r *Replicator) wakeLoopLocked() {
	if s := r.act.loop; s != nil {
		r.act.wakeLocked(s, true)
	}
}

// Settle runs everything that is due at the clock's current time and returns once it has run:
// the contract of every driver's Settle (health.Scheduler.Settle, registry.Internals.Settle). It
// never moves the clock and never runs anything before its time (it sends nothing before its
// merge window ends, unlike Flush). It is how a test on a fake clock sees, at once, what a
// move of the clock caused.
//
// Here, it wakes the goroutines whose sleep has ended at the clock's time (the same wake-up
// their timer gives them) and returns once none of its goroutines is running: each sleeps until
// a time still ahead, or waits for the transport. It waits for the goroutines they start, up to
// the point where they hand a message to the transport, and for the Store calls they make.
//
// did reports whether any of its goroutines ran since the previous Settle returned (woken by
// the clock, a poke or this Settle, started, or back from the transport): false means this
// replicator did nothing in between. With did false on every node and no message in flight
// or sent on the network meanwhile, nothing of the replicators' can happen until the clock
// moves or a message is delivered (registrytest's Cluster.Settle relies on it).
//
// It fails with ctx's error, saying how many goroutines still run, and with ErrClosed after
// Close. Before Start nothing is due: it returns false and nil at once.
func (r *Replicator) Settle(ctx context.Context) (did bool, err error) {
	r.mu.Lock()
	closed, started := r.closed, r.ctx != nil
	r.mu.Unlock()
	if closed {
		return false, ErrClosed
	}
	if !started {
		return false, nil
	}
	for {
		r.amu.Lock()
		now := r.clk.Now()
		for s := range r.act.sleepers {
			if !now.Before(s.at) {
				r.act.wakeLocked(s, true)
			}
		}
		if r.act.busy == 0 {
			did = r.act.woke != r.act.drained
			r.act.drained = r.act.woke
			r.amu.Unlock()
			return did, nil
		}
		if r.act.idle == nil {
			r.act.idle = make(chan struct{})
		}
		idle, busy := r.act.idle, r.act.busy
		r.amu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			return true, fmt.Errorf("distro: %s: %d goroutines still running: %w", r.self, busy, ctx.Err())
		case <-r.ctx.Done():
			return false, ErrClosed
		}
	}
}
