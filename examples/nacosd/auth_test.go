package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	mmodel "github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	v1clients "github.com/nacos-group/nacos-sdk-go/clients"
	v1constant "github.com/nacos-group/nacos-sdk-go/common/constant"
	"github.com/nacos-group/nacos-sdk-go/v2/common/constant"
	"github.com/nacos-group/nacos-sdk-go/v2/vo"
	v1vo "github.com/nacos-group/nacos-sdk-go/vo"
)

const testAdminPassword = "admin-secret-1"

func jsonDecode(resp *http.Response, v any) error { return json.NewDecoder(resp.Body).Decode(v) }

func registryList(ns string) registry.ListOptions { return registry.ListOptions{Namespace: ns} }

func testKey(t testing.TB) []byte {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

// withAuth turns authentication on with a fresh key and the admin's
// password.
func withAuth(key []byte) func(*Config) {
	return func(c *Config) {
		c.Auth = AuthConfig{Enabled: true, Key: key, AdminPassword: testAdminPassword}
	}
}

// login logs in over HTTP and returns the token, polling while the admin
// is being created.
func login(t testing.TB, addr, user, password string) string {
	t.Helper()
	var tok string
	eventually(t, 60*time.Second, "login of "+user, func() bool { // bcrypt under -race on a loaded machine
		resp, err := http.PostForm("http://"+addr+"/nacos/v1/auth/login", url.Values{"username": {user}, "password": {password}})
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var m map[string]any
		if resp.StatusCode != 200 || jsonDecode(resp, &m) != nil {
			return false
		}
		tok, _ = m["accessToken"].(string)
		return tok != "" && m["tokenTtl"] == float64(18000)
	})
	return tok
}

// as returns form with the token added.
func as(tok string, form url.Values) url.Values {
	out := url.Values{}
	for k, v := range form {
		out[k] = v
	}
	if tok != "" {
		out.Set("accessToken", tok)
	}
	return out
}

// tenants makes the users of the tests: alice writes the public namespace,
// bob writes tenant-b, reader reads public. It returns their tokens.
func tenants(t *testing.T, s *Server) (admin, alice, bob, reader string) {
	t.Helper()
	admin = login(t, s.HTTPAddr(), "nacos", testAdminPassword)
	must := func(method, path string, form url.Values) {
		t.Helper()
		if st, body := callRaft(t, s, method, path, as(admin, form)); st != 200 {
			t.Fatalf("%s %s %v: %d %s", method, path, form, st, body)
		}
	}
	for _, u := range [][3]string{{"alice", "a-pass", "team-a"}, {"bob", "b-pass", "team-b"}, {"reader", "r-pass", "readers"}} {
		must("POST", "/nacos/v1/auth/users", url.Values{"username": {u[0]}, "password": {u[1]}})
		must("POST", "/nacos/v1/auth/roles", url.Values{"username": {u[0]}, "role": {u[2]}})
	}
	must("POST", "/nacos/v1/auth/permissions", url.Values{"role": {"team-a"}, "resource": {"public:*:*"}, "action": {"rw"}})
	must("POST", "/nacos/v1/auth/permissions", url.Values{"role": {"team-b"}, "resource": {"tenant-b:*:*"}, "action": {"rw"}})
	must("POST", "/nacos/v1/auth/permissions", url.Values{"role": {"readers"}, "resource": {":*:*"}, "action": {"r"}})
	return admin, login(t, s.HTTPAddr(), "alice", "a-pass"), login(t, s.HTTPAddr(), "bob", "b-pass"), login(t, s.HTTPAddr(), "reader", "r-pass")
}

func TestAuthTokens(t *testing.T) {
	key := testKey(t)
	a := newAuth(AuthConfig{Enabled: true, Key: key}, nil, testLogger(t))
	tok := a.newToken("alice")
	if !strings.HasPrefix(tok, "eyJhbGciOiJIUzI1NiJ9.") {
		t.Fatalf("not Nacos's JWT header: %s", tok)
	}
	if u, err := a.parseToken(tok); err != nil || u != "alice" {
		t.Fatalf("parse: %q %v", u, err)
	}
	parts := strings.Split(tok, ".")
	forged := func(payload string) string {
		return parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + "." + parts[2]
	}
	other := newAuth(AuthConfig{Enabled: true, Key: testKey(t)}, nil, testLogger(t))
	expired := newAuth(AuthConfig{Enabled: true, Key: key, TokenTTL: time.Second}, nil, testLogger(t))
	expired.now = func() time.Time { return time.Now().Add(-time.Hour) }
	for name, bad := range map[string]string{
		"another user, the same signature": forged(`{"sub":"nacos","exp":99999999999}`),
		"signed with another key":          other.newToken("alice"),
		"alg none":                         base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none"}`)) + "." + parts[1] + ".",
		"HS512 header":                     "eyJhbGciOiJIUzUxMiJ9." + parts[1] + "." + parts[2],
		"expired":                          expired.newToken("alice"),
		"two parts":                        parts[0] + "." + parts[1],
		"oversized":                        tok + strings.Repeat("A", maxTokenLen),
		"empty":                            "",
	} {
		if u, err := a.parseToken(bad); err == nil || !strings.Contains(err.Error(), "unauthenticated") {
			t.Errorf("%s: accepted as %q (%v)", name, u, err)
		}
	}
	if _, err := DecodeAuthKey(base64.StdEncoding.EncodeToString(make([]byte, 31))); err == nil {
		t.Error("a 31-byte key accepted")
	}
	if _, err := DecodeAuthKey("not base64!"); err == nil {
		t.Error("a key that is not base64 accepted")
	}
}

func TestGlobMatch(t *testing.T) {
	for _, c := range []struct {
		pat, s string
		want   bool
	}{
		{"public:*:*", "public:DEFAULT_GROUP:naming/shop", true},
		{"public:*:*", "public-x:DEFAULT_GROUP:naming/shop", false},
		{"tenant-b:*:*", "tenant-b-prod:G:naming/x", false},
		{"dev:G:naming/shop", "dev:G:naming/shop", true},
		{"dev:G:naming/shop", "dev:G:naming/shopx", false},
		{"dev:G:naming/sh*", "dev:G:naming/shopx", true},
		{"dev:.:*", "dev:G:naming/x", false}, // '.' is no regular expression
		{"*", "", true},
		{"a*a*a*a*a*b", strings.Repeat("a", 5000), false}, // no blow-up
	} {
		if got := globMatch(c.pat, c.s); got != c.want {
			t.Errorf("globMatch(%q, %q) = %v", c.pat, c.s, got)
		}
	}
}

// TestAuthClients: the real clients, configured with a username and
// password, work with authentication on; without credentials they are
// refused.
func TestAuthClients(t *testing.T) {
	skipUnderRace(t)
	s := startServer(t, withAuth(testKey(t)))
	tenants(t, s)

	v2 := newClientWith(t, []constant.ClientOption{constant.WithUsername("alice"), constant.WithPassword("a-pass")}, s.HTTPAddr())
	register(t, v2, "auth-shop", "", "10.9.0.1", 80, 1)
	got, err := v2.SelectAllInstances(vo.SelectAllInstancesParam{ServiceName: "auth-shop"})
	if err != nil || len(got) != 1 {
		t.Fatalf("v2 select: %v %v", got, err)
	}
	// Persistent, over HTTP with the token as a parameter.
	if ok, err := v2.RegisterInstance(vo.RegisterInstanceParam{ServiceName: "auth-db", Ip: "10.9.0.2", Port: 3306, Weight: 1, Enable: true, Healthy: true, Ephemeral: false}); err != nil || !ok {
		t.Fatalf("v2 persistent register: %v %v", ok, err)
	}
	if n := len(served(t, s, "auth-db")); n != 1 {
		t.Fatalf("persistent instance not served: %d", n)
	}

	dir := clientDir(t)
	v1, err := v1clients.NewNamingClient(v1vo.NacosClientParam{
		ClientConfig: &v1constant.ClientConfig{TimeoutMs: 3000, NotLoadCacheAtStart: true, LogDir: dir, CacheDir: dir, LogLevel: "error",
			Username: "alice", Password: "a-pass"},
		ServerConfigs: []v1constant.ServerConfig{*v1constant.NewServerConfig("127.0.0.1", httpPort(t, s.HTTPAddr()))},
	})
	if err != nil {
		t.Fatal(err)
	}
	v1Register(t, v1, "auth-v1", "", "10.9.0.3", 80, 1, nil)
	eventually(t, 5*time.Second, "the v1 client sees its instance", func() bool {
		l, err := v1.SelectAllInstances(v1vo.SelectAllInstancesParam{ServiceName: "auth-v1"})
		return err == nil && len(l) == 1
	})

	// Without credentials, or with a wrong password: refused.
	anon := newClient(t, s.HTTPAddr())
	if ok, err := anon.RegisterInstance(vo.RegisterInstanceParam{ServiceName: "auth-shop", Ip: "10.9.0.9", Port: 80, Weight: 1, Enable: true, Healthy: true, Ephemeral: true}); err == nil && ok {
		t.Fatal("an anonymous v2 client registered")
	}
	wrong := newClientWith(t, []constant.ClientOption{constant.WithUsername("alice"), constant.WithPassword("nope")}, s.HTTPAddr())
	if ok, err := wrong.RegisterInstance(vo.RegisterInstanceParam{ServiceName: "auth-shop", Ip: "10.9.0.9", Port: 80, Weight: 1, Enable: true, Healthy: true, Ephemeral: true}); err == nil && ok {
		t.Fatal("a v2 client with a wrong password registered")
	}
	if n := len(served(t, s, "auth-shop")); n != 1 {
		t.Fatalf("auth-shop has %d instances, want alice's only", n)
	}
}

// TestAuthAttacks performs the cross-client attacks that worked without
// authentication (issue 28, item 1) with authentication on: as an
// anonymous client, with forged and foreign tokens, as a user of another
// namespace and as a read-only user. Each must be refused with Nacos's 403,
// and nothing of the victim's may change.
func TestAuthAttacks(t *testing.T) {
	key := testKey(t)
	s := startServer(t, withAuth(key))
	admin, alice, bob, reader := tenants(t, s)

	// The victim's data: an ephemeral instance on a gRPC connection, a
	// persistent instance and a service definition.
	victim := dialWire(t, s.GRPCAddr(), true)
	ah := map[string]string{"accessToken": alice}
	var r response
	victim.callWith(ah, "InstanceRequest", map[string]any{"serviceName": "victim", "type": "registerInstance", "instance": inst("10.8.0.1", 8080)}, &r)
	if !r.Success {
		t.Fatalf("victim's registration: %+v", r)
	}
	for _, c := range []struct {
		method, path string
		form         url.Values
	}{
		{"POST", "/nacos/v1/ns/instance", url.Values{"serviceName": {"victim-db"}, "ip": {"10.8.0.2"}, "port": {"3306"}, "ephemeral": {"false"}}},
		{"POST", "/nacos/v1/ns/service", url.Values{"serviceName": {"victim-svc"}, "protectThreshold": {"0"}}},
	} {
		if st, body := call(t, s, c.method, c.path, as(alice, c.form)); st != 200 {
			t.Fatalf("victim's %s %s: %d %s", c.method, c.path, st, body)
		}
	}

	forgedAdmin := func() string { // alice's signature on an admin claim
		p := strings.Split(alice, ".")
		return p[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"nacos","exp":99999999999}`)) + "." + p[2]
	}()
	old := newAuth(AuthConfig{Enabled: true, Key: key, TokenTTL: time.Second}, nil, testLogger(t))
	old.now = func() time.Time { return time.Now().Add(-time.Hour) }
	attackers := map[string]url.Values{
		"anonymous":          {},
		"forged admin token": {"accessToken": {forgedAdmin}},
		"expired token":      {"accessToken": {old.newToken("alice")}},
		"foreign key":        {"accessToken": {newAuth(AuthConfig{Enabled: true, Key: testKey(t)}, nil, testLogger(t)).newToken("nacos")}},
		"wrong password":     {"username": {"alice"}, "password": {"guess"}},
		"bob (tenant-b)":     {"accessToken": {bob}},
		"reader (read-only)": {"accessToken": {reader}},
	}
	httpAttacks := []struct {
		what, method, path string
		form               url.Values
	}{
		{"overwrite an ephemeral instance", "PUT", "/nacos/v1/ns/instance", url.Values{"serviceName": {"victim"}, "ip": {"10.8.0.1"}, "port": {"8080"}, "weight": {"0"}, "enabled": {"false"}}},
		{"overwrite a persistent instance", "PUT", "/nacos/v1/ns/instance", url.Values{"serviceName": {"victim-db"}, "ip": {"10.8.0.2"}, "port": {"3306"}, "ephemeral": {"false"}, "weight": {"0"}, "enabled": {"false"}}},
		{"delete an ephemeral instance", "DELETE", "/nacos/v1/ns/instance", url.Values{"serviceName": {"victim"}, "ip": {"10.8.0.1"}, "port": {"8080"}}},
		{"delete a persistent instance", "DELETE", "/nacos/v1/ns/instance", url.Values{"serviceName": {"victim-db"}, "ip": {"10.8.0.2"}, "port": {"3306"}, "ephemeral": {"false"}}},
		{"create a service", "POST", "/nacos/v1/ns/service", url.Values{"serviceName": {"attacker-svc"}}},
		{"update a service", "PUT", "/nacos/v1/ns/service", url.Values{"serviceName": {"victim-svc"}, "protectThreshold": {"0.9"}}},
		{"delete a service", "DELETE", "/nacos/v1/ns/service", url.Values{"serviceName": {"victim-svc"}}},
		{"write into another namespace", "POST", "/nacos/v1/ns/instance", url.Values{"namespaceId": {"tenant-b-prod"}, "serviceName": {"x"}, "ip": {"10.8.0.3"}, "port": {"80"}}},
		{"register the victim's ip:port by a beat", "PUT", "/nacos/v1/ns/instance/beat", url.Values{"serviceName": {"DEFAULT_GROUP@@victim"}, "beat": {`{"ip":"10.8.0.1","port":8080,"serviceName":"DEFAULT_GROUP@@victim","weight":1}`}}},
	}
	for who, id := range attackers {
		for _, a := range httpAttacks {
			form := url.Values{}
			for k, v := range a.form {
				form[k] = v
			}
			for k, v := range id {
				form[k] = v
			}
			st, body := call(t, s, a.method, a.path, form)
			if st != http.StatusForbidden || jsonOf(t, body)["status"] != float64(403) {
				t.Errorf("%s could %s: %d %s", who, a.what, st, body)
			}
		}
		// Over gRPC, from connections of their own.
		h := map[string]string{}
		if tok := id.Get("accessToken"); tok != "" {
			h["accessToken"] = tok
		}
		h["username"], h["password"] = id.Get("username"), id.Get("password")
		attacker := dialWire(t, s.GRPCAddr(), true)
		for what, req := range map[string]struct {
			typ  string
			body map[string]any
		}{
			"deregister a persistent instance": {"PersistentInstanceRequest", map[string]any{"serviceName": "victim-db", "type": "deregisterInstance", "instance": inst("10.8.0.2", 3306)}},
			"register the victim's ip:port":    {"InstanceRequest", map[string]any{"serviceName": "victim", "type": "registerInstance", "instance": inst("10.8.0.1", 8080)}},
			"register into another namespace":  {"InstanceRequest", map[string]any{"namespace": "tenant-b-prod", "serviceName": "x", "type": "registerInstance", "instance": inst("10.8.0.3", 80)}},
		} {
			var r response
			if typ := attacker.callWith(h, req.typ, req.body, &r); typ != "ErrorResponse" || r.ErrorCode != codeNoRight {
				t.Errorf("%s could %s over gRPC: %s %+v", who, what, typ, r)
			}
		}
	}

	// Nothing changed.
	v := served(t, s, "victim")
	if len(v) != 1 || v[0].Weight != 1 || !v[0].Enabled {
		t.Fatalf("the victim's ephemeral instance changed: %+v", v)
	}
	if v := served(t, s, "victim-db"); len(v) != 1 || v[0].Weight != 1 || !v[0].Enabled {
		t.Fatalf("the victim's persistent instance changed: %+v", v)
	}
	ctx := context.Background()
	if d, err := s.Registry().GetService(ctx, mmodel.ServiceKey{Name: "victim-svc"}); err != nil || d.ProtectThreshold != 0 {
		t.Fatalf("the victim's service changed: %+v %v", d, err)
	}
	if _, err := s.Registry().GetService(ctx, mmodel.ServiceKey{Name: "attacker-svc"}); err == nil {
		t.Fatal("attacker-svc was created")
	}
	if l, _ := s.Registry().ListServices(ctx, registryList("tenant-b-prod")); l.Total != 0 {
		t.Fatalf("tenant-b-prod has %d services", l.Total)
	}

	// What the users may do, they can: the reader reads, bob writes his
	// namespace, the admin anything but nacosd's own namespace.
	if st, body := call(t, s, "GET", "/nacos/v1/ns/instance/list", as(reader, url.Values{"serviceName": {"victim"}})); st != 200 || !strings.Contains(body, "10.8.0.1") {
		t.Fatalf("reader cannot read: %d %s", st, body)
	}
	if st, body := call(t, s, "POST", "/nacos/v1/ns/instance", as(bob, url.Values{"namespaceId": {"tenant-b"}, "serviceName": {"b"}, "ip": {"10.8.1.1"}, "port": {"80"}})); st != 200 {
		t.Fatalf("bob cannot write tenant-b: %d %s", st, body)
	}
	if st, body := call(t, s, "GET", "/nacos/v1/ns/service/list", as(admin, url.Values{"namespaceId": {authNamespace}, "groupName": {authUsers}})); st != 403 {
		t.Fatalf("nacosd's users are readable through the naming API: %d %s", st, body)
	}
	if st, body := call(t, s, "GET", "/nacos/v1/core/loader/current", as(alice, nil)); st != 403 {
		t.Fatalf("a non-admin lists the connections: %d %s", st, body)
	}
}

// TestAuthUsers: the user, role and permission APIs are the admin's; a
// user changes its own password; a deleted user's token and a revoked
// permission stop working.
func TestAuthUsers(t *testing.T) {
	s := startServer(t, withAuth(testKey(t)))
	admin, alice, _, reader := tenants(t, s)
	st := func(tok, method, path string, form url.Values) int {
		t.Helper()
		code, _ := call(t, s, method, path, as(tok, form))
		return code
	}
	write := url.Values{"serviceName": {"u"}, "ip": {"10.7.0.1"}, "port": {"80"}}
	for _, c := range []struct {
		what   string
		tok    string
		method string
		path   string
		form   url.Values
		want   int
	}{
		{"a user creates a user", alice, "POST", "/nacos/v1/auth/users", url.Values{"username": {"eve"}, "password": {"x"}}, 403},
		{"a user grants itself a role", alice, "POST", "/nacos/v1/auth/roles", url.Values{"username": {"alice"}, "role": {"team-b"}}, 403},
		{"a user grants a permission", alice, "POST", "/nacos/v1/auth/permissions", url.Values{"role": {"team-a"}, "resource": {"*:*:*"}, "action": {"rw"}}, 403},
		{"anyone lists users", "", "GET", "/nacos/v1/auth/users", nil, 403},
		{"a user changes another's password", alice, "PUT", "/nacos/v1/auth/users", url.Values{"username": {"bob"}, "newPassword": {"owned"}}, 403},
		{"the admin binds ROLE_ADMIN", admin, "POST", "/nacos/v1/auth/roles", url.Values{"username": {"alice"}, "role": {"ROLE_ADMIN"}}, 400},
		{"the admin adds alice twice", admin, "POST", "/nacos/v1/auth/users", url.Values{"username": {"alice"}, "password": {"x"}}, 400},
		{"a user name with a colon", admin, "POST", "/nacos/v1/auth/users", url.Values{"username": {"a:b"}, "password": {"x"}}, 400},
		{"an action that is not r, w or rw", admin, "POST", "/nacos/v1/auth/permissions", url.Values{"role": {"x"}, "resource": {"a:*:*"}, "action": {"x"}}, 400},
		{"alice changes her password", alice, "PUT", "/nacos/v1/auth/users", url.Values{"username": {"alice"}, "newPassword": {"a-pass-2"}}, 200},
	} {
		if got := st(c.tok, c.method, c.path, c.form); got != c.want {
			t.Errorf("%s: %d, want %d", c.what, got, c.want)
		}
	}
	if code, body := call(t, s, "POST", "/nacos/v1/auth/login", url.Values{"username": {"alice"}, "password": {"a-pass"}}); code != 403 {
		t.Fatalf("the old password still logs in: %d %s", code, body)
	}
	alice2 := login(t, s.HTTPAddr(), "alice", "a-pass-2")
	if st(alice2, "POST", "/nacos/v1/ns/instance", write) != 200 {
		t.Fatal("alice cannot write with her new token")
	}
	// A revoked permission: refused once the change is read (at once on
	// the node that made it).
	if st(admin, "DELETE", "/nacos/v1/auth/permissions", url.Values{"role": {"team-a"}, "resource": {"public:*:*"}, "action": {"rw"}}) != 200 {
		t.Fatal("cannot revoke")
	}
	if st(alice2, "POST", "/nacos/v1/ns/instance", write) != 403 {
		t.Fatal("a revoked permission still works")
	}
	// A deleted user's token stops working.
	if st(admin, "DELETE", "/nacos/v1/auth/users", url.Values{"username": {"reader"}}) != 200 {
		t.Fatal("cannot delete a user")
	}
	if st(reader, "GET", "/nacos/v1/ns/instance/list", url.Values{"serviceName": {"u"}}) != 403 {
		t.Fatal("a deleted user's token still reads")
	}
	code, body := call(t, s, "GET", "/nacos/v1/auth/roles", as(admin, url.Values{"username": {"reader"}}))
	if code != 200 || jsonOf(t, body)["totalCount"] != float64(0) {
		t.Fatalf("a deleted user keeps its roles: %s", body)
	}
	if code, body := call(t, s, "GET", "/nacos/v1/auth/users", as(admin, nil)); code != 200 || strings.Contains(body, "$2a$") {
		t.Fatalf("user list: %d %s", code, body)
	}
}
