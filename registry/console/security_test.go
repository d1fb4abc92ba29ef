package console_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry/console"
)

// testAuth is an Authorize of two users: "admin" (token "t-admin") writes,
// "viewer" (token "t-viewer") only reads, and only the public namespace.
func testAuth(r *http.Request, ns string, write bool) (string, error) {
	switch r.URL.Query().Get("accessToken") {
	case "t-admin":
		return "admin", nil
	case "t-viewer":
		if write {
			return "viewer", console.ErrForbidden
		}
		if ns != "" && ns != model.DefaultNamespace {
			return "viewer", errors.New("viewer: only the public namespace")
		}
		return "viewer", nil
	}
	return "", console.ErrUnauthenticated
}

func withAuth(c *console.Config) {
	c.Authorize = testAuth
	c.LoginURL = "/login"
}

// TestMetadataIsEscaped: metadata, names and IDs that hold markup show as
// text on every page and in the event streams; nothing of theirs runs.
func TestMetadataIsEscaped(t *testing.T) {
	reg := newRegistry(t)
	const evil = `<script>alert(1)</script>`
	svc := model.ServiceKey{Group: "g", Name: `x"><img_src=x_onerror=alert(2)>`}
	in := model.NewInstance(svc, "10.0.0.1", 8080)
	in.ID = `<b>id</b>`
	in.Metadata = model.NewMetadata(map[string]string{"k": evil, `<i>`: `"'&`})
	if err := reg.Register(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	srv, _ := server(t, reg, nil)
	for _, path := range []string{"/", servicePath(svc), instancePath(in.Key()), "/api/events?view=services"} {
		var body string
		if strings.HasPrefix(path, "/api/events") {
			resp := openStream(t, srv, path)
			readEvents(t, resp, 10e9, func(data string) bool { body = data; return true })
		} else {
			_, body = get(t, srv, path)
		}
		for _, bad := range []string{"<script>alert", "<img_src", "<b>id</b>", "<i>="} {
			if strings.Contains(body, bad) {
				t.Errorf("%s: %q is not escaped:\n%s", path, bad, body)
			}
		}
		if path == servicePath(svc) {
			for _, want := range []string{"k=&lt;script&gt;alert(1)&lt;/script&gt;", "&lt;b&gt;id&lt;/b&gt;"} {
				if !strings.Contains(body, want) {
					t.Errorf("%s: no %q (the text shown escaped)", path, want)
				}
			}
		}
	}
}

func TestAuthorization(t *testing.T) {
	reg := newRegistry(t)
	in := register(t, reg, orders, "10.0.0.1", 8080, nil)
	other := register(t, reg, model.ServiceKey{Namespace: "team-b", Name: "secret"}, "10.0.0.2", 1, nil)
	srv, _ := server(t, reg, withAuth)

	// No token: 401, and a page is the login form.
	code, body := get(t, srv, "/")
	if code != http.StatusUnauthorized || !strings.Contains(body, `id="login"`) || !strings.Contains(body, `data-login="/login"`) {
		t.Errorf("GET / without a token: %d\n%s", code, body)
	}
	if code, _ := get(t, srv, "/api/events?view=services"); code != http.StatusUnauthorized {
		t.Errorf("the stream without a token: %d", code)
	}
	if code, _ := get(t, srv, "/api/me"); code != http.StatusUnauthorized {
		t.Errorf("api/me without a token: %d", code)
	}

	// The viewer reads public, sees no button, and may not patch.
	code, body = get(t, srv, servicePath(orders)+"&accessToken=t-viewer")
	if code != http.StatusOK || strings.Contains(body, `data-act="patch"`) || !strings.Contains(body, "read-only") {
		t.Errorf("the viewer's service page: %d, buttons or no read-only mark:\n%s", code, body)
	}
	if !strings.Contains(body, "accessToken=t-viewer") {
		t.Errorf("the page's links do not carry the token")
	}
	_, me := getJSON(t, srv, "/api/me?accessToken=t-viewer")
	if me["write"] != false || me["user"] != "viewer" {
		t.Errorf("api/me for the viewer: %v", me)
	}
	code, out := post(t, srv, "/api/patch?accessToken=t-viewer", map[string]any{"instance": in.Key(), "weight": 5})
	if code != http.StatusForbidden {
		t.Errorf("the viewer's patch: %d %v", code, out)
	}
	if code, _ := post(t, srv, "/api/patch", map[string]any{"instance": in.Key(), "weight": 5}); code != http.StatusUnauthorized {
		t.Errorf("a patch without a token: %d", code)
	}
	if got, _ := reg.GetInstance(context.Background(), in.Key()); got.Weight != 1 {
		t.Fatalf("a refused patch changed the weight to %v", got.Weight)
	}
	// Another namespace is refused with the hook's own error: 403.
	if code, _ := get(t, srv, servicePath(other.Service)+"&accessToken=t-viewer"); code != http.StatusForbidden {
		t.Errorf("the viewer on team-b: %d", code)
	}
	if _, body := get(t, srv, "/?accessToken=t-viewer"); strings.Contains(body, "team-b") {
		t.Errorf("the viewer's namespace list shows team-b")
	}

	// The admin sees the buttons and patches.
	_, body = get(t, srv, servicePath(orders)+"&accessToken=t-admin")
	if !strings.Contains(body, `data-act="patch"`) {
		t.Errorf("the admin sees no patch button")
	}
	if code, out := post(t, srv, "/api/patch?accessToken=t-admin", map[string]any{"instance": in.Key(), "weight": 5}); code != http.StatusOK {
		t.Fatalf("the admin's patch: %d %v", code, out)
	}
	if got, _ := reg.GetInstance(context.Background(), in.Key()); got.Weight != 5 {
		t.Fatalf("after the admin's patch the registry serves weight %v", got.Weight)
	}
}

// TestCrossSiteWrites: a form of another site (a simple request, which the
// browser sends without asking) and a request the browser marks cross-site
// change nothing.
func TestCrossSiteWrites(t *testing.T) {
	reg := newRegistry(t)
	in := register(t, reg, orders, "10.0.0.1", 8080, nil)
	srv, _ := server(t, reg, nil)
	body := `{"instance":{"service":{"group":"shop","name":"orders"},"ip":"10.0.0.1","port":8080},"weight":0}`
	for _, tc := range []struct {
		name string
		ct   string
		site string
		want int
	}{
		{"form", "application/x-www-form-urlencoded", "", http.StatusUnsupportedMediaType},
		{"text/plain", "text/plain", "", http.StatusUnsupportedMediaType},
		{"cross-site fetch", "application/json", "cross-site", http.StatusForbidden},
		{"same-site fetch", "application/json", "same-site", http.StatusForbidden},
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/patch", strings.NewReader(body))
		req.Header.Set("Content-Type", tc.ct)
		if tc.site != "" {
			req.Header.Set("Sec-Fetch-Site", tc.site)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}
	if got, _ := reg.GetInstance(context.Background(), in.Key()); got.Weight != 1 {
		t.Fatalf("a cross-site write changed the weight to %v", got.Weight)
	}
}

// TestRebindingHostRefused: without Authorize, a request whose Host is not
// loopback (a page of another site whose name now resolves to 127.0.0.1)
// is refused; with Authorize the host's scheme decides.
func TestRebindingHostRefused(t *testing.T) {
	reg := newRegistry(t)
	srv, _ := server(t, reg, nil)
	for host, want := range map[string]int{"evil.example:80": 403, "localhost:1": 200, "127.0.0.1": 200, "[::1]:8": 200, "10.0.0.1": 403} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
		req.Host = host
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %s: %d, want %d", host, resp.StatusCode, want)
		}
	}
	srv2, _ := server(t, reg, withAuth)
	req, _ := http.NewRequest(http.MethodGet, srv2.URL+"/?accessToken=t-admin", nil)
	req.Host = "console.example"
	resp, err := srv2.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("with Authorize, Host console.example: %d", resp.StatusCode)
	}
}

// TestStreamsBounded: one stream past MaxStreams is answered 503, and a
// slot comes back when a stream ends.
func TestStreamsBounded(t *testing.T) {
	reg := newRegistry(t)
	srv, _ := server(t, reg, func(c *console.Config) { c.MaxStreams = 2 })
	a := openStream(t, srv, "/api/events?view=cluster")
	openStream(t, srv, "/api/events?view=services")
	if code, _ := get(t, srv, "/api/events?view=services"); code != http.StatusServiceUnavailable {
		t.Fatalf("a third stream: %d", code)
	}
	a.Body.Close()
	// The server notices the closed stream at its next write: poll.
	waitFor(t, func() bool {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/events?view=cluster", nil)
		resp, err := srv.Client().Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// TestBadWrites: a body too large, unknown fields, two values, a weight out
// of range and an invalid key are refused with the field named.
func TestBadWrites(t *testing.T) {
	reg := newRegistry(t)
	in := register(t, reg, orders, "10.0.0.1", 8080, nil)
	srv, _ := server(t, reg, nil)
	big := `{"instance":{"ip":"` + strings.Repeat("a", 70<<10) + `"}}`
	for name, tc := range map[string]struct {
		body string
		want string
	}{
		"too large":     {big, "too large"},
		"unknown field": {`{"instance":{},"color":1}`, "unknown field"},
		"two values":    {`{"instance":{}} {}`, "more than one"},
		"weight":        {`{"instance":` + jsonOf(in.Key()) + `,"weight":-1}`, "weight"},
		"no change":     {`{"instance":` + jsonOf(in.Key()) + `}`, "weight, enabled"},
		"bad ip":        {`{"instance":{"service":{"name":"orders"},"ip":"not an ip!","port":1},"weight":1}`, "ip"},
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/patch", strings.NewReader(tc.body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(strings.ToLower(string(b)), tc.want) {
			t.Errorf("%s: %d %s, want 400 naming %q", name, resp.StatusCode, b, tc.want)
		}
	}
}
