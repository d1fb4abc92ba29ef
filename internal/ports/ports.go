// Package ports picks loopback addresses for nodes that restart on the
// address they had, in Muster's tests and demo.
//
// A port the kernel hands out for ":0" comes from its ephemeral range, the
// range it also takes the source ports of outgoing connections from. A
// node that restarts on such a port after a crash (as a process restarted
// on the same host would: memberlist ties a node's name to its address)
// finds it taken now and then: in the seconds it was down, some other
// connection on the machine (the test suite's other packages open
// thousands) got it as its source port, and the restart fails with
// "address already in use". [Loopback] picks ports outside that range
// (below it or above it), which the kernel never hands out on its own.
//
// Test binaries that run at once (go test runs packages in parallel) pick
// from the same windows at random, so two may still meet on one port while
// its node is down; that takes one of a few thousand ports, where an
// ephemeral one was taken by any connection of the machine's.
package ports

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"sync"
)

const (
	// lowest and belowTop bound the window Loopback picks from below the
	// ephemeral range: above the well-known and most registered services'
	// ports, and below Kubernetes' NodePort range (30000–32767), whose
	// ports a host's firewall rules may redirect.
	lowest, belowTop = 20000, 30000
	// tries bounds the candidates Loopback tries in its windows, and then
	// the ports it lets the kernel choose.
	tries = 200
)

// errNoPort: nothing free in tries attempts.
var errNoPort = errors.New("ports: no free loopback port found")

// handedOut holds the ports Loopback returned in this process, none of
// which it returns twice: a port closed at once is free again, and two
// nodes of one test must not be given the same one.
var handedOut sync.Map

// Loopback returns "127.0.0.1:port" for a port that nothing listens on now
// (on TCP, and on UDP as well if udp is set: memberlist binds both),
// outside the kernel's ephemeral range: below it (from 20000 up to 30000 at
// most) or above it. If the range leaves no such port, or none is free,
// the kernel chooses the port (as ":0" would), which serves everything
// but a restart on it.
func Loopback(udp bool) (string, error) {
	low, high := ephemeralRange()
	if w := windowsOutside(low, high); w.size() > 0 {
		for range tries {
			p := w.port(rand.IntN(w.size()))
			if _, dup := handedOut.Load(p); !dup && free(p, udp) && !loaded(p) {
				return fmt.Sprintf("127.0.0.1:%d", p), nil
			}
		}
	}
	for range tries {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		p := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if (!udp || free(p, true)) && !loaded(p) {
			return fmt.Sprintf("127.0.0.1:%d", p), nil
		}
	}
	return "", errNoPort
}

// windows are the ports Loopback picks from, outside the ephemeral range:
// [lowest, lowest+below) and [aboveFrom, aboveFrom+above).
type windows struct{ below, aboveFrom, above int }

// windowsOutside returns the windows outside the ephemeral range [low, high].
func windowsOutside(low, high int) windows {
	from := max(high+1, lowest)
	return windows{below: max(0, min(low, belowTop)-lowest), aboveFrom: from, above: max(0, 65536-from)}
}

func (w windows) size() int { return w.below + w.above }

// port returns the n-th port of the windows, 0 <= n < size.
func (w windows) port(n int) int {
	if n < w.below {
		return lowest + n
	}
	return w.aboveFrom + n - w.below
}

// loaded records p as handed out and reports whether it was already.
func loaded(p int) bool {
	_, dup := handedOut.LoadOrStore(p, true)
	return dup
}

// free reports whether port p of 127.0.0.1 can be bound now for TCP (and
// UDP).
func free(p int, udp bool) bool {
	addr := fmt.Sprintf("127.0.0.1:%d", p)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer l.Close()
	if udp {
		c, err := net.ListenPacket("udp", addr)
		if err != nil {
			return false
		}
		_ = c.Close()
	}
	return true
}

// ephemeralRange returns the kernel's ephemeral port range: Linux's from
// /proc (its default if that cannot be read), else the system's default.
func ephemeralRange() (low, high int) {
	switch runtime.GOOS {
	case "linux", "android":
		f, err := os.Open("/proc/sys/net/ipv4/ip_local_port_range")
		if err != nil {
			return 32768, 60999
		}
		defer f.Close()
		if _, err := fmt.Fscan(bufio.NewReader(f), &low, &high); err != nil || low <= 0 || low > high || high > 65535 {
			return 32768, 60999
		}
		return low, high
	case "freebsd":
		return 10000, 65535
	case "openbsd":
		return 1024, 49151
	default: // the IANA dynamic range: macOS, Windows, NetBSD, illumos
		return 49152, 65535
	}
}
