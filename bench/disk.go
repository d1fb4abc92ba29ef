package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// The persistent row is bound by the disk: a Raft commit round ends with an fsync of the
// log on the leader and on a follower (three replicas on one disk here), and 64 writers can
// have at most 64 commands in one round. The probe below measures that bound in the same run
// as the row, on the same file system, so the row's throughput can be read against it.

// fsyncAppends is the number of timed appends of one probe.
const fsyncAppends = 200

// diskProbe is one probe's result: the latency of appending 4 KiB to a file and making it
// durable with fdatasync (fsync where there is no fdatasync), as a write-ahead log does.
type diskProbe struct {
	p50, p99 time.Duration
}

// probeDisk times n appends of 4 KiB, each followed by fdatasync, in a file in dir. The first
// few are not timed: they allocate the file's first blocks.
func probeDisk(dir string, n int) (diskProbe, error) {
	f, err := os.OpenFile(filepath.Join(dir, "fsync-probe"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return diskProbe{}, err
	}
	defer f.Close()
	buf := make([]byte, 4096)
	lat := make([]time.Duration, 0, n)
	for i := -5; i < n; i++ {
		buf[0] = byte(i)
		t0 := time.Now() // real time
		if _, err := f.Write(buf); err != nil {
			return diskProbe{}, err
		}
		if err := fdatasync(f); err != nil {
			return diskProbe{}, err
		}
		if i >= 0 {
			lat = append(lat, time.Since(t0)) // real time
		}
	}
	return diskProbe{p50: percentile(lat, 50), p99: percentile(lat, 99)}, nil
}

// fsyncBound reads a persistent throughput (commands/s) against one fsync of latency fsync per
// commit round: the commands one fsync carried, and the fraction of writers per fsync (every
// writer's command in every round) that the throughput reached.
func fsyncBound(rate float64, fsync time.Duration, writers int) (perFsync, fraction float64) {
	perFsync = rate * fsync.Seconds()
	return perFsync, perFsync / float64(writers)
}

// boundNote formats fsyncBound's figures for a round's line.
func boundNote(rate float64, d diskProbe, writers int) string {
	per, frac := fsyncBound(rate, d.p50, writers)
	return fmt.Sprintf("disk fdatasync p50 %.2f ms, p99 %.2f ms: %.1f commands per fsync, %.0f %% of %d writers × one fsync per commit round (%.1fk/s)",
		ms(d.p50), ms(d.p99), per, 100*frac, writers, float64(writers)/d.p50.Seconds()/1e3)
}
