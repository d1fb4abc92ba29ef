package distro

import (
	"bytes"
	"testing"
	"time"
	"unsafe"
)

// TestEntryPacked: an entry gives back the record it was installed with, field for field: a
// nil payload stays nil and an empty one empty (they encode differently), the owner's ID is
// one string for every entry of the owner, forgotten with the last of them, and the install
// time is kept exactly. And it stays 64 bytes (issue 30.2: one per record held).
func TestEntryPacked(t *testing.T) {
	if n := unsafe.Sizeof(entry{}); n > 64 {
		t.Fatalf("entry is %d bytes, want ≤ 64", n)
	}
	tab := newTable(4)
	recs := []Record{
		{Key: "a", Kind: KindSession, Owner: "n1", Revision: 3, Payload: []byte("payload of a")},
		{Key: "b", Kind: KindBeat, Owner: "n1", Revision: 1, Payload: []byte{}},
		{Key: "c", Kind: KindSession, Owner: "n2", Revision: 7, Deleted: true},
		{Key: "d", Kind: KindBeat, Owner: "n2", Revision: 1<<64 - 1, Payload: bytes.Repeat([]byte{0xff}, MaxPayloadLen)},
	}
	for i, rec := range recs {
		at := t0.Add(time.Duration(i)*time.Hour + time.Nanosecond)
		tab.install(rec, at)
		e := tab.get(rec.Key)
		got := e.record()
		if got.Key != rec.Key || got.Owner != rec.Owner || got.Revision != rec.Revision || got.Kind != rec.Kind ||
			got.Deleted != rec.Deleted || !bytes.Equal(got.Payload, rec.Payload) || (got.Payload == nil) != (rec.Payload == nil) {
			t.Fatalf("installed %v (payload nil %v, %d bytes), got %v (payload nil %v, %d bytes)",
				rec, rec.Payload == nil, len(rec.Payload), got, got.Payload == nil, len(got.Payload))
		}
		if e.sum != payloadSum(rec.Payload) {
			t.Fatalf("%s: sum %x, want %x", rec.Key, e.sum, payloadSum(rec.Payload))
		}
		if ra := tab.recvAt(e); !ra.Equal(at) {
			t.Fatalf("%s: installed at %v, recvAt %v", rec.Key, at, ra)
		}
	}
	if a, b := tab.get("a").owner, tab.get("b").owner; a != b || a.refs != 2 || len(tab.names) != 2 {
		t.Fatalf("owner n1: %p and %p, %d refs, %d names", a, b, a.refs, len(tab.names))
	}
	// A new version of a key names its owner once; a version of another owner moves the count.
	tab.install(Record{Key: "a", Kind: KindSession, Owner: "n1", Revision: 4, Payload: []byte("x")}, t0)
	tab.install(Record{Key: "b", Kind: KindBeat, Owner: "n2", Revision: 2, Payload: []byte("y")}, t0)
	if n1, n2 := tab.names["n1"], tab.names["n2"]; n1 == nil || n1.refs != 1 || n2 == nil || n2.refs != 3 {
		t.Fatalf("names after the new versions: %v", tab.names)
	}
	tab.remove("a")
	if _, ok := tab.names["n1"]; ok || len(tab.names) != 1 {
		t.Fatalf("n1 is still named after its last entry left: %v", tab.names)
	}
	// An orphan marker keeps its owner and takes the time it was made. The tombstone for the
	// Store carries the payload of the record it removes (Store.Apply).
	e := tab.get("b")
	rec := tab.orphan(e, t0.Add(5*time.Hour))
	if rec.Owner != "n2" || !rec.Deleted || string(rec.Payload) != "y" || !tab.recvAt(e).Equal(t0.Add(5*time.Hour)) {
		t.Fatalf("orphan: %v, recvAt %v", rec, tab.recvAt(e))
	}
	if n := tab.expire(t0.Add(100 * time.Hour)); n != 2 || len(tab.names) != 1 || tab.names["n2"].refs != 1 {
		t.Fatalf("expire removed %d; names %v", n, tab.names)
	}
}
