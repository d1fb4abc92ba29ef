package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/jonboulle/clockwork"
)

// TCPConfig configures a [TCPChecker].
type TCPConfig struct {
	// Timeout bounds the connect; 0 means DefaultCheckTimeout (500 ms).
	Timeout time.Duration
	// Clock measures latency; nil means the real clock.
	Clock clockwork.Clock
}

// TCPChecker checks a target by opening a TCP connection to its check port and closing it
// at once. A refused connection is a definite failure; a timeout or any other error is an
// ordinary one. It holds no resources between checks and is safe for concurrent use.
type TCPChecker struct {
	timeout time.Duration
	clock   clockwork.Clock
	dialer  net.Dialer
}

// NewTCPChecker returns a TCPChecker. It reports an error wrapping [ErrInvalidConfig] if
// cfg.Timeout is negative.
func NewTCPChecker(cfg TCPConfig) (*TCPChecker, error) {
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("%w: TCPConfig.Timeout must be >= 0 (0: %v), got %v", ErrInvalidConfig, DefaultCheckTimeout, cfg.Timeout)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultCheckTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	// KeepAlive -1: the connection is closed at once, so no keep-alive probes.
	return &TCPChecker{timeout: cfg.Timeout, clock: cfg.Clock, dialer: net.Dialer{KeepAlive: -1}}, nil
}

// Check dials t.Addr() within the checker's timeout (or ctx's deadline, if earlier).
func (c *TCPChecker) Check(ctx context.Context, t Target) Result {
	start := c.clock.Now()
	// The connect deadline is a socket deadline derived from a ctx deadline: context's
	// real-time timer is the documented exception to the injected clock.
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	conn, err := c.dialer.DialContext(ctx, "tcp", t.Addr())
	lat := c.clock.Since(start)
	if err != nil {
		return dialFailure(err, lat)
	}
	_ = conn.Close()
	return Result{Healthy: true, Latency: lat, Reason: "ok"}
}

// dialFailure maps a dial error to a result: refused (RST, nothing listening) is definite,
// the rest (timeouts, unreachable networks, DNS) is not.
func dialFailure(err error, lat time.Duration) Result {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return Result{Definite: true, Latency: lat, Reason: "connection refused"}
	case errors.Is(err, context.DeadlineExceeded), isTimeout(err):
		return Result{Latency: lat, Reason: "timeout"}
	case errors.Is(err, context.Canceled):
		return Result{Latency: lat, Reason: "canceled"}
	}
	return Result{Latency: lat, Reason: err.Error()}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
