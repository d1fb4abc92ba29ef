package model

import (
	"encoding/binary"
	"strconv"
)

// The allocation bound. Before msgpack decodes anything, Unmarshal walks the
// input alongside the plan of the destination type and adds up an upper
// bound of what msgpack v5 will allocate for it:
//
//   - a slice of n elements: 2 × n × the element size (msgpack makes the
//     elements, then appends them to the empty destination);
//   - []string: n × 16; []byte: n; a map: its table for n entries, plus
//     msgpack's per-entry temporaries;
//   - a string: its bytes, plus the decoder's scratch buffer whenever a
//     read is longer than any before it;
//   - a pointer: the pointed-to value;
//   - Metadata: 2 × n strings;
//   - an interface{}: what msgpack's DecodeInterface builds.
//
// Every allocation is rounded up to Go's size classes (allocSize). Unknown
// struct fields are skipped by msgpack, which costs only scratch-buffer
// reads. The walk fails as soon as the sum passes the limit, so a hostile
// length costs no more time than its header.

// header returns the family of the msgpack value at the start of b, the
// length of its header, and its length: payload bytes for str, bin and ext,
// elements for arrays, entries for maps; ok is false for a truncated header
// or the unused code 0xc1.
func header(b []byte) (fam family, head, n int, ok bool) {
	if len(b) == 0 {
		return 0, 0, 0, false
	}
	c := b[0]
	switch {
	case c <= 0x7f || c >= 0xe0:
		return fInt, 1, 0, true
	case c <= 0x8f:
		return fMap, 1, int(c & 0x0f), true
	case c <= 0x9f:
		return fArray, 1, int(c & 0x0f), true
	case c <= 0xbf:
		return fStr, 1, int(c & 0x1f), true
	}
	sized := func(f family, size, extra int) (family, int, int, bool) {
		n, ok := readLen(b, size)
		return f, 1 + size + extra, n, ok
	}
	fixed := func(f family, total int) (family, int, int, bool) {
		return f, total, 0, len(b) >= total
	}
	switch c {
	case 0xc0:
		return fNil, 1, 0, true
	case 0xc2, 0xc3:
		return fBool, 1, 0, true
	case 0xcc, 0xd0:
		return fixed(fInt, 2)
	case 0xcd, 0xd1:
		return fixed(fInt, 3)
	case 0xce, 0xd2:
		return fixed(fInt, 5)
	case 0xcf, 0xd3:
		return fixed(fInt, 9)
	case 0xca:
		return fixed(fFloat, 5)
	case 0xcb:
		return fixed(fFloat, 9)
	case 0xd9:
		return sized(fStr, 1, 0)
	case 0xda:
		return sized(fStr, 2, 0)
	case 0xdb:
		return sized(fStr, 4, 0)
	case 0xc4:
		return sized(fBin, 1, 0)
	case 0xc5:
		return sized(fBin, 2, 0)
	case 0xc6:
		return sized(fBin, 4, 0)
	case 0xdc:
		return sized(fArray, 2, 0)
	case 0xdd:
		return sized(fArray, 4, 0)
	case 0xde:
		return sized(fMap, 2, 0)
	case 0xdf:
		return sized(fMap, 4, 0)
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1, 2, 4, 8, 16
		return fExt, 2, 1 << (c - 0xd4), len(b) >= 2
	case 0xc7:
		return sized(fExt, 1, 1)
	case 0xc8:
		return sized(fExt, 2, 1)
	case 0xc9:
		return sized(fExt, 4, 1)
	}
	return 0, 0, 0, false
}

type family uint8

const (
	fNil family = iota
	fBool
	fInt
	fFloat
	fStr
	fBin
	fArray
	fMap
	fExt
)

var familyNames = [...]string{"nil", "a bool", "an integer", "a float", "a string", "a binary", "an array", "a map", "an ext"}

// allocSize bounds what the Go allocator takes for an object of n bytes:
// nothing is smaller than 16 bytes (the tiny allocator's block), rounding up
// to a size class wastes less than a quarter (768 → 896 is the worst above
// the smallest classes), and a large object takes whole 8 KiB pages.
func allocSize(n int64) int64 {
	switch {
	case n <= 0:
		return 0
	case n <= 16:
		return 16
	case n <= 32<<10:
		return n + n/4 + 16
	}
	return n + 8<<10
}

// mul returns a × b, saturated well above any limit.
func mul(a, b int64) int64 {
	const max = 1 << 62
	if a != 0 && b > max/a {
		return max
	}
	return a * b
}

// mapCost bounds a Go map made for n entries of slot bytes: Swiss tables
// keep at most 7/8 of a power-of-two number of slots full, plus a control
// byte per slot.
func mapCost(n, slot int64) int64 {
	return 64 + mul(3*n+8, slot+1)
}

// grown bounds what growing by appends to the size c takes, when grow is
// set: the capacities grow by at least 1.25 at a time, so all of them
// together take at most 5 × (1.25 × c), and 8 × c leaves room for rounding.
func grown(c int64, grow bool) int64 {
	if grow {
		return mul(c, 8)
	}
	return c
}

// fixedCost is what every decode allocates whatever its input: the reader,
// a decoder if the pool is empty, and the decoder's first scratch buffer.
const fixedCost = 64 + 192 + 64

type walker struct {
	b      []byte
	off    int
	cost   int64
	limit  int64
	bufMax int // the longest read through the decoder's scratch buffer so far
}

func (w *walker) fail(rule string) error {
	return &DecodeError{Rule: rule, Err: ErrMalformed}
}

func (w *walker) charge(n int64) error {
	w.cost += n
	if w.cost > w.limit || n < 0 {
		rule := "decoding would allocate more than " + strconv.FormatInt(w.limit, 10) + " bytes"
		if w.limit == int64(MaxDecodeRatio)*int64(len(w.b))+DecodeSlack {
			rule += " (" + itoa(MaxDecodeRatio) + " × the " + itoa(len(w.b)) + "-byte input + " + itoa(DecodeSlack) + ")"
		}
		return &DecodeError{Rule: rule, Err: ErrTooLarge}
	}
	return nil
}

// read charges a read of n bytes through msgpack's scratch buffer, which
// grows (up to twice the length it needs) when n is longer than before, in
// steps of 1 MiB beyond 1 MiB.
func (w *walker) read(n int) error {
	return w.charge(readCost(n, &w.bufMax))
}

// readCost is the charge of a read of n bytes through msgpack's scratch
// buffer when the longest read so far is *longest, which it updates.
func readCost(n int, longest *int) int64 {
	if n <= *longest {
		return 0
	}
	*longest = n
	if n <= 1<<20 {
		return allocSize(2 * int64(n))
	}
	return mul(8, int64(n)) + 6<<20
}

// str charges a string of n bytes: the scratch buffer, then the copy (a
// one-byte string is static).
func (w *walker) str(n int) error {
	if err := w.read(n); err != nil {
		return err
	}
	return w.charge(strCopyCost(n))
}

// strCopyCost is the charge of a string's copy: a one-byte string is static.
func strCopyCost(n int) int64 {
	if n > 1 {
		return allocSize(int64(n))
	}
	return 0
}

// sliceCost is the charge of a slice of n elements of size bytes: msgpack
// makes the elements, then appends them to the empty destination.
func sliceCost(n int, size int64) int64 { return 2 * allocSize(mul(int64(n), size)) }

// metadataPairsCost is the charge of a Metadata's n pairs before their
// strings: the pairs in one slice (grown by appends past 1<<16 pairs), and
// a sort.Interface if they are out of order.
func metadataPairsCost(n int) int64 {
	return grown(allocSize(32*int64(n)), n > 1<<16) + 32
}

// at prefixes the path of a *DecodeError with seg.
func at(err error, seg string) error {
	if de, ok := err.(*DecodeError); ok {
		de.Path = seg + de.Path
	}
	return err
}

func index(i int) string { return "[" + itoa(i) + "]" }

func (w *walker) wrong(p *plan, fam family) error {
	return w.fail("want a value for " + p.name + ", got " + familyNames[fam])
}

// value walks one value decoded into p. max, if positive, caps its length.
func (w *walker) value(p *plan, max, depth int) error {
	if depth > maxDepth {
		return w.fail("nested more than " + itoa(maxDepth) + " deep")
	}
	fam, head, n, ok := header(w.b[w.off:])
	if !ok {
		return w.fail("truncated or unknown msgpack code")
	}
	rest := len(w.b) - w.off - head
	if rest < 0 {
		return w.fail("truncated msgpack header")
	}
	if fam == fNil {
		if !p.kind.nilable() {
			return w.fail("nil where " + p.name + " has none")
		}
		w.off += head
		return nil
	}
	// Declared lengths must fit in what follows: every element takes at
	// least a byte, and a payload its length.
	switch fam {
	case fStr, fBin, fExt:
		if n > rest {
			return w.fail("declares " + itoa(n) + " bytes, " + itoa(rest) + " follow")
		}
	case fArray:
		if n > rest {
			return w.fail("declares " + itoa(n) + " elements, " + itoa(rest) + " bytes follow")
		}
	case fMap:
		if 2*n > rest {
			return w.fail("declares " + itoa(n) + " entries, " + itoa(rest) + " bytes follow")
		}
	}
	if max > 0 && n > max && (fam == fStr || fam == fBin || fam == fArray || fam == fMap) && p.kind != pStruct {
		return &DecodeError{Rule: "must hold at most " + itoa(max) + " (declares " + itoa(n) + ")", Err: ErrTooLarge}
	}
	switch p.kind {
	case pBool:
		if fam != fBool {
			return w.wrong(p, fam)
		}
		w.off += head
	case pInt, pFloat:
		if fam != fInt && (p.kind == pInt || fam != fFloat) {
			return w.wrong(p, fam)
		}
		w.off += head
	case pString, pBytes, pByteArray:
		if fam != fStr && fam != fBin {
			return w.wrong(p, fam)
		}
		var err error
		switch p.kind {
		case pString:
			err = w.str(n)
		case pBytes:
			err = w.charge(allocSize(int64(n)))
		default:
			if n > p.n {
				err = w.fail("holds " + itoa(n) + " bytes, more than " + p.name)
			}
		}
		if err != nil {
			return err
		}
		w.off += head + n
	case pStrings, pSlice, pArray:
		if fam != fArray {
			return w.wrong(p, fam)
		}
		var err error
		switch p.kind {
		case pStrings:
			// msgpack sizes []string up to 1e6 elements, then appends.
			err = w.charge(grown(allocSize(16*int64(n)), n > 1e6))
		case pSlice:
			err = w.charge(sliceCost(n, p.elem.size))
		default:
			if n > p.n {
				err = w.fail("holds " + itoa(n) + " elements, more than " + p.name)
			}
		}
		if err != nil {
			return err
		}
		w.off += head
		for i := range n {
			if err := w.value(p.elem, 0, depth+1); err != nil {
				return at(err, index(i))
			}
		}
	case pMap:
		if fam != fMap {
			return w.wrong(p, fam)
		}
		// msgpack sizes maps up to 1e6 entries; more grow the table.
		if err := w.charge(grown(mapCost(int64(n), p.slot), n > 1e6) + mul(int64(n), p.temps)); err != nil {
			return err
		}
		w.off += head
		for i := range n {
			if err := w.value(p.key, 0, depth+1); err != nil {
				return at(err, index(i)+".key")
			}
			if err := w.value(p.elem, 0, depth+1); err != nil {
				return at(err, index(i))
			}
		}
	case pSelf:
		// Its own decoder answers for what it allocates; the walk still
		// checks that the value is well-formed and fits (skim: the plain
		// length walk, with a small stack frame, for what may be a large
		// list).
		n, err := skim(w.b[w.off:], depth)
		if err != nil {
			return w.fail("malformed " + p.name)
		}
		w.off += n
	case pMetadata:
		if fam != fMap {
			return w.wrong(p, fam)
		}
		if err := w.charge(metadataPairsCost(n)); err != nil {
			return err
		}
		start := w.off
		w.off += head
		for i := range 2 * n {
			if err := w.value(&metadataString, 0, depth+1); err != nil {
				return at(err, "["+itoa(i/2)+"]")
			}
		}
		// Their encoding, Metadata's own form: never longer than the input
		// (its headers are the shortest; a duplicate key only drops bytes).
		if err := w.charge(allocSize(int64(w.off - start))); err != nil {
			return err
		}
	case pStruct:
		return w.structure(p, fam, head, n, depth)
	case pPtr:
		if err := w.charge(allocSize(p.elem.size)); err != nil {
			return err
		}
		return w.value(p.elem, max, depth)
	case pAny:
		return w.dynamic(depth)
	}
	return nil
}

// metadataString is the plan of a metadata key or value.
var metadataString = plan{kind: pString, name: "a metadata string"}

func (w *walker) structure(p *plan, fam family, head, n, depth int) error {
	switch fam {
	case fArray:
		w.off += head
		if n == 0 {
			return nil
		}
		if n != len(p.list) {
			return w.fail("an array of " + itoa(n) + " for the " + itoa(len(p.list)) + " fields of " + p.name)
		}
		for _, f := range p.list {
			if err := w.value(f.p, f.max, depth+1); err != nil {
				return at(err, "."+f.name)
			}
		}
		return nil
	case fMap:
		w.off += head
		next := 0 // Marshal writes the fields in order: try the next ones first
		for range n {
			kfam, khead, kn, ok := header(w.b[w.off:])
			if !ok || kfam != fStr && kfam != fBin {
				return w.fail("a field name of " + p.name + " must be a string")
			}
			start := w.off + khead
			if kn > len(w.b)-start {
				return w.fail("truncated field name")
			}
			if err := w.read(kn); err != nil {
				return err
			}
			w.off = start + kn
			name := w.b[start:w.off]
			var f *field
			for i := next; i < len(p.list); i++ {
				if p.list[i].name == string(name) && !p.list[i].shadowed {
					f, next = p.list[i], i+1
					break
				}
			}
			if f == nil {
				f = p.fields[string(name)] // an alias, or out of order
			}
			if f == nil {
				if err := w.skip(depth + 1); err != nil {
					return at(err, "."+strconv.Quote(string(w.b[start:start+kn])))
				}
				continue
			}
			if err := w.value(f.p, f.max, depth+1); err != nil {
				return at(err, "."+f.name)
			}
		}
		return nil
	}
	return w.wrong(p, fam)
}

// skip walks a value msgpack skips (a field the destination does not have):
// that only reads through the scratch buffer.
func (w *walker) skip(depth int) error {
	if depth > maxDepth {
		return w.fail("nested more than " + itoa(maxDepth) + " deep")
	}
	fam, head, n, ok := header(w.b[w.off:])
	if !ok || head > len(w.b)-w.off {
		return w.fail("truncated or unknown msgpack code")
	}
	rest := len(w.b) - w.off - head
	w.off += head
	switch fam {
	case fStr, fBin, fExt:
		if n > rest {
			return w.fail("declares " + itoa(n) + " bytes, " + itoa(rest) + " follow")
		}
		w.off += n
		return w.read(n + 1)
	case fArray, fMap:
		items := n
		if fam == fMap {
			items = 2 * n
		}
		if items > rest {
			return w.fail("declares " + itoa(n) + " elements, " + itoa(rest) + " bytes follow")
		}
		for range items {
			if err := w.skip(depth + 1); err != nil {
				return err
			}
		}
	}
	return nil
}

// dynamic walks a value decoded into an empty interface, charging what
// msgpack's DecodeInterface builds: boxed numbers, strings and byte slices,
// []interface{} and map[string]interface{}; of the ext types only the
// timestamp, which msgpack registers itself.
func (w *walker) dynamic(depth int) error {
	if depth > maxDepth {
		return w.fail("nested more than " + itoa(maxDepth) + " deep")
	}
	fam, head, n, ok := header(w.b[w.off:])
	if !ok || head > len(w.b)-w.off {
		return w.fail("truncated or unknown msgpack code")
	}
	rest := len(w.b) - w.off - head
	c := w.b[w.off]
	var err error
	switch fam {
	case fNil, fBool:
	case fInt, fFloat:
		if c > 0x7f && c < 0xe0 && c != 0xcc && c != 0xd0 { // one-byte values are boxed for free
			err = w.charge(16)
		}
	case fStr, fBin:
		if n > rest {
			return w.fail("declares " + itoa(n) + " bytes, " + itoa(rest) + " follow")
		}
		if fam == fStr {
			err = w.str(n)
		} else {
			err = w.charge(allocSize(int64(n)))
		}
		if err == nil {
			err = w.charge(32) // the boxed header
		}
		w.off += n
	case fExt:
		if n > rest || int8(w.b[w.off+head-1]) != -1 {
			return w.fail("an ext value other than a timestamp in an interface")
		}
		w.off += n
		err = w.charge(64)
	case fArray:
		if n > rest {
			return w.fail("declares " + itoa(n) + " elements, " + itoa(rest) + " bytes follow")
		}
		if err := w.charge(allocSize(16*int64(n)) + 32); err != nil {
			return err
		}
		w.off += head
		for i := range n {
			if err := w.dynamic(depth + 1); err != nil {
				return at(err, index(i))
			}
		}
		return nil
	case fMap:
		if 2*n > rest {
			return w.fail("declares " + itoa(n) + " entries, " + itoa(rest) + " bytes follow")
		}
		if err := w.charge(mapCost(int64(n), 40)); err != nil {
			return err
		}
		w.off += head
		for i := range n {
			kfam, khead, kn, ok := header(w.b[w.off:])
			if !ok || kfam != fStr && kfam != fBin && kfam != fNil || kn > len(w.b)-w.off-khead {
				return w.fail("a map key in an interface must be a string")
			}
			if err := w.str(kn); err != nil {
				return err
			}
			w.off += khead + kn
			if err := w.dynamic(depth + 1); err != nil {
				return at(err, index(i))
			}
		}
		return nil
	}
	w.off += head
	return err
}

// readLen reads a big-endian length of size bytes after the code byte.
func readLen(b []byte, size int) (int, bool) {
	if len(b) < 1+size {
		return 0, false
	}
	switch size {
	case 1:
		return int(b[1]), true
	case 2:
		return int(binary.BigEndian.Uint16(b[1:])), true
	default:
		return int(binary.BigEndian.Uint32(b[1:])), true
	}
}

// itoa is strconv.Itoa kept out of line: the walk's error messages use it at
// many call sites, and inlined, each would add its digit buffer to the stack
// frame of the recursive walk, which every decode in a fresh goroutine (a
// transport handler) then pays for in stack growth.
//
//go:noinline
func itoa(n int) string { return strconv.Itoa(n) }
