package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// sampleSys reads this process's CPU time, the whole machine's busy CPU time and the
// storage devices' completed flushes (Linux: getrusage, /proc/stat, /proc/diskstats). A
// figure it cannot read is zero.
func sampleSys() sysSample {
	var s sysSample
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.procCPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if f, err := os.Open("/proc/stat"); err == nil {
		sc := bufio.NewScanner(f)
		if sc.Scan() {
			// cpu user nice system idle iowait irq softirq steal ...: busy is all but idle
			// and iowait, in clock ticks (USER_HZ, 100 on Linux).
			fs := strings.Fields(sc.Text())
			var busy int64
			for i, v := range fs[1:] {
				n, _ := strconv.ParseInt(v, 10, 64)
				if i != 3 && i != 4 && i < 8 {
					busy += n
				}
			}
			s.machineCPU = time.Duration(busy) * 10 * time.Millisecond
		}
		f.Close()
	}
	if f, err := os.Open("/proc/diskstats"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// major minor name, 11 I/O fields, 4 discard fields, then flushes completed.
			fs := strings.Fields(sc.Text())
			if len(fs) < 18 || strings.HasPrefix(fs[2], "loop") || strings.HasPrefix(fs[2], "ram") || isPartition(fs[2]) {
				continue
			}
			n, _ := strconv.ParseUint(fs[17], 10, 64)
			s.flushes += n
		}
		f.Close()
	}
	return s
}

// isPartition reports whether the block device name is a partition (it has a
// /sys/class/block/<name>/partition file).
func isPartition(name string) bool {
	_, err := os.Stat("/sys/class/block/" + name + "/partition")
	return err == nil
}
