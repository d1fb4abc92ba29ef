package distro

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/muster-io/muster/model"
)

// Tests that a record received from a peer takes one allocation for its key and its payload
// (joinKeyPayload): the key's bytes, then the payload's, in an allocation no other record's bytes
// share and that is no window on the message.

// checkJoined fails unless each record with a payload has its key and payload adjacent in one
// allocation of their own: not overlapping another record's, not within msg.
func checkJoined(t *testing.T, what string, recs []Record, msg []byte) {
	t.Helper()
	type span struct{ lo, hi uintptr }
	var spans []span
	in := func(p uintptr) bool {
		lo := uintptr(unsafe.Pointer(unsafe.SliceData(msg)))
		return p >= lo && p < lo+uintptr(len(msg))
	}
	for i, r := range recs {
		if len(r.Payload) == 0 {
			continue
		}
		k := uintptr(unsafe.Pointer(unsafe.StringData(r.Key)))
		p := uintptr(unsafe.Pointer(&r.Payload[0]))
		if k+uintptr(len(r.Key)) != p {
			t.Fatalf("%s: record %d (%s): key at %#x (%d bytes), payload at %#x: not one allocation", what, i, r.Key, k, len(r.Key), p)
		}
		if cap(r.Payload) != len(r.Payload) {
			t.Fatalf("%s: record %d: payload capacity %d beyond its %d bytes", what, i, cap(r.Payload), len(r.Payload))
		}
		if in(k) || in(p) {
			t.Fatalf("%s: record %d: a window on the message", what, i)
		}
		s := span{k, p + uintptr(len(r.Payload))}
		for j, o := range spans {
			if s.lo < o.hi && o.lo < s.hi {
				t.Fatalf("%s: records %d and %d share bytes", what, i, j)
			}
		}
		spans = append(spans, s)
	}
}

func joinedRecords(n int) []Record {
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = Record{Key: fmt.Sprintf("s/%040d", i), Kind: KindSession, Owner: "node-a", Revision: uint64(i + 1),
			Payload: bytes.Repeat([]byte{byte(i)}, 100+i)}
	}
	recs = append(recs,
		Record{Key: "s/nil", Kind: KindSession, Owner: "node-a", Revision: 1},                      // live, nil payload
		Record{Key: "s/empty", Kind: KindSession, Owner: "node-a", Revision: 1, Payload: []byte{}}, // live, empty payload
		Record{Key: "s/gone", Kind: KindSession, Owner: "node-a", Revision: 2, Deleted: true},      // tombstone
	)
	return recs
}

// sameRecords compares decoded records with what was sent: payloads by content and nil-ness.
func sameRecords(t *testing.T, what string, got, want []Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d", what, len(got), len(want))
	}
	for i := range got {
		a, b := got[i], want[i]
		if a.String() != b.String() || !bytes.Equal(a.Payload, b.Payload) || (a.Payload == nil) != (b.Payload == nil) {
			t.Fatalf("%s: record %d: %v (payload %q, nil %v), want %v (payload %q, nil %v)",
				what, i, a, a.Payload, a.Payload == nil, b, b.Payload, b.Payload == nil)
		}
	}
}

func TestReceivedRecordOneAllocation(t *testing.T) {
	want := joinedRecords(20)
	syncBody, err := model.Marshal(syncMsg{Records: wires(want)})
	if err != nil {
		t.Fatal(err)
	}
	repairBody, err := model.Marshal(repairMsg{Records: wires(want)})
	if err != nil {
		t.Fatal(err)
	}
	page := encodeSnapshotPage(want, 7, true, nil)
	for _, tc := range []struct {
		name   string
		body   []byte
		decode func([]byte) ([]Record, error)
	}{
		{"sync", syncBody, decodeSync},
		{"repair", repairBody, func(b []byte) ([]Record, error) { recs, _, err := decodeRepair(b); return recs, err }},
		{"snapshot page", page, func(b []byte) ([]Record, error) { recs, _, err := decodeSnapResp(b); return recs, err }},
		{"snapshot page, msgpack's path", page, func(b []byte) ([]Record, error) { recs, _, err := decodeSnapRespReflect(b); return recs, err }},
	} {
		got, err := tc.decode(tc.body)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		sameRecords(t, tc.name, got, want)
		checkJoined(t, tc.name, got, tc.body)
	}
}

// Fields in another order than the encoder's, or given twice, decode as before (the last one
// wins), still joined.
func TestReceivedRecordFieldOrder(t *testing.T) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	field := func(name string, v any) {
		if err := enc.EncodeString(name); err != nil {
			t.Fatal(err)
		}
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
	}
	enc.EncodeMapLen(1)
	enc.EncodeString("Records")
	enc.EncodeArrayLen(4)
	// Payload first, then Key.
	enc.EncodeMapLen(5)
	field("Payload", []byte("payload-1"))
	field("Key", "k1")
	field("Kind", 1)
	field("Owner", "a")
	field("Revision", 1)
	// Key, Payload, then Key again: the second key wins.
	enc.EncodeMapLen(6)
	field("Key", "first-key")
	field("Payload", []byte("payload-2"))
	field("Kind", 1)
	field("Owner", "a")
	field("Revision", 1)
	field("Key", "k2")
	// Payload given twice around the key: the second wins.
	enc.EncodeMapLen(6)
	field("Payload", []byte("dropped"))
	field("Key", "k3")
	field("Payload", []byte("payload-3"))
	field("Kind", 1)
	field("Owner", "a")
	field("Revision", 1)
	// Key, then Payload twice (the second is not allocated with the key: see recordDecoder).
	enc.EncodeMapLen(6)
	field("Key", "k4")
	field("Payload", []byte("dropped"))
	field("Payload", []byte("payload-4"))
	field("Kind", 1)
	field("Owner", "a")
	field("Revision", 1)
	body := buf.Bytes()
	want := []Record{
		{Key: "k1", Kind: KindSession, Owner: "a", Revision: 1, Payload: []byte("payload-1")},
		{Key: "k2", Kind: KindSession, Owner: "a", Revision: 1, Payload: []byte("payload-2")},
		{Key: "k3", Kind: KindSession, Owner: "a", Revision: 1, Payload: []byte("payload-3")},
		{Key: "k4", Kind: KindSession, Owner: "a", Revision: 1, Payload: []byte("payload-4")},
	}
	got, err := decodeSync(body)
	if err != nil {
		t.Fatal(err)
	}
	sameRecords(t, "sync", got, want)
	checkJoined(t, "sync", got, body)
	// The same bytes are a snapshot page (of records only), for the hand decoder.
	got, _, err = decodeSnapResp(body)
	if err != nil {
		t.Fatal(err)
	}
	sameRecords(t, "snapshot page", got, want)
	checkJoined(t, "snapshot page", got, body)
}

// Decoding takes one allocation per record for its key and payload: a page of n records costs
// about n allocations (owner IDs are shared), a sync about 2n (each record's owner is a string
// of its own until offerFromLocked), not one more per record.
func TestReceivedRecordAllocations(t *testing.T) {
	const n = 100
	recs := joinedRecords(n)[:n]
	page := encodeSnapshotPage(recs, 1, true, nil)
	syncBody, err := model.Marshal(syncMsg{Records: wires(recs)})
	if err != nil {
		t.Fatal(err)
	}
	o := &owners{}
	pageAllocs := testing.AllocsPerRun(20, func() {
		if _, _, err := decodePage(page, o); err != nil {
			t.Fatal(err)
		}
	})
	syncAllocs := testing.AllocsPerRun(20, func() {
		if _, err := decodeSync(syncBody); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("%d records: page %.0f allocations, sync %.0f", n, pageAllocs, syncAllocs)
	if pageAllocs > n+10 {
		t.Errorf("a page of %d records: %.0f allocations, want about %d (one per record)", n, pageAllocs, n)
	}
	if syncAllocs > 2*n+20 {
		t.Errorf("a sync of %d records: %.0f allocations, want about %d (key and payload one, owner one)", n, syncAllocs, 2*n)
	}
	// A sync of one record (a Put's): its payload costs no allocation beyond its key's.
	one := func(payload []byte) float64 {
		body, err := model.Marshal(syncMsg{Records: wires([]Record{{Key: "s/" + strings.Repeat("k", 40), Kind: KindSession, Owner: "node-a", Revision: 1, Payload: payload}})})
		if err != nil {
			t.Fatal(err)
		}
		return testing.AllocsPerRun(20, func() {
			if _, err := decodeSync(body); err != nil {
				t.Fatal(err)
			}
		})
	}
	// AllocsPerRun counts the whole process's allocations (another test's
	// goroutines, the race detector's): the least of three runs each, and
	// noise can only make the one without a payload look dearer.
	least := func(payload []byte) float64 { return min(one(payload), one(payload), one(payload)) }
	if with, without := least(make([]byte, 179)), least(nil); with > without {
		t.Errorf("a one-record sync: %.0f allocations with a payload, %.0f without", with, without)
	}
}

// A tombstone this node makes of a received record's key, and keeps its TTL long, holds a
// copy of the key, not the received allocation (which holds that record's payload too): the
// load's tombstones of this node's previous sessions, and a deletion taken over from another
// owner (deleteDeferredLocked).
func TestOwnTombstoneKeepsNoReceivedPayload(t *testing.T) {
	c := newCluster(t, nil)
	n := c.add("b")
	r := n.r
	now := c.clk.Now()
	shares := func(key string, joined []byte) bool {
		e := r.tab.get(key)
		p := unsafe.Pointer(unsafe.StringData(e.key))
		return p == unsafe.Pointer(unsafe.SliceData(joined))
	}

	// The load: a session of this node's previous incarnation, loaded from a peer.
	key, payload := joinKeyPayload([]byte("s/previous"), []byte("payload"))
	joined := unsafe.Slice(unsafe.StringData(key), len(key)+len(payload))
	r.mu.Lock()
	r.offerLoadedLocked(Record{Key: key, Kind: KindSession, Owner: "b", Revision: 1, Payload: payload}, keyHash(key), now)
	r.mu.Unlock()
	r.finishLoad(1, false, time.Second)
	r.mu.Lock()
	if e := r.tab.get("s/previous"); e == nil || !e.deleted || e.owner.id != "b" {
		r.mu.Unlock()
		t.Fatal("the previous incarnation's session is not tombstoned")
	}
	if shares("s/previous", joined) {
		r.mu.Unlock()
		t.Fatal("the load's tombstone keeps the loaded record's allocation")
	}

	// A deletion taken over: the key noted is a refused record's (received, joined).
	r.offerLocked(Record{Key: "b/k", Kind: KindBeat, Owner: "a", Revision: 5, Deleted: true}, now)
	key, _ = joinKeyPayload([]byte("b/k"), []byte("refused"))
	joined = unsafe.Slice(unsafe.StringData(key), len(key)+len("refused"))
	r.deleteLater[key] = struct{}{}
	r.deleteDeferredLocked()
	e := r.tab.get("b/k")
	ok := e != nil && e.deleted && e.owner.id == "b"
	sharesKey := ok && shares("b/k", joined)
	r.mu.Unlock()
	if !ok {
		t.Fatal("the deletion was not taken over")
	}
	if sharesKey {
		t.Fatal("the taken-over tombstone keeps the refused record's allocation")
	}
}
