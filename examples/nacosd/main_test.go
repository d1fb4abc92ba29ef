package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/muster-io/muster/model"
)

func TestFlags(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(t.TempDir(), "short")
	_ = os.WriteFile(short, []byte("tiny"), 0o600)
	conf := filepath.Join(t.TempDir(), "cluster.conf")
	_ = os.WriteFile(conf, []byte("# nodes\nn1=127.0.0.1:8848\nn2=127.0.0.1:8858 # second\n"), 0o600)

	cfg, _, err := parseFlags([]string{"-addr", "127.0.0.1:8848", "-node-id", "n1", "-cluster-conf", conf, "-secret-file", secret}, io.Discard)
	if err != nil || len(cfg.Peers) != 2 || cfg.Peers[1].Addr != "127.0.0.1:8858" || string(cfg.Secret) != "0123456789abcdef0123" {
		t.Fatalf("good flags: %+v %v", cfg, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-addr", "nope"}, "-addr"},
		{[]string{"-addr", "127.0.0.1:0"}, "port must be 1–65535"},
		{[]string{"-peers", "n1=127.0.0.1:8848"}, "-node-id is required"},
		{[]string{"-peers", "n1=127.0.0.1:8848", "-node-id", "n1"}, "secret"},
		{[]string{"-peers", "n1=127.0.0.1:8848", "-node-id", "n1", "-secret-file", short}, "at least 16 bytes"},
		{[]string{"-peers", "n1=127.0.0.1:8848", "-node-id", "n9", "-secret-file", secret}, "not in the peer list"},
		{[]string{"-peers", "127.0.0.1:8848"}, "want id=host:port"},
		{[]string{"-addr", "127.0.0.1:500", "-peers", "n1=127.0.0.1:500", "-node-id", "n1", "-secret-file", secret}, "out of range"},
		{[]string{"-node-id", "n1"}, "need -peers"},
		{[]string{"-addr", "127.0.0.1:9000", "-peers", "n1=127.0.0.1:8848", "-node-id", "n1", "-secret-file", secret}, "own entry must be its -addr"},
		{[]string{"-log-level", "loud"}, "-log-level"},
		{[]string{"-bogus"}, "bogus"},
		{[]string{"extra"}, "unexpected arguments"},
	} {
		_, _, err := parseFlags(c.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one mentioning %q", c.args, err, c.want)
		}
	}
}

// TestDurable: with -data, persistent instances and service definitions
// survive a restart (one Raft replica in the directory).
func TestDurable(t *testing.T) {
	dir := t.TempDir()
	start := func() *Server {
		return startServer(t, func(c *Config) { c.DataDir = dir })
	}
	s := start()
	ctx := context.Background()
	in := model.NewInstance(model.ServiceKey{Name: "kept"}, "10.6.0.1", 5432)
	in.Ephemeral = false
	if err := s.Registry().Register(ctx, in); err != nil {
		t.Fatal(err)
	}
	addr := s.HTTPAddr()
	_ = s.Close()
	s = startServer(t, func(c *Config) { c.DataDir, c.HTTPAddr = dir, addr })
	eventually(t, 10*time.Second, "the persistent instance is back", func() bool { return len(served(t, s, "kept")) == 1 })
}
