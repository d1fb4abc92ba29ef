package health

import (
	"context"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func tcpTarget(t *testing.T, addr string) Target {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return Target{IP: host, Port: p}
}

func TestTCPCheckerListenerThenClosed(t *testing.T) {
	defer goleak.VerifyNone(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewTCPChecker(TCPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	target := tcpTarget(t, ln.Addr().String())

	r := c.Check(context.Background(), target)
	if !r.Healthy || r.Reason != "ok" {
		t.Fatalf("listening: %+v, want healthy", r)
	}
	_ = ln.Close()
	r = c.Check(context.Background(), target)
	if r.Healthy || !r.Definite || r.Reason != "connection refused" {
		t.Fatalf("closed: %+v, want a definite failure, connection refused", r)
	}
}

func TestTCPCheckerCheckPortOverrides(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadPort := dead.Addr().(*net.TCPAddr).Port
	_ = dead.Close()
	c, _ := NewTCPChecker(TCPConfig{})

	target := Target{IP: "127.0.0.1", Port: deadPort}
	if r := c.Check(context.Background(), target); r.Healthy {
		t.Fatalf("instance port %d (closed): %+v, want unhealthy", deadPort, r)
	}
	target.Check.Port = ln.Addr().(*net.TCPAddr).Port
	if r := c.Check(context.Background(), target); !r.Healthy {
		t.Fatalf("check port %d (listening): %+v, want healthy", target.Check.Port, r)
	}
}

// A timeout is an ordinary failure: here a timeout so small that the dial cannot finish.
func TestTCPCheckerTinyTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, _ := NewTCPChecker(TCPConfig{Timeout: time.Nanosecond})
	r := c.Check(context.Background(), tcpTarget(t, ln.Addr().String()))
	if r.Healthy || r.Definite || r.Reason != "timeout" {
		t.Fatalf("%+v, want an ordinary failure, timeout", r)
	}
}

// A port that never answers: a listener whose accept queue is full drops further SYNs, so the
// connect hangs until the checker's timeout. Linux only (backlog semantics); skipped if the
// queue does not fill as expected.
func TestTCPCheckerNoAnswer(t *testing.T) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Skipf("raw socket: %v", err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	port := sa.(*syscall.SockaddrInet4).Port
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	// Fill the accept queue (never accepted) until a connect hangs.
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	full := false
	for range 8 {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			full = true
			break
		}
		conns = append(conns, c)
	}
	if !full {
		t.Skip("the accept queue did not fill")
	}
	c, _ := NewTCPChecker(TCPConfig{Timeout: 150 * time.Millisecond})
	r := c.Check(context.Background(), Target{IP: "127.0.0.1", Port: port})
	if r.Healthy || r.Definite || r.Reason != "timeout" {
		t.Fatalf("%+v, want an ordinary failure, timeout", r)
	}
	if r.Latency < 100*time.Millisecond {
		t.Fatalf("latency %v: the connect did not wait for the timeout", r.Latency)
	}
}

func TestTCPCheckerCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c, _ := NewTCPChecker(TCPConfig{})
	r := c.Check(ctx, Target{IP: "127.0.0.1", Port: 1})
	if r.Healthy || r.Definite {
		t.Fatalf("%+v, want an ordinary failure", r)
	}
}

func TestNewTCPCheckerRejectsNegativeTimeout(t *testing.T) {
	if _, err := NewTCPChecker(TCPConfig{Timeout: -1}); err == nil {
		t.Fatal("no error for a negative timeout")
	}
}

func newLocalListener() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
