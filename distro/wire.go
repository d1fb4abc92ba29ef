package distro

import (
	"encoding/binary"
	"fmt"
	"slices"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/transport"
)

// Element caps per message. Each list decoder checks the declared count against its cap, and
// rejects nil elements, before it allocates anything: a hostile count costs one header. Senders
// stay within them (Config.MaxBatch <= MaxMessageRecords; snapshot pages and verify answers are
// cut at whole buckets below their caps).
const (
	// maxSnapshotRecords caps the records of one snapshot page: snapshotPage, or one bucket
	// alone when a single bucket holds more (a page never splits a bucket).
	maxSnapshotRecords = 1 << 16
	// maxWireVersions caps the versions of a verify answer and the drops of a repair message.
	maxWireVersions = maxVerifyVersions
	// maxWireBuckets caps the buckets of a verify answer (Config.Buckets is at most 1<<16; the
	// decoder then checks them against the receiver's own Buckets).
	maxWireBuckets = 1 << 16
)

// preallocElems is the capacity a list decoder starts with: lists grow as elements arrive, so a
// declared count the input does not back costs nothing (each element takes at least a few bytes
// of input and a few dozen of memory: a small multiple).
const preallocElems = 128

// grow extends s by one zero element, doubling its capacity when full (append grows large slices
// by a quarter, which costs a list decoded element by element several times its final size),
// up to n.
func grow[T any](s []T, n int) []T {
	if len(s) == cap(s) {
		ns := make([]T, len(s), min(max(2*cap(s), 1), n))
		copy(ns, s)
		s = ns
	}
	var zero T
	return append(s, zero)
}

// errTooMany reports a list longer than its cap.
func errTooMany(what string, n, limit int) error {
	return fmt.Errorf("%w: %d %s in one message, at most %d", ErrInvalidRecord, n, what, limit)
}

// decodeListLen reads a list header: -1 for nil (an empty list), else a length within limit.
func decodeListLen(d *msgpack.Decoder, what string, limit int) (int, error) {
	n, err := d.DecodeArrayLen()
	if err != nil {
		return 0, err
	}
	if n > limit {
		return 0, errTooMany(what, n, limit)
	}
	return n, nil
}

// element checks the header of list element i before it is decoded: not nil (no element type of
// distro's messages has a nil value), and a struct of at least fields fields (every field
// distro has ever sent), so that each element costs the input some bytes. Longer headers (map16,
// array16 and up) carry more fields than any message type has and are let through to decoding.
func element(d *msgpack.Decoder, what string, i, fields int) error {
	c, err := d.PeekCode()
	if err != nil {
		return err
	}
	n := -1
	switch {
	case c == msgpcode.Nil:
		return fmt.Errorf("%w: %s %d is nil", ErrInvalidRecord, what, i)
	case msgpcode.IsFixedMap(c):
		n = int(c & msgpcode.FixedMapMask)
	case msgpcode.IsFixedArray(c):
		n = int(c & msgpcode.FixedArrayMask)
	}
	if n >= 0 && n < fields {
		return fmt.Errorf("%w: %s %d has %d fields, want at least %d", ErrInvalidRecord, what, i, n, fields)
	}
	return nil
}

// Message kinds distro registers on the transport (its reserved range is 1–63).
const (
	kindSync     transport.Kind = 1 // owner → peer: changed records (request, empty answer)
	kindVerify   transport.Kind = 2 // owner → peer: bucket digest; answer: differing buckets and the peer's versions in them
	kindRepair   transport.Kind = 3 // owner → peer: records to install and keys to drop (request, empty answer)
	kindSnapshot transport.Kind = 4 // loader → peer: one page of every held record (request)
)

// Wire format: msgpack maps keyed by field name. (The `_ struct{}` fields below carry an
// as_array tag, but msgpack v5 reads that option only from a field named _msgpack, so every body
// has always been encoded as a map; the decoders below read maps, skip unknown fields, and are
// written by hand: no reflection, element caps checked before anything is allocated.) Fields may
// be added; a field is never renamed or removed.

type wireRecord struct {
	_        struct{} `msgpack:",as_array"`
	Key      string
	Kind     uint8
	Owner    string
	Revision uint64
	Deleted  bool
	Payload  []byte
}

// fieldName reads a struct field name into buf without allocating: the encoder writes structs as
// maps keyed by field name (short fixstr). It returns nil, having consumed the key, for any other
// key (a name too long, or not a string), whose value the caller skips.
func fieldName(d *msgpack.Decoder, buf *[16]byte) ([]byte, error) {
	c, err := d.PeekCode()
	if err != nil {
		return nil, err
	}
	if !msgpcode.IsFixedString(c) || int(c&msgpcode.FixedStrMask) > len(buf) {
		return nil, d.Skip()
	}
	n := int(c & msgpcode.FixedStrMask)
	if err := d.ReadFull(buf[:1]); err != nil { // the code byte
		return nil, err
	}
	if err := d.ReadFull(buf[:n]); err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// structLen reads a wire struct's header: a map of fields by name, which is what the encoder
// writes (see the wire format note above).
func structLen(d *msgpack.Decoder, what string) (int, error) {
	c, err := d.PeekCode()
	if err != nil {
		return 0, err
	}
	if !msgpcode.IsFixedMap(c) && c != msgpcode.Map16 && c != msgpcode.Map32 {
		return 0, fmt.Errorf("%w: %s is not a map of fields (code %#x)", ErrInvalidRecord, what, c)
	}
	return d.DecodeMapLen()
}

// fieldDecoder is a wire struct decoded by hand: decodeField decodes the value of its field
// called name, and skips the value of a field it does not have.
type fieldDecoder interface {
	decodeField(d *msgpack.Decoder, name []byte) error
}

// decodeStruct decodes v, a wire struct called what, field by field; buf is scratch space for
// field names (it escapes through the decoder's reader: a list decoder allocates one for all
// its elements).
func decodeStruct(d *msgpack.Decoder, what string, buf *[16]byte, v fieldDecoder) error {
	n, err := structLen(d, what)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		name, err := fieldName(d, buf)
		if err == nil {
			if name == nil {
				err = d.Skip() // not a field name: its value goes too
			} else {
				err = v.decodeField(d, name)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// decodeList decodes a list of at most limit elements called what, each decoded by elem after
// element checked its header against fields; -1 (msgpack nil) is an empty list.
func decodeList[T any](d *msgpack.Decoder, what string, limit, fields int, elem func(i int, v *T) error) ([]T, error) {
	n, err := decodeListLen(d, what+"s", limit)
	if err != nil || n < 0 {
		return nil, err
	}
	out := make([]T, 0, min(n, preallocElems))
	for i := 0; i < n; i++ {
		if err := element(d, what, i, fields); err != nil {
			return nil, err
		}
		out = grow(out, n)
		if err := elem(i, &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// joinKeyPayload returns key as a string and payload as a slice in one allocation: the key's
// bytes, then the payload's, the string on its start and the slice (its capacity its length) on
// the rest. A record received from a peer takes one size class for both, not one each (issue
// 30.2: 221 bytes in the 224 class, against 48 + 192 for a 42-byte key and a 179-byte payload).
// The payload still shares its allocation with no other record's bytes (see Record); a string
// kept of the key keeps the payload alive too. A nil payload stays nil and an empty one empty
// (they encode differently): then only the key is copied.
func joinKeyPayload(key, payload []byte) (string, []byte) {
	if len(payload) == 0 {
		if payload != nil {
			payload = []byte{}
		}
		return string(key), payload
	}
	b := make([]byte, len(key)+len(payload))
	copy(b, key)
	copy(b[len(key):], payload)
	return keyOf(b, len(key)), b[len(key):len(b):len(b)]
}

// keyOf returns the first n bytes of b, the head of a joined allocation, as a string.
func keyOf(b []byte, n int) string {
	if n == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), n)
}

// recordDecoder decodes wireRecords, each one's Key and Payload in one allocation
// (joinKeyPayload). The Key's bytes are read into key, scratch space reused from record to
// record; the encoder writes Key before Payload, so the Payload's allocation is made with the
// key at its head. Fields in another order (a Key again after the Payload, or a Payload given
// twice) are joined at the end: one more copy of the last payload, for input no encoder of
// distro writes. Only the first Payload of a record is allocated with the key at its head; a
// later one takes its own size: copying the key for each would let a record of one long Key and
// thousands of one-byte Payload fields allocate hundreds of times its input (a 1 KiB key and
// 10,000 fields: 11 MB for 111 KB), past the bound every decoder keeps.
//
// A list decoder makes one for all its records, and it holds the scratch space (field names,
// and keys up to len(small) bytes): the buffers the decoder's reader fills escape, and a sync
// message of one record (a Put's, the usual one) costs one allocation for them all, as the field
// name buffer alone did before.
type recordDecoder struct {
	key   []byte // small, or a longer buffer once a key did not fit
	name  [16]byte
	small [64]byte
}

// decode decodes a record into w, which is the zero wireRecord. Its fields are decoded here,
// not through decodeStruct and a decodeField method: each message is decoded on a goroutine of
// its own (a transport handler), and with those two frames (and this one) the stack grew, a
// copy, on every sync message (BenchmarkReplicationLatency: p50 0.077 → 0.092 ms; as deep as
// before without them).
func (rd *recordDecoder) decode(d *msgpack.Decoder, w *wireRecord) error {
	if rd.key == nil {
		rd.key = rd.small[:0]
	}
	key := rd.key[:0]
	var joined []byte // the allocation of the first Payload, the key's bytes at its head; then the last's
	head := false     // joined's head holds key as it is now
	n, err := structLen(d, "record")
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		name, err := fieldName(d, &rd.name)
		if err != nil {
			return err
		}
		switch string(name) { // no allocation; name is not used after (nil: not a field name)
		case "Key":
			// What DecodeString reads (a str or bin; nil is ""), into the scratch space. Its
			// length is within the input: model.Unmarshal checked every length first.
			var size int
			if size, err = d.DecodeBytesLen(); err == nil && size > 0 {
				key = slices.Grow(key[:0], size)[:size]
				err = d.ReadFull(key)
			} else {
				key = key[:0]
			}
			head = false
		case "Kind":
			w.Kind, err = d.DecodeUint8()
		case "Owner":
			w.Owner, err = d.DecodeString()
		case "Revision":
			w.Revision, err = d.DecodeUint64()
		case "Deleted":
			w.Deleted, err = d.DecodeBool()
		case "Payload":
			// What DecodeBytes reads (nil is nil, an empty one empty), after the key's bytes.
			var size int
			switch size, err = d.DecodeBytesLen(); {
			case err != nil || size < 0:
				w.Payload = nil
			case size == 0:
				w.Payload = []byte{}
			case joined != nil:
				// A Payload again: the key is not copied again (a long key and thousands of
				// one-byte Payload fields would allocate the key once per field, hundreds of
				// times the input), and the last one is joined to the key at the end.
				joined = make([]byte, size)
				err = d.ReadFull(joined)
				head = false
				w.Payload = joined
			default:
				joined = make([]byte, len(key)+size)
				copy(joined, key)
				err = d.ReadFull(joined[len(key):])
				head = true
				w.Payload = joined[len(key):len(joined):len(joined)]
			}
		default:
			err = d.Skip()
		}
		if err != nil {
			return err
		}
	}
	switch {
	case len(w.Payload) == 0:
		w.Key = string(key)
	case head:
		w.Key = keyOf(joined, len(key))
	default:
		w.Key, w.Payload = joinKeyPayload(key, w.Payload)
	}
	rd.key = key[:0] // a longer buffer, if one was needed, for the next record
	return nil
}

// DecodeMsgpack decodes a record without reflection; unknown fields are skipped.
func (w *wireRecord) DecodeMsgpack(d *msgpack.Decoder) error {
	return new(recordDecoder).decode(d, w)
}

// DecodeMsgpack decodes a version without reflection; unknown fields are skipped.
func (v *version) DecodeMsgpack(d *msgpack.Decoder) error {
	return decodeStruct(d, "version", new([16]byte), v)
}

func (v *version) decodeField(d *msgpack.Decoder, name []byte) (err error) {
	switch string(name) {
	case "Key":
		v.Key, err = d.DecodeString()
	case "Rev":
		v.Rev, err = d.DecodeUint64()
	case "Deleted":
		v.Deleted, err = d.DecodeBool()
	case "Owner":
		v.Owner, err = d.DecodeString()
	case "Sum":
		v.Sum, err = d.DecodeUint32()
	default:
		err = d.Skip()
	}
	return err
}

// recordList is a message's records: at most MaxMessageRecords (maxSnapshotRecords in snapshot
// pages), none nil, each valid.
type recordList []wireRecord

func (l *recordList) decode(d *msgpack.Decoder, limit int) error {
	rd := new(recordDecoder)
	out, err := decodeList(d, "record", limit, 4, func(i int, w *wireRecord) error {
		if err := rd.decode(d, w); err != nil {
			return err
		}
		if err := w.record().validate(); err != nil { // before the next element is read
			return fmt.Errorf("record %d: %w", i, err)
		}
		return nil
	})
	if err == nil {
		*l = out
	}
	return err
}

// DecodeMsgpack decodes the records of a sync or repair message.
func (l *recordList) DecodeMsgpack(d *msgpack.Decoder) error { return l.decode(d, MaxMessageRecords) }

// pageRecords is the record list of a snapshot page.
type pageRecords []wireRecord

// DecodeMsgpack decodes the records of a snapshot page.
func (l *pageRecords) DecodeMsgpack(d *msgpack.Decoder) error {
	return (*recordList)(l).decode(d, maxSnapshotRecords)
}

// versionList is a verify answer's versions or a repair's drops: at most maxWireVersions, none
// nil, each valid.
type versionList []version

// DecodeMsgpack decodes the list.
func (l *versionList) DecodeMsgpack(d *msgpack.Decoder) error {
	buf := new([16]byte)
	out, err := decodeList(d, "version", maxWireVersions, 2, func(i int, v *version) error {
		if err := decodeStruct(d, "version", buf, v); err != nil {
			return err
		}
		return validVersion(i, *v)
	})
	if err == nil {
		*l = out
	}
	return err
}

// bucketList is a verify answer's differing buckets: at most maxWireBuckets, none nil.
type bucketList []uint32

// DecodeMsgpack decodes the list.
func (l *bucketList) DecodeMsgpack(d *msgpack.Decoder) error {
	out, err := decodeList(d, "bucket", maxWireBuckets, 0, func(_ int, v *uint32) (err error) {
		*v, err = d.DecodeUint32()
		return err
	})
	if err == nil {
		*l = out
	}
	return err
}

func toWire(r Record) wireRecord {
	return wireRecord{Key: r.Key, Kind: uint8(r.Kind), Owner: r.Owner, Revision: r.Revision, Deleted: r.Deleted, Payload: r.Payload}
}

func (w wireRecord) record() Record {
	return Record{Key: w.Key, Kind: Kind(w.Kind), Owner: w.Owner, Revision: w.Revision, Deleted: w.Deleted, Payload: w.Payload}
}

// version is a record's version without its payload, exchanged by verify.
type version struct {
	_       struct{} `msgpack:",as_array"`
	Key     string
	Rev     uint64
	Deleted bool
	Owner   string // in verify answers; empty in drops (the sender is the owner)
	// Sum is payloadSum of the record's payload, in verify and consistency answers; 0 (left
	// out) in drops and from a peer that sends none. Two copies of one version that differ in
	// it are two states under one name: the owner moves past it.
	Sum uint32 `msgpack:",omitempty"`
}

type syncMsg struct {
	_       struct{} `msgpack:",as_array"`
	Records recordList
}

// DecodeMsgpack decodes a sync message: its records, through their bounded
// decoder; any other field is skipped.
func (m *syncMsg) DecodeMsgpack(d *msgpack.Decoder) error {
	n, err := d.DecodeMapLen()
	if err != nil {
		return err
	}
	for range max(n, 0) {
		k, err := d.DecodeString()
		if err != nil {
			return err
		}
		if k != "Records" {
			if err := d.Skip(); err != nil {
				return err
			}
			continue
		}
		if err := m.Records.DecodeMsgpack(d); err != nil {
			return err
		}
	}
	return nil
}

type verifyReq struct {
	_      struct{} `msgpack:",as_array"`
	Digest []byte   // 8 bytes per bucket, big endian
	// Skip are buckets the receiver is not to compare this round: the sender has syncs of
	// records there to this receiver on their first attempt (syncSched.freshBuckets). A
	// receiver that does not know the field compares them, as before.
	Skip bucketList
}

type verifyResp struct {
	_        struct{}    `msgpack:",as_array"`
	Buckets  bucketList  // buckets whose hashes differ (versions follow for each)
	Versions versionList // the receiver's versions of the sender's records in those buckets
}

type repairMsg struct {
	_       struct{} `msgpack:",as_array"`
	Records recordList
	Drop    versionList // records of the sender it no longer holds: drop if still at that version
}

type snapReq struct {
	_    struct{} `msgpack:",as_array"`
	From uint32   // first bucket
	Max  uint32   // record budget for the page
	// Sums, if set, are the loader's reference: 8 bytes per bucket (big endian), the bucket sums
	// of a snapshot it has merged whole (snapResp.Sums). The peer then leaves out every bucket
	// whose own sum is the same (it holds exactly what the loader was given there). A peer that
	// does not know the field serves every bucket, as before.
	Sums []byte
}

type snapResp struct {
	_       struct{} `msgpack:",as_array"`
	Records pageRecords
	Next    uint32 // first bucket of the next page
	Done    bool
	// Sums are the sums (table.bucketSum) of the buckets the page covers, From to Next−1, 8
	// bytes each (big endian), taken with the page's records; absent in an answer to a request
	// with Sums.
	Sums []byte
}

func encodeDigest(sums []uint64, nb int) []byte {
	b := make([]byte, 8*nb)
	for i, s := range sums {
		binary.BigEndian.PutUint64(b[8*i:], s)
	}
	return b
}

func records(ws []wireRecord) ([]Record, error) {
	out := make([]Record, len(ws))
	for i, w := range ws {
		out[i] = w.record()
		if err := out[i].validate(); err != nil {
			return nil, fmt.Errorf("record %d: %w", i, err)
		}
	}
	return out, nil
}

func wires(rs []Record) []wireRecord {
	out := make([]wireRecord, len(rs))
	for i, r := range rs {
		out[i] = toWire(r)
	}
	return out
}

func decode(b []byte, v any) error {
	if err := model.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRecord, err)
	}
	return nil
}

func validVersions(vs []version) error {
	for i, v := range vs {
		if err := validVersion(i, v); err != nil {
			return err
		}
	}
	return nil
}

func validVersion(i int, v version) error {
	if v.Key == "" || len(v.Key) > MaxKeyLen || v.Rev == 0 || len(v.Owner) > MaxOwnerLen {
		return fmt.Errorf("%w: version %d: key must be 1–%d bytes, revision > 0 and owner at most %d bytes", ErrInvalidRecord, i, MaxKeyLen, MaxOwnerLen)
	}
	return nil
}

// decodeSync decodes and validates a sync message.
func decodeSync(b []byte) ([]Record, error) {
	var m syncMsg
	if err := decode(b, &m); err != nil {
		return nil, err
	}
	return records(m.Records)
}

// decodeVerifyReq decodes a digest of nb buckets and the buckets not to compare.
func decodeVerifyReq(b []byte, nb int) ([]uint64, []uint32, error) {
	var m verifyReq
	if err := decode(b, &m); err != nil {
		return nil, nil, err
	}
	if len(m.Digest) != 8*nb { // the bin's bytes are within the input (model.Unmarshal checks)
		return nil, nil, fmt.Errorf("%w: digest of %d bytes, want %d (8 × Buckets; do the nodes' Buckets differ?)", ErrInvalidRecord, len(m.Digest), 8*nb)
	}
	for _, bk := range m.Skip {
		if int(bk) >= nb {
			return nil, nil, fmt.Errorf("%w: bucket %d out of range (Buckets %d)", ErrInvalidRecord, bk, nb)
		}
	}
	sums := make([]uint64, nb)
	for i := range sums {
		sums[i] = binary.BigEndian.Uint64(m.Digest[8*i:])
	}
	return sums, m.Skip, nil
}

// decodeVerifyResp decodes a verify answer for nb buckets.
func decodeVerifyResp(b []byte, nb int) (verifyResp, error) {
	var m verifyResp
	if err := decode(b, &m); err != nil {
		return m, err
	}
	if len(m.Buckets) > nb {
		return m, errTooMany("buckets", len(m.Buckets), nb)
	}
	for _, bk := range m.Buckets {
		if int(bk) >= nb {
			return m, fmt.Errorf("%w: bucket %d out of range (Buckets %d)", ErrInvalidRecord, bk, nb)
		}
	}
	return m, validVersions(m.Versions)
}

// decodeRepair decodes and validates a repair message.
func decodeRepair(b []byte) ([]Record, []version, error) {
	var m repairMsg
	if err := decode(b, &m); err != nil {
		return nil, nil, err
	}
	recs, err := records(m.Records)
	if err != nil {
		return nil, nil, err
	}
	return recs, m.Drop, validVersions(m.Drop)
}

func decodeSnapReq(b []byte) (snapReq, error) {
	var m snapReq
	err := decode(b, &m)
	return m, err
}

// decodeSnapResp is in snapdec.go.

// The wire types bound their own allocations: each list checks its declared
// length against its cap before allocating, and grows by doubling
// (model.BoundedDecoder; FuzzWire* and TestWireHostileAllocation measure it).
func (*wireRecord) DecodeBounded()  {}
func (*syncMsg) DecodeBounded()     {}
func (*version) DecodeBounded()     {}
func (*recordList) DecodeBounded()  {}
func (*pageRecords) DecodeBounded() {}
func (*versionList) DecodeBounded() {}
func (*bucketList) DecodeBounded()  {}
