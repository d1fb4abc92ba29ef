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

// instance stands for the registry's per-instance record, whose address keys its lease; its
// size is about that of the registry's.
type instance struct {
	_        [3]uintptr // the registry record's publisher, slot and instance pointers: only their size matters
	interval time.Duration
}

// instanceIDs returns n ids as the registry makes them: a pointer to a record allocated per
// instance.
func instanceIDs(n int) []*instance {
	ids := make([]*instance, n)
	for i := range ids {
		ids[i] = &instance{interval: time.Duration(i)}
	}
	return ids
}

// BenchmarkLeaseTouch touches 1,000,000 leases keyed by pointers, as the registry keys them, in
// a shuffled order, as beats from many instances arrive, with a clock that advances by a
// microsecond per beat.
//
// At this size the table (48 MB) is far larger than the caches, so a touch costs about one
// miss to memory, for the id's cell; compare BenchmarkLeaseTouchInCache (the same work on
// 10,000 leases) and BenchmarkLeaseTouchFloor (a Go map lookup alone).
func BenchmarkLeaseTouch(b *testing.B) { benchTouch(b, instanceIDs(1_000_000)) }

// BenchmarkLeaseTouchString is BenchmarkLeaseTouch with "10.x.y.z:port" ids, whose bytes are
// memory of their own: the hash reads the id's (scattered here by the shuffle, as the ids were
// allocated in order), and a probe that meets another id of the same length reads that one's.
// The cells are 32 bytes, the table 64 MB.
func BenchmarkLeaseTouchString(b *testing.B) { benchTouch(b, beatIDs(1_000_000)) }

// BenchmarkLeaseTouchInCache is BenchmarkLeaseTouch with 10,000 leases, which fit in the
// caches: it measures the cost of the code rather than of the memory.
func BenchmarkLeaseTouchInCache(b *testing.B) { benchTouch(b, instanceIDs(10_000)) }

func benchTouch[K comparable](b *testing.B, ids []K) {
	n := len(ids)
	var l Leases[K]
	to := Timeouts{Unhealthy: 15 * time.Second, Expire: 30 * time.Second}
	for _, id := range ids {
		if err := l.Put(id, t0, to); err != nil {
			b.Fatal(err)
		}
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	runtime.GC() // the garbage of the setup must not be collected on the clock
	b.ReportAllocs()
	now := t0.UnixNano()
	i := 0
	for b.Loop() {
		if found, _ := l.Touch(ids[i], time.Unix(0, now)); !found {
			b.Fatal("lease not found")
		}
		now += 1000
		if i++; i == n {
			i = 0
		}
	}
}

// BenchmarkLeaseTouchFloor is not a benchmark of Leases but a yardstick for
// BenchmarkLeaseTouch: a bare map[*instance]int32 lookup over the same 1,000,000 ids in the
// same order, which was the first of the two or three misses of a Touch built on a Go map and a
// slab. It moves with the load from other tenants of the machine as much as Touch does.
func BenchmarkLeaseTouchFloor(b *testing.B) {
	const n = 1_000_000
	ids := instanceIDs(n)
	index := make(map[*instance]int32, n)
	for i, id := range ids {
		index[id] = int32(i)
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	runtime.GC()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, ok := index[ids[i%n]]; !ok {
			b.Fatal("id not found")
		}
		i++
	}
}

// BenchmarkLeaseMemory reports the memory that 1,000,000 leases keyed by pointers hold: the
// live heap after Put, less the live heap before, which holds the ids. Its ns/op is not
// reported: an op is a million Puts and two collections.
func BenchmarkLeaseMemory(b *testing.B) {
	const n = 1_000_000
	ids := instanceIDs(n)
	to := Timeouts{Unhealthy: 15 * time.Second, Expire: 30 * time.Second}
	var perLease float64
	for b.Loop() {
		before := liveHeap()
		var l Leases[*instance]
		for _, id := range ids {
			if err := l.Put(id, t0, to); err != nil {
				b.Fatal(err)
			}
		}
		perLease = float64(liveHeap()-before) / n
		runtime.KeepAlive(&l)
	}
	b.ReportMetric(perLease, "B/lease")
	b.ReportMetric(0, "ns/op")
}

// liveHeap collects the garbage and returns the bytes of the heap objects left.
func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
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

// BenchmarkLeasePutRemove: steady churn in a tracker of 100,000 leases: each
// op puts a new lease and removes the oldest, as registrations and
// deregistrations do.
func BenchmarkLeasePutRemove(b *testing.B) {
	const n = 100_000
	type obj struct{ _ [16]byte }
	ids := make([]*obj, 2*n)
	for i := range ids {
		ids[i] = new(obj)
	}
	var l Leases[*obj]
	to := Timeouts{Unhealthy: 15 * time.Second, Expire: 30 * time.Second}
	base := t0.UnixNano()
	for i := range n {
		if err := l.Put(ids[i], time.Unix(0, base+int64(i)), to); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := l.Put(ids[(n+i)%len(ids)], time.Unix(0, base+int64(n+i)), to); err != nil {
			b.Fatal(err)
		}
		l.Remove(ids[i%len(ids)])
		i++
	}
}
