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
// "address already in use". [Loopback] picks ports below that range, which
// the kernel never hands out on its own.
package ports

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
)

// Without /proc/sys/net/ipv4/ip_local_port_range (not Linux), the IANA
// dynamic range is assumed, which BSDs, macOS and Windows use.
const (
	ianaEphemeralLow = 49152
	// lowest is the lowest port Loopback picks: above the well-known and
	// most registered services' ports.
	lowest = 20000
	// tries bounds the candidates Loopback tries before it lets the kernel
	// choose.
	tries = 200
)

// handedOut holds the ports Loopback returned in this process, none of
// which it returns twice: a port closed at once is free again, and two
// nodes of one test must not be given the same one.
var handedOut sync.Map

// Loopback returns "127.0.0.1:port" for a port that nothing listens on now
// (on TCP, and on UDP as well if udp is set: memberlist binds both), outside
// the kernel's ephemeral range. If that range leaves no room below it, or
// no candidate is free, the kernel chooses the port (as ":0" would), which
// serves everything but a restart on it.
func Loopback(udp bool) (string, error) {
	if low := ephemeralLow(); low-lowest >= 1000 {
		for range tries {
			p := lowest + rand.IntN(low-lowest)
			if _, dup := handedOut.Load(p); dup {
				continue
			}
			if free(p, udp) && !loaded(p) {
				return fmt.Sprintf("127.0.0.1:%d", p), nil
			}
		}
	}
	for {
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

// ephemeralLow returns the lowest port of the kernel's ephemeral range.
func ephemeralLow() int {
	f, err := os.Open("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return ianaEphemeralLow
	}
	defer f.Close()
	var low, high int
	if _, err := fmt.Fscan(bufio.NewReader(f), &low, &high); err != nil || low <= 0 || low > high {
		return ianaEphemeralLow
	}
	return low
}
