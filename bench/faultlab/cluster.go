package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// labNode is one node process, as the driver sees it.
type labNode struct {
	id       string
	ip       string
	spec     nodeSpec
	specPath string
	logPath  string
	api      *apiClient
	strict   bool   // the Raft log is on a strict in-memory FS: power loss, never SIGKILL
	tmpfs    string // the data directory is this small tmpfs: the full-disk fault

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{} // closed when the process exits
	expected bool          // the lab ended the process (SIGKILL, stop)
	exitErr  error
}

type cluster struct {
	lab   *lab
	net   *labNetwork
	nodes []*labNode
	exe   string
}

// newCluster writes the node specs and creates the network; nothing runs.
func newCluster(l *lab, count int) (*cluster, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	c := &cluster{lab: l, exe: exe, net: &labNetwork{prefix: fmt.Sprintf("mfl%d", os.Getpid())}}
	secret, gossipKey := make([]byte, 32), make([]byte, 32)
	_, _ = rand.Read(secret)
	_, _ = rand.Read(gossipKey)
	members := map[uint64]string{}
	var seeds []string
	for i := 1; i <= count; i++ {
		id := "n" + strconv.Itoa(i)
		members[uint64(i)] = id
		c.net.nodes = append(c.net.nodes, id)
		seeds = append(seeds, fmt.Sprintf("%s:%d", nodeIP(i), gossipPort))
	}
	for i := 1; i <= count; i++ {
		id := "n" + strconv.Itoa(i)
		dir := filepath.Join(l.dir, id)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		n := &labNode{id: id, ip: nodeIP(i), strict: i == 1, specPath: filepath.Join(dir, "spec.json"), logPath: filepath.Join(dir, "node.log")}
		data := filepath.Join(dir, "data")
		if i == 3 {
			n.tmpfs = data
		}
		n.spec = nodeSpec{
			ID: id, IP: n.ip, Dir: data, Socket: filepath.Join(dir, "api.sock"),
			Seeds: seeds, Members: members, Deployment: 0x6661756c74, Secret: secret, GossipKey: gossipKey,
			StrictFS: n.strict, LogLevel: l.logLevel,
		}
		b, _ := json.Marshal(n.spec)
		if err := os.WriteFile(n.specPath, b, 0o600); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(data, 0o700); err != nil {
			return nil, err
		}
		if n.tmpfs != "" {
			if err := run("mount", "-t", "tmpfs", "-o", "size="+l.tmpfsSize+",mode=0700", "tmpfs", data); err != nil {
				return nil, err
			}
		}
		n.api = newAPIClient(n.spec.Socket)
		c.nodes = append(c.nodes, n)
	}
	if err := c.net.setup(); err != nil {
		return c, err
	}
	return c, nil
}

// start starts node n's process in its namespace.
func (c *cluster) start(n *labNode) error {
	log, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "\n=== faultlab: start %s at %s\n", n.id, time.Now().UTC().Format(time.RFC3339Nano)) // real time
	cmd := exec.Command("ip", "netns", "exec", c.net.ns(n.id), c.exe, "node", n.specPath)
	cmd.Stdout, cmd.Stderr = log, log
	// The node dies with the driver, however the driver ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		return err
	}
	exited := make(chan struct{})
	n.mu.Lock()
	n.cmd, n.exited, n.expected, n.exitErr = cmd, exited, false, nil
	n.mu.Unlock()
	go func() {
		err := cmd.Wait()
		log.Close()
		n.mu.Lock()
		n.exitErr = err
		expected := n.expected
		n.mu.Unlock()
		close(exited)
		if !expected {
			c.lab.nodeExited(n, err)
		}
	}()
	return nil
}

// signal sends sig to node n's process.
func (n *labNode) signal(sig syscall.Signal) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.cmd.Process == nil {
		return errors.New("not running")
	}
	if sig == syscall.SIGKILL || sig == syscall.SIGTERM {
		n.expected = true
	}
	return n.cmd.Process.Signal(sig)
}

// running reports whether node n's process is running.
func (n *labNode) running() bool {
	n.mu.Lock()
	ch := n.exited
	n.mu.Unlock()
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return false
	default:
		return true
	}
}

// kill kills node n's process and waits for it to be gone.
func (n *labNode) kill(ctx context.Context) error {
	n.mu.Lock()
	ch := n.exited
	n.mu.Unlock()
	if err := n.signal(syscall.SIGKILL); err != nil {
		return err
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stop ends every node process (SIGCONT first, for a stalled one).
func (c *cluster) stop() {
	for _, n := range c.nodes {
		_ = n.signal(syscall.SIGCONT)
		_ = n.signal(syscall.SIGKILL)
	}
	for _, n := range c.nodes {
		n.mu.Lock()
		ch := n.exited
		n.mu.Unlock()
		if ch != nil {
			select {
			case <-ch:
			case <-time.After(10 * time.Second): // real time
			}
		}
	}
}

// teardown stops the processes and removes the namespaces and mounts.
func (c *cluster) teardown() {
	c.stop()
	c.net.teardown()
	for _, n := range c.nodes {
		if n.tmpfs != "" {
			_ = syscall.Unmount(n.tmpfs, syscall.MNT_DETACH)
		}
	}
}

// fill writes a file into node n's tmpfs until the file system is full.
func (n *labNode) fill() (int64, error) {
	f, err := os.Create(filepath.Join(n.tmpfs, "faultlab-fill"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var total int64
	for {
		k, err := f.Write(buf)
		total += int64(k)
		if err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return total, nil
			}
			return total, err
		}
	}
}

func (n *labNode) unfill() error {
	return os.Remove(filepath.Join(n.tmpfs, "faultlab-fill"))
}

// tail returns the last lines of node n's log.
func (n *labNode) tail(max int) string {
	f, err := os.Open(n.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, _ := f.Stat()
	off := max64(0, st.Size()-int64(max))
	_, _ = f.Seek(off, io.SeekStart)
	b, _ := io.ReadAll(f)
	return string(b)
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}
