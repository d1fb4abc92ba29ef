package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/muster-io/muster/registry/console"
)

// The web console (registry/console, issue 32 item 1) at /nacos/, where
// Nacos users find Nacos's: its pages are /nacos/ (services),
// /nacos/service, /nacos/instance and /nacos/cluster, its script and
// styles under /nacos/static/, its calls under /nacos/api/. Nacos's own
// API paths stay nacosd's: /nacos/v1/, /nacos/v2/ and /nacos/actuator/
// never reach the console (an unknown one is a 404, as before).
//
// Permissions are nacosd's (Auth.Authorize, the ones of the OpenAPI): with
// authentication on, a page or a call needs a token with the permission to
// read the namespace shown, a write the permission to write it; a
// read-only user sees no buttons, and the console refuses the write
// anyway. The login form posts to /nacos/v1/auth/login. The namespace of
// nacosd's users is refused to everyone, whatever the permissions.
//
// With authentication off the console is served to loopback Hosts only (a
// page of another site that rebinds its name to 127.0.0.1 sends its own
// Host and is refused): on a non-loopback address (-open) it then answers
// 403 to everyone; turn on -auth to use it from elsewhere, and -tls-cert
// (the token travels in the URL).

// consolePrefix is where the console is mounted.
const consolePrefix = "/nacos"

// startConsole makes and starts the console, unless it is off.
func (s *Server) startConsole(ctx context.Context) error {
	if s.cfg.NoConsole {
		return nil
	}
	nd := console.Node{Registry: s.reg}
	if s.node != nil {
		nd.Raft = s.node.Raft()
	}
	cfg := console.DefaultConfig()
	cfg.Nodes = func() []console.Node { return []console.Node{nd} }
	cfg.Authorize = s.consoleAuthorize
	cfg.LoginURL = consolePrefix + "/v1/auth/login"
	cfg.Logger = s.log.With("api", "console")
	c, err := console.New(cfg)
	if err != nil {
		return fmt.Errorf("console: %w", err)
	}
	if err := c.Start(ctx); err != nil {
		return fmt.Errorf("console: %w", err)
	}
	s.console = c
	return nil
}

// consoleHandler serves the console under consolePrefix; Nacos's API
// prefixes stay out of it.
func (s *Server) consoleHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.console == nil {
			http.NotFound(w, r)
			return
		}
		http.StripPrefix(consolePrefix, s.console).ServeHTTP(w, r)
	})
}

// mountConsole routes the console's paths on mux.
func (s *Server) mountConsole(mux *http.ServeMux) {
	mux.Handle(consolePrefix+"/", s.consoleHandler())
	for _, p := range []string{"/v1/", "/v2/", "/actuator/"} {
		mux.Handle(consolePrefix+p, http.NotFoundHandler())
	}
}

// consoleAuthorize is the console's Authorize: nacosd's permissions, with
// its errors told apart as the console wants them; with authentication
// off, a loopback Host only (see above).
func (s *Server) consoleAuthorize(r *http.Request, namespace string, write bool) (string, error) {
	if !s.auth.Enabled() {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		if !isLoopback(host) {
			return "", fmt.Errorf("%w: authentication is off (nacosd -auth), so the console serves loopback Hosts only", console.ErrForbidden)
		}
	}
	user, err := s.auth.Authorize(r, namespace, write)
	switch {
	case err == nil:
		return user, nil
	case errors.Is(err, ErrUnauthenticated):
		return "", fmt.Errorf("%w: %w", console.ErrUnauthenticated, err)
	default:
		return "", fmt.Errorf("%w: %w", console.ErrForbidden, err)
	}
}
