package main

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nacos-group/nacos-sdk-go/v2/common/constant"
	"github.com/nacos-group/nacos-sdk-go/v2/vo"
)

// TestDataDirDefault: without -data, nacosd keeps its persistent data in
// $HOME/nacosd/data/<node-id> (standalone: .../standalone); -memory keeps it
// in memory, and excludes -data.
func TestDataDirDefault(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	cfg, _, err := parseFlags(nil, io.Discard)
	if want := filepath.Join(home, "nacosd", "data", "standalone"); err != nil || cfg.DataDir != want {
		t.Fatalf("default data dir %q %v, want %q", cfg.DataDir, err, want)
	}
	if cfg, _, err = parseFlags([]string{"-memory"}, io.Discard); err != nil || cfg.DataDir != "" {
		t.Fatalf("-memory: %q %v", cfg.DataDir, err)
	}
	if _, _, err = parseFlags([]string{"-memory", "-data", "/x"}, io.Discard); err == nil || !strings.Contains(err.Error(), "exclude") {
		t.Fatalf("-memory -data: %v", err)
	}
}

// httpForm posts (or, with method GET, gets) form to a server by address.
func httpForm(t *testing.T, method, addr, path string, form url.Values) (int, string) {
	t.Helper()
	var resp *http.Response
	var err error
	if method == http.MethodGet {
		resp, err = http.Get("http://" + addr + path + "?" + form.Encode())
	} else {
		resp, err = http.PostForm("http://"+addr+path, form)
	}
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// loginAt logs in, polling until the server answers (within 60 s: a child
// process starting its Raft replica on a loaded machine).
func loginAt(t *testing.T, addr, user, password string) string {
	t.Helper()
	var tok string
	eventually(t, 60*time.Second, "login of "+user+" at "+addr, func() bool {
		st, body := httpForm(t, "POST", addr, "/nacos/v1/auth/login", url.Values{"username": {user}, "password": {password}})
		var m map[string]any
		if st != 200 || json.Unmarshal([]byte(body), &m) != nil {
			return false
		}
		tok, _ = m["accessToken"].(string)
		return tok != ""
	})
	return tok
}

// TestRestartDurable runs nacosd as a process (the command line, no -data:
// the default directory under $HOME), registers a persistent instance with
// nacos-sdk-go v2, defines a service and creates a user, kills the process
// with SIGKILL, starts it again, and finds all three.
func TestRestartDurable(t *testing.T) {
	skipUnderRace(t)
	home := t.TempDir()
	key := filepath.Join(home, "key")
	adminFile := filepath.Join(home, "admin")
	_ = os.WriteFile(key, []byte(base64.StdEncoding.EncodeToString(testKey(t))), 0o600)
	_ = os.WriteFile(adminFile, []byte(testAdminPassword+"\n"), 0o600)
	addr := "127.0.0.1:" + strconv.Itoa(freeBase(t, false))
	args := strings.Join([]string{"-addr", addr, "-auth", "-auth-key-file", key, "-admin-password-file", adminFile, "-log-level", "warn"}, " ")
	start := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestChildServer$")
		cmd.Env = append(os.Environ(), "HOME="+home, "NACOSD_CHILD_ARGS="+args)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	kill := func(cmd *exec.Cmd) {
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
	}

	cmd := start()
	admin := loginAt(t, addr, "nacos", testAdminPassword)
	for _, step := range []struct {
		path string
		form url.Values
	}{
		{"/nacos/v1/auth/users", url.Values{"username": {"carol"}, "password": {"c-pass"}}},
		{"/nacos/v1/auth/roles", url.Values{"username": {"carol"}, "role": {"ops"}}},
		{"/nacos/v1/auth/permissions", url.Values{"role": {"ops"}, "resource": {"public:*:*"}, "action": {"rw"}}},
		{"/nacos/v1/ns/service", url.Values{"serviceName": {"defined"}, "protectThreshold": {"0.25"}}},
	} {
		if st, body := httpForm(t, "POST", addr, step.path, as(admin, step.form)); st != 200 {
			t.Fatalf("%s: %d %s", step.path, st, body)
		}
	}
	creds := []constant.ClientOption{constant.WithUsername("carol"), constant.WithPassword("c-pass")}
	c := newClientWith(t, creds, addr)
	if ok, err := c.RegisterInstance(vo.RegisterInstanceParam{ServiceName: "kept-db", Ip: "10.40.0.1", Port: 5432, Weight: 1, Enable: true, Healthy: true, Ephemeral: false}); err != nil || !ok {
		t.Fatalf("persistent register: %v %v", ok, err)
	}
	c.CloseClient()
	if _, err := os.Stat(filepath.Join(home, "nacosd", "data", "standalone")); err != nil {
		t.Fatalf("the default data directory: %v", err)
	}
	kill(cmd)

	start()
	loginAt(t, addr, "carol", "c-pass") // the user, her role and permission are back
	c = newClientWith(t, creds, addr)
	eventually(t, 30*time.Second, "the persistent instance is back", func() bool {
		hs, err := c.SelectAllInstances(vo.SelectAllInstancesParam{ServiceName: "kept-db"})
		return err == nil && len(hs) == 1 && hs[0].Ip == "10.40.0.1" && !hs[0].Ephemeral
	})
	tok := loginAt(t, addr, "carol", "c-pass")
	st, body := httpForm(t, "GET", addr, "/nacos/v1/ns/service", as(tok, url.Values{"serviceName": {"defined"}}))
	if st != 200 || !strings.Contains(body, `"protectThreshold":0.25`) {
		t.Fatalf("the service definition after the restart: %d %s", st, body)
	}
}

// TestChildServer is the child of TestRestartDurable: nacosd's command
// line, run until killed.
func TestChildServer(t *testing.T) {
	args := os.Getenv("NACOSD_CHILD_ARGS")
	if args == "" {
		t.Skip("run by TestRestartDurable")
	}
	if err := run(strings.Fields(args), os.Stderr); err != nil {
		t.Fatal(err)
	}
}
