package distro

import (
	"bytes"
	"runtime"
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

// An orphan marker keeps no window on the allocation of the version it removed (a received
// record's key and payload, joinKeyPayload), nor does its gc item: once the Store lets the
// removed version go, so does the table, whether the marker stays or is replaced (by the
// owner's same version, or by a tombstone). The gc item kept the key, and so the payload,
// until it expired (TombstoneTTL), and the marker until it expired or was replaced.
func TestOrphanKeepsNoPayload(t *testing.T) {
	for _, then := range []string{"marker stays", "same version again", "tombstone"} {
		t.Run(then, func(t *testing.T) {
			tab := newTable(4)
			freed := make(chan struct{}, 1)
			func() {
				k, p := joinKeyPayload([]byte("s/x/AAAA"), make([]byte, 4000))
				runtime.AddCleanup(unsafe.StringData(k), func(ch chan struct{}) { ch <- struct{}{} }, freed)
				tab.install(Record{Key: k, Owner: "a", Revision: 3, Kind: KindSession, Payload: p}, t0)
				removed := tab.orphan(tab.get(k), t0.Add(time.Second))
				if len(removed.Payload) != 4000 || !removed.Deleted {
					t.Fatalf("the Store is handed %v with %d bytes of payload, want the removed 4000", removed, len(removed.Payload))
				}
				var rec Record
				switch then {
				case "marker stays":
					return
				case "same version again":
					k2, p2 := joinKeyPayload([]byte("s/x/AAAA"), make([]byte, 4000))
					rec = Record{Key: k2, Owner: "a", Revision: 3, Kind: KindSession, Payload: p2}
				case "tombstone":
					k2, _ := joinKeyPayload([]byte("s/x/AAAA"), nil)
					rec = Record{Key: k2, Owner: "a", Revision: 4, Kind: KindSession, Deleted: true}
				}
				if !tab.accepts(rec) {
					t.Fatalf("%v refused over the orphan marker", rec)
				}
				tab.install(rec, t0.Add(2*time.Second))
			}()
			for range 5 {
				runtime.GC()
				select {
				case <-freed:
					runtime.KeepAlive(tab)
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
			t.Errorf("the orphaned version's key and payload are still reachable (gc queue: %d items)", len(tab.gcq))
			runtime.KeepAlive(tab)
		})
	}
}
