package registry_test

import (
	"bytes"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
)

// syncBuffer is a bytes.Buffer safe for the registry's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A health flip is logged once, by the scheduler, with node= once.
func TestHealthFlipLoggedOnce(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close() // refused: a definite failure flips at the first check

	var logs syncBuffer
	clk := clockwork.NewFakeClockAt(registrytest.Epoch)
	cfg := registry.DefaultConfig()
	cfg.NodeID, cfg.Clock = "solo", clk
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	reg, err := registry.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	in := model.NewInstance(svcKey("db"), "127.0.0.1", port)
	in.Ephemeral = false
	mustRegister(t, reg, in)
	for i := 0; ; i++ {
		v, _ := reg.Query(ctx, model.Query{Service: svcKey("db")})
		if len(v.Instances) == 1 && !v.RealHealthy(0) {
			break
		}
		if i > 20 {
			t.Fatal("never flipped to unhealthy")
		}
		clk.Advance(7 * time.Second)
		if err := reg.Internals().Settle(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var flips []string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "flipped") {
			flips = append(flips, line)
		}
	}
	if len(flips) != 1 {
		t.Fatalf("the flip was logged %d times:\n%s", len(flips), strings.Join(flips, "\n"))
	}
	if n := strings.Count(flips[0], "node=solo"); n != 1 {
		t.Fatalf("node= %d times in %q", n, flips[0])
	}
}
