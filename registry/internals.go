package registry

import (
	"context"
	"errors"
	"fmt"

	"github.com/muster-io/muster/health"
	"github.com/muster-io/muster/model"
)

// Internals is the registry seen from inside: the barriers that tests use
// to make a fake clock's effects visible at once, the consistency check the
// registrytest harness runs when a test ends, and the engines the registry
// drives (its replicator and its health-check scheduler), for metrics and
// diagnostics. None of it is needed to use the registry, which is why it is
// kept off Registry: a host's code calls Registry's methods, a test's or an
// operator's tooling Registry.Internals.
//
// An Internals is a small value, obtained from Registry.Internals; its zero
// value is not usable. Its methods are safe for concurrent use, as
// Registry's are.
type Internals struct{ r *Registry }

// Internals returns the registry's internals: test barriers (Settle,
// FlushWatchers), the index's consistency check, and the engines it drives.
// See Internals.
func (r *Registry) Internals() Internals { return Internals{r: r} }

// Settle makes the registry handle, now, every deadline that has passed on
// its clock (beat leases, session keep-alives, clean-ups) and returns once
// that is done, and once the messages it has started sending in the
// background (leases handed to a key's new owner) have been answered: the
// contract of every driver's Settle (health.Scheduler.Settle,
// distro.Replicator.Settle). It never moves the clock. The registry does
// this by itself as time passes; a test that moves a fake clock calls
// Settle to see the effects at once (registrytest's Advance does). It
// returns ctx's error, ErrClosed once closed and ErrNotReady before Start.
func (in Internals) Settle(ctx context.Context) error {
	r := in.r
	if err := r.checkWrite(); err != nil {
		return err
	}
	if err := r.await(ctx, r.settles); err != nil {
		return err
	}
	if err := r.sends.wait(ctx, r.stop); err != nil {
		return err
	}
	if r.checks != nil {
		if err := r.checks.Settle(ctx); err != nil {
			return err
		}
		_, _ = r.writeHealth(ctx)
	}
	return nil
}

// FlushWatchers returns once every watcher has been handed the newest view
// of its query as of the call: each one's next Next returns at once with
// every change made before FlushWatchers was called (or the watcher has
// closed). It is a barrier for tests, which need not poll Next after moving
// a fake clock (registrytest's Settle and Advance call it); delivery does
// not need it. It fails with ErrClosed once the registry is closed, or with
// ctx's error. Before Start there is nothing to flush: it returns nil.
func (in Internals) FlushWatchers(ctx context.Context) error {
	r := in.r
	if r.state.Load() == stateNew {
		return nil // no watcher before Start, and no notifier to ask
	}
	return r.await(ctx, r.watch.flush)
}

// await hands a background goroutine (the housekeeper, the notifier) a
// request on ch and waits until it has been served: ErrClosed once the
// registry closes, ctx's error if it ends first.
func (r *Registry) await(ctx context.Context, ch chan<- chan struct{}) error {
	done := make(chan struct{})
	select {
	case ch <- done:
	case <-r.stop:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-r.stop:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// CheckConsistency walks the whole index and returns an error describing
// every broken internal invariant, or nil. It is meant for tests (the
// registrytest harness calls it when a test ends): it holds the registry's
// lock for the whole walk, O(instances).
func (in Internals) CheckConsistency() error {
	r := in.r
	r.mu.RLock()
	defer r.mu.RUnlock()
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	r.core.checkCarriedOut(bad)
	r.core.checkInvariants(bad)
	r.checkWatchers(bad)
	return errors.Join(errs...)
}

// Replicator returns the registry's replicator (Config.Replicator), or nil
// for a standalone registry. It is meant for diagnostics and tests;
// writing through it bypasses the registry.
func (in Internals) Replicator() Replicator {
	if !in.r.cluster {
		return nil
	}
	return in.r.replicator
}

// HealthChecks returns the scheduler of the active health checks, or nil
// when they are off: for its Stats (package registry/metrics exports them).
func (in Internals) HealthChecks() *health.Scheduler { return in.r.checks }

// CheckStatus returns the status of the active checks of the persistent
// instance key on this node: last result, latency, reason, consecutive
// counts, flap damping. It reports false when this node does not probe the
// instance (another node owns its ip:port, its cluster's check type is
// NONE, or active checks are off). Registry.Explain reports the same
// status (Explanation.Check) with the instance's history.
func (in Internals) CheckStatus(key model.InstanceKey) (health.Status, bool) {
	return in.r.checkStatus(key)
}
