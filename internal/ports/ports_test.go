package ports

import (
	"net"
	"strconv"
	"testing"
)

func TestLoopbackOutsideTheEphemeralRangeAndDistinct(t *testing.T) {
	low, high := ephemeralRange()
	seen := map[string]bool{}
	for range 50 {
		addr, err := Loopback(true)
		if err != nil {
			t.Fatal(err)
		}
		if seen[addr] {
			t.Fatalf("%s handed out twice", addr)
		}
		seen[addr] = true
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host != "127.0.0.1" {
			t.Fatalf("address %q: %v", addr, err)
		}
		p, _ := strconv.Atoi(port)
		// Without a window outside the range (FreeBSD's default, a Linux
		// host tuned to 1024–65535) the kernel chooses.
		if windowsOutside(low, high).size() > 0 && (p < lowest || p >= low && p <= high) {
			t.Fatalf("port %d is not outside the ephemeral range [%d, %d] (nor at least %d): the kernel may hand it out as a source port", p, low, high, lowest)
		}
		// Free for both protocols, as memberlist binds them.
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("listen tcp %s: %v", addr, err)
		}
		c, err := net.ListenPacket("udp", addr)
		if err != nil {
			t.Fatalf("listen udp %s: %v", addr, err)
		}
		_ = c.Close()
		_ = l.Close()
	}
}

// A port something listens on, on either protocol, is not free.
func TestFreeRefusesABoundPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if free(l.Addr().(*net.TCPAddr).Port, false) {
		t.Fatal("a port bound for TCP was free")
	}
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := c.LocalAddr().(*net.UDPAddr).Port
	if !free(p, false) {
		t.Skipf("port %d is taken for TCP too", p)
	}
	if free(p, true) {
		t.Fatal("a port bound for UDP was free for memberlist")
	}
}

// Every port of the windows lies outside the ephemeral range, from lowest
// up, below NodePorts when under the range; and the windows are all there
// is outside it.
func TestWindowsOutsideTheRange(t *testing.T) {
	for _, r := range []struct{ low, high, size int }{
		{32768, 60999, (belowTop - lowest) + (65535 - 60999)}, // Linux's default
		{49152, 65535, belowTop - lowest},                     // IANA
		{10000, 65535, 0},                                     // FreeBSD: nothing outside
		{1024, 49151, 65535 - 49151},                          // OpenBSD
		{25000, 26000, (25000 - lowest) + (65535 - 26000)},
		{1024, 10000, 65536 - lowest},         // all below lowest: everything from it up
		{32768, 65534, belowTop - lowest + 1}, // the top edge: 65535 alone above
	} {
		w := windowsOutside(r.low, r.high)
		if w.size() != r.size {
			t.Errorf("range [%d, %d]: %d ports outside, want %d", r.low, r.high, w.size(), r.size)
		}
		for n := range w.size() {
			p := w.port(n)
			if p < lowest || p > 65535 || p >= r.low && p <= r.high || p >= belowTop && p < r.low {
				t.Fatalf("range [%d, %d]: port %d (the %d-th)", r.low, r.high, p, n)
			}
		}
	}
}
