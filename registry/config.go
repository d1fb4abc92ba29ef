package registry

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/muster-io/muster/health"
	"github.com/muster-io/muster/internal/cfgerr"
	"github.com/muster-io/muster/model"
)

// Config configures a Registry. New copies it; the caller's value is never
// written to.
//
// Zero values. As everywhere in this module, a field left zero takes its
// default, so Config{} is a valid standalone registry, and a feature that
// can be turned off says how: with a negative value or a named constant,
// documented on the field. The optional parts (Clock, Logger, Rand,
// Replicator, Transport, Store, HealthChecks) are the exception a pointer
// or a function has to be: nil means without them (or the real clock, no
// logs). DefaultConfig is Config{} with every default written out and
// with HealthChecks on (health.DefaultConfig).
type Config struct {
	// NodeID names this node in session IDs and logs. Default "local".
	NodeID string

	// Clock drives every timer of the registry: leases, keep-alives and
	// clean-ups. Nil means the real clock. Tests pass a
	// clockwork.FakeClock and advance it.
	Clock clockwork.Clock
	// Logger receives the registry's logs, and those of the engines it
	// builds (Replicator, Store, health checks) unless their configs name
	// their own. The registry tags every line with node=NodeID, once: do
	// not add it yourself. Nil discards them.
	Logger *slog.Logger
	// Rand is the random source for session IDs and weighted selection. Nil
	// means a source seeded from crypto/rand. It is used under a lock, so
	// any rand.Source works.
	Rand rand.Source

	// Limits bound what the registry holds: sessions, instances, services,
	// namespaces, watchers and metadata (see Limits). Zero fields mean their
	// defaults.
	Limits Limits

	// EmptyServiceTTL is how long a service with neither instances nor a
	// stored definition lives before it is removed (default 60 s, as
	// Nacos).
	EmptyServiceTTL time.Duration
	// PatchTTL is how long an instance patch outlives its instance before it
	// is dropped (Nacos: 60 s). A patch whose instance comes back in time
	// stays. Default 60 s.
	PatchTTL time.Duration
	// SweepInterval caps how long the housekeeping loop sleeps. Deadlines
	// are tracked exactly, so this only bounds the wake-ups of an idle
	// registry. Default 5 s.
	SweepInterval time.Duration

	// Replicator, when set, makes the registry one node of a cluster: its
	// ephemeral data (sessions and beat publishers) is replicated to every
	// other node by the Replicator it builds (Distro builds a
	// distro.Replicator), and beat writes for an ip:port owned elsewhere
	// are forwarded to the owner over Transport. Nil means standalone.
	Replicator ReplicatorFunc
	// Transport carries forwarded beat writes and handed-over beat leases
	// between the nodes: required with Replicator, unused without. It stays
	// the caller's: close it after the registry.
	Transport Transport
	// HealthChecks configures the active health checks (TCP, HTTP, MySQL)
	// of persistent instances; nil turns them off, and persistent instances
	// then keep the health SetHealth gives them. A nil Clock, Logger or
	// Rand in it means the registry's; OnTransition is the registry's and
	// must be nil. DefaultConfig turns them on with health.DefaultConfig
	// (Nacos's timings). It has no MySQL checker (that would link a MySQL
	// driver into every registry): New logs, at Info, that MYSQL checks will
	// fail until HealthChecks.Checkers has one (package health/mysqlcheck;
	// registry/node adds it).
	HealthChecks *health.Config
	// Store, when set, keeps persistent data (service definitions,
	// persistent instances and their health, instance patches) in the
	// replicated Store it builds: package registry/raftcp builds a Raft
	// group on disk. Nil means persistent data lives in this process's
	// memory only and is lost on Close.
	Store StoreFunc
	// HistoryEvents is how many of the latest instance events (registered,
	// updated, health flips, patches, removals and why) this node keeps for
	// Explain, for all instances together (rounded up to a power of two):
	// about 130 bytes each, allocated once, and a clock read per event on
	// the write paths (a noticeable share of a standalone Register's cost).
	// Zero (the default) or negative keeps none (off: Explain reports the
	// instance's current state only); registry/node and registrytest turn
	// it on with DefaultHistoryEvents, as a cluster's operators want it.
	HistoryEvents int
	// WatchHistory is how many past revisions of each service the registry
	// keeps so that a watcher can resume from one (WatchFrom) and get the
	// change since, rather than the whole view again. Only revisions that
	// were read (by a query or a watcher) are kept, and each costs one copy
	// of the service's instance list at that revision: at most
	// WatchHistory × Limits.MaxInstancesPerService instances per service.
	// Zero means DefaultWatchHistory; negative keeps none (every resume is
	// a reset).
	WatchHistory int
	// ServeBeforeReady lets queries and watches answer while the node is
	// still loading its data from its peers. By default they fail with
	// ErrNotReady until the load is done, rather than serve partial lists.
	ServeBeforeReady bool
	// ForwardAttempts bounds how often a forwarded write is tried while
	// ownership is moving (the owner answers that it is not the owner:
	// membership views differ), with ForwardBackoff (default 20 ms)
	// doubling between attempts, on Clock: under a fake clock the backoff
	// waits for the test to move it. Default 5.
	ForwardAttempts int
	ForwardBackoff  time.Duration
	// HandoverTimeout bounds, in real time, what Close does first in a
	// cluster: end this node's sessions and send their removal to the
	// peers, so that their instances leave every node at once instead of
	// after the peers' OrphanTimeout (default 2 s; NoHandover, or any
	// negative value, skips it, and the peers treat the node as crashed).
	HandoverTimeout time.Duration
	// ForwardTimeout bounds each forwarded request in real time (default
	// 3 s): an owner that stopped answering fails the call with
	// ErrUnavailable rather than holding it.
	ForwardTimeout time.Duration
}

// DefaultConfig returns the defaults: Nacos's timings, the real clock, no
// logs.
func DefaultConfig() Config {
	hc := health.DefaultConfig()
	return Config{
		NodeID:          "local",
		Limits:          DefaultLimits(),
		EmptyServiceTTL: 60 * time.Second,
		PatchTTL:        60 * time.Second,
		SweepInterval:   5 * time.Second,
		HealthChecks:    &hc,
		ForwardAttempts: 5,
		ForwardBackoff:  20 * time.Millisecond,
		ForwardTimeout:  3 * time.Second,
		HandoverTimeout: 2 * time.Second,
	}
}

// withDefaults returns c with each zero field set to its default.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	cfgerr.Default(&c.NodeID, d.NodeID)
	c.Limits = c.Limits.withDefaults()
	cfgerr.Default(&c.EmptyServiceTTL, d.EmptyServiceTTL)
	cfgerr.Default(&c.PatchTTL, d.PatchTTL)
	cfgerr.Default(&c.SweepInterval, d.SweepInterval)
	cfgerr.Default(&c.ForwardAttempts, d.ForwardAttempts)
	cfgerr.Default(&c.ForwardBackoff, d.ForwardBackoff)
	cfgerr.Default(&c.ForwardTimeout, d.ForwardTimeout)
	cfgerr.Default(&c.HandoverTimeout, d.HandoverTimeout)
	return c
}

// Validate reports every invalid field, each with its rule, in an error
// that matches ErrInvalidConfig. Zero fields are checked as their
// defaults: a Config with none of its fields set is valid.
func (c *Config) Validate() error {
	d := c.withDefaults()
	return d.validate()
}

func (c *Config) validate() error {
	var errs []error
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"EmptyServiceTTL", c.EmptyServiceTTL}, {"PatchTTL", c.PatchTTL}, {"SweepInterval", c.SweepInterval}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive (got %v)", d.name, d.v))
		}
	}
	if c.HistoryEvents > MaxHistoryEvents {
		errs = append(errs, fmt.Errorf("HistoryEvents must be at most %d (got %d)", MaxHistoryEvents, c.HistoryEvents))
	}
	if c.WatchHistory > maxWatchHistory {
		errs = append(errs, fmt.Errorf("WatchHistory must be at most %d (got %d)", maxWatchHistory, c.WatchHistory))
	}
	if c.HealthChecks != nil && c.HealthChecks.OnTransition != nil {
		errs = append(errs, errors.New("HealthChecks.OnTransition must be nil: the registry stores the transitions"))
	}
	if c.Replicator == nil && c.Transport != nil {
		errs = append(errs, errors.New("Transport is only used with Replicator"))
	}
	if c.Replicator != nil {
		if c.Transport == nil {
			errs = append(errs, errors.New("Transport must be set with Replicator"))
		}
		if c.ForwardAttempts < 1 {
			errs = append(errs, fmt.Errorf("ForwardAttempts must be at least 1 (got %d)", c.ForwardAttempts))
		}
		if c.ForwardBackoff <= 0 {
			errs = append(errs, fmt.Errorf("ForwardBackoff must be positive (got %v)", c.ForwardBackoff))
		}
		if c.ForwardTimeout <= 0 {
			errs = append(errs, fmt.Errorf("ForwardTimeout must be positive (got %v)", c.ForwardTimeout))
		}
	}
	errs = append(errs, c.Limits.validate()...)
	return cfgerr.Join(ErrInvalidConfig, errs...)
}

// Env is what the registry hands the engines it builds (ReplicatorFunc,
// StoreFunc): the values it owns, which an engine takes from here rather
// than from its own config.
type Env struct {
	// NodeID is the registry's node ID.
	NodeID string
	// Clock is the registry's clock.
	Clock clockwork.Clock
	// Logger is the registry's logger, already tagged node=NodeID.
	Logger *slog.Logger
	// Rand is a random source of the engine's own, drawn from the
	// registry's (nil for the Store, which draws none).
	Rand rand.Source
	// Limits are the validation limits of the registry's writes.
	Limits model.Limits
}

// NoHandover, as Config.HandoverTimeout, makes Close skip the handover of
// the node's sessions.
const NoHandover time.Duration = -1

// DefaultWatchHistory is the default of Config.WatchHistory.
const DefaultWatchHistory = 8

// maxWatchHistory caps Config.WatchHistory: a resume scans the kept
// revisions, and each one may cost a copy of a large service.
const maxWatchHistory = 1024

// watchHistory returns how many past revisions each service keeps.
func (c *Config) watchHistory() int {
	switch {
	case c.WatchHistory == 0:
		return DefaultWatchHistory
	case c.WatchHistory < 0:
		return 0
	}
	return c.WatchHistory
}

// DefaultHistoryEvents is the journal size registry/node and registrytest
// set (about 2 MB); MaxHistoryEvents caps Config.HistoryEvents (about
// 500 MB).
const (
	DefaultHistoryEvents = 16384
	MaxHistoryEvents     = 1 << 22
)
