package main

import (
	"context"
	"errors"
	"net/http"
	"strings"
)

// Authorize checks that the request's token allows reading (or, with
// write, changing) the naming data of namespace: the check a web console
// mounted on this server makes before it serves a page or an action. The
// token is read as nacosd's own APIs read it: "Authorization: Bearer
// <token>", the accessToken header, or the accessToken query parameter
// (a form body is not read, so the caller's body stays untouched).
//
// The error matches ErrUnauthenticated (answer 401: no token, or an
// invalid or expired one, or a deleted user) or ErrForbidden (answer 403:
// a valid user without the permission, or the namespace reserved for
// nacosd's users). With authentication off it allows everything but the
// reserved namespace, and returns the user "".
func (a *Auth) Authorize(r *http.Request, namespace string, write bool) (user string, err error) {
	id := tokenIdentity(r)
	return a.authorize(r.Context(), id, namespace, "", "", write)
}

// tokenIdentity reads a request's token from its headers and query string.
func tokenIdentity(r *http.Request) identity {
	if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "Bearer ") {
		return identity{token: strings.TrimSpace(h[7:])}
	}
	if t := r.Header.Get("accessToken"); t != "" {
		return identity{token: t}
	}
	return identity{token: r.URL.Query().Get("accessToken")}
}

// httpIdentity reads a request's identity as Nacos's AuthFilter does: the
// token as tokenIdentity reads it or an accessToken form field, or else
// username and password parameters. The form must be parsed.
func httpIdentity(r *http.Request) identity {
	id := tokenIdentity(r)
	if id.token == "" {
		id.token = r.FormValue("accessToken")
	}
	if id.token == "" {
		id.user, id.password = r.FormValue("username"), r.FormValue("password")
	}
	return id
}

// authStatus is the HTTP status of an authentication or authorization
// error, for Nacos's APIs: 403 for both, as Nacos's AuthFilter answers.
func authStatus(err error) (int, bool) {
	if errors.Is(err, ErrUnauthenticated) || errors.Is(err, ErrForbidden) {
		return http.StatusForbidden, true
	}
	return 0, false
}

// allow checks a naming request over HTTP against the permissions of its
// sender and answers the refusal; it reports whether to go on.
func (s *Server) allow(w http.ResponseWriter, r *http.Request, namespace, group, name string, write bool) bool {
	_, err := s.auth.authorize(r.Context(), httpIdentity(r), namespace, group, name, write)
	if err == nil {
		return true
	}
	s.denied(w, r, err)
	return false
}

// denied answers a refused request: Nacos's 403 (Spring's error body) for
// an authentication or authorization error, the usual answer otherwise.
func (s *Server) denied(w http.ResponseWriter, r *http.Request, err error) {
	status, ok := authStatus(err)
	if !ok {
		s.fail(w, r, err)
		return
	}
	msg := err.Error()
	if i := strings.Index(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	s.log.Info("HTTP request denied", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "err", err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	writeJSONBody(w, map[string]any{
		"timestamp": s.now().Format("2006-01-02T15:04:05.000-07:00"), "status": status,
		"error": http.StatusText(status), "message": msg, "path": r.URL.Path,
	})
}

// allowGRPC checks a naming request over gRPC; the token is the
// request's accessToken header (the 2.x SDK's), or its username and
// password headers.
func (s *Server) allowGRPC(ctx context.Context, headers map[string]string, namespace, group, name string, write bool) error {
	id := identity{token: headers["accessToken"]}
	if id.token == "" {
		id.user, id.password = headers["username"], headers["password"]
	}
	_, err := s.auth.authorize(ctx, id, namespace, group, name, write)
	return err
}
