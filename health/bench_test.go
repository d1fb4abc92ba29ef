package health

import (
	"fmt"
	"math/rand/v2"
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
func BenchmarkLeaseTouch(b *testing.B) {
	const n = 1_000_000
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

// BenchmarkLeaseExpire measures the cost per event of a mass expiry: 100,000 leases with
// spread deadlines all pass Expire in one call.
func BenchmarkLeaseExpire(b *testing.B) {
	const n = 100_000
	ids := beatIDs(n)
	b.ReportAllocs()
	events := 0
	for b.Loop() {
		b.StopTimer()
		var l Leases[string]
		for i, id := range ids {
			to := Timeouts{Unhealthy: 15 * time.Second, Expire: 30*time.Second + time.Duration(i)*time.Microsecond}
			if err := l.Put(id, t0, to); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		events += l.Expire(t0.Add(time.Hour), nil)
	}
	if events != b.N*n {
		b.Fatalf("%d events, want %d", events, b.N*n)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
}
