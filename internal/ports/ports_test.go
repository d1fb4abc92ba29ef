package ports

import (
	"net"
	"strconv"
	"testing"
)

func TestLoopbackOutsideTheEphemeralRangeAndDistinct(t *testing.T) {
	low := ephemeralLow()
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
		if low-lowest >= 1000 && (p < lowest || p >= low) {
			t.Fatalf("port %d outside [%d, %d): the kernel may hand it out as a source port", p, lowest, low)
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
