package distro

import (
	"bytes"
	"encoding/binary"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/muster-io/muster/model"
)

func seedRecords() []wireRecord {
	return []wireRecord{
		toWire(Record{Key: "s1", Kind: KindSession, Owner: "a", Revision: 3, Payload: []byte("p")}),
		toWire(Record{Key: "10.0.0.1:80", Kind: KindBeat, Owner: "b", Revision: 9, Deleted: true}),
	}
}

func mustMarshal(f *testing.F, v any) []byte {
	b, err := model.Marshal(v)
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// Every decoder rejects hostile input with an error wrapping ErrInvalidRecord, never a panic,
// and whatever it accepts is valid.
func FuzzDecodeSync(f *testing.F) {
	f.Add(mustMarshal(f, syncMsg{Records: seedRecords()}))
	f.Add([]byte{0x91, 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := decodeSync(b)
		if err != nil {
			if !errors.Is(err, ErrInvalidRecord) {
				t.Fatalf("error %v does not wrap ErrInvalidRecord", err)
			}
			return
		}
		if len(recs) > MaxMessageRecords {
			t.Fatalf("%d records accepted, cap %d", len(recs), MaxMessageRecords)
		}
		for _, r := range recs {
			if err := r.validate(); err != nil {
				t.Fatalf("accepted an invalid record: %v", err)
			}
		}
	})
}

func FuzzDecodeVerify(f *testing.F) {
	f.Add(mustMarshal(f, verifyReq{Digest: make([]byte, 64), Skip: []uint32{2, 5}}), mustMarshal(f, verifyResp{}))
	f.Add(mustMarshal(f, verifyReq{Digest: make([]byte, 64)}), mustMarshal(f, verifyResp{Buckets: []uint32{1, 7}, Versions: []version{{Key: "k", Rev: 2}}}))
	f.Add([]byte{0x91, 0xc4, 0x01, 0x00}, []byte{0x92, 0x91, 0xce, 0xff, 0xff, 0xff, 0xff, 0x90})
	f.Fuzz(func(t *testing.T, req, resp []byte) {
		if sums, _, err := decodeVerifyReq(req, 8); err == nil && len(sums) != 8 {
			t.Fatalf("digest of %d buckets accepted for 8", len(sums))
		} else if err != nil && !errors.Is(err, ErrInvalidRecord) {
			t.Fatal(err)
		}
		m, err := decodeVerifyResp(resp, 8)
		if err != nil {
			if !errors.Is(err, ErrInvalidRecord) {
				t.Fatal(err)
			}
			return
		}
		for _, b := range m.Buckets {
			if b >= 8 {
				t.Fatalf("bucket %d accepted", b)
			}
		}
		if len(m.Buckets) > 8 || len(m.Versions) > maxWireVersions {
			t.Fatalf("%d buckets and %d versions accepted, caps 8 and %d", len(m.Buckets), len(m.Versions), maxWireVersions)
		}
	})
}

func FuzzDecodeRepair(f *testing.F) {
	f.Add(mustMarshal(f, repairMsg{Records: seedRecords(), Drop: []version{{Key: "x", Rev: 1}}}))
	f.Add([]byte{0x92, 0x90, 0x91, 0x93, 0xa0, 0x00, 0xc2})
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, drops, err := decodeRepair(b)
		if err != nil {
			if !errors.Is(err, ErrInvalidRecord) {
				t.Fatal(err)
			}
			return
		}
		for _, r := range recs {
			if r.validate() != nil {
				t.Fatal("invalid record accepted")
			}
		}
		if len(recs) > MaxMessageRecords || len(drops) > maxWireVersions {
			t.Fatalf("%d records and %d drops accepted, caps %d and %d", len(recs), len(drops), MaxMessageRecords, maxWireVersions)
		}
		if validVersions(drops) != nil {
			t.Fatal("invalid drop accepted")
		}
	})
}

func FuzzDecodeSnapshot(f *testing.F) {
	f.Add(mustMarshal(f, snapResp{Records: seedRecords(), Next: 3}), mustMarshal(f, snapReq{From: 2, Max: 10}))
	f.Add([]byte{0x93, 0x90, 0x00, 0xc3}, []byte{0x92, 0x00})
	f.Fuzz(func(t *testing.T, resp, req []byte) {
		if _, err := decodeSnapReq(req); err != nil && !errors.Is(err, ErrInvalidRecord) {
			t.Fatal(err)
		}
		recs, _, err := decodeSnapResp(resp)
		if err != nil {
			if !errors.Is(err, ErrInvalidRecord) {
				t.Fatal(err)
			}
			return
		}
		if len(recs) > maxSnapshotRecords {
			t.Fatalf("%d records accepted, cap %d", len(recs), maxSnapshotRecords)
		}
		for _, r := range recs {
			if r.validate() != nil {
				t.Fatal("invalid record accepted")
			}
		}
	})
}

func TestWireRoundTrip(t *testing.T) {
	in := []Record{
		{Key: "s1", Kind: KindSession, Owner: "a", Revision: 3, Payload: []byte("p")},
		{Key: "10.0.0.1:80", Kind: KindBeat, Owner: "b", Revision: 9, Deleted: true},
	}
	b, err := model.Marshal(syncMsg{Records: wires(in)})
	if err != nil {
		t.Fatal(err)
	}
	out, err := decodeSync(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range in {
		if out[i].String() != in[i].String() || string(out[i].Payload) != string(in[i].Payload) {
			t.Fatalf("round trip: %v → %v", in[i], out[i])
		}
	}
	bad := []Record{
		{Key: "", Kind: KindSession, Owner: "a", Revision: 1},
		{Key: "k", Kind: 7, Owner: "a", Revision: 1},
		{Key: "k", Kind: KindBeat, Owner: "", Revision: 1},
		{Key: "k", Kind: KindBeat, Owner: "a", Revision: 0},
		{Key: "k", Kind: KindBeat, Owner: "a", Revision: 1, Deleted: true, Payload: []byte("x")},
	}
	for _, r := range bad {
		b, _ := model.Marshal(syncMsg{Records: wires([]Record{r})})
		if _, err := decodeSync(b); !errors.Is(err, ErrInvalidRecord) {
			t.Errorf("decodeSync accepted %+v: %v", r, err)
		}
	}
}

// hostileList encodes a one-field message {field: [n × elem]} with an array32 header, as an
// attacker would: n declared elements of a few bytes each.
func hostileList(field string, n int, elem []byte) []byte {
	b := []byte{0x81, 0xa0 | byte(len(field))}
	b = append(b, field...)
	b = append(b, 0xdd, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(b[len(b)-4:], uint32(n))
	for i := 0; i < n; i++ {
		b = append(b, elem...)
	}
	return b
}

// hostileRecord is a record map of 6 fields with empty keys and nil values (13 bytes).
var hostileRecord = []byte{0x86, 0xa0, 0xc0, 0xa0, 0xc0, 0xa0, 0xc0, 0xa0, 0xc0, 0xa0, 0xc0, 0xa0, 0xc0}

// Issue 12.6: every list of every message has an element cap and refuses nil and hollow
// elements, with an error naming the list and the cap, before it allocates the list.
func TestWireElementCaps(t *testing.T) {
	for _, tc := range []struct {
		name   string
		decode func([]byte) error
		body   []byte
		want   string
	}{
		{"sync records over the cap", func(b []byte) error { _, err := decodeSync(b); return err },
			hostileList("Records", MaxMessageRecords+1, hostileRecord), "4097 records in one message, at most 4096"},
		{"sync nil record", func(b []byte) error { _, err := decodeSync(b); return err },
			hostileList("Records", 3, []byte{0xc0}), "record 0 is nil"},
		{"sync hollow record", func(b []byte) error { _, err := decodeSync(b); return err },
			hostileList("Records", 3, []byte{0x80}), "record 0 has 0 fields, want at least 4"},
		{"repair records over the cap", func(b []byte) error { _, _, err := decodeRepair(b); return err },
			hostileList("Records", MaxMessageRecords+1, hostileRecord), "records in one message, at most 4096"},
		{"repair drops over the cap", func(b []byte) error { _, _, err := decodeRepair(b); return err },
			hostileList("Drop", maxWireVersions+1, []byte{0x84, 0xa0, 0xc0, 0xa0, 0xc0, 0xa0, 0xc0, 0xa0, 0xc0}), "versions in one message, at most 16384"},
		{"repair nil drop", func(b []byte) error { _, _, err := decodeRepair(b); return err },
			hostileList("Drop", 2, []byte{0xc0}), "version 0 is nil"},
		{"snapshot records over the cap", func(b []byte) error { _, _, err := decodeSnapResp(b); return err },
			hostileList("Records", maxSnapshotRecords+1, hostileRecord), "records in one message, at most 65536"},
		{"verify versions over the cap", func(b []byte) error { _, err := decodeVerifyResp(b, 64); return err },
			hostileList("Versions", maxWireVersions+1, []byte{0x84, 0xa0, 0xc0, 0xa0, 0xc0, 0xa0, 0xc0, 0xa0, 0xc0}), "versions in one message, at most 16384"},
		{"verify buckets over the receiver's Buckets", func(b []byte) error { _, err := decodeVerifyResp(b, 64); return err },
			hostileList("Buckets", 65, []byte{0x01}), "65 buckets in one message, at most 64"},
		{"verify buckets over the cap", func(b []byte) error { _, err := decodeVerifyResp(b, 64); return err },
			hostileList("Buckets", maxWireBuckets+1, []byte{0x01}), "buckets in one message, at most 65536"},
		{"verify nil bucket", func(b []byte) error { _, err := decodeVerifyResp(b, 64); return err },
			hostileList("Buckets", 2, []byte{0xc0}), "bucket 0 is nil"},
	} {
		err := tc.decode(tc.body)
		if !errors.Is(err, ErrInvalidRecord) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an ErrInvalidRecord saying %q", tc.name, err, tc.want)
		}
	}
	// At the caps, well-formed messages pass (the senders' limits fit the receivers').
	full := make([]Record, MaxMessageRecords)
	for i := range full {
		full[i] = Record{Key: "k", Kind: KindSession, Owner: "a", Revision: 1}
	}
	b, _ := model.Marshal(syncMsg{Records: wires(full)})
	if recs, err := decodeSync(b); err != nil || len(recs) != MaxMessageRecords {
		t.Fatalf("a sync of MaxMessageRecords records: %d, %v", len(recs), err)
	}
}

// minimalRecord is the smallest valid record (4 fields: Key "k", Kind 1, Owner "a", Revision 1).
var minimalRecord = []byte{0x84, 0xa3, 'K', 'e', 'y', 0xa1, 'k', 0xa4, 'K', 'i', 'n', 'd', 0x01,
	0xa5, 'O', 'w', 'n', 'e', 'r', 0xa1, 'a', 0xa8, 'R', 'e', 'v', 'i', 's', 'i', 'o', 'n', 0x01}

// repeatedPayloadRecord encodes a one-record message whose record has a Key of keyLen bytes and
// then payloads one-byte Payload fields (a map32 of 4+payloads fields), as an attacker would.
func repeatedPayloadRecord(keyLen, payloads int) []byte {
	rec := []byte{0xdf, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(rec[1:], uint32(4+payloads))
	rec = append(rec, 0xa3, 'K', 'e', 'y', 0xdb, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(rec[len(rec)-4:], uint32(keyLen))
	rec = append(rec, bytes.Repeat([]byte{'k'}, keyLen)...)
	rec = append(rec, 0xa4, 'K', 'i', 'n', 'd', 0x01,
		0xa5, 'O', 'w', 'n', 'e', 'r', 0xa1, 'a', 0xa8, 'R', 'e', 'v', 'i', 's', 'i', 'o', 'n', 0x01)
	for range payloads {
		rec = append(rec, 0xa7, 'P', 'a', 'y', 'l', 'o', 'a', 'd', 0xc4, 1, 'p')
	}
	return hostileList("Records", 1, rec)
}

// Decoding allocates at most 16× its input, whatever the input declares: a hostile list is
// refused at its header (over the cap) or at its first bad element, a list of the smallest
// valid elements grows with them, and a field given again costs its own bytes, not the
// record's (a Payload given again does not copy the key again: 104× and 1,684× the input
// before).
func TestWireHostileAllocation(t *testing.T) {
	for _, tc := range []struct {
		name  string
		body  []byte
		valid bool
	}{
		{"1 MiB of nil records", hostileList("Records", 1<<20, []byte{0xc0}), false},
		{"1 MiB of hollow records", hostileList("Records", 1<<20, []byte{0x80}), false},
		{"1 MiB of nil versions", hostileList("Drop", 1<<20, []byte{0xc0}), false},
		{"4096 hollow records", hostileList("Records", MaxMessageRecords, []byte{0x80}), false},
		{"4096 six-field records with empty names", hostileList("Records", MaxMessageRecords, hostileRecord), false},
		{"4096 smallest valid records", hostileList("Records", MaxMessageRecords, minimalRecord), true},
		{"16384 smallest valid drops", hostileList("Drop", maxWireVersions, []byte{0x82, 0xa3, 'K', 'e', 'y', 0xa1, 'k', 0xa3, 'R', 'e', 'v', 0x01}), true},
		{"a 1 KiB key and 10000 one-byte payloads", repeatedPayloadRecord(MaxKeyLen, 10000), true},
		{"a 64 KiB key and 2000 one-byte payloads", repeatedPayloadRecord(64<<10, 2000), false},
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, _, err := decodeRepair(tc.body)
		runtime.ReadMemStats(&after)
		if (err == nil) != tc.valid {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := after.TotalAlloc - before.TotalAlloc
		if got > 16*uint64(len(tc.body))+64<<10 {
			t.Errorf("%s: %d bytes of input allocated %d bytes (over 16×)", tc.name, len(tc.body), got)
		}
		t.Logf("%s: %d bytes of input, %d allocated", tc.name, len(tc.body), got)
	}
}
