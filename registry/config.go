package registry

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/muster-io/muster/model"
)

// Config configures a Registry. Start from DefaultConfig. New copies it; the
// caller's value is never written to.
type Config struct {
	// NodeID names this node in session IDs and logs. Default "local".
	NodeID string

	// Clock drives every timer of the registry: leases, keep-alives and
	// clean-ups. Nil means the real clock. Tests pass a
	// clockwork.FakeClock and advance it.
	Clock clockwork.Clock
	// Logger receives the registry's logs. Nil discards them.
	Logger *slog.Logger
	// Rand is the random source for session IDs and weighted selection. Nil
	// means a source seeded from crypto/rand. It is used under a lock, so
	// any rand.Source works.
	Rand rand.Source

	// Limits are the validation limits (the metadata size cap).
	Limits model.Limits

	// EmptyServiceTTL is how long a service with neither instances nor a
	// stored definition lives before it is removed (Nacos: 60 s).
	EmptyServiceTTL time.Duration
	// PatchTTL is how long an instance patch outlives its instance before it
	// is dropped (Nacos: 60 s). A patch whose instance comes back in time
	// stays.
	PatchTTL time.Duration
	// SweepInterval caps how long the housekeeping loop sleeps. Deadlines
	// are tracked exactly, so this only bounds the wake-ups of an idle
	// registry. Default 5 s.
	SweepInterval time.Duration
}

// DefaultConfig returns the defaults: Nacos's timings, the real clock, no
// logs.
func DefaultConfig() Config {
	return Config{
		NodeID:          "local",
		EmptyServiceTTL: 60 * time.Second,
		PatchTTL:        60 * time.Second,
		SweepInterval:   5 * time.Second,
	}
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	var errs []error
	if c.NodeID == "" {
		errs = append(errs, errors.New("NodeID must not be empty"))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"EmptyServiceTTL", c.EmptyServiceTTL}, {"PatchTTL", c.PatchTTL}, {"SweepInterval", c.SweepInterval}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive (got %v)", d.name, d.v))
		}
	}
	if c.Limits.MaxMetadataSize < 0 {
		errs = append(errs, fmt.Errorf("Limits.MaxMetadataSize must not be negative (got %d)", c.Limits.MaxMetadataSize))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("registry: invalid config: %w", err)
	}
	return nil
}
