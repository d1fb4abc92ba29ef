package console_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzWriteBodies: any body sent to the write handlers is answered with a
// status below 500 (refused, or applied), never a panic or a server error.
func FuzzWriteBodies(f *testing.F) {
	f.Add("/api/patch", `{"instance":{"service":{"group":"shop","name":"orders"},"ip":"10.0.0.1","port":8080},"weight":2}`)
	f.Add("/api/unpatch", `{"instance":{"service":{"name":"orders"},"ip":"10.0.0.1","port":8080}}`)
	f.Add("/api/deregister", `{"instance":{"service":{"name":"db"},"ip":"::1","port":1}}`)
	f.Add("/api/service", `{"service":{"group":"infra","name":"db"},"protectThreshold":0.5,"clusters":[{"name":"DEFAULT","healthCheck":{"type":"HTTP","expectedCodes":[200]}}]}`)
	f.Add("/api/compare", `{"from":"local","peer":"x"}`)
	f.Add("/api/patch", `{"instance":{"service":{"name":""},"ip":"","port":-1},"weight":1e400}`)
	reg := newRegistry(f)
	register(f, reg, orders, "10.0.0.1", 8080, nil)
	registerPersistent(f, reg, db, "10.0.0.9", 3306)
	_, c := server(f, reg, nil)
	paths := []string{"/api/patch", "/api/unpatch", "/api/deregister", "/api/service", "/api/compare"}
	f.Fuzz(func(t *testing.T, path, body string) {
		ok := false
		for _, p := range paths {
			ok = ok || p == path
		}
		if !ok {
			path = paths[len(body)%len(paths)]
		}
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Host = "127.0.0.1" // the console without Authorize serves loopback only
		c.ServeHTTP(rec, req)
		if rec.Code == http.StatusForbidden && strings.Contains(rec.Body.String(), "loopback") {
			t.Fatal("the request did not reach the handlers")
		}
		if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("POST %s %q: %d %s", path, body, rec.Code, rec.Body.String())
		}
	})
}
