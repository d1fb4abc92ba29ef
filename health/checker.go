package health

import (
	"context"
	"net"
	"strconv"
	"time"

	"github.com/muster-io/muster/model"
)

// DefaultCheckTimeout is the timeout of the TCP, HTTP and MySQL checkers when their config
// leaves it 0, as in Nacos.
const DefaultCheckTimeout = 500 * time.Millisecond

// Target is what a [Checker] probes: an instance's address and its cluster's check config.
type Target struct {
	IP    string
	Port  int               // the instance's port; Check.Port, if > 0, overrides it
	Check model.HealthCheck // type, port, HTTP path/headers/codes, MySQL user/password/command
}

// Addr returns the "ip:port" the checkers dial: Check.Port if it is > 0, else Port. Unlike
// Nacos, whose MySQL check always uses the instance port, every checker honours Check.Port.
func (t Target) Addr() string {
	port := t.Port
	if t.Check.Port > 0 {
		port = t.Check.Port
	}
	return net.JoinHostPort(t.IP, strconv.Itoa(port))
}

// clone returns t with a copy of ExpectedCodes (Headers is immutable), so that the scheduler
// shares nothing mutable with its caller.
func (t Target) clone() Target {
	if t.Check.ExpectedCodes != nil {
		t.Check.ExpectedCodes = append([]int(nil), t.Check.ExpectedCodes...)
	}
	return t
}

// Result is the outcome of one check.
type Result struct {
	Healthy bool `json:"healthy"`
	// Definite marks a failure that flips a healthy instance at once instead of after
	// several consecutive failures: a refused connection, an SQL or authentication error, an
	// HTTP status that is neither expected nor transient. It is meaningless when Healthy.
	Definite bool          `json:"definite"`
	Latency  time.Duration `json:"latency"` // how long the check took
	Reason   string        `json:"reason"`  // human-readable: "ok", "connection refused", "status 503", "read_only=ON"...
}

// Checker probes a target.
//
// Concurrency contract: Check may be called concurrently from many goroutines, for different
// targets and for the same one ([Scheduler] never runs two checks of one instance at once, but
// other callers may). It may block, but must return soon after ctx is done, and should return
// within its own timeout (500 ms for the built-in checkers) even when ctx has no deadline. It
// must not panic; the scheduler turns a panic into a failed result, but other callers may not.
// A Checker that holds resources (connections) also implements io.Closer; Close is called
// once, after every Check has returned.
type Checker interface {
	Check(ctx context.Context, t Target) Result
}

// NoneChecker is the checker of [model.CheckNone]: it never probes. The [Scheduler] does not
// call any checker for such targets (their health is set by hand through Scheduler.Set); Check
// exists only so that NONE has a Checker like the other types. It returns an unhealthy,
// non-definite result whose Reason says that nothing was probed, so that a caller that
// wrongly feeds it to a threshold never turns an instance healthy.
type NoneChecker struct{}

// Check returns at once without probing anything. It is safe for concurrent use.
func (NoneChecker) Check(context.Context, Target) Result {
	return Result{Reason: "check type NONE: not probed"}
}

// noMySQL is the checker of MYSQL checks when Config.Checkers has none: it
// says that one is missing.
type noMySQL struct{}

func (noMySQL) Check(context.Context, Target) Result {
	return Result{Definite: true, Reason: "no MySQL checker: put one (package health/mysqlcheck) in health.Config.Checkers"}
}
