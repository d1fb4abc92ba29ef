package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// The lab's network: one namespace per node and a hub namespace holding
// the bridge, so that nothing is added to the host's own namespace (no
// route, no address, no interface). Every node namespace has one veth,
// eth0, with an address of labNet; its peer sits on the hub's bridge. The
// namespaces are named after the driver's PID (mfl<pid>-hub, mfl<pid>-n1, …):
// runs side by side never meet, and a run that finds namespaces of a PID
// that no longer lives removes them, with their processes and mounts.
const labNet = "10.213.77" // a private /24, inside the lab's own namespaces only

type labNetwork struct {
	prefix string   // mfl<pid>
	nodes  []string // node IDs, n1…
}

func nsName(prefix, id string) string { return prefix + "-" + id }

func (l *labNetwork) hub() string         { return nsName(l.prefix, "hub") }
func (l *labNetwork) ns(id string) string { return nsName(l.prefix, id) }

// nodeIP is the address of node i (1-based).
func nodeIP(i int) string { return fmt.Sprintf("%s.%d", labNet, 10+i) }

// hubVeth is the hub-side interface of node id.
func hubVeth(id string) string { return "h-" + id }

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func nsRun(ns string, args ...string) error {
	return run("ip", append([]string{"netns", "exec", ns}, args...)...)
}

// setup creates the namespaces, the bridge and the links.
func (l *labNetwork) setup() error {
	if err := run("ip", "netns", "add", l.hub()); err != nil {
		return err
	}
	steps := [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "link", "add", "br0", "type", "bridge"},
		{"ip", "link", "set", "br0", "up"},
	}
	for _, s := range steps {
		if err := nsRun(l.hub(), s...); err != nil {
			return err
		}
	}
	for i, id := range l.nodes {
		ns := l.ns(id)
		if err := run("ip", "netns", "add", ns); err != nil {
			return err
		}
		// Both ends are made inside their namespaces: the host's namespace
		// never holds them, even for a moment.
		if err := run("ip", "link", "add", "name", hubVeth(id), "netns", l.hub(), "type", "veth", "peer", "name", "eth0", "netns", ns); err != nil {
			return err
		}
		if err := nsRun(l.hub(), "ip", "link", "set", hubVeth(id), "master", "br0", "up"); err != nil {
			return err
		}
		for _, s := range [][]string{
			{"ip", "link", "set", "lo", "up"},
			{"ip", "addr", "add", nodeIP(i+1) + "/24", "dev", "eth0"},
			{"ip", "link", "set", "eth0", "up"},
		} {
			if err := nsRun(ns, s...); err != nil {
				return err
			}
		}
	}
	return nil
}

// linkDown takes node id's link down at the hub (isolation) or up again.
func (l *labNetwork) link(id string, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	return nsRun(l.hub(), "ip", "link", "set", hubVeth(id), state)
}

// block installs, in node id's namespace, an nftables table that drops
// packets from (in) and to (out) the given peers' addresses. It replaces
// any table installed before.
func (l *labNetwork) block(id string, in, out []string) error {
	l.unblock(id)
	var b strings.Builder
	b.WriteString("table inet faultlab {\n")
	if len(in) > 0 {
		fmt.Fprintf(&b, "  chain input { type filter hook input priority 0; policy accept; ip saddr { %s } drop; }\n", strings.Join(in, ", "))
	}
	if len(out) > 0 {
		fmt.Fprintf(&b, "  chain output { type filter hook output priority 0; policy accept; ip daddr { %s } drop; }\n", strings.Join(out, ", "))
	}
	b.WriteString("}\n")
	cmd := exec.Command("ip", "netns", "exec", l.ns(id), "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(b.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft in %s: %w: %s", l.ns(id), err, out)
	}
	return nil
}

// unblock removes node id's nftables table, if any.
func (l *labNetwork) unblock(id string) {
	_ = nsRun(l.ns(id), "nft", "delete", "table", "inet", "faultlab")
}

// teardown removes the run's namespaces (their links, bridge and nftables
// tables go with them).
func (l *labNetwork) teardown() {
	removeNamespaces(func(name string) bool { return strings.HasPrefix(name, l.prefix+"-") })
}

var nsPattern = regexp.MustCompile(`^mfl(\d+)-`)

// removeNamespaces kills the processes in every namespace keep selects and
// deletes it.
func removeNamespaces(sel func(string) bool) {
	names, _ := os.ReadDir("/var/run/netns")
	for _, e := range names {
		if !sel(e.Name()) {
			continue
		}
		if out, err := exec.Command("ip", "netns", "pids", e.Name()).Output(); err == nil {
			for _, f := range strings.Fields(string(out)) {
				if pid, err := strconv.Atoi(f); err == nil {
					_ = syscall.Kill(pid, syscall.SIGCONT)
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		_ = run("ip", "netns", "del", e.Name())
	}
}

func pidAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// cleanLeftovers removes what runs that no longer live left behind: their
// namespaces (and processes in them), their tmpfs mounts and run
// directories under base (base/<pid>).
func cleanLeftovers(base string) []string {
	var removed []string
	dead := func(name string) bool {
		m := nsPattern.FindStringSubmatch(name)
		if m == nil {
			return false
		}
		pid, _ := strconv.Atoi(m[1])
		if pidAlive(pid) && pid != os.Getpid() {
			return false
		}
		removed = append(removed, name)
		return true
	}
	removeNamespaces(dead)
	// Mounts of dead runs: the full-disk fault's tmpfs.
	if f, err := os.Open("/proc/self/mounts"); err == nil {
		var mounts []string
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) > 1 && strings.HasPrefix(fields[1], base+"/") {
				mounts = append(mounts, fields[1])
			}
		}
		f.Close()
		sort.Sort(sort.Reverse(sort.StringSlice(mounts)))
		for _, m := range mounts {
			if runDead(base, m) {
				_ = syscall.Unmount(m, syscall.MNT_DETACH)
				removed = append(removed, "mount "+m)
			}
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(base, "[0-9]*"))
	for _, d := range dirs {
		if runDead(base, d) {
			if _, err := os.Stat(filepath.Join(d, "keep")); err == nil {
				continue // a failed run's evidence: kept until removed by hand
			}
			_ = os.RemoveAll(d)
			removed = append(removed, "dir "+d)
		}
	}
	return removed
}

// runDead reports whether path, under base/<pid>, belongs to a run whose
// driver no longer lives.
func runDead(base, path string) bool {
	rel, err := filepath.Rel(base, path)
	if err != nil || strings.HasPrefix(rel, "..") {
		return false
	}
	first := strings.SplitN(rel, string(filepath.Separator), 2)[0]
	pid, err := strconv.Atoi(first)
	if err != nil {
		return false
	}
	return pid != os.Getpid() && !pidAlive(pid)
}
