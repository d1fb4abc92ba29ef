package gossip

import (
	"bytes"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
)

// memberlist's goroutines outlive its sockets at Shutdown; their failed
// writes are logged at Debug once the node is stopping, at their own level
// before.
func TestLogBridgeQuietsClosedSocketsWhileStopping(t *testing.T) {
	var buf bytes.Buffer
	var stopping atomic.Bool
	b := &logBridge{log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), stopping: &stopping}
	line := "[ERR] memberlist: Failed to send gossip to 127.0.0.1:1: write udp 127.0.0.1:2->127.0.0.1:1: use of closed network connection\n"
	other := "[ERR] memberlist: Push/Pull with n3 failed: connection refused\n"

	_, _ = b.Write([]byte(line))
	if !strings.Contains(buf.String(), "level=ERROR") {
		t.Fatalf("before stopping: %q, want ERROR", buf.String())
	}
	buf.Reset()
	stopping.Store(true)
	_, _ = b.Write([]byte(line))
	if !strings.Contains(buf.String(), "level=DEBUG") {
		t.Fatalf("while stopping: %q, want DEBUG", buf.String())
	}
	buf.Reset()
	_, _ = b.Write([]byte(other))
	if !strings.Contains(buf.String(), "level=ERROR") {
		t.Fatalf("another error while stopping: %q, want ERROR", buf.String())
	}
}
