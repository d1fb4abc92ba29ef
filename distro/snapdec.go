package distro

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Snapshot pages are decoded by hand from their bytes, as they are encoded (snapenc.go): a
// joining node decodes a million records, and msgpack's Decoder read each of their fields
// through an io.Reader, into a list of wireRecords copied again into Records. pageDecoder reads
// the bytes in place, writes each record once into a list sized from the page's header, and
// gives the records of one owner one string (owners) and each record's key and payload one
// allocation (joinKeyPayload).
//
// It reads what msgpack's Decoder read for a snapResp (the reference is the reflective path,
// model.Unmarshal into a snapResp; FuzzSnapshotPageDecoding compares them): a map of fields by
// name, unknown fields skipped, any integer or string encoding, nil as a field's zero value. It
// is stricter where no correct peer goes: an integer beyond its field's type (msgpack truncated
// it) and a negative one are refused; a record list declaring more records than its bytes can
// hold is refused at its header; a field's length is checked against its limit (MaxKeyLen,
// MaxOwnerLen, MaxPayloadLen) before anything is allocated for it; and a page that is msgpack nil
// rather than a map is refused (msgpack read it as an empty page). Every error wraps
// ErrInvalidRecord and names the field.

// minPageRecordLen is the fewest bytes a valid record takes in a page: a fixmap of Key, Kind,
// Owner and Revision, each of them at least one byte (TestMinPageRecordLen); a list declaring n
// records in fewer than n × minPageRecordLen bytes is refused before the list is allocated.
const minPageRecordLen = 31

// maxSkipDepth bounds the nesting of the unknown values the decoder skips (as model's walk).
const maxSkipDepth = 32

// maxOwnerIDs caps the distinct owner IDs an owners keeps; more (a hostile peer's) are decoded
// each into their own string.
const maxOwnerIDs = 64

// owners gives the records of one owner one string for its ID. A loader's records come from a
// few owners: a million records would otherwise carry a million copies of a few node IDs.
// Not safe for concurrent use: a loader's pages are decoded one after the other.
type owners struct {
	ids  []string
	last int
}

// id returns b as a string, the same string for the same bytes (up to maxOwnerIDs of them).
func (o *owners) id(b []byte) string {
	if o == nil {
		return string(b)
	}
	if o.last < len(o.ids) && o.ids[o.last] == string(b) { // no allocation
		return o.ids[o.last]
	}
	for i, s := range o.ids {
		if s == string(b) {
			o.last = i
			return s
		}
	}
	s := string(b)
	if len(o.ids) < maxOwnerIDs {
		o.ids = append(o.ids, s)
		o.last = len(o.ids) - 1
	}
	return s
}

// pageDecoder reads one snapshot page from b, from off on.
type pageDecoder struct {
	b      []byte
	off    int
	owners *owners
}

// decodeSnapResp decodes and validates a snapshot page: its records, and its other fields in m
// (m.Records is left empty).
func decodeSnapResp(b []byte) ([]Record, snapResp, error) { return decodePage(b, nil) }

// decodePage is decodeSnapResp with the owner IDs taken from o (nil: none).
func decodePage(b []byte, o *owners) (recs []Record, m snapResp, err error) {
	d := pageDecoder{b: b, owners: o}
	n, err := d.mapLen("snapshot page")
	if err != nil {
		return nil, m, err
	}
	var name [16]byte
	for range n {
		f, err := d.fieldName(&name)
		if err == nil {
			switch string(f) { // no allocation
			case "Records":
				recs, err = d.records()
			case "Next":
				var v uint64
				v, err = d.uint("Next", math.MaxUint32)
				m.Next = uint32(v)
			case "Done":
				m.Done, err = d.bool("Done")
			case "Sums":
				m.Sums, err = d.bin("Sums", len(b))
			default: // an unknown field, or a key that is no field name (f nil)
				err = d.skip("snapshot page field", 0)
			}
		}
		if err != nil {
			return nil, snapResp{}, err
		}
	}
	if d.off != len(b) {
		return nil, snapResp{}, d.fail("snapshot page", fmt.Sprintf("%d bytes after its end", len(b)-d.off))
	}
	return recs, m, nil
}

func (d *pageDecoder) fail(what, why string) error {
	return fmt.Errorf("%w: snapshot page: %s: %s (at byte %d)", ErrInvalidRecord, what, why, d.off)
}

func (d *pageDecoder) truncated(what string) error { return d.fail(what, "truncated") }

// code reads the next value's first byte.
func (d *pageDecoder) code(what string) (byte, error) {
	if d.off >= len(d.b) {
		return 0, d.truncated(what)
	}
	c := d.b[d.off]
	d.off++
	return c, nil
}

// n reads a big-endian unsigned integer of size bytes (1, 2, 4 or 8).
func (d *pageDecoder) n(what string, size int) (uint64, error) {
	if len(d.b)-d.off < size {
		return 0, d.truncated(what)
	}
	p := d.b[d.off : d.off+size]
	d.off += size
	switch size {
	case 1:
		return uint64(p[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(p)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(p)), nil
	}
	return binary.BigEndian.Uint64(p), nil
}

// mapLen reads the header of a struct: a map of fields by name.
func (d *pageDecoder) mapLen(what string) (int, error) {
	c, err := d.code(what)
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case msgpcode.IsFixedMap(c):
		n = uint64(c & msgpcode.FixedMapMask)
	case c == msgpcode.Map16:
		n, err = d.n(what, 2)
	case c == msgpcode.Map32:
		n, err = d.n(what, 4)
	default:
		d.off--
		return 0, d.fail(what, fmt.Sprintf("not a map of fields (code %#x)", c))
	}
	if err != nil {
		return 0, err
	}
	if n > uint64(len(d.b)-d.off)/2 { // a field takes two bytes at least
		return 0, d.fail(what, fmt.Sprintf("%d fields in %d bytes", n, len(d.b)-d.off))
	}
	return int(n), nil
}

// fieldName reads a map key: a field name (a fixstr of at most len(buf) bytes, as every encoder
// of these structs writes) into buf, or, for any other key, skips it and returns nil: the caller
// then skips the value.
func (d *pageDecoder) fieldName(buf *[16]byte) ([]byte, error) {
	if d.off >= len(d.b) {
		return nil, d.truncated("field name")
	}
	c := d.b[d.off]
	if !msgpcode.IsFixedString(c) || int(c&msgpcode.FixedStrMask) > len(buf) {
		return nil, d.skip("field name", 0)
	}
	n := int(c & msgpcode.FixedStrMask)
	if len(d.b)-d.off-1 < n {
		return nil, d.truncated("field name")
	}
	name := buf[:copy(buf[:n], d.b[d.off+1:d.off+1+n])]
	d.off += 1 + n
	return name, nil
}

// uint reads an unsigned integer of at most limit; msgpack nil reads as 0.
func (d *pageDecoder) uint(what string, limit uint64) (uint64, error) {
	c, err := d.code(what)
	if err != nil {
		return 0, err
	}
	var v uint64
	neg := false
	switch {
	case c <= msgpcode.PosFixedNumHigh:
		v = uint64(c)
	case c >= msgpcode.NegFixedNumLow:
		neg = true
	case c == msgpcode.Nil:
	case c == msgpcode.Uint8:
		v, err = d.n(what, 1)
	case c == msgpcode.Uint16:
		v, err = d.n(what, 2)
	case c == msgpcode.Uint32:
		v, err = d.n(what, 4)
	case c == msgpcode.Uint64:
		v, err = d.n(what, 8)
	case c == msgpcode.Int8, c == msgpcode.Int16, c == msgpcode.Int32, c == msgpcode.Int64:
		size := 1 << (c - msgpcode.Int8) // 1, 2, 4, 8
		v, err = d.n(what, size)
		neg = v>>(8*size-1) != 0
	default:
		d.off--
		return 0, d.fail(what, fmt.Sprintf("not an integer (code %#x)", c))
	}
	switch {
	case err != nil:
		return 0, err
	case neg:
		return 0, d.fail(what, "negative")
	case v > limit:
		return 0, d.fail(what, fmt.Sprintf("%d is more than %d", v, limit))
	}
	return v, nil
}

// bool reads a bool; msgpack nil reads as false.
func (d *pageDecoder) bool(what string) (bool, error) {
	c, err := d.code(what)
	switch {
	case err != nil:
		return false, err
	case c == msgpcode.True:
		return true, nil
	case c == msgpcode.False || c == msgpcode.Nil:
		return false, nil
	}
	d.off--
	return false, d.fail(what, fmt.Sprintf("not a bool (code %#x)", c))
}

// raw reads a string or bin (either: msgpack's Decoder read both for both) of at most limit
// bytes, in place; nil is msgpack nil.
func (d *pageDecoder) raw(what string, limit int) (p []byte, isNil bool, err error) {
	c, err := d.code(what)
	if err != nil {
		return nil, false, err
	}
	var n uint64
	switch {
	case msgpcode.IsFixedString(c):
		n = uint64(c & msgpcode.FixedStrMask)
	case c == msgpcode.Nil:
		return nil, true, nil
	case c == msgpcode.Str8 || c == msgpcode.Bin8:
		n, err = d.n(what, 1)
	case c == msgpcode.Str16 || c == msgpcode.Bin16:
		n, err = d.n(what, 2)
	case c == msgpcode.Str32 || c == msgpcode.Bin32:
		n, err = d.n(what, 4)
	default:
		d.off--
		return nil, false, d.fail(what, fmt.Sprintf("not a string or bin (code %#x)", c))
	}
	switch {
	case err != nil:
		return nil, false, err
	case n > uint64(limit):
		return nil, false, d.fail(what, fmt.Sprintf("%d bytes, at most %d", n, limit))
	case n > uint64(len(d.b)-d.off):
		return nil, false, d.truncated(what)
	}
	p = d.b[d.off : d.off+int(n) : d.off+int(n)]
	d.off += int(n)
	return p, false, nil
}

// bin reads a bin (or string) of at most limit bytes into a new slice (an empty one for an
// empty bin, nil for msgpack nil, as msgpack's Decoder).
func (d *pageDecoder) bin(what string, limit int) ([]byte, error) {
	p, isNil, err := d.raw(what, limit)
	if err != nil || isNil {
		return nil, err
	}
	return bytes.Clone(p), nil
}

// records reads a page's record list (msgpack nil: none), each record valid.
func (d *pageDecoder) records() ([]Record, error) {
	c, err := d.code("Records")
	if err != nil {
		return nil, err
	}
	var n uint64
	switch {
	case c == msgpcode.Nil:
		return nil, nil
	case msgpcode.IsFixedArray(c):
		n = uint64(c & msgpcode.FixedArrayMask)
	case c == msgpcode.Array16:
		n, err = d.n("Records", 2)
	case c == msgpcode.Array32:
		n, err = d.n("Records", 4)
	default:
		d.off--
		return nil, d.fail("Records", fmt.Sprintf("not a list (code %#x)", c))
	}
	switch {
	case err != nil:
		return nil, err
	case n > maxSnapshotRecords:
		return nil, errTooMany("records", int(min(n, math.MaxInt32)), maxSnapshotRecords)
	case n*minPageRecordLen > uint64(len(d.b)-d.off):
		return nil, d.fail("Records", fmt.Sprintf("%d records in %d bytes (a record takes at least %d)", n, len(d.b)-d.off, minPageRecordLen))
	}
	recs := make([]Record, n) // at most 72/minPageRecordLen times the input
	var name [16]byte
	for i := range recs {
		if err := d.record(&recs[i], i, &name); err != nil {
			return nil, err
		}
		if err := recs[i].validate(); err != nil {
			return nil, fmt.Errorf("record %d: %w", i, err)
		}
	}
	return recs, nil
}

// record reads record i into r (its fields as wireRecord's; unknown ones skipped).
func (d *pageDecoder) record(r *Record, i int, name *[16]byte) error {
	if d.off < len(d.b) {
		// As element: a nil record, and a fixmap of fewer than four fields, are named as such.
		switch c := d.b[d.off]; {
		case c == msgpcode.Nil:
			return fmt.Errorf("%w: record %d is nil", ErrInvalidRecord, i)
		case msgpcode.IsFixedMap(c) && c&msgpcode.FixedMapMask < 4:
			return fmt.Errorf("%w: record %d has %d fields, want at least 4", ErrInvalidRecord, i, c&msgpcode.FixedMapMask)
		}
	}
	n, err := d.mapLen("record")
	if err != nil {
		return err
	}
	// The key and the payload are read in place, and copied together at the end, into one
	// allocation (joinKeyPayload): whatever their order, and the last of a field given twice.
	var key, payload []byte
	for range n {
		f, err := d.fieldName(name)
		if err != nil {
			return err
		}
		switch string(f) {
		case "Key":
			key, _, err = d.raw("Key", MaxKeyLen) // nil reads as ""
		case "Kind":
			var v uint64
			v, err = d.uint("Kind", math.MaxUint8)
			r.Kind = Kind(v)
		case "Owner":
			var p []byte
			p, _, err = d.raw("Owner", MaxOwnerLen)
			r.Owner = d.owners.id(p)
		case "Revision":
			r.Revision, err = d.uint("Revision", math.MaxUint64)
		case "Deleted":
			r.Deleted, err = d.bool("Deleted")
		case "Payload":
			payload, _, err = d.raw("Payload", MaxPayloadLen) // nil reads as nil, empty as empty
		default:
			err = d.skip("record field", 0)
		}
		if err != nil {
			return fmt.Errorf("record %d: %w", i, err)
		}
	}
	r.Key, r.Payload = joinKeyPayload(key, payload)
	return nil
}

// skip skips one value of any type, nested at most maxSkipDepth deep.
func (d *pageDecoder) skip(what string, depth int) error {
	if depth > maxSkipDepth {
		return d.fail(what, "nested too deep")
	}
	c, err := d.code(what)
	if err != nil {
		return err
	}
	var size, extra int // a length of size bytes, then extra bytes, then that many bytes
	items := uint64(0)  // or that many values
	switch {
	case c <= msgpcode.PosFixedNumHigh || c >= msgpcode.NegFixedNumLow,
		c == msgpcode.Nil, c == msgpcode.False, c == msgpcode.True:
		return nil
	case msgpcode.IsFixedMap(c):
		items = 2 * uint64(c&msgpcode.FixedMapMask)
	case msgpcode.IsFixedArray(c):
		items = uint64(c & msgpcode.FixedArrayMask)
	case msgpcode.IsFixedString(c):
		return d.advance(what, uint64(c&msgpcode.FixedStrMask))
	case c == msgpcode.Uint8 || c == msgpcode.Int8:
		return d.advance(what, 1)
	case c == msgpcode.Uint16 || c == msgpcode.Int16:
		return d.advance(what, 2)
	case c == msgpcode.FixExt1:
		return d.advance(what, 2)
	case c == msgpcode.FixExt2:
		return d.advance(what, 3)
	case c == msgpcode.Uint32 || c == msgpcode.Int32 || c == msgpcode.Float:
		return d.advance(what, 4)
	case c == msgpcode.FixExt4:
		return d.advance(what, 5)
	case c == msgpcode.Uint64 || c == msgpcode.Int64 || c == msgpcode.Double:
		return d.advance(what, 8)
	case c == msgpcode.FixExt8:
		return d.advance(what, 9)
	case c == msgpcode.FixExt16:
		return d.advance(what, 17)
	case c == msgpcode.Str8 || c == msgpcode.Bin8:
		size = 1
	case c == msgpcode.Str16 || c == msgpcode.Bin16:
		size = 2
	case c == msgpcode.Str32 || c == msgpcode.Bin32:
		size = 4
	case c == msgpcode.Ext8:
		size, extra = 1, 1
	case c == msgpcode.Ext16:
		size, extra = 2, 1
	case c == msgpcode.Ext32:
		size, extra = 4, 1
	case c == msgpcode.Array16 || c == msgpcode.Array32 || c == msgpcode.Map16 || c == msgpcode.Map32:
		w := 2
		if c == msgpcode.Array32 || c == msgpcode.Map32 {
			w = 4
		}
		if items, err = d.n(what, w); err != nil {
			return err
		}
		if c == msgpcode.Map16 || c == msgpcode.Map32 {
			items *= 2
		}
	default: // 0xc1, never used
		d.off--
		return d.fail(what, fmt.Sprintf("invalid code %#x", c))
	}
	if size > 0 {
		n, err := d.n(what, size)
		if err != nil {
			return err
		}
		return d.advance(what, n+uint64(extra))
	}
	if items > uint64(len(d.b)-d.off) { // a value takes a byte at least
		return d.truncated(what)
	}
	for range items {
		if err := d.skip(what, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// advance skips n bytes.
func (d *pageDecoder) advance(what string, n uint64) error {
	if n > uint64(len(d.b)-d.off) {
		return d.truncated(what)
	}
	d.off += int(n)
	return nil
}
