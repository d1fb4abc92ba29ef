package distro

import (
	"errors"
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
		for _, r := range recs {
			if err := r.validate(); err != nil {
				t.Fatalf("accepted an invalid record: %v", err)
			}
		}
	})
}

func FuzzDecodeVerify(f *testing.F) {
	f.Add(mustMarshal(f, verifyReq{Digest: make([]byte, 64)}), mustMarshal(f, verifyResp{Buckets: []uint32{1, 7}, Versions: []version{{Key: "k", Rev: 2}}}))
	f.Add([]byte{0x91, 0xc4, 0x01, 0x00}, []byte{0x92, 0x91, 0xce, 0xff, 0xff, 0xff, 0xff, 0x90})
	f.Fuzz(func(t *testing.T, req, resp []byte) {
		if sums, err := decodeVerifyReq(req, 8); err == nil && len(sums) != 8 {
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
