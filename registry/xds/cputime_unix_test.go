//go:build unix

package xds_test

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time the process has used (user and system, every
// thread): set against the latencies, it tells work from waiting for a core.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
