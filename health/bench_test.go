package health

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// beatIDs returns n distinct ids shaped like instance addresses, "10.x.y.z:port".
func beatIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("10.%d.%d.%d:%d", i>>16&0xff, i>>8&0xff, i&0xff, 8000+i%1000)
	}
	return ids
}

// BenchmarkLeaseTouch touches 1,000,000 leases in a shuffled order, as beats from many
// instances arrive, with a clock that advances by a microsecond per beat.
//
// At this size every touch is a few random accesses to memory far larger than the caches, so
// the figure is set by memory latency rather than by Leases: compare BenchmarkLeaseTouchFloor
// (the map lookup alone) and BenchmarkLeaseTouchInCache (the same work on 10,000 leases).
func BenchmarkLeaseTouch(b *testing.B) { benchTouch(b, 1_000_000) }

// BenchmarkLeaseTouchInCache is BenchmarkLeaseTouch with 10,000 leases, which fit in the
// caches: it measures the cost of the code rather than of the memory.
func BenchmarkLeaseTouchInCache(b *testing.B) { benchTouch(b, 10_000) }

func benchTouch(b *testing.B, n int) {
	ids := beatIDs(n)
	var l Leases[string]
	to := Timeouts{Unhealthy: 15 * time.Second, Expire: 30 * time.Second}
	for _, id := range ids {
		if err := l.Put(id, t0, to); err != nil {
			b.Fatal(err)
		}
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	b.ReportAllocs()
	base := t0.UnixNano()
	i := 0
	for b.Loop() {
		if found, _ := l.Touch(ids[i%n], time.Unix(0, base+int64(i)*1000)); !found {
			b.Fatal("lease not found")
		}
		i++
	}
}

// BenchmarkLeaseTouchFloor is not a benchmark of Leases: it is the bare map[string]int32
// lookup that every Touch starts with, over the same 1,000,000 ids in the same order. No
// Touch built on a Go map can be faster.
func BenchmarkLeaseTouchFloor(b *testing.B) {
	const n = 1_000_000
	ids := beatIDs(n)
	index := make(map[string]int32, n)
	for i, id := range ids {
		index[id] = int32(i)
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, ok := index[ids[i%n]]; !ok {
			b.Fatal("id not found")
		}
		i++
	}
}

// BenchmarkLeaseExpire measures the cost per event of a mass expiry: 100,000 leases whose
// beats stopped within a tenth of a second of each other turn unhealthy in one Expire call and
// expire in the next.
func BenchmarkLeaseExpire(b *testing.B) {
	const n = 100_000
	ids := beatIDs(n)
	to := Timeouts{Unhealthy: 15 * time.Second, Expire: 30 * time.Second}
	b.ReportAllocs()
	events := 0
	for b.Loop() {
		b.StopTimer()
		var l Leases[string]
		for i, id := range ids {
			if err := l.Put(id, at(time.Duration(i)*time.Microsecond), to); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC() // the previous round's garbage must not be collected on the clock
		b.StartTimer()
		events += l.Expire(at(20*time.Second), nil)
		events += l.Expire(at(time.Minute), nil)
	}
	if events != 2*b.N*n {
		b.Fatalf("%d events, want %d", events, 2*b.N*n)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
}
