package xds

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
)

// Source is what the server reads from Muster: a registry's watches.
// *registry.Registry implements it (and so do registrytest's registries and
// nodes, which embed one). Watch must be safe for concurrent use; it is the
// package's only call into the registry, made once per served service (and
// again after a failure).
type Source interface {
	Watch(ctx context.Context, q model.Query) (*registry.Watcher, error)
}

// Policy is the load-balancing policy the Clusters ask clients to use.
type Policy int

const (
	// RingHash (the default) asks for RING_HASH with no hash policy on the
	// route, so each RPC gets a random hash and lands on an endpoint with a
	// probability in proportion to its weight: Muster's weights are
	// honoured per call, as by Nacos's clients. It is the one policy of
	// gRPC-Go's that reads endpoint weights per call.
	RingHash Policy = iota
	// RoundRobin asks for ROUND_ROBIN: gRPC splits calls between localities
	// by their weights (the sums of their endpoints' weights) and goes round
	// robin within a locality, ignoring the endpoints' own weights there.
	RoundRobin
)

func (p Policy) String() string {
	switch p {
	case RingHash:
		return "RingHash"
	case RoundRobin:
		return "RoundRobin"
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// Config configures a Server. Start from DefaultConfig.
type Config struct {
	// Source is the registry the server follows (required).
	Source Source
	// Logger receives the NACKs and watch failures; nil discards.
	Logger *slog.Logger
	// Clock paces the retries of a failed watch; nil is real time.
	Clock clockwork.Clock
	// Rand picks the version prefix that tells this server's versions from
	// an earlier run's; nil uses a randomly seeded source.
	Rand rand.Source
	// Policy is the clusters' load-balancing policy; default RingHash.
	Policy Policy
	// LocalityKey, when set, names the instance metadata key whose value is
	// the endpoint's locality zone; instances without it, and every
	// instance when LocalityKey is empty, are in the zone of their Muster
	// cluster name.
	LocalityKey string
	// Region is the locality region of every endpoint (optional).
	Region string
	// MaxServices caps the services served at once, over all clients: a
	// name asked for beyond it is not served (the client sees no resource)
	// and counted in Stats.Refused. Each served service holds one Muster
	// watcher, which also counts against the registry's
	// Limits.MaxWatchers.
	MaxServices int
	// MaxNamesPerStream caps the resource names one stream may subscribe
	// to, over all types; a stream past it is ended (ErrTooManyNames,
	// codes.ResourceExhausted).
	MaxNamesPerStream int
	// RetryMin and RetryMax bound the backoff between attempts to watch a
	// service when Watch fails (before the registry is ready, say).
	RetryMin, RetryMax time.Duration
}

// DefaultConfig returns the defaults; set Source.
func DefaultConfig() Config {
	return Config{
		Policy:            RingHash,
		MaxServices:       10_000,
		MaxNamesPerStream: 4 * 10_000,
		RetryMin:          100 * time.Millisecond,
		RetryMax:          5 * time.Second,
	}
}

// Validate checks c, naming every field it refuses.
func (c *Config) Validate() error {
	var errs []string
	if c.Source == nil {
		errs = append(errs, "Source: required")
	}
	if c.Policy != RingHash && c.Policy != RoundRobin {
		errs = append(errs, "Policy: must be RingHash or RoundRobin")
	}
	if c.MaxServices <= 0 {
		errs = append(errs, "MaxServices: must be positive")
	}
	if c.MaxNamesPerStream <= 0 {
		errs = append(errs, "MaxNamesPerStream: must be positive")
	}
	if c.RetryMin <= 0 || c.RetryMax < c.RetryMin {
		errs = append(errs, "RetryMin, RetryMax: must be positive, RetryMin ≤ RetryMax")
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: xds config: %v", model.ErrInvalid, errs)
	}
	return nil
}
