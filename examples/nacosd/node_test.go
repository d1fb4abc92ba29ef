package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The Node.js client (nacos-naming, pinned in testdata/node/package.json)
// driven through testdata/node/driver.js. CI installs Node and the client
// and sets NACOSD_NODE_REQUIRED=1, so that a missing one fails there; a
// developer without them gets a skip that says how to install them.

type nodeEvent struct {
	Event   string          `json:"event"`
	ID      int64           `json:"id"`
	Msg     string          `json:"msg"`
	Service string          `json:"service"`
	Hosts   []string        `json:"hosts"`
	Result  json.RawMessage `json:"result"`
}

type nodeClient struct {
	t     testing.TB
	cmd   *exec.Cmd
	stdin io.WriteCloser
	seq   atomic.Int64

	mu      sync.Mutex
	replies map[int64]chan nodeEvent
	hosts   chan nodeEvent // subscription callbacks
}

// startNode starts a Node.js client of the given servers (HTTP addresses)
// with optional credentials (user, password).
func startNode(t testing.TB, servers []string, cred ...string) *nodeClient {
	t.Helper()
	node, err := exec.LookPath("node")
	dir, _ := filepath.Abs(filepath.Join("testdata", "node"))
	_, modErr := os.Stat(filepath.Join(dir, "node_modules", "nacos-naming"))
	if err != nil || modErr != nil {
		msg := "the Node.js client is not installed: apt-get install nodejs npm; (cd testdata/node && npm ci)"
		if os.Getenv("NACOSD_NODE_REQUIRED") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	cmd := exec.Command(node, "driver.js")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NACOS_SERVERS="+strings.Join(servers, ","))
	if len(cred) == 2 {
		cmd.Env = append(cmd.Env, "NACOS_USERNAME="+cred[0], "NACOS_PASSWORD="+cred[1])
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &nodeClient{t: t, cmd: cmd, stdin: stdin, replies: map[int64]chan nodeEvent{}, hosts: make(chan nodeEvent, 256)}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var ev nodeEvent
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				continue
			}
			switch ev.Event {
			case "ready":
				close(ready)
			case "hosts":
				select {
				case c.hosts <- ev:
				default:
				}
			case "ok", "error":
				c.mu.Lock()
				ch := c.replies[ev.ID]
				c.mu.Unlock()
				if ch != nil {
					ch <- ev
				}
			}
		}
	}()
	t.Cleanup(c.kill)
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("the Node.js client did not start")
	}
	return c
}

func (c *nodeClient) kill() {
	_ = c.stdin.Close()
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
}

// do runs one command and returns its reply.
func (c *nodeClient) do(cmd map[string]any) nodeEvent {
	c.t.Helper()
	id := c.seq.Add(1)
	cmd["id"] = id
	ch := make(chan nodeEvent, 1)
	c.mu.Lock()
	c.replies[id] = ch
	c.mu.Unlock()
	b, _ := json.Marshal(cmd)
	if _, err := c.stdin.Write(append(b, '\n')); err != nil {
		c.t.Fatal(err)
	}
	select {
	case ev := <-ch:
		return ev
	case <-time.After(60 * time.Second):
		c.t.Fatalf("no answer from the Node.js client to %v", cmd)
		return nodeEvent{}
	}
}

// must runs a command that must succeed.
func (c *nodeClient) must(cmd map[string]any) nodeEvent {
	c.t.Helper()
	ev := c.do(cmd)
	if ev.Event != "ok" {
		c.t.Fatalf("Node.js client: %v: %s", cmd, ev.Msg)
	}
	return ev
}

// waitHosts waits for a subscription callback of svc with exactly want.
func (c *nodeClient) waitHosts(svc string, within time.Duration, want ...string) {
	c.t.Helper()
	deadline := time.After(within)
	for {
		select {
		case ev := <-c.hosts:
			if ev.Service == svc && sameSet(ev.Hosts, want) {
				return
			}
		case <-deadline:
			c.t.Fatalf("the Node.js subscriber of %s never saw %v", svc, want)
		}
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]bool{}
	for _, x := range a {
		m[x] = true
	}
	for _, x := range b {
		if !m[x] {
			return false
		}
	}
	return true
}

// TestNodeClient drives the Node.js client with authentication on (it
// sends its username and password on every call): consumer first, a
// subscription exists before any provider, and the first provider is
// pushed; its acknowledgements (lastRefTime as a JSON number) are
// counted; beats keep its instance; deregistration is pushed.
func TestNodeClient(t *testing.T) {
	skipUnderRace(t)
	s := startServer(t, withAuth(testKey(t)))
	tenants(t, s)
	consumer := startNode(t, []string{s.HTTPAddr()}, "alice", "a-pass")
	consumer.must(map[string]any{"op": "subscribe", "service": "node-svc"})
	eventually(t, 10*time.Second, "a UDP subscription of the service nobody provides yet", func() bool {
		return s.udp.count() == 1
	})

	provider := startNode(t, []string{s.HTTPAddr()}, "alice", "a-pass")
	_, _, pushes0 := s.metrics.percentiles()
	provider.must(map[string]any{"op": "register", "service": "node-svc", "ip": "10.6.0.1", "port": 8080})
	provider.must(map[string]any{"op": "register", "service": "node-svc", "ip": "10.6.0.2", "port": 8080})
	consumer.waitHosts("node-svc", 20*time.Second, "10.6.0.1:8080", "10.6.0.2:8080")
	eventually(t, 10*time.Second, "the consumer's acknowledgements are counted", func() bool {
		_, _, n := s.metrics.percentiles()
		return n > pushes0
	})
	s.metrics.mu.Lock()
	failures := s.metrics.failures
	s.metrics.mu.Unlock()
	if failures != 0 {
		t.Fatalf("%d pushes were never acknowledged", failures)
	}

	// Beats: the client's first comes about 10 s after it starts.
	beats0 := s.beats.Load()
	eventually(t, 30*time.Second, "a beat of the Node.js client", func() bool { return s.beats.Load() > beats0 })
	if n := len(served(t, s, "node-svc")); n != 2 {
		t.Fatalf("%d instances served after the beats, want 2", n)
	}

	provider.must(map[string]any{"op": "deregister", "service": "node-svc", "ip": "10.6.0.1", "port": 8080})
	consumer.waitHosts("node-svc", 20*time.Second, "10.6.0.2:8080")

	// Without credentials it is refused (the server's 403 ends in the
	// client's "after all servers tried").
	anon := startNode(t, []string{s.HTTPAddr()})
	if ev := anon.do(map[string]any{"op": "register", "service": "node-svc", "ip": "10.6.0.9", "port": 8080}); ev.Event != "error" {
		t.Fatalf("an anonymous Node.js client registered: %+v", ev)
	}
	if n := len(served(t, s, "node-svc")); n != 1 {
		t.Fatalf("%d instances served, want 1", n)
	}
}
