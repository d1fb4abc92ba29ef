package health

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/muster-io/muster/internal/cfgerr"
	"github.com/muster-io/muster/model"
)

// Config configures a [Scheduler]. NewScheduler copies it and never writes to the caller's
// value. Every field left zero takes its default ([DefaultConfig]), as everywhere in this
// module, so Config{} is valid; what can be turned off says how ([NoDamping]).
type Config struct {
	// Clock drives the schedule. Nil means the real clock; tests pass a
	// clockwork.FakeClock, advance it and call Scheduler.Settle.
	Clock clockwork.Clock
	// Logger receives the scheduler's logs. Nil discards them.
	Logger *slog.Logger
	// Rand draws the first intervals. Nil means a source seeded from crypto/rand. It is used
	// under the scheduler's lock: do not share it.
	Rand rand.Source

	// Checkers replaces the checker of a check type (TCP, HTTP, MYSQL). TCP or HTTP absent
	// or nil gets the built-in checker, made from TCP or HTTP below, which the scheduler
	// closes on Close; checkers given here are not closed by it. MYSQL has no built-in
	// checker, so that the scheduler does not link a MySQL driver: package health/mysqlcheck
	// has one. Without it, a MYSQL check is a definite failure that says so. NONE and
	// unknown types are never probed.
	Checkers map[model.CheckType]Checker
	// TCP and HTTP configure the built-in checkers. A nil Clock in them means this
	// Config's.
	TCP  TCPConfig
	HTTP HTTPConfig

	// MaxConcurrent bounds the checks running at once; due checks wait their turn, earliest
	// due first. Default 64.
	MaxConcurrent int
	// CheckTimeout is a deadline on every check's context, a bound for custom checkers that
	// ignore their own timeout, so that a stuck check cannot hold its slot for ever. The
	// built-in checkers time out after 500 ms. Default 5 s.
	CheckTimeout time.Duration

	// The first check of a new target runs at once; the second one after an interval drawn
	// uniformly in [FirstIntervalMin, FirstIntervalMax), so that targets added together do
	// not stay in step. Defaults 2 s and 7 s, as in Nacos (a zero FirstIntervalMax is at
	// least 2 × FirstIntervalMin).
	FirstIntervalMin, FirstIntervalMax time.Duration
	// TCPInterval, HTTPInterval and MySQLInterval adapt the later intervals to the measured
	// response time, per check type (see Interval). Defaults from Nacos: TCP 1-5 s with
	// factor 0.75, HTTP 0.5-5 s with 0.85, MySQL 2-3 s with 0.65. Each zero field of an
	// Interval takes its default.
	TCPInterval, HTTPInterval, MySQLInterval Interval

	// HealthyAfter is the number of consecutive healthy results that turn an unhealthy
	// instance healthy; UnhealthyAfter the number of consecutive failures that turn a
	// healthy one unhealthy (a definite failure does it at once). Default 3 each.
	HealthyAfter, UnhealthyAfter int

	// Damping holds instances that flap. Default: more than 4 flips in 60 s hold the
	// instance unhealthy for 60 s.
	Damping Damping

	// OnTransition, if not nil, is called when an instance's state flips, with the new state
	// and its status after the check that flipped it. It is called from the scheduler's
	// goroutine, one call at a time, in the order of the flips, and must not block long: no
	// check result is processed while it runs (checks keep running, up to MaxConcurrent).
	// It may call Set, Remove, Status and Len, but not Settle or Close (they wait for the
	// goroutine that calls it). A caller that needs to do slow work (a Raft
	// write with retries) hands it to a goroutine of its own.
	OnTransition func(key model.InstanceKey, healthy bool, st Status)
}

// Interval bounds the adaptive check interval of one check type. After every check the
// interval moves toward that check's sample by an exponentially weighted moving average,
// interval = Factor*interval + (1-Factor)*sample, clamped to [Min, Max]. The sample is the
// check's latency for a healthy result and Max for a failure, so a fast, healthy target
// converges to a check every Min, and a failing one backs off toward Max (Nacos's
// "checkRtNormalized").
type Interval struct {
	Min, Max time.Duration
	Factor   float64 // weight of the current interval, in [0, 1)
}

// Damping configures flap damping. When a flip would be an instance's Flips+1'th flip within
// Window, the instance is held unhealthy for Hold: a flip to unhealthy is applied, a flip to
// healthy is not. While held it does not turn healthy; checks go on and their results are
// counted. The hold ends at the first check that completes at or after its end; the flip
// history is then forgotten and the usual rule applies at once, so an instance whose last
// HealthyAfter checks passed turns healthy at that check. A negative Flips ([NoDamping])
// disables damping; zero fields take their defaults (4 flips, 60 s, 60 s).
type Damping struct {
	Flips  int
	Window time.Duration
	Hold   time.Duration
}

// NoDamping, as Config.Damping, turns flap damping off.
var NoDamping = Damping{Flips: -1}

// DefaultConfig returns the defaults: Nacos's timings and thresholds, damping of 4 flips in
// 60 s held for 60 s, 64 concurrent checks, the real clock, no logs.
func DefaultConfig() Config {
	return Config{
		MaxConcurrent:    64,
		CheckTimeout:     5 * time.Second,
		FirstIntervalMin: 2 * time.Second,
		FirstIntervalMax: 7 * time.Second,
		TCPInterval:      Interval{Min: time.Second, Max: 5 * time.Second, Factor: 0.75},
		HTTPInterval:     Interval{Min: 500 * time.Millisecond, Max: 5 * time.Second, Factor: 0.85},
		MySQLInterval:    Interval{Min: 2 * time.Second, Max: 3 * time.Second, Factor: 0.65},
		HealthyAfter:     3,
		UnhealthyAfter:   3,
		Damping:          Damping{Flips: 4, Window: 60 * time.Second, Hold: 60 * time.Second},
	}
}

// withDefaults returns c with each zero field set to its default. An Interval's or the
// Damping's fields default one by one; a Max left zero is at least its Min.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	cfgerr.Default(&c.MaxConcurrent, d.MaxConcurrent)
	cfgerr.Default(&c.CheckTimeout, d.CheckTimeout)
	cfgerr.Default(&c.FirstIntervalMin, d.FirstIntervalMin)
	cfgerr.Default(&c.FirstIntervalMax, max(d.FirstIntervalMax, 2*c.FirstIntervalMin))
	for _, iv := range []struct{ v, d *Interval }{{&c.TCPInterval, &d.TCPInterval}, {&c.HTTPInterval, &d.HTTPInterval}, {&c.MySQLInterval, &d.MySQLInterval}} {
		cfgerr.Default(&iv.v.Min, iv.d.Min)
		cfgerr.Default(&iv.v.Max, max(iv.d.Max, iv.v.Min))
		cfgerr.Default(&iv.v.Factor, iv.d.Factor)
	}
	cfgerr.Default(&c.HealthyAfter, d.HealthyAfter)
	cfgerr.Default(&c.UnhealthyAfter, d.UnhealthyAfter)
	if c.Damping.Flips < 0 {
		c.Damping = Damping{}
	} else {
		cfgerr.Default(&c.Damping.Flips, d.Damping.Flips)
		cfgerr.Default(&c.Damping.Window, d.Damping.Window)
		cfgerr.Default(&c.Damping.Hold, d.Damping.Hold)
	}
	return c
}

// Validate reports every rule c breaks, each naming the field and the rule, joined in one error
// wrapping [ErrInvalidConfig] (nil if none). Zero fields are checked as their defaults.
func (c *Config) Validate() error {
	d := c.withDefaults()
	return d.validate()
}

func (c *Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.MaxConcurrent < 1 {
		bad("MaxConcurrent must be >= 1, got %d", c.MaxConcurrent)
	}
	if c.CheckTimeout <= 0 {
		bad("CheckTimeout must be > 0, got %v", c.CheckTimeout)
	}
	if c.FirstIntervalMin <= 0 {
		bad("FirstIntervalMin must be > 0, got %v", c.FirstIntervalMin)
	}
	if c.FirstIntervalMax <= c.FirstIntervalMin {
		bad("FirstIntervalMax (%v) must be > FirstIntervalMin (%v)", c.FirstIntervalMax, c.FirstIntervalMin)
	}
	for _, iv := range []struct {
		name string
		v    Interval
	}{{"TCPInterval", c.TCPInterval}, {"HTTPInterval", c.HTTPInterval}, {"MySQLInterval", c.MySQLInterval}} {
		switch {
		case iv.v.Min <= 0:
			bad("%s.Min must be > 0, got %v", iv.name, iv.v.Min)
		case iv.v.Max < iv.v.Min:
			bad("%s.Max (%v) must be >= Min (%v)", iv.name, iv.v.Max, iv.v.Min)
		}
		if !(iv.v.Factor >= 0 && iv.v.Factor < 1) {
			bad("%s.Factor must be in [0, 1), got %v", iv.name, iv.v.Factor)
		}
	}
	if c.HealthyAfter < 1 {
		bad("HealthyAfter must be >= 1, got %d", c.HealthyAfter)
	}
	if c.UnhealthyAfter < 1 {
		bad("UnhealthyAfter must be >= 1, got %d", c.UnhealthyAfter)
	}
	if c.Damping.Flips > 0 {
		if c.Damping.Window <= 0 {
			bad("Damping.Window must be > 0 when Damping.Flips > 0, got %v", c.Damping.Window)
		}
		if c.Damping.Hold <= 0 {
			bad("Damping.Hold must be > 0 when Damping.Flips > 0, got %v", c.Damping.Hold)
		}
	}
	if c.Damping.Flips > maxDampFlips {
		bad("Damping.Flips must be <= %d, got %d", maxDampFlips, c.Damping.Flips)
	}
	return cfgerr.Join(ErrInvalidConfig, errs...)
}

// maxDampFlips bounds the per-instance flip history.
const maxDampFlips = 64
