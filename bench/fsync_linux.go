package main

import (
	"os"
	"syscall"
)

// fdatasync makes f's data durable without its metadata other than its size, as Dragonboat's
// and etcd's logs do on Linux.
func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
