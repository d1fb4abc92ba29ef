package distro

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"unsafe"
)

// decodeSnapRespReflect is the reference page decoder: msgpack's Decoder through model.Unmarshal
// into a snapResp (what a node decoded pages with before snapdec.go), then the records checked.
func decodeSnapRespReflect(b []byte) ([]Record, snapResp, error) {
	var m snapResp
	if err := decode(b, &m); err != nil {
		return nil, m, err
	}
	recs, err := records(m.Records)
	return recs, m, err
}

// samePage compares two decoded pages: records (payloads by content and by nil-ness), Next,
// Done and Sums.
func samePage(t *testing.T, recs []Record, m snapResp, wantRecs []Record, want snapResp) {
	t.Helper()
	if len(recs) != len(wantRecs) || m.Next != want.Next || m.Done != want.Done ||
		!bytes.Equal(m.Sums, want.Sums) || (m.Sums == nil) != (want.Sums == nil) {
		t.Fatalf("decoded %d records (next %d, done %v, sums %x), want %d (next %d, done %v, sums %x)",
			len(recs), m.Next, m.Done, m.Sums, len(wantRecs), want.Next, want.Done, want.Sums)
	}
	for i := range recs {
		a, b := recs[i], wantRecs[i]
		if a.Key != b.Key || a.Owner != b.Owner || a.Kind != b.Kind || a.Revision != b.Revision || a.Deleted != b.Deleted ||
			!bytes.Equal(a.Payload, b.Payload) || (a.Payload == nil) != (b.Payload == nil) {
			t.Fatalf("record %d: %v (payload %x), want %v (payload %x)", i, a, a.Payload, b, b.Payload)
		}
	}
}

// FuzzSnapshotPageDecoding: the hand decoder accepts nothing that msgpack's reflective path
// refused, decodes what both accept alike, and accepts every page the encoder writes of valid
// records. (It refuses more: integers beyond their field's type, which msgpack truncated, and
// record lists declaring more records than their bytes can hold.)
func FuzzSnapshotPageDecoding(f *testing.F) {
	valid := []Record{
		{Key: "s/1/abc", Kind: KindSession, Owner: "node-1", Revision: 3, Payload: []byte("p")},
		{Key: "10.0.0.1:80", Kind: KindBeat, Owner: "node-2", Revision: 9, Deleted: true},
		{Key: "s/1/abd", Kind: KindSession, Owner: "node-1", Revision: 1 << 40, Payload: []byte{}},
	}
	f.Add(encodeSnapshotPage(valid, 3, false, make([]byte, 24)))
	f.Add(encodeSnapshotPage(nil, 1024, true, nil))
	f.Add(mustMarshal(f, snapResp{Records: seedRecords(), Next: 3}))
	f.Add(hostileList("Records", 2, minimalRecord))
	f.Add(hostileList("Records", 3, hostileRecord))
	f.Add([]byte{0x84, 0xa4, 'N', 'e', 'x', 't', 0xd0, 0xff, 0xa4, 'D', 'o', 'n', 'e', 0xc0, 0xa1, 'x', 0x92, 0x91, 0xc7, 0x01, 0x05, 0x00, 0xc0, 0x01, 0xc0})
	f.Add([]byte{0x81, 0xa7, 'R', 'e', 'c', 'o', 'r', 'd', 's', 0xc0})
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, m, err := decodeSnapResp(b)
		refRecs, ref, refErr := decodeSnapRespReflect(b)
		if err != nil {
			if !errors.Is(err, ErrInvalidRecord) {
				t.Fatalf("error %v does not wrap ErrInvalidRecord", err)
			}
			return
		}
		if refErr != nil {
			t.Fatalf("accepted a page the reflective decoder refuses (%v)", refErr)
		}
		samePage(t, recs, m, refRecs, ref)
		if len(recs) > maxSnapshotRecords {
			t.Fatalf("%d records accepted, cap %d", len(recs), maxSnapshotRecords)
		}
		for _, r := range recs {
			if r.validate() != nil {
				t.Fatal("invalid record accepted")
			}
		}
		// What it decoded, encoded again, decodes to the same.
		again, m2, err := decodeSnapResp(encodeSnapshotPage(recs, m.Next, m.Done, m.Sums))
		if err != nil {
			t.Fatalf("the page re-encoded is refused: %v", err)
		}
		samePage(t, again, m2, recs, m)
	})
}

// The decoder's refusals name the field, and are refusals of what no encoder writes.
func TestSnapshotPageDecoderRefusals(t *testing.T) {
	page := func(field string, value ...byte) []byte {
		return append(append([]byte{0x81, 0xa0 | byte(len(field))}, field...), value...)
	}
	record := func(fields ...[]byte) []byte {
		b := append([]byte{}, minimalRecord...)
		b[0] += byte(len(fields))
		for _, f := range fields {
			b = append(b, f...)
		}
		return hostileList("Records", 1, b)
	}
	long := func(code byte, n int) []byte { // a str16 or bin16 of n bytes
		return append([]byte{code, byte(n >> 8), byte(n)}, make([]byte, n)...)
	}
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"not a map", []byte{0x90}, "snapshot page: not a map of fields"},
		{"trailing bytes", append(page("Done", 0xc3), 0x00), "1 bytes after its end"},
		{"truncated", page("Next", 0xce, 0x01), "Next: truncated"},
		{"next beyond uint32", page("Next", 0xcf, 0, 0, 0, 1, 0, 0, 0, 0), "Next: 4294967296 is more than 4294967295"},
		{"negative next", page("Next", 0xff), "Next: negative"},
		{"done not a bool", page("Done", 0x01), "Done: not a bool"},
		{"records not a list", page("Records", 0x01), "Records: not a list"},
		{"records the bytes cannot hold", bytes.TrimSuffix(hostileList("Records", 1000, minimalRecord), []byte{0x01}), "1000 records in 30999 bytes"},
		{"kind beyond uint8", record([]byte{0xa4, 'K', 'i', 'n', 'd', 0xcd, 0x01, 0x01}), "Kind: 257 is more than 255"},
		{"key over MaxKeyLen", record(append([]byte{0xa3, 'K', 'e', 'y'}, long(0xda, MaxKeyLen+1)...)), "Key: 1025 bytes, at most 1024"},
		{"owner over MaxOwnerLen", record(append([]byte{0xa5, 'O', 'w', 'n', 'e', 'r'}, long(0xda, MaxOwnerLen+1)...)), "Owner: 257 bytes, at most 256"},
		{"payload truncated", record([]byte{0xa7, 'P', 'a', 'y', 'l', 'o', 'a', 'd', 0xc4, 0x09, 0x01}), "Payload: truncated"},
		{"revision not an integer", record([]byte{0xa8, 'R', 'e', 'v', 'i', 's', 'i', 'o', 'n', 0xa1, '1'}), "Revision: not an integer"},
		{"nested too deep", page("x", append(bytes.Repeat([]byte{0x91}, maxSkipDepth+2), 0xc0)...), "nested too deep"},
		{"invalid code", page("x", 0xc1), "invalid code 0xc1"},
		{"nil record", hostileList("Records", 1, append([]byte{0xc0}, make([]byte, 30)...)), "record 0 is nil"},
		{"hollow record", hostileList("Records", 2, append([]byte{0x83}, bytes.Repeat([]byte{0xa0, 0xc0}, 28)...)), "record 0 has 3 fields, want at least 4"},
		{"invalid record", hostileList("Records", 1, append([]byte{0x84}, bytes.Repeat([]byte{0xa0, 0xc0}, 15)...)), "record 0: distro: invalid record: key must be"},
	} {
		_, _, err := decodeSnapResp(tc.in)
		if !errors.Is(err, ErrInvalidRecord) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an ErrInvalidRecord saying %q", tc.name, err, tc.want)
		}
	}
}

// minPageRecordLen is the length of the smallest valid record, which the decoder accepts at
// that bound.
func TestMinPageRecordLen(t *testing.T) {
	if len(minimalRecord) != minPageRecordLen {
		t.Fatalf("the smallest valid record takes %d bytes, minPageRecordLen is %d", len(minimalRecord), minPageRecordLen)
	}
	recs, _, err := decodeSnapResp(hostileList("Records", 100, minimalRecord))
	if err != nil || len(recs) != 100 {
		t.Fatalf("100 smallest records: %d, %v", len(recs), err)
	}
}

// A loader's records of one owner share one string for its ID.
func TestSnapshotPageOwnersShared(t *testing.T) {
	var recs []Record
	for i := range 6 {
		recs = append(recs, Record{Key: string(rune('a' + i)), Kind: KindSession, Owner: []string{"node-1", "node-2"}[i%2], Revision: 1, Payload: []byte("p")})
	}
	var o owners
	got, _, err := decodePage(encodeSnapshotPage(recs, 1, true, nil), &o)
	if err != nil {
		t.Fatal(err)
	}
	got2, _, err := decodePage(encodeSnapshotPage(recs, 1, true, nil), &o)
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i].Owner != recs[i].Owner || got2[i].Owner != recs[i].Owner {
			t.Fatalf("record %d: owner %q and %q, want %q", i, got[i].Owner, got2[i].Owner, recs[i].Owner)
		}
		if a, b := got[i].Owner, got2[i%2].Owner; unsafe.StringData(a) != unsafe.StringData(b) {
			t.Fatalf("record %d: the owner %q is a copy, not the shared string", i, a)
		}
	}
	if len(o.ids) != 2 {
		t.Fatalf("%d owner IDs kept, want 2", len(o.ids))
	}
	// Past maxOwnerIDs, IDs are still decoded, each its own string.
	for i := range maxOwnerIDs + 5 {
		o.id([]byte{byte(i), 'x'})
	}
	if len(o.ids) != maxOwnerIDs {
		t.Fatalf("%d owner IDs kept, cap %d", len(o.ids), maxOwnerIDs)
	}
	if s := o.id([]byte("beyond")); s != "beyond" {
		t.Fatalf("an ID beyond the cap decoded as %q", s)
	}
}
