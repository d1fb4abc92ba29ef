//go:build !unix

package transport

import "net"

// hasSpoken cannot peek here: a connection counts as having spoken once
// its handshake reads a byte (firstByte).
func hasSpoken(net.Conn) bool { return false }
