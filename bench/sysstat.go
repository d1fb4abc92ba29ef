package main

import (
	"fmt"
	"time"
)

// sysSample is what the persistent row reads around each side (sampleSys): where the
// machine's CPU and the disk's flushes went while the side ran. The machine is shared, so
// the difference between the machine's busy time and this process's is what other
// processes took from the side; the flushes are the whole machine's too.
type sysSample struct {
	procCPU    time.Duration // this process's user + system CPU time
	machineCPU time.Duration // the machine's busy CPU time (all CPUs; not idle, not iowait)
	flushes    uint64        // flushes completed by the storage devices (not partitions)
}

// sysNote formats what happened between a and b, a side of ops operations that took el.
func sysNote(a, b sysSample, ops int, el time.Duration) string {
	if b.procCPU == 0 && b.machineCPU == 0 {
		return ""
	}
	proc := b.procCPU - a.procCPU
	other := max(b.machineCPU-a.machineCPU-proc, 0)
	s := fmt.Sprintf("cpu %.1f µs/op (%.2f cores); other processes %.2f cores", float64(proc.Microseconds())/float64(max(ops, 1)),
		proc.Seconds()/el.Seconds(), other.Seconds()/el.Seconds())
	if f := b.flushes - a.flushes; f > 0 {
		s += fmt.Sprintf("; device flushes %d (%.1f ops per flush, machine-wide)", f, float64(ops)/float64(f))
	}
	return s
}

// add returns s plus what happened between a and b.
func (s sysSample) add(a, b sysSample) sysSample {
	return sysSample{procCPU: s.procCPU + b.procCPU - a.procCPU, machineCPU: s.machineCPU + b.machineCPU - a.machineCPU, flushes: s.flushes + b.flushes - a.flushes}
}

// cpuPerOp is this process's CPU time per operation between a and b, in microseconds (0
// when it cannot be read).
func cpuPerOp(a, b sysSample, ops int) float64 {
	return float64((b.procCPU - a.procCPU).Nanoseconds()) / 1e3 / float64(max(ops, 1))
}
