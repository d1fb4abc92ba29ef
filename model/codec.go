package model

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strconv"

	"github.com/vmihailenco/msgpack/v5"
)

// maxDepth bounds the nesting of arrays and maps that Unmarshal accepts.
// Muster's types nest a few levels; anything deeper is hostile.
const maxDepth = 32

// BoundedDecoder is implemented by a type whose DecodeMsgpack bounds what it
// allocates by itself: it checks every declared length against a cap of its
// own before allocating, and refuses what it does not expect. Unmarshal still
// checks that such a value is well-formed and that its declared lengths fit
// in the input, but does not plan or charge what is decoded below it: the
// type answers for its allocations (and should have a fuzz test that
// measures them). distro's wire lists are such types.
type BoundedDecoder interface {
	msgpack.CustomDecoder
	// DecodeBounded marks the type; it is never called.
	DecodeBounded()
}

// Marshal encodes v with msgpack.
func Marshal(v any) ([]byte, error) { return msgpack.Marshal(v) }

// The allocation bound of Unmarshal: decoding b may allocate at most
// MaxDecodeRatio × len(b) + DecodeSlack bytes.
const (
	MaxDecodeRatio = 16
	DecodeSlack    = 4096
)

// DecodeOptions tune UnmarshalWith. The zero value is what Unmarshal does.
type DecodeOptions struct {
	// MaxLen, when positive, caps the length of the top-level value: the
	// elements of an array, the entries of a map, the bytes of a string or
	// []byte. A longer one fails with ErrTooLarge before anything is
	// decoded. Fields are capped with a maxlen struct tag (see Unmarshal).
	MaxLen int
	// MaxAlloc, when positive, replaces MaxDecodeRatio × len(b) +
	// DecodeSlack as the bound on what decoding may allocate. It is meant
	// for input whose length is capped already and which must decode
	// whenever Marshal wrote it, such as committed Raft entries: the ratio
	// holds for every realistic value of the project's types, but not for
	// all of Marshal's output (a Cluster with a one-letter name and no
	// health check encodes in 15 bytes and decodes into about 350).
	MaxAlloc int64
}

// Unmarshal decodes msgpack bytes from an untrusted source into v, a
// non-nil pointer to a zero value.
//
// Before msgpack sees the bytes, Unmarshal walks them alongside the
// destination type and rejects them, decoding nothing, unless
//
//   - they hold exactly one well-formed value, nested at most 32 deep,
//     whose every declared length fits in the bytes that follow
//     (ErrMalformed);
//   - each value has the msgpack type the destination decodes, and a nil
//     appears only where the Go type has one: pointers, slices, maps,
//     interfaces and Metadata, never a struct, string, number or bool
//     (ErrMalformed);
//   - decoding allocates at most MaxDecodeRatio × len(b) + DecodeSlack
//     bytes, counting every slice, map, string and pointer msgpack v5 makes
//     for the destination type, rounded up to Go's size classes
//     (ErrTooLarge);
//   - no field exceeds its maxlen tag, and the top-level value no
//     DecodeOptions.MaxLen (ErrTooLarge).
//
// Errors other than the destination's own are *DecodeError values naming
// where in the value and which rule. A struct field caps its length (the
// elements of a slice or array, the entries of a map, the bytes of a
// string or []byte) with a tag:
//
//	Records []Record `msgpack:"r" maxlen:"1000"`
//
// The destination type may hold bools, numbers, strings, slices, arrays,
// maps, structs, pointers, empty interfaces and Metadata; a type with a
// msgpack decoder of its own (other than Metadata), an embedded field, a
// non-empty interface, or a type registered with msgpack.Register or
// RegisterExt cannot be bounded and fails with errors.ErrUnsupported.
// Plans of the destination types are cached per type.
func Unmarshal(b []byte, v any) error { return UnmarshalWith(b, v, DecodeOptions{}) }

// UnmarshalWith is Unmarshal with options.
func UnmarshalWith(b []byte, v any, o DecodeOptions) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("model: Unmarshal into %T: %w", v, errNotPointer)
	}
	if e := rv.Elem(); e.Kind() == reflect.Interface && !e.IsNil() {
		return unsupported(e.Type(), "an interface holding a value")
	}
	p, err := planFor(rv.Type().Elem())
	if err != nil {
		return err
	}
	if p.kind == pSelf && o.MaxLen == 0 {
		// The type bounds its own decoding: only the length walk, with its
		// small stack frames (a decode often runs in a fresh goroutine, a
		// transport handler, whose stack the full walk would make grow).
		n, err := skim(b, 0)
		if err == nil && n != len(b) {
			err = ErrMalformed
		}
		if err != nil {
			return &DecodeError{Type: p.name, Rule: "malformed", Err: ErrMalformed}
		}
		return decodeInto(b, v)
	}
	if err := walkPlan(p, b, o); err != nil {
		return err
	}
	return decodeInto(b, v)
}

// walkPlan is UnmarshalWith's check of b against the plan p.
func walkPlan(p *plan, b []byte, o DecodeOptions) error {
	w := walker{b: b, cost: fixedCost, bufMax: 64, limit: int64(MaxDecodeRatio)*int64(len(b)) + DecodeSlack}
	if o.MaxAlloc > 0 {
		w.limit = o.MaxAlloc
	}
	err := w.value(p, o.MaxLen, 0)
	if err == nil && w.off != len(b) {
		err = w.fail(strconv.Itoa(len(b)-w.off) + " bytes after the value")
	}
	if err != nil {
		if de, ok := err.(*DecodeError); ok {
			de.Type = p.name
		}
		return err
	}
	return nil
}

// decodeInto decodes checked input into v. Not msgpack.Unmarshal: it turns
// on UsePreallocateValues, which starts a goroutine per type that allocates
// values ahead of need, outside any bound.
func decodeInto(b []byte, v any) error {
	dec := msgpack.GetDecoder()
	dec.Reset(bytes.NewReader(b))
	err := dec.Decode(v)
	msgpack.PutDecoder(dec)
	return err
}

var errNotPointer = errors.New("the destination must be a non-nil pointer")

// Check reports whether b holds exactly one well-formed msgpack value whose
// declared lengths fit in b, nested at most 32 deep.
func Check(b []byte) error {
	n, err := skim(b, 0)
	if err != nil {
		return err
	}
	if n != len(b) {
		return ErrMalformed
	}
	return nil
}

// skim returns the length of the msgpack value at the start of b.
func skim(b []byte, depth int) (int, error) {
	if len(b) == 0 || depth > maxDepth {
		return 0, ErrMalformed
	}
	c := b[0]
	switch {
	case c <= 0x7f || c >= 0xe0: // positive and negative fixint
		return 1, nil
	case c >= 0x80 && c <= 0x8f: // fixmap
		return skimItems(b, 1, 2*int(c&0x0f), depth)
	case c >= 0x90 && c <= 0x9f: // fixarray
		return skimItems(b, 1, int(c&0x0f), depth)
	case c >= 0xa0 && c <= 0xbf: // fixstr
		return skimBytes(b, 1, int(c&0x1f))
	}
	switch c {
	case 0xc0, 0xc2, 0xc3: // nil, false, true
		return 1, nil
	case 0xcc, 0xd0: // uint8, int8
		return fixed(b, 2)
	case 0xcd, 0xd1, 0xd4: // uint16, int16, fixext1
		return fixed(b, 3)
	case 0xd5: // fixext2
		return fixed(b, 4)
	case 0xca, 0xce, 0xd2: // float32, uint32, int32
		return fixed(b, 5)
	case 0xd6: // fixext4
		return fixed(b, 6)
	case 0xcb, 0xcf, 0xd3: // float64, uint64, int64
		return fixed(b, 9)
	case 0xd7: // fixext8
		return fixed(b, 10)
	case 0xd8: // fixext16
		return fixed(b, 18)
	case 0xc4, 0xd9: // bin8, str8
		return skimSized(b, 1, 0)
	case 0xc5, 0xda: // bin16, str16
		return skimSized(b, 2, 0)
	case 0xc6, 0xdb: // bin32, str32
		return skimSized(b, 4, 0)
	case 0xc7: // ext8
		return skimSized(b, 1, 1)
	case 0xc8: // ext16
		return skimSized(b, 2, 1)
	case 0xc9: // ext32
		return skimSized(b, 4, 1)
	case 0xdc, 0xdd: // array16, array32
		return skimCollection(b, c == 0xdc, 1, depth)
	case 0xde, 0xdf: // map16, map32
		return skimCollection(b, c == 0xde, 2, depth)
	}
	return 0, ErrMalformed // 0xc1 is never used
}

func fixed(b []byte, n int) (int, error) {
	if len(b) < n {
		return 0, ErrMalformed
	}
	return n, nil
}

// skimSized skips a str, bin or ext value: a length of size bytes, extra
// bytes (the ext type), then the payload.
func skimSized(b []byte, size, extra int) (int, error) {
	n, ok := readLen(b, size)
	if !ok {
		return 0, ErrMalformed
	}
	return skimBytes(b, 1+size+extra, n)
}

func skimBytes(b []byte, head, n int) (int, error) {
	if n > len(b)-head {
		return 0, ErrMalformed
	}
	return head + n, nil
}

func skimCollection(b []byte, short bool, perItem, depth int) (int, error) {
	size := 4
	if short {
		size = 2
	}
	n, ok := readLen(b, size)
	if !ok {
		return 0, ErrMalformed
	}
	return skimItems(b, 1+size, perItem*n, depth)
}

// skimItems skips n values after a header of head bytes. Every value takes
// at least one byte, so n larger than what is left is rejected before any
// work.
func skimItems(b []byte, head, n, depth int) (int, error) {
	if n > len(b)-head {
		return 0, ErrMalformed
	}
	off := head
	for range n {
		m, err := skim(b[off:], depth+1)
		if err != nil {
			return 0, err
		}
		off += m
	}
	return off, nil
}
