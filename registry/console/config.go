package console

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/jonboulle/clockwork"
)

// Config configures a Console. Start from DefaultConfig; New copies it.
type Config struct {
	// Nodes returns the nodes to show, called on every request (a host
	// whose nodes come and go returns the running ones). The first is the
	// local node: the console reads from it, watches it and writes through
	// it; the others add their views to the cluster page, the charts and the
	// instance timelines. Required.
	Nodes func() []Node

	// Authorize, if set, is asked before every request is served: for the
	// namespace the request reads or writes ("" for the cluster page, the
	// charts and the consistency check, which are not a namespace's), and
	// whether it writes. It returns the user's name, or an error: one
	// matching ErrUnauthenticated answers 401 (a page shows the login
	// form), ErrForbidden or any other error 403. The browser sends the
	// token it got from LoginURL as the accessToken query parameter of every
	// request, the event streams' included; Authorize reads it there (or
	// wherever the host's scheme puts it). Nil means no authentication:
	// anyone who reaches the handler reads and writes everything. Mount it
	// then on a loopback address only; the console refuses, without
	// Authorize, requests whose Host is not a loopback name or address (a
	// DNS-rebinding page).
	Authorize func(r *http.Request, namespace string, write bool) (user string, err error)
	// LoginURL is where the login form posts username and password
	// (form-encoded, as Nacos's /nacos/v1/auth/login takes them) and gets
	// back {"accessToken": "..."}. Relative URLs are resolved against the
	// console's pages. Empty: no login form (the host hands out tokens
	// another way).
	LoginURL string

	// Clock drives the samples of the charts and the event streams' timers.
	// Nil means the real clock.
	Clock clockwork.Clock
	// Logger receives the console's logs (refused requests are not logged:
	// they are answered). Nil discards.
	Logger *slog.Logger

	// SampleInterval is how often the charts' counters are read (each read
	// calls Registry.Stats on every node, which walks the index); default
	// 2 s. Samples is how many are kept per node (default 150: 5 min).
	SampleInterval time.Duration
	Samples        int
	// PageSize is the number of services per page, and of instances per
	// page of a service (default 50).
	PageSize int
	// PatchTTL is the registry's Config.PatchTTL, for the countdown of a
	// patch whose instance is gone (default 60 s, the registry's default).
	PatchTTL time.Duration
	// MaxStreams caps the event streams open at once (default 64); one past
	// it is answered 503. Each stream of the services page holds a watcher
	// per service shown.
	MaxStreams int
}

// DefaultConfig returns the defaults; Nodes is still to be set.
func DefaultConfig() Config {
	return Config{
		SampleInterval: 2 * time.Second,
		Samples:        150,
		PageSize:       50,
		PatchTTL:       60 * time.Second,
		MaxStreams:     64,
	}
}

// Validate reports every invalid field, each with its rule, in an error
// matching ErrInvalidConfig.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, rule string, v any) {
		errs = append(errs, fmt.Errorf("%s %v: %s", field, v, rule))
	}
	if c.Nodes == nil {
		errs = append(errs, errors.New("Nodes: required"))
	}
	if c.SampleInterval < 10*time.Millisecond {
		bad("SampleInterval", "must be at least 10ms", c.SampleInterval)
	}
	if c.Samples < 2 || c.Samples > 100000 {
		bad("Samples", "must be 2–100000", c.Samples)
	}
	if c.PageSize < 1 || c.PageSize > 1000 {
		bad("PageSize", "must be 1–1000", c.PageSize)
	}
	if c.PatchTTL < 0 {
		bad("PatchTTL", "must not be negative", c.PatchTTL)
	}
	if c.MaxStreams < 1 {
		bad("MaxStreams", "must be at least 1", c.MaxStreams)
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
}
