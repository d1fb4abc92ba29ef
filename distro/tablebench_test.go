package distro

import (
	"fmt"
	"strings"
	"testing"
)

// benchTable returns a table of 1,024 buckets holding n records, and their keys (keys like
// fill's: instance addresses).
func benchTable(n int) (*table, []string) {
	tab := newTable(DefaultConfig().Buckets)
	keys := addrKeys(n, 8080)
	payload := make([]byte, 100)
	for _, k := range keys {
		tab.install(Record{Key: k, Kind: KindSession, Owner: "n1", Revision: 1, Payload: payload}, t0)
	}
	return tab, keys
}

// addrKeys returns n distinct keys "ip:port", instance addresses.
func addrKeys(n, port int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("10.%d.%d.%d:%d", i>>16, (i>>8)&255, i&255, port)
	}
	return keys
}

// BenchmarkTableGet: the table's get of a held key, among 100,000, and a read of the entry
// (every caller reads it). The keys are copies, as keys decoded from a message are, and come in
// a scattered order, so that the caches hold little of the table, as under load.
func BenchmarkTableGet(b *testing.B) {
	tab, keys := benchTable(100_000)
	for i := range keys {
		keys[i] = strings.Clone(keys[i])
	}
	var revs uint64
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e := tab.get(keys[(i*7919)%len(keys)])
		if e == nil {
			b.Fatal("missing")
		}
		revs += e.rev
	}
	if revs != uint64(b.N) {
		b.Fatal("wrong entries")
	}
}

// BenchmarkTableGetMiss: get of a key the table does not hold (every new record's install
// looks first), among 100,000.
func BenchmarkTableGetMiss(b *testing.B) {
	tab, _ := benchTable(100_000)
	miss := addrKeys(4096, 9090)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if tab.get(miss[i%len(miss)]) != nil {
			b.Fatal("found")
		}
	}
}

// BenchmarkTableChurn: one record installed under a new key and one removed, among 100,000
// (sessions that come and go, tombstones that expire).
func BenchmarkTableChurn(b *testing.B) {
	tab, keys := benchTable(100_000)
	fresh := addrKeys(len(keys), 9090)
	payload := make([]byte, 100)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Round after round, the keys of keys and fresh take turns being held.
		k := i % len(keys)
		in, out := fresh[k], keys[k]
		if (i/len(keys))%2 == 1 {
			in, out = out, in
		}
		tab.install(Record{Key: in, Kind: KindSession, Owner: "n1", Revision: 1, Payload: payload}, t0)
		if tab.remove(out) == nil {
			b.Fatal("missing")
		}
	}
}
