package main

import (
	"bytes"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestSetupLabelsBounded: a ConnectionSetupRequest with huge labels (or a
// huge SDK version) is accepted, the connection keeps only what the
// registry accepted, and nothing large reaches the log.
func TestSetupLabelsBounded(t *testing.T) {
	many := func(n, size int) map[string]string {
		m := make(map[string]string, n)
		for i := range n {
			m["k"+strconv.Itoa(i)] = strings.Repeat("v", size)
		}
		return m
	}
	for _, tc := range []struct {
		name    string
		body    map[string]any
		want    map[string]string // labels the connection keeps (besides clientIp and clientVersion)
		refused bool              // the registry refuses the set: no labels at all
	}{
		{name: "kept", body: map[string]any{"clientVersion": "v1", "labels": map[string]string{"AppName": "app"}}, want: map[string]string{"AppName": "app"}},
		{name: "huge labels skipped unread", body: map[string]any{"clientVersion": "v1", "labels": many(50000, 64)}}, // ~4 MiB
		{name: "many labels refused", body: map[string]any{"clientVersion": "v1", "labels": many(1000, 16)}, refused: true},
		{name: "huge version refused", body: map[string]any{"clientVersion": strings.Repeat("x", 1<<20)}, refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs syncBuffer
			s := startServer(t, func(c *Config) {
				c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			})
			w := dialWireSetup(t, s.GRPCAddr(), tc.body) // waits until the connection works
			var r response
			w.call("HealthCheckRequest", map[string]any{}, &r)
			if !r.Success {
				t.Fatalf("health check: %+v", r)
			}
			conns := s.api.snapshot()
			if len(conns) != 1 {
				t.Fatalf("%d connections, want 1", len(conns))
			}
			c := conns[0]
			got := c.sess.Labels() // the session keeps them; the connection only counts them
			if tc.refused {
				if len(got) != 0 {
					t.Fatalf("labels %v kept, want none", keys(got))
				}
			} else {
				if got["clientIp"] != "127.0.0.1" || got["clientVersion"] != "v1" || len(got) != 2+len(tc.want) {
					t.Fatalf("labels %v, want clientIp, clientVersion and %v", keys(got), tc.want)
				}
				for k, v := range tc.want {
					if got[k] != v {
						t.Fatalf("label %s = %q, want %q", k, got[k], v)
					}
				}
			}
			if sl := c.sess.Labels(); len(sl) != len(got) {
				t.Fatalf("the connection keeps %d labels, its session %d", len(got), len(sl))
			}
			if len(c.version) > maxClip+len("…") || len(c.clientIP) > maxClip+len("…") {
				t.Fatalf("version %d bytes, client IP %d bytes kept", len(c.version), len(c.clientIP))
			}
			out := logs.String()
			if len(out) > 64<<10 {
				t.Fatalf("%d bytes of log", len(out))
			}
			for _, line := range strings.Split(out, "\n") {
				if len(line) > 2<<10 {
					t.Fatalf("log line of %d bytes: %.200s…", len(line), line)
				}
			}
			if !strings.Contains(out, "connection set up") {
				t.Fatalf("no setup log line in:\n%s", out)
			}
		})
	}
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
