package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/console"
)

// newRegistry starts a standalone registry with its journal on.
func newRegistry(t testing.TB) *registry.Registry {
	t.Helper()
	cfg := registry.DefaultConfig()
	cfg.HistoryEvents = registry.DefaultHistoryEvents
	cfg.HealthChecks = nil
	reg, err := registry.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	return reg
}

// server serves a console over reg on an httptest server (loopback).
func server(t testing.TB, reg *registry.Registry, mod func(*console.Config)) (*httptest.Server, *console.Console) {
	t.Helper()
	cfg := console.DefaultConfig()
	cfg.Nodes = func() []console.Node { return []console.Node{{Registry: reg}} }
	cfg.SampleInterval = 20 * time.Millisecond
	if mod != nil {
		mod(&cfg)
	}
	c, err := console.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	t.Cleanup(func() {
		srv.Close()
		_ = c.Close()
	})
	return srv, c
}

var (
	orders = model.ServiceKey{Group: "shop", Name: "orders"}
	db     = model.ServiceKey{Group: "infra", Name: "db"}
)

func register(t testing.TB, reg *registry.Registry, svc model.ServiceKey, ip string, port int, md map[string]string) model.Instance {
	t.Helper()
	in := model.NewInstance(svc, ip, port)
	in.Metadata = model.NewMetadata(md)
	if err := reg.Register(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	return in
}

func registerPersistent(t testing.TB, reg *registry.Registry, svc model.ServiceKey, ip string, port int) model.Instance {
	t.Helper()
	in := model.NewInstance(svc, ip, port)
	in.Ephemeral = false
	if err := reg.Register(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	return in
}

func get(t testing.TB, srv *httptest.Server, path string) (int, string) {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func post(t testing.TB, srv *httptest.Server, path string, body any) (int, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(string(b)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func servicePath(k model.ServiceKey) string {
	k = k.WithDefaults()
	return "/service?" + url.Values{"ns": {k.Namespace}, "group": {k.Group}, "name": {k.Name}}.Encode()
}

func instancePath(k model.InstanceKey) string {
	k = k.WithDefaults()
	return "/instance?" + url.Values{"ns": {k.Service.Namespace}, "group": {k.Service.Group}, "name": {k.Service.Name},
		"cluster": {k.Cluster}, "ip": {k.IP}, "port": {itoa(k.Port)}}.Encode()
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestPagesRender(t *testing.T) {
	reg := newRegistry(t)
	in := register(t, reg, orders, "10.0.0.1", 8080, map[string]string{"zone": "a"})
	registerPersistent(t, reg, db, "10.0.0.9", 3306)
	srv, _ := server(t, reg, nil)

	for _, tc := range []struct {
		path string
		want []string
	}{
		{"/", []string{"orders", "db", "ephemeral", "persistent", `data-stream="api/events?`}},
		{"/?q=ord", []string{"orders"}},
		{servicePath(orders), []string{"10.0.0.1:8080", "zone=a", "beats from 10.0.0.1:8080", "Patch"}},
		{servicePath(db), []string{"10.0.0.9:3306", "Deregister", "persistent store", "Edit threshold and checks"}},
		{instancePath(in.Key()), []string{"registered", `id="timeline"`, "local"}},
		{"/cluster", []string{"Members", "Charts", "local"}},
		{"/static/console.js", []string{"EventSource"}},
		{"/static/console.css", []string{".timeline"}},
	} {
		code, body := get(t, srv, tc.path)
		if code != http.StatusOK {
			t.Errorf("GET %s: %d %s", tc.path, code, body)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s: no %q in\n%s", tc.path, w, body)
			}
		}
	}
	if _, body := get(t, srv, "/?q=ord"); strings.Contains(body, ">db<") {
		t.Errorf("the search for ord shows db")
	}
}

// TestSecurityHeaders: every answer forbids scripts but the console's own,
// framing and the referrer (the token travels in the URL).
func TestSecurityHeaders(t *testing.T) {
	srv, _ := server(t, newRegistry(t), nil)
	resp, err := srv.Client().Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	csp := resp.Header.Get("Content-Security-Policy")
	for _, w := range []string{"script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'", "default-src 'none'"} {
		if !strings.Contains(csp, w) {
			t.Errorf("CSP %q lacks %q", csp, w)
		}
	}
	if resp.Header.Get("Referrer-Policy") != "no-referrer" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("headers: %v", resp.Header)
	}
}

// readEvents reads server-sent events from resp until fn returns true or
// the deadline passes.
func readEvents(t *testing.T, resp *http.Response, deadline time.Duration, fn func(data string) bool) {
	t.Helper()
	done := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<22)
		var data strings.Builder
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "data: "):
				data.WriteString(line[len("data: "):])
				data.WriteByte('\n')
			case line == "" && data.Len() > 0:
				if fn(data.String()) {
					done <- true
					return
				}
				data.Reset()
			}
		}
		done <- false
	}()
	select {
	case ok := <-done:
		if !ok {
			t.Fatal("the stream ended")
		}
	case <-time.After(deadline): // real time: a deadline for the test
		t.Fatal("no matching event before the deadline")
	}
}

func openStream(t *testing.T, srv *httptest.Server, path string) *http.Response {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	return resp
}

// TestServiceStreamFollowsRegistrations: the service page's stream sends
// the instances again when one is registered.
func TestServiceStreamFollowsRegistrations(t *testing.T) {
	reg := newRegistry(t)
	register(t, reg, orders, "10.0.0.1", 8080, nil)
	srv, _ := server(t, reg, nil)
	k := orders.WithDefaults()
	resp := openStream(t, srv, "/api/events?"+url.Values{"view": {"service"}, "ns": {k.Namespace}, "group": {k.Group}, "name": {k.Name}}.Encode())
	first := true
	readEvents(t, resp, 10*time.Second, func(data string) bool {
		if first {
			first = false
			if !strings.Contains(data, "10.0.0.1:8080") {
				t.Errorf("the first update lacks the instance:\n%s", data)
			}
			register(t, reg, orders, "10.0.0.2", 8080, nil)
			return false
		}
		return strings.Contains(data, "10.0.0.2:8080")
	})
}

// TestServicesStreamFollowsCounts: the services page's stream follows the
// instance counts of the services it shows, and new services.
func TestServicesStreamFollowsCounts(t *testing.T) {
	reg := newRegistry(t)
	register(t, reg, orders, "10.0.0.1", 8080, nil)
	srv, _ := server(t, reg, nil)
	resp := openStream(t, srv, "/api/events?view=services")
	step := 0
	readEvents(t, resp, 10*time.Second, func(data string) bool {
		switch step {
		case 0:
			register(t, reg, orders, "10.0.0.2", 8080, nil)
			step++
		case 1:
			if strings.Contains(data, `<td class="num instances">2</td>`) {
				register(t, reg, db, "10.0.0.3", 1, nil)
				step++
			}
		case 2:
			return strings.Contains(data, ">db<")
		}
		return false
	})
}

func TestClusterStream(t *testing.T) {
	srv, _ := server(t, newRegistry(t), nil)
	resp := openStream(t, srv, "/api/events?view=cluster")
	readEvents(t, resp, 10*time.Second, func(data string) bool {
		return strings.Contains(data, `id="members"`) && strings.Contains(data, "polyline")
	})
}

func TestConfigValidate(t *testing.T) {
	cfg := console.DefaultConfig()
	cfg.PageSize = 0
	_, err := console.New(cfg)
	if !errors.Is(err, console.ErrInvalidConfig) || !strings.Contains(err.Error(), "Nodes") || !strings.Contains(err.Error(), "PageSize") {
		t.Fatalf("New: %v", err)
	}
}

func getJSON(t testing.TB, srv *httptest.Server, path string) (int, map[string]any) {
	t.Helper()
	code, body := get(t, srv, path)
	var out map[string]any
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatalf("GET %s: %d %s: %v", path, code, body, err)
	}
	return code, out
}

func jsonOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// waitFor polls cond until it holds, or fails the test after a deadline.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second) // real time: a deadline for the test
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("the condition did not hold before the deadline")
		}
		time.Sleep(10 * time.Millisecond) // real time: polling
	}
}
