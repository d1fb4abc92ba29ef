package logx

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestWithNodeOnce(t *testing.T) {
	var buf bytes.Buffer
	base := slog.New(slog.NewTextHandler(&buf, nil))
	l := WithNode(base, "n1")
	l = WithNode(l.With("component", "x"), "n1") // a second component tags it again
	l.Info("hello")
	if got := strings.Count(buf.String(), "node=n1"); got != 1 {
		t.Fatalf("node=n1 appears %d times in %q, want 1", got, buf.String())
	}
	buf.Reset()
	WithNode(l, "n2").Info("other")
	if !strings.Contains(buf.String(), "node=n2") {
		t.Fatalf("another node's tag was dropped: %q", buf.String())
	}
	if WithNode(nil, "n1") != nil {
		t.Fatal("WithNode(nil) is not nil")
	}
}
