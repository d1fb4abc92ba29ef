package distro

import (
	"encoding/binary"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Snapshot pages are encoded by hand, as they are decoded (wire.go): a page of a million-record
// snapshot is thousands of records, and msgpack's reflective encoder spent most of a page's
// cost walking their fields. The bytes are exactly those model.Marshal writes for the page's
// snapResp (TestSnapshotPageEncoding compares them), so peers of either kind read them alike.

// encodeSnapshotPage encodes a snapshot page of recs: a snapResp of toWire(recs) (nil when empty),
// next, done and sums, in one allocation.
func encodeSnapshotPage(recs []Record, next uint32, done bool, sums []byte) []byte {
	size := 1 + strLen("Records") + arrayLen(len(recs)) +
		strLen("Next") + 5 + strLen("Done") + 1 + strLen("Sums") + binLen(sums)
	for i := range recs {
		size += recordLen(&recs[i])
	}
	b := make([]byte, 0, size)
	b = append(b, msgpcode.FixedMapLow|4)
	b = appendStr(b, "Records")
	if recs == nil {
		b = append(b, msgpcode.Nil)
	} else {
		b = appendArrayLen(b, len(recs))
	}
	for i := range recs {
		b = appendRecord(b, &recs[i])
	}
	b = appendStr(b, "Next")
	b = binary.BigEndian.AppendUint32(append(b, msgpcode.Uint32), next)
	b = appendStr(b, "Done")
	b = appendBool(b, done)
	b = appendStr(b, "Sums")
	return appendBin(b, sums)
}

// appendRecord appends r as its wireRecord: a map of six fields by name, in declaration order,
// with the fixed-width integers msgpack's reflective encoder writes for uint8 and uint64.
//
// The bytes between the values are constants: the map header and each field's name, with the
// code of the fixed-width integers (TestRecordPrefixes checks them against appendStr).
func appendRecord(b []byte, r *Record) []byte {
	b = appendStr(append(b, prefixKey...), r.Key)
	b = append(append(b, prefixKind...), byte(r.Kind))
	b = appendStr(append(b, prefixOwner...), r.Owner)
	b = binary.BigEndian.AppendUint64(append(b, prefixRevision...), r.Revision)
	b = appendBool(append(b, prefixDeleted...), r.Deleted)
	return appendBin(append(b, prefixPayload...), r.Payload)
}

// The constant bytes of a record's encoding, before each value.
const (
	prefixKey      = "\x86\xa3Key"      // fixmap of 6, fixstr "Key"
	prefixKind     = "\xa4Kind\xcc"     // fixstr "Kind", uint8
	prefixOwner    = "\xa5Owner"        // fixstr "Owner"
	prefixRevision = "\xa8Revision\xcf" // fixstr "Revision", uint64
	prefixDeleted  = "\xa7Deleted"      // fixstr "Deleted"
	prefixPayload  = "\xa7Payload"      // fixstr "Payload"
)

// recordLen is the length of appendRecord's encoding of r.
func recordLen(r *Record) int {
	// The map header, the six names (1 + their length each), Kind (2), Revision (9), Deleted (1).
	const fixed = 1 + (1 + 3) + (1 + 4) + 2 + (1 + 5) + (1 + 8) + 9 + (1 + 7) + 1 + (1 + 7)
	return fixed + strLen(r.Key) + strLen(r.Owner) + binLen(r.Payload)
}

// The encodings below are msgpack v5's (Encoder.EncodeString, EncodeBytes, EncodeArrayLen,
// EncodeBool): the shortest header for the length.

func appendStr(b []byte, s string) []byte {
	if len(s) < 32 {
		b = append(b, msgpcode.FixedStrLow|byte(len(s)))
	} else {
		b = appendLenHead(b, len(s), msgpcode.Str8, msgpcode.Str16, msgpcode.Str32)
	}
	return append(b, s...)
}

func strLen(s string) int { return headLen(len(s), 32) + len(s) }

// appendBin appends p as msgpack bin, nil as msgpack nil.
func appendBin(b []byte, p []byte) []byte {
	if p == nil {
		return append(b, msgpcode.Nil)
	}
	return append(appendLenHead(b, len(p), msgpcode.Bin8, msgpcode.Bin16, msgpcode.Bin32), p...)
}

// appendLenHead appends the header of a string or bin of n bytes beyond the fixed forms: code8,
// code16 or code32 and n in 1, 2 or 4 bytes, the fewest that hold it.
func appendLenHead(b []byte, n int, code8, code16, code32 byte) []byte {
	switch {
	case n < 1<<8:
		return append(b, code8, byte(n))
	case n < 1<<16:
		return binary.BigEndian.AppendUint16(append(b, code16), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, code32), uint32(n))
}

func binLen(p []byte) int {
	if p == nil {
		return 1
	}
	return headLen(len(p), 0) + len(p)
}

func appendArrayLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, msgpcode.FixedArrayLow|byte(n))
	case n < 1<<16:
		return binary.BigEndian.AppendUint16(append(b, msgpcode.Array16), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, msgpcode.Array32), uint32(n))
}

func arrayLen(n int) int {
	switch {
	case n < 16:
		return 1
	case n < 1<<16:
		return 3
	}
	return 5
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, msgpcode.True)
	}
	return append(b, msgpcode.False)
}

// headLen is the length of the header of a string or bin of n bytes: one byte below fixed (the
// fixstr form; 0 for bin, which has none), else 2, 3 or 5.
func headLen(n, fixed int) int {
	switch {
	case n < fixed:
		return 1
	case n < 1<<8:
		return 2
	case n < 1<<16:
		return 3
	}
	return 5
}

// DecodeMsgpack decodes a snapshot page without reflection; unknown fields are skipped.
func (m *snapResp) DecodeMsgpack(d *msgpack.Decoder) error {
	return decodeStruct(d, "snapshot page", new([16]byte), m)
}

func (m *snapResp) decodeField(d *msgpack.Decoder, name []byte) (err error) {
	switch string(name) {
	case "Records":
		err = m.Records.DecodeMsgpack(d)
	case "Next":
		m.Next, err = d.DecodeUint32()
	case "Done":
		m.Done, err = d.DecodeBool()
	case "Sums":
		m.Sums, err = d.DecodeBytes()
	default:
		err = d.Skip()
	}
	return err
}

// The page bounds its allocations as its records do (see the DecodeBounded list in wire.go):
// Sums is a bin whose bytes are within the input.
func (*snapResp) DecodeBounded() {}
