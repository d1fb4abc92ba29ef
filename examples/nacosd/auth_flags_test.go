package main

import (
	"encoding/base64"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAuthFlags: nacosd refuses to serve clients without authentication on
// an address that is not loopback (wildcards included) and says how to
// turn it on or how to ask for the open mode; -auth needs a key of at
// least 32 bytes in base64; the auth files need -auth.
func TestAuthFlags(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key := write("key", base64.StdEncoding.EncodeToString(testKey(t))+"\n")
	short := write("short", base64.StdEncoding.EncodeToString(make([]byte, 31)))
	notB64 := write("notb64", "this is not base64 at all, though long enough!")
	admin := write("admin", "an-admin-password\n")

	for _, addr := range []string{"10.0.0.1:8848", "0.0.0.0:8848", ":8848", "[::]:8848", "example.com:8848"} {
		_, _, err := parseFlags([]string{"-addr", addr}, io.Discard)
		if err == nil {
			t.Fatalf("-addr %s without -auth or -open was accepted", addr)
		}
		for _, want := range []string{"not a loopback address", "-auth", "-open"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("-addr %s: error %q does not mention %q", addr, err, want)
			}
		}
	}
	for _, ok := range [][]string{
		{"-addr", "127.0.0.1:8848"},
		{"-addr", "localhost:8848"},
		{"-addr", "[::1]:8848"},
		{"-addr", "10.0.0.1:8848", "-open"},
		{"-addr", "10.0.0.1:8848", "-auth", "-auth-key-file", key, "-admin-password-file", admin},
	} {
		cfg, _, err := parseFlags(ok, io.Discard)
		if err != nil {
			t.Errorf("%q: %v", ok, err)
			continue
		}
		if cfg.Auth.Enabled && (len(cfg.Auth.Key) != 32 || cfg.Auth.AdminPassword != "an-admin-password") {
			t.Errorf("%q: key of %d bytes, admin password %q", ok, len(cfg.Auth.Key), cfg.Auth.AdminPassword)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-auth"}, "-auth-key-file"},
		{[]string{"-auth", "-auth-key-file", short}, "at least 32"},
		{[]string{"-auth", "-auth-key-file", notB64}, "base64"},
		{[]string{"-auth", "-auth-key-file", filepath.Join(dir, "missing")}, "-auth-key-file"},
		{[]string{"-auth-key-file", key}, "need -auth"},
		{[]string{"-admin-password-file", admin}, "need -auth"},
		{[]string{"-auth", "-auth-key-file", key, "-auth-token-ttl", "-1s"}, "-auth-token-ttl"},
	} {
		_, _, err := parseFlags(c.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one mentioning %q", c.args, err, c.want)
		}
	}
}
