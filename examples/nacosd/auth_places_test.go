package main

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestAuthTokenPlaces: a token is accepted wherever the clients send it
// (the accessToken query parameter, form field and header,
// "Authorization: Bearer", a gRPC request's accessToken header), and so
// are username and password parameters and gRPC headers; the same places
// with a token of another key, or a wrong password, are refused. Both
// login paths answer the token and -auth-token-ttl as tokenTtl, and a
// token stops working once it expired.
func TestAuthTokenPlaces(t *testing.T) {
	s := startServer(t, func(c *Config) {
		withAuth(testKey(t))(c)
		c.Auth.TokenTTL = 2 * time.Second
	})
	admin := loginTTL(t, s, "/nacos/v1/auth/login", "nacos", testAdminPassword, 2)
	for _, step := range []struct{ path, form string }{
		{"/nacos/v1/auth/users", "username=alice&password=a-pass"},
		{"/nacos/v1/auth/roles", "username=alice&role=team-a"},
		{"/nacos/v1/auth/permissions", "role=team-a&resource=public:*:*&action=rw"},
	} {
		form, _ := url.ParseQuery(step.form)
		if st, body := call(t, s, "POST", step.path, as(admin, form)); st != 200 {
			t.Fatalf("POST %s: %d %s", step.path, st, body)
		}
	}
	foreign := newAuth(AuthConfig{Enabled: true, Key: testKey(t)}, nil, testLogger(t)).newToken("alice")

	n := 0
	// send registers a persistent instance with the credentials placed by
	// place, and returns the status.
	send := func(place, tok string) int {
		t.Helper()
		n++
		form := url.Values{"serviceName": {"places"}, "ip": {"10.4.9." + strconv.Itoa(n)}, "port": {"80"}, "ephemeral": {"false"}}
		u := "http://" + s.HTTPAddr() + "/nacos/v1/ns/instance"
		hdr := http.Header{}
		switch place {
		case "query":
			u += "?accessToken=" + url.QueryEscape(tok)
		case "form":
			form.Set("accessToken", tok)
		case "header":
			hdr.Set("accessToken", tok)
		case "bearer":
			hdr.Set("Authorization", "Bearer "+tok)
		case "password":
			form.Set("username", "alice")
			form.Set("password", tok)
		}
		req, err := http.NewRequest("POST", u, strings.NewReader(form.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = hdr
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for _, place := range []string{"query", "form", "header", "bearer"} {
		// A fresh token each time: the TTL is 2 s.
		alice := loginTTL(t, s, "/nacos/v1/auth/users/login", "alice", "a-pass", 2)
		if st := send(place, alice); st != 200 && time.Until(tokenExpiry(t, alice)) > 0 {
			t.Errorf("alice's token as %s: %d", place, st)
		}
		if st := send(place, foreign); st != 403 {
			t.Errorf("a token of another key as %s: %d", place, st)
		}
	}
	if st := send("password", "a-pass"); st != 200 {
		t.Errorf("alice's username and password as parameters: %d", st)
	}
	if st := send("password", "guess"); st != 403 {
		t.Errorf("a wrong password as parameters: %d", st)
	}
	if st := send("none", ""); st != 403 {
		t.Errorf("no credentials: %d", st)
	}

	// gRPC: the accessToken header, or username and password headers.
	w := dialWire(t, s.GRPCAddr(), true)
	for what, c := range map[string]struct {
		headers map[string]string
		ok      bool
	}{
		"alice's password":       {map[string]string{"username": "alice", "password": "a-pass"}, true},
		"a wrong password":       {map[string]string{"username": "alice", "password": "guess"}, false},
		"a foreign token":        {map[string]string{"accessToken": foreign}, false},
		"no credentials":         {nil, false},
		"an admin claim, forged": {map[string]string{"accessToken": jwtHeader + ".eyJzdWIiOiJuYWNvcyIsImV4cCI6OTk5OTk5OTk5OTl9.AAAA"}, false},
	} {
		var r response
		typ := w.callWith(c.headers, "InstanceRequest", map[string]any{"serviceName": "places-grpc", "type": "registerInstance", "instance": inst("10.4.8.1", 80)}, &r)
		if c.ok != (typ == "InstanceResponse" && r.Success) || (!c.ok && r.ErrorCode != codeNoRight) {
			t.Errorf("gRPC with %s: %s %+v", what, typ, r)
		}
	}
	alice := loginTTL(t, s, "/nacos/v1/auth/login", "alice", "a-pass", 2)
	var r response
	if typ := w.callWith(map[string]string{"accessToken": alice}, "InstanceRequest", map[string]any{"serviceName": "places-grpc", "type": "registerInstance", "instance": inst("10.4.8.1", 80)}, &r); (typ != "InstanceResponse" || !r.Success) && time.Until(tokenExpiry(t, alice)) > 0 {
		t.Errorf("gRPC with alice's token: %s %+v", typ, r)
	}

	// Expiry: the same token, refused once its exp passed (polled: the
	// token is good for 2 s, whole seconds).
	eventually(t, 10*time.Second, "alice's token expires", func() bool { return send("header", alice) == 403 })
	var r2 response
	if typ := w.callWith(map[string]string{"accessToken": alice}, "InstanceRequest", map[string]any{"serviceName": "places-grpc", "type": "registerInstance", "instance": inst("10.4.8.2", 80)}, &r2); typ != "ErrorResponse" || r2.ErrorCode != codeNoRight {
		t.Errorf("gRPC with an expired token: %s %+v", typ, r2)
	}
}

// loginTTL logs in through path and checks the answer's tokenTtl.
func loginTTL(t *testing.T, s *Server, path, user, password string, ttl float64) string {
	t.Helper()
	var tok string
	eventually(t, 10*time.Second, "login of "+user+" at "+path, func() bool {
		resp, err := http.PostForm("http://"+s.HTTPAddr()+path, url.Values{"username": {user}, "password": {password}})
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var m map[string]any
		if resp.StatusCode != 200 || jsonDecode(resp, &m) != nil {
			return false
		}
		if m["tokenTtl"] != ttl || m["username"] != user {
			t.Fatalf("login answer %v: want tokenTtl %v and username %q", m, ttl, user)
		}
		tok, _ = m["accessToken"].(string)
		return tok != ""
	})
	return tok
}

// tokenExpiry reads a token's exp: a check of a fresh token is
// inconclusive once the machine was too slow to use it in time.
func tokenExpiry(t *testing.T, tok string) time.Time {
	t.Helper()
	parts := strings.Split(tok, ".")
	var p jwtPayload
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %q", tok)
	}
	if b, err := base64.RawURLEncoding.DecodeString(parts[1]); err != nil || json.Unmarshal(b, &p) != nil {
		t.Fatalf("token payload %q: %v", parts[1], err)
	}
	return time.Unix(p.Exp, 0)
}
