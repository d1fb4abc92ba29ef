package distro

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/muster-io/muster/internal/cfgerr"
	"github.com/muster-io/muster/transport"
)

// Config configures a Replicator. Set the required fields (NodeID, Transport, Membership,
// Store); every other field left zero takes its default (DefaultConfig), as everywhere in this
// module, and where a field can be turned off, a negative value or a named constant says so.
type Config struct {
	NodeID     string              // required: this node's ID, as the transport and membership know it
	Transport  transport.Transport // required; distro registers message kinds 1–63 on it
	Membership Membership          // required; must list this node
	Store      Store               // required; see the Store contract

	Clock  clockwork.Clock // nil: real time
	Logger *slog.Logger    // nil: discard
	Rand   rand.Source     // nil: seeded from crypto/rand; used under the replicator's lock, do not share it

	// SyncDelay is the merge window of change sync: changes of a key within SyncDelay of its first
	// unsent change go out in one message, carrying the state at send time. NoSyncDelay (or
	// any negative value) turns the window off: every change is sent at once. Zero is the default
	// 1 s (Nacos).
	SyncDelay time.Duration
	// RetryMin and RetryMax bound the backoff of failed syncs to a peer: RetryMin doubling per
	// consecutive failure, capped at RetryMax, with jitter (each delay drawn in [d/2, d)).
	// A zero RetryMax is the default 10 s, or RetryMin if that is more.
	RetryMin, RetryMax time.Duration
	// RequestTimeout bounds each sync, verify, repair and snapshot request (a real-time network
	// deadline).
	RequestTimeout time.Duration
	// VerifyInterval is the anti-entropy period: each node sends each peer a digest of the records
	// it owns.
	VerifyInterval time.Duration
	// OrphanTimeout is how long the session records of a node that left are kept before they are
	// removed (unless it comes back).
	OrphanTimeout time.Duration
	// TombstoneTTL is how long deletions (and orphan removals) are remembered to refuse stale
	// updates. It must be well beyond VerifyInterval: at least twice; zero is the default
	// 60 s, or 12 × VerifyInterval if that is more.
	TombstoneTTL time.Duration
	// LoadTimeout is how long Start looks for a reachable peer to load from before this node
	// declares itself the first node and becomes ready empty: the first node of a new cluster
	// waits it (3 s by default) before it serves, unless ColdStartMembers lets it go earlier.
	LoadTimeout time.Duration
	// ColdStartMembers, when positive, is the size of the cluster (this node included) as the
	// host knows it from its own configuration (a static peer list, the Raft members). A node
	// whose membership lists at least that many members, every other one of which answers
	// twice in a row that it is loading too, is in a cold cluster, all nodes starting empty
	// together: it is ready at once instead of after LoadTimeout. A membership still
	// converging lists fewer, and a node restarting beside peers that restart too then waits
	// for the rest (or LoadTimeout): "every peer I know is loading" is only as good as the
	// view, and a member holding state may not be in it yet. One peer that does not answer
	// holds the node back as well, so a restarting node never serves before it has loaded.
	// 0 (the default) never takes the shortcut; so does a negative value.
	ColdStartMembers int
	// Buckets is the number of digest buckets. A verify round sends 8 bytes per bucket to each
	// peer; a differing bucket costs its records' versions. 1024 keeps a round near 8 KiB.
	Buckets int
	// MaxBatch caps the records of one sync or repair message (at most MaxMessageRecords).
	MaxBatch int
}

// NoSyncDelay, as Config.SyncDelay, turns the merge window off: every change is sent at once.
const NoSyncDelay time.Duration = -1

// DefaultConfig returns the defaults: SyncDelay 1 s, retries 500 ms–10 s, requests 3 s, verify
// every 5 s, orphans after 30 s, tombstones kept 60 s, load timeout 3 s, 1024 buckets, batches of
// 1000 records.
func DefaultConfig() Config {
	return Config{
		SyncDelay:      time.Second,
		RetryMin:       500 * time.Millisecond,
		RetryMax:       10 * time.Second,
		RequestTimeout: 3 * time.Second,
		VerifyInterval: 5 * time.Second,
		OrphanTimeout:  30 * time.Second,
		TombstoneTTL:   60 * time.Second,
		LoadTimeout:    3 * time.Second,
		Buckets:        1024,
		MaxBatch:       1000,
	}
}

// withDefaults returns c with each zero field set to its default.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	cfgerr.Default(&c.SyncDelay, d.SyncDelay)
	cfgerr.Default(&c.RetryMin, d.RetryMin)
	cfgerr.Default(&c.RetryMax, max(d.RetryMax, c.RetryMin))
	cfgerr.Default(&c.RequestTimeout, d.RequestTimeout)
	cfgerr.Default(&c.VerifyInterval, d.VerifyInterval)
	cfgerr.Default(&c.OrphanTimeout, d.OrphanTimeout)
	cfgerr.Default(&c.TombstoneTTL, max(d.TombstoneTTL, 12*c.VerifyInterval))
	cfgerr.Default(&c.LoadTimeout, d.LoadTimeout)
	cfgerr.Default(&c.Buckets, d.Buckets)
	cfgerr.Default(&c.MaxBatch, d.MaxBatch)
	c.ColdStartMembers = max(c.ColdStartMembers, 0)
	return c
}

// Validate reports every rule cfg breaks, each naming the field and the rule, joined in one
// error wrapping ErrInvalidConfig (nil if none). Zero fields are checked as their defaults.
func (c *Config) Validate() error {
	d := c.withDefaults()
	return d.validate()
}

func (c *Config) validate() error {
	var errs []error
	check := func(ok bool, field, rule string) {
		if !ok {
			errs = append(errs, fmt.Errorf("%s %s", field, rule))
		}
	}
	check(c.NodeID != "" && len(c.NodeID) <= MaxOwnerLen, "NodeID", fmt.Sprintf("must be 1–%d bytes", MaxOwnerLen))
	check(c.Transport != nil, "Transport", "is required")
	if c.Transport != nil {
		check(c.Transport.LocalID() == c.NodeID, "Transport", fmt.Sprintf("must have LocalID %q, got %q", c.NodeID, c.Transport.LocalID()))
	}
	check(c.Membership != nil, "Membership", "is required")
	check(c.Store != nil, "Store", "is required")
	check(c.RetryMin > 0, "RetryMin", "must be > 0")
	check(c.RetryMax >= c.RetryMin, "RetryMax", "must be >= RetryMin")
	check(c.RequestTimeout > 0, "RequestTimeout", "must be > 0")
	check(c.VerifyInterval > 0, "VerifyInterval", "must be > 0")
	check(c.OrphanTimeout > 0, "OrphanTimeout", "must be > 0")
	check(c.TombstoneTTL >= 2*c.VerifyInterval, "TombstoneTTL", "must be at least 2×VerifyInterval")
	check(c.LoadTimeout > 0, "LoadTimeout", "must be > 0")
	check(c.Buckets >= 1 && c.Buckets <= 1<<16, "Buckets", "must be 1–65536 (0: the default 1024)")
	check(c.MaxBatch >= 1 && c.MaxBatch <= MaxMessageRecords, "MaxBatch", fmt.Sprintf("must be 1–%d (MaxMessageRecords: peers refuse larger messages; 0: the default 1000)", MaxMessageRecords))
	return cfgerr.Join(ErrInvalidConfig, errs...)
}
