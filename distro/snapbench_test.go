package distro

import (
	"fmt"
	"testing"
)

// benchPage is a snapshot page as the scale harness's records make it: 4,096 session records of
// 58-byte keys and 180-byte payloads, of three owners.
func benchPage() []Record {
	recs := make([]Record, snapshotPage)
	for i := range recs {
		payload := make([]byte, 180)
		for j := range payload {
			payload[j] = byte(i + j)
		}
		recs[i] = Record{Key: fmt.Sprintf("s/%024d/%032x", i/1000, i), Kind: KindSession,
			Owner: fmt.Sprintf("node-%d", i%3), Revision: uint64(1<<40 + i), Payload: payload}
	}
	return recs
}

// BenchmarkSnapshotPageEncode: a peer's encoding of one page (ns/op is per page).
func BenchmarkSnapshotPageEncode(b *testing.B) {
	recs := benchPage()
	b.ReportAllocs()
	for b.Loop() {
		encodeSnapshotPage(recs, 7, false, make([]byte, 32))
	}
}

// BenchmarkSnapshotPageDecode: a loader's decoding and checking of one page (ns/op is per page).
func BenchmarkSnapshotPageDecode(b *testing.B) {
	page := encodeSnapshotPage(benchPage(), 7, false, make([]byte, 32))
	b.SetBytes(int64(len(page)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := decodeSnapResp(page); err != nil {
			b.Fatal(err)
		}
	}
}
