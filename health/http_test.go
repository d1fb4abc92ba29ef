package health

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/muster-io/muster/model"
	"go.uber.org/goleak"
)

func TestHTTPChecker(t *testing.T) {
	defer goleak.VerifyNone(t)
	var (
		mu      sync.Mutex
		headers http.Header
		host    string
	)
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		headers, host = r.Header.Clone(), r.Host
		mu.Unlock()
		_, _ = w.Write([]byte(strings.Repeat("x", 64<<10))) // longer than what is drained
	})
	mux.HandleFunc("/nocontent", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("/unavailable", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	mux.HandleFunc("/broken", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusFound) })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	srv := httptest.NewServer(mux)
	defer srv.Close()

	c, err := NewHTTPChecker(HTTPConfig{Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	base := tcpTarget(t, srv.Listener.Addr().String())
	at := func(path string, codes ...int) Target {
		tg := base
		tg.Check = model.HealthCheck{Type: model.CheckHTTP, Path: path, ExpectedCodes: codes}
		return tg
	}

	cases := []struct {
		name           string
		target         Target
		healthy, def   bool
		reasonContains string
	}{
		{"200 default", at("/ok"), true, false, "status 200"},
		{"path without slash", at("ok"), true, false, "status 200"},
		{"204 configured healthy", at("/nocontent", 204, 200), true, false, "status 204"},
		{"204 not expected", at("/nocontent"), false, true, "status 204"},
		{"200 not in the configured codes", at("/ok", 204), false, true, "status 200"},
		{"503 is counted", at("/unavailable"), false, false, "status 503"},
		{"500 is definite", at("/broken"), false, true, "status 500"},
		{"404 is definite", at("/missing"), false, true, "status 404"},
		{"302 not followed", at("/moved"), false, false, "status 302"},
		{"302 configured healthy", at("/moved", 302), true, false, "status 302"},
		{"slow handler times out", at("/slow"), false, false, "timeout"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := c.Check(context.Background(), tc.target)
			if r.Healthy != tc.healthy || (!r.Healthy && r.Definite != tc.def) || !strings.Contains(r.Reason, tc.reasonContains) {
				t.Fatalf("%+v, want healthy %v, definite %v, reason with %q", r, tc.healthy, tc.def, tc.reasonContains)
			}
			if r.Latency <= 0 {
				t.Fatalf("latency %v, want > 0", r.Latency)
			}
		})
	}

	// Headers are sent; Host sets the request's host.
	tg := at("/ok")
	tg.Check.Headers = model.NewMetadata(map[string]string{"X-Check": "muster", "Host": "svc.example", "User-Agent": "probe/1"})
	if r := c.Check(context.Background(), tg); !r.Healthy {
		t.Fatalf("with headers: %+v", r)
	}
	mu.Lock()
	if headers.Get("X-Check") != "muster" || host != "svc.example" || headers.Get("User-Agent") != "probe/1" {
		t.Fatalf("sent headers %v, host %q", headers, host)
	}
	mu.Unlock()
	// Without a configured User-Agent, the checker's own is sent.
	if r := c.Check(context.Background(), at("/ok")); !r.Healthy {
		t.Fatalf("%+v", r)
	}
	mu.Lock()
	if ua := headers.Get("User-Agent"); ua != "muster-health" {
		t.Fatalf("User-Agent %q", ua)
	}
	mu.Unlock()
}

// Connections are kept alive and reused between checks of one target.
func TestHTTPCheckerReusesConnections(t *testing.T) {
	defer goleak.VerifyNone(t)
	var (
		mu    sync.Mutex
		conns = map[string]bool{}
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		conns[r.RemoteAddr] = true
		mu.Unlock()
	}))
	defer srv.Close()
	c, _ := NewHTTPChecker(HTTPConfig{})
	defer c.Close()
	tg := tcpTarget(t, srv.Listener.Addr().String())
	for range 5 {
		if r := c.Check(context.Background(), tg); !r.Healthy {
			t.Fatalf("%+v", r)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(conns) != 1 {
		t.Fatalf("5 checks used %d connections, want 1", len(conns))
	}
}

func TestHTTPCheckerRefused(t *testing.T) {
	defer goleak.VerifyNone(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tg := tcpTarget(t, ln.Addr().String())
	_ = ln.Close()
	c, _ := NewHTTPChecker(HTTPConfig{})
	defer c.Close()
	r := c.Check(context.Background(), tg)
	if r.Healthy || !r.Definite || r.Reason != "connection refused" {
		t.Fatalf("%+v, want a definite failure, connection refused", r)
	}
}

func TestNewHTTPCheckerRejectsNegatives(t *testing.T) {
	for _, cfg := range []HTTPConfig{{Timeout: -1}, {IdleConnTimeout: -1}, {MaxIdleConns: -1}} {
		if _, err := NewHTTPChecker(cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}

// TestNewHTTPCheckerReportsEvery: NewHTTPChecker names every negative field, in one error.
func TestNewHTTPCheckerReportsEvery(t *testing.T) {
	_, err := NewHTTPChecker(HTTPConfig{Timeout: -1, MaxIdleConns: -1})
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "HTTPConfig.Timeout") || !strings.Contains(err.Error(), "HTTPConfig.MaxIdleConns") {
		t.Fatalf("NewHTTPChecker = %v, want ErrInvalidConfig naming Timeout and MaxIdleConns", err)
	}
}
