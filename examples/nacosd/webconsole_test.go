package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/muster-io/muster/model"
)

// consoleDo makes one request to the console (or any path) and returns the
// status and body; hdr adds headers ("Host" sets the Host).
func consoleDo(t *testing.T, s *Server, method, path string, body any, hdr map[string]string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	}
	req, err := http.NewRequest(method, "http://"+s.HTTPAddr()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func withToken(path, tok string) string {
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	return path + sep + "accessToken=" + url.QueryEscape(tok)
}

// TestConsoleAuth: the console at /nacos/ under nacosd's permissions. An
// anonymous request is refused (401: the login form); a read-only user
// sees the service but no button, and its patch is refused 403 with
// nothing changed; a user who may write sees the buttons and patches; a
// write without a JSON body, or marked cross-site, is refused (CSRF);
// the namespace of nacosd's users is refused even to the admin; Nacos's
// own paths under /nacos/ are still nacosd's.
func TestConsoleAuth(t *testing.T) {
	s := startServer(t, withAuth(testKey(t)))
	admin, alice, _, reader := tenants(t, s)
	ctx := context.Background()
	db := model.NewInstance(model.ServiceKey{Name: "console-db"}, "10.60.0.1", 5432)
	db.Ephemeral = false
	if err := s.Registry().Register(ctx, db); err != nil {
		t.Fatal(err)
	}
	page := "/nacos/service?" + url.Values{"ns": {"public"}, "group": {"DEFAULT_GROUP"}, "name": {"console-db"}}.Encode()
	patch := map[string]any{"instance": db.Key(), "weight": 7}
	weight := func() float64 {
		v, err := s.Registry().Query(ctx, model.Query{Service: db.Service, IncludeDisabled: true})
		if err != nil || len(v.Instances) != 1 {
			t.Fatalf("query: %v %v", v, err)
		}
		return v.Instances[0].Weight
	}

	for _, p := range []string{"/nacos/", page, "/nacos/cluster"} {
		if st, body := consoleDo(t, s, "GET", p, nil, nil); st != http.StatusUnauthorized || !strings.Contains(body, "login") {
			t.Fatalf("anonymous %s: %d %.200s", p, st, body)
		}
	}
	if st, _ := consoleDo(t, s, "GET", withToken(page, "eyJhbGciOiJIUzI1NiJ9.e30.forged"), nil, nil); st != http.StatusUnauthorized {
		t.Fatalf("forged token: %d", st)
	}
	if st, _ := consoleDo(t, s, "POST", "/nacos/api/patch", patch, nil); st != http.StatusUnauthorized {
		t.Fatalf("anonymous patch: %d", st)
	}

	st, body := consoleDo(t, s, "GET", withToken(page, reader), nil, nil)
	if st != 200 || !strings.Contains(body, "10.60.0.1") || strings.Contains(body, `data-act="patch"`) || strings.Contains(body, `data-act="deregister"`) {
		t.Fatalf("read-only user's service page: %d (buttons shown: %v) %.300s", st, strings.Contains(body, "data-act"), body)
	}
	if st, body := consoleDo(t, s, "POST", withToken("/nacos/api/patch", reader), patch, nil); st != http.StatusForbidden {
		t.Fatalf("read-only user's patch: %d %s", st, body)
	}
	if st, _ := consoleDo(t, s, "POST", withToken("/nacos/api/deregister", reader), map[string]any{"instance": db.Key()}, nil); st != http.StatusForbidden {
		t.Fatalf("read-only user's deregister: %d", st)
	}
	if w := weight(); w != 1 {
		t.Fatalf("after the refused patch the weight is %v", w)
	}

	st, body = consoleDo(t, s, "GET", withToken(page, alice), nil, nil)
	if st != 200 || !strings.Contains(body, `data-act="patch"`) || !strings.Contains(body, `data-act="deregister"`) {
		t.Fatalf("writer's service page: %d %.300s", st, body)
	}
	// CSRF: a form post (what another site's page can send without a
	// preflight), and a request the browser marks cross-site.
	for name, hdr := range map[string]map[string]string{
		"form body":  {"Content-Type": "application/x-www-form-urlencoded"},
		"text body":  {"Content-Type": "text/plain"},
		"cross-site": {"Sec-Fetch-Site": "cross-site"},
	} {
		if st, body := consoleDo(t, s, "POST", withToken("/nacos/api/patch", alice), patch, hdr); st == 200 {
			t.Fatalf("%s write accepted: %s", name, body)
		}
	}
	if w := weight(); w != 1 {
		t.Fatalf("after the CSRF attempts the weight is %v", w)
	}
	if st, body := consoleDo(t, s, "POST", withToken("/nacos/api/patch", alice), patch, nil); st != 200 {
		t.Fatalf("writer's patch: %d %s", st, body)
	}
	if w := weight(); w != 7 {
		t.Fatalf("after the patch the weight is %v", w)
	}

	if st, _ := consoleDo(t, s, "GET", withToken("/nacos/?ns="+authNamespace, admin), nil, nil); st != http.StatusForbidden {
		t.Fatalf("the admin on the users' namespace: %d", st)
	}
	if st, body := consoleDo(t, s, "GET", withToken("/nacos/api/me", admin), nil, nil); st != 200 || !strings.Contains(body, `"user":"nacos"`) {
		t.Fatalf("api/me: %d %s", st, body)
	}
	// Nacos's paths: the OpenAPI answers, an unknown one is a plain 404.
	if st, body := call(t, s, "GET", "/nacos/v1/ns/instance/list", as(alice, url.Values{"serviceName": {"console-db"}})); st != 200 || !strings.Contains(body, "10.60.0.1") {
		t.Fatalf("OpenAPI under /nacos/v1: %d %s", st, body)
	}
	for _, p := range []string{"/nacos/v1/nope", "/nacos/v2/ns/instance", "/nacos/actuator/nope"} {
		if st, body := consoleDo(t, s, "GET", withToken(p, admin), nil, nil); st != 404 || strings.Contains(body, "<html") {
			t.Fatalf("%s: %d %.100s", p, st, body)
		}
	}
}

// TestConsoleOpen: with authentication off the console serves loopback
// Hosts only (a DNS-rebinding page sends its own Host) and still refuses
// the users' namespace; -console=false leaves it out.
func TestConsoleOpen(t *testing.T) {
	s := startServer(t, nil)
	if st, body := consoleDo(t, s, "GET", "/nacos/", nil, nil); st != 200 || !strings.Contains(body, "<html") {
		t.Fatalf("loopback Host: %d %.200s", st, body)
	}
	for _, host := range []string{"rebound.example:8848", "10.0.0.5"} {
		if st, _ := consoleDo(t, s, "GET", "/nacos/", nil, map[string]string{"Host": host}); st != http.StatusForbidden {
			t.Fatalf("Host %s: %d", host, st)
		}
		if st, _ := consoleDo(t, s, "POST", "/nacos/api/patch", map[string]any{"instance": model.InstanceKey{Service: model.ServiceKey{Name: "x"}, IP: "10.0.0.1", Port: 1}, "weight": 1},
			map[string]string{"Host": host}); st != http.StatusForbidden {
			t.Fatalf("patch with Host %s: %d", host, st)
		}
	}
	if st, _ := consoleDo(t, s, "GET", "/nacos/?ns="+authNamespace, nil, nil); st != http.StatusForbidden {
		t.Fatalf("the users' namespace without auth: %d", st)
	}
	off := startServer(t, func(c *Config) { c.NoConsole = true })
	if st, _ := consoleDo(t, off, "GET", "/nacos/", nil, nil); st != 404 {
		t.Fatalf("-console=false: %d", st)
	}
}
