package health

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/muster-io/muster/internal/cfgerr"
)

// HTTPConfig configures an [HTTPChecker].
type HTTPConfig struct {
	// Timeout bounds a whole check: connect, request, response headers and the drained
	// body. 0 means DefaultCheckTimeout (500 ms).
	Timeout time.Duration
	// MaxIdleConnsPerHost is how many idle keep-alive connections are kept per target, so
	// that a check every second reuses one. 0 means 1; negative keeps none.
	MaxIdleConnsPerHost int
	// MaxIdleConns bounds the idle connections over all targets. 0 means 1024.
	MaxIdleConns int
	// IdleConnTimeout closes idle connections after this long. 0 means 30 s.
	IdleConnTimeout time.Duration
	// UserAgent is sent unless a configured header sets it. Empty means "muster-health".
	UserAgent string
	// Clock measures latency; nil means the real clock.
	Clock clockwork.Clock
}

// maxDrain is how much of a response body is read (and discarded) so that the connection
// can be reused; a longer body is abandoned and the connection closed.
const maxDrain = 4 << 10

// HTTPChecker checks a target with GET http://addr/path. The instance is healthy iff the
// status is one of the check's ExpectedCodes (200 when none are configured). Redirects are
// not followed: a 3xx is judged as it is.
//
// An unexpected status is an ordinary (counted) failure when it may be transient (3xx, 429,
// 502, 503, 504), and a definite one otherwise (for example 404 or 500: Nacos also fails at
// once on any status other than 503 and 302). A refused connection is definite; a timeout or
// another error is not.
//
// It shares one http.Client and Transport between all checks and is safe for concurrent use.
// Close closes its idle connections.
type HTTPChecker struct {
	timeout time.Duration
	ua      string
	clock   clockwork.Clock
	tr      *http.Transport
	client  *http.Client
}

// NewHTTPChecker returns an HTTPChecker. It reports every negative field, joined in one error
// wrapping [ErrInvalidConfig].
func NewHTTPChecker(cfg HTTPConfig) (*HTTPChecker, error) {
	var errs []error
	if cfg.Timeout < 0 {
		errs = append(errs, fmt.Errorf("HTTPConfig.Timeout must be >= 0 (0: %v), got %v", DefaultCheckTimeout, cfg.Timeout))
	}
	if cfg.IdleConnTimeout < 0 {
		errs = append(errs, fmt.Errorf("HTTPConfig.IdleConnTimeout must be >= 0, got %v", cfg.IdleConnTimeout))
	}
	if cfg.MaxIdleConns < 0 {
		errs = append(errs, fmt.Errorf("HTTPConfig.MaxIdleConns must be >= 0, got %d", cfg.MaxIdleConns))
	}
	if err := cfgerr.Join(ErrInvalidConfig, errs...); err != nil {
		return nil, err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultCheckTimeout
	}
	if cfg.MaxIdleConnsPerHost == 0 {
		cfg.MaxIdleConnsPerHost = 1
	}
	if cfg.MaxIdleConns == 0 {
		cfg.MaxIdleConns = 1024
	}
	if cfg.IdleConnTimeout == 0 {
		cfg.IdleConnTimeout = 30 * time.Second
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "muster-health"
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	tr := &http.Transport{
		// No proxy: a health check goes straight to the instance.
		Proxy:                  nil,
		DialContext:            (&net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:           cfg.MaxIdleConns,
		MaxIdleConnsPerHost:    cfg.MaxIdleConnsPerHost,
		IdleConnTimeout:        cfg.IdleConnTimeout,
		ResponseHeaderTimeout:  cfg.Timeout,
		DisableCompression:     true,
		MaxResponseHeaderBytes: 64 << 10,
	}
	if cfg.MaxIdleConnsPerHost < 0 {
		tr.DisableKeepAlives = true
	}
	client := &http.Client{
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse // judge the 3xx itself
		},
	}
	return &HTTPChecker{timeout: cfg.Timeout, ua: cfg.UserAgent, clock: cfg.Clock, tr: tr, client: client}, nil
}

// Check sends the GET and judges the status.
func (c *HTTPChecker) Check(ctx context.Context, t Target) Result {
	start := c.clock.Now()
	// The request deadline is a socket deadline derived from a ctx deadline: context's
	// real-time timer is the documented exception to the injected clock.
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	path := t.Check.Path
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+t.Addr()+path, nil)
	if err != nil {
		return Result{Definite: true, Latency: c.clock.Since(start), Reason: "bad request: " + err.Error()}
	}
	req.Header.Set("User-Agent", c.ua)
	for k, v := range t.Check.Headers.All() {
		if strings.EqualFold(k, "Host") {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		lat := c.clock.Since(start)
		if errors.Is(err, syscall.ECONNREFUSED) {
			return Result{Definite: true, Latency: lat, Reason: "connection refused"}
		}
		if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
			return Result{Latency: lat, Reason: "timeout"}
		}
		return Result{Latency: lat, Reason: err.Error()}
	}
	// Drain a little so that the connection can be reused; a longer body is dropped with it.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	_ = resp.Body.Close()
	lat := c.clock.Since(start)
	if expected(t.Check.ExpectedCodes, resp.StatusCode) {
		return Result{Healthy: true, Latency: lat, Reason: "status " + strconv.Itoa(resp.StatusCode)}
	}
	return Result{Definite: !transientStatus(resp.StatusCode), Latency: lat, Reason: "status " + strconv.Itoa(resp.StatusCode)}
}

// Close closes the idle connections. Checks still running finish normally; call it once
// they have returned.
func (c *HTTPChecker) Close() error {
	c.tr.CloseIdleConnections()
	return nil
}

func expected(codes []int, status int) bool {
	if len(codes) == 0 {
		return status == http.StatusOK
	}
	return slices.Contains(codes, status)
}

func transientStatus(status int) bool {
	switch {
	case status >= 300 && status < 400:
		return true
	case status == http.StatusTooManyRequests, status == http.StatusBadGateway,
		status == http.StatusServiceUnavailable, status == http.StatusGatewayTimeout:
		return true
	}
	return false
}
