package distro

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/muster-io/muster/model"
)

// reflectPage is what model.Marshal (msgpack's reflective encoder) writes for a page of recs.
func reflectPage(t testing.TB, recs []Record, next uint32, done bool, sums []byte) []byte {
	m := snapResp{Next: next, Done: done, Sums: sums}
	if recs != nil {
		m.Records = wires(recs)
	}
	b, err := model.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSnapshotPageEncoding: the hand-written page encoder writes exactly the bytes of the
// reflective one, at every length boundary of msgpack's string, bin and array headers, and the
// page decodes back to its records.
func TestSnapshotPageEncoding(t *testing.T) {
	rec := func(key string, payload []byte) Record {
		return Record{Key: key, Kind: KindSession, Owner: "node-1", Revision: 1<<40 + 7, Payload: payload}
	}
	var many []Record
	for i := range 1<<16 + 1 { // array32
		many = append(many, Record{Key: "k", Kind: KindBeat, Owner: "o", Revision: uint64(i + 1), Deleted: true})
	}
	cases := map[string]struct {
		recs []Record
		sums []byte
	}{
		"empty":            {nil, nil},
		"empty with sums":  {nil, make([]byte, 8)},
		"one":              {[]Record{rec("a", []byte("p"))}, []byte{1, 2, 3, 4, 5, 6, 7, 8}},
		"tombstone":        {[]Record{{Key: "10.0.0.1:80", Kind: KindBeat, Owner: "b", Revision: 9, Deleted: true}}, nil},
		"empty payload":    {[]Record{rec("a", []byte{})}, nil},
		"str boundaries":   {[]Record{rec(strings.Repeat("k", 31), nil), rec(strings.Repeat("k", 32), nil), rec(strings.Repeat("k", 255), nil), rec(strings.Repeat("k", 256), nil), rec(strings.Repeat("k", 1<<16), nil)}, nil},
		"bin boundaries":   {[]Record{rec("a", make([]byte, 255)), rec("b", make([]byte, 256)), rec("c", make([]byte, 1<<16-1)), rec("d", make([]byte, 1<<16))}, make([]byte, 1<<16)},
		"fixarray limit":   {many[:15], nil},
		"array16":          {many[:16], nil},
		"array16 limit":    {many[:1<<16-1], nil},
		"array32":          {many, nil},
		"owner boundaries": {[]Record{{Key: "k", Kind: KindBeat, Owner: strings.Repeat("o", 32), Revision: 1}}, nil},
	}
	for name, c := range cases {
		for _, done := range []bool{false, true} {
			got := encodeSnapshotPage(c.recs, 77, done, c.sums)
			if want := reflectPage(t, c.recs, 77, done, c.sums); !bytes.Equal(got, want) {
				t.Fatalf("%s: the hand encoding differs from the reflective one (%d vs %d bytes)", name, len(got), len(want))
			}
			if cap(got) != len(got) {
				t.Errorf("%s: encoded %d bytes into a buffer of %d: the size computation is off", name, len(got), cap(got))
			}
		}
		if len(c.recs) > maxSnapshotRecords {
			continue // beyond what a loader accepts (TestWireElementCaps)
		}
		recs, m, err := decodeSnapResp(encodeSnapshotPage(c.recs, 77, true, c.sums))
		if err != nil {
			if strings.HasPrefix(name, "str") { // keys over MaxKeyLen are refused on decoding
				continue
			}
			t.Fatalf("%s: %v", name, err)
		}
		if len(recs) != len(c.recs) || m.Next != 77 || !m.Done || !bytes.Equal(m.Sums, c.sums) {
			t.Fatalf("%s: decoded %d records, next %d, done %v", name, len(recs), m.Next, m.Done)
		}
		for i := range recs {
			if recs[i].String() != c.recs[i].String() || !bytes.Equal(recs[i].Payload, c.recs[i].Payload) {
				t.Fatalf("%s: record %d: %v, want %v", name, i, recs[i], c.recs[i])
			}
		}
	}
}

// FuzzSnapshotPageEncoding: for any records the hand encoder's bytes are the reflective
// encoder's, and a page decodes to what was encoded or is refused as invalid.
func FuzzSnapshotPageEncoding(f *testing.F) {
	f.Add("s1", "a", []byte("p"), uint64(3), uint8(KindSession), false, uint16(1), uint32(3), false, []byte{})
	f.Add("10.0.0.1:80", "b", []byte(nil), uint64(9), uint8(KindBeat), true, uint16(20), uint32(1<<20), true, make([]byte, 8))
	f.Add("", "", make([]byte, 300), uint64(0), uint8(7), true, uint16(0), uint32(0), false, []byte(nil))
	f.Fuzz(func(t *testing.T, key, owner string, payload []byte, rev uint64, kind uint8, deleted bool, n uint16, next uint32, done bool, sums []byte) {
		var recs []Record
		for i := range int(n % 40) {
			recs = append(recs, Record{Key: key, Owner: owner, Revision: rev + uint64(i), Kind: Kind(kind), Deleted: deleted, Payload: payload})
		}
		got := encodeSnapshotPage(recs, next, done, sums)
		if want := reflectPage(t, recs, next, done, sums); !bytes.Equal(got, want) {
			t.Fatalf("the hand encoding differs from the reflective one:\n got %x\nwant %x", got, want)
		}
		back, m, err := decodeSnapResp(got)
		if err != nil {
			if !errors.Is(err, ErrInvalidRecord) {
				t.Fatal(err)
			}
			if len(recs) > 0 && recs[0].validate() == nil && recs[len(recs)-1].validate() == nil {
				t.Fatalf("a page of valid records refused: %v", err)
			}
			return
		}
		if len(back) != len(recs) || m.Next != next || m.Done != done || !bytes.Equal(m.Sums, sums) {
			t.Fatalf("decoded %d records (next %d, done %v), encoded %d (next %d, done %v)", len(back), m.Next, m.Done, len(recs), next, done)
		}
		for i := range back {
			if back[i].String() != recs[i].String() || !bytes.Equal(back[i].Payload, recs[i].Payload) {
				t.Fatalf("record %d: %v, want %v", i, back[i], recs[i])
			}
		}
	})
}

// The constant bytes appendRecord writes are the map header, the field names as appendStr
// writes them, and the codes of the fixed-width integers.
func TestRecordPrefixes(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{prefixKey, string(appendStr([]byte{msgpcode.FixedMapLow | 6}, "Key"))},
		{prefixKind, string(append(appendStr(nil, "Kind"), msgpcode.Uint8))},
		{prefixOwner, string(appendStr(nil, "Owner"))},
		{prefixRevision, string(append(appendStr(nil, "Revision"), msgpcode.Uint64))},
		{prefixDeleted, string(appendStr(nil, "Deleted"))},
		{prefixPayload, string(appendStr(nil, "Payload"))},
	} {
		if c.got != c.want {
			t.Errorf("prefix %q, want %q", c.got, c.want)
		}
	}
}
