//go:build unix

package transport

import (
	"net"
	"syscall"
)

// hasSpoken reports whether bytes from the peer already wait on nc, an
// accepted connection, without consuming them or blocking: a client that
// speaks as soon as it connects (every Muster peer does) has usually
// spoken by the time a busy accept loop takes its connection.
func hasSpoken(nc net.Conn) bool {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return false
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return false
	}
	var b [1]byte
	n := 0
	_ = rc.Read(func(fd uintptr) bool {
		n, _, _ = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true // never wait
	})
	return n > 0
}
