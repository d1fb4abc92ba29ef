package model

import (
	"encoding/json"
	"iter"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
)

// Metadata is an immutable set of string key/value pairs, kept sorted by
// key. Its zero value is empty and ready to use.
//
// Metadata is immutable so that instances and views can be shared between
// readers without copies: nothing a caller does to a value it got from the
// registry can change what other readers see. It is compact and encodes
// deterministically, which matters for snapshots and digests: it holds one
// string, the pairs' msgpack encoding as EncodeMsgpack writes it (a map
// header, then each key and its value in key order, every header in its
// shortest form). So a set of pairs costs one allocation of about the size
// of its keys and values, encoding it is a copy, comparing two is a string
// comparison, and a decoder can keep a window on a payload that holds the
// encoding rather than copy it. A lookup walks the pairs, which is as fast
// as a binary search for the few pairs instances carry.
type Metadata struct {
	p string // the encoding; "" when empty
}

// NewMetadata copies m into a Metadata.
func NewMetadata(m map[string]string) Metadata {
	keys := slices.Sorted(maps.Keys(m))
	return encodePairs(len(keys), func(i int) (string, string) { return keys[i], m[keys[i]] })
}

// metadataOf encodes kv, pairs in strictly ascending key order.
func metadataOf(kv []string) Metadata {
	return encodePairs(len(kv)/2, func(i int) (string, string) { return kv[2*i], kv[2*i+1] })
}

// encodePairs encodes n pairs, pair(i) the ith in strictly ascending key
// order, in one allocation of the encoding's size.
func encodePairs(n int, pair func(i int) (k, v string)) Metadata {
	if n == 0 {
		return Metadata{}
	}
	size := mapHeaderLen(n)
	for i := range n {
		k, v := pair(i)
		size += strLen(k) + strLen(v)
	}
	b := appendMapHeader(make([]byte, 0, size), n)
	for i := range n {
		k, v := pair(i)
		b = appendStr(appendStr(b, k), v)
	}
	return Metadata{p: unsafe.String(unsafe.SliceData(b), len(b))}
}

// pairs returns m's keys and values, kv[2i] a key and kv[2i+1] its value,
// as windows on m's encoding.
func (m Metadata) pairs() []string {
	kv := make([]string, 0, 2*m.Len())
	for off := m.first(); off < len(m.p); {
		var s string
		s, off = strAt(m.p, off)
		kv = append(kv, s)
	}
	return kv
}

// first returns the offset of the first key, past the map header.
func (m Metadata) first() int {
	if m.p == "" {
		return 0
	}
	switch c := m.p[0]; c {
	case 0xde:
		return 3
	case 0xdf:
		return 5
	}
	return 1
}

// strAt returns the string whose msgpack encoding starts at off in p, a
// Metadata's encoding, and the offset past it. Go does not inline it: the
// loops on the registration path (find, ByteSize, plainMetadata) try
// shortStrAt first.
func strAt(p string, off int) (string, int) {
	if s, next, ok := shortStrAt(p, off); ok {
		return s, next
	}
	n, h := 0, 5
	switch p[off] {
	case 0xd9:
		n, h = int(p[off+1]), 2
	case 0xda:
		n, h = int(p[off+1])<<8|int(p[off+2]), 3
	default: // 0xdb
		n = int(p[off+1])<<24 | int(p[off+2])<<16 | int(p[off+3])<<8 | int(p[off+4])
	}
	off += h
	return p[off : off+n], off + n
}

// shortStrAt is strAt for a fixstr (0xa0–0xbf), the string metadata mostly
// holds, small enough for Go to inline. ok is false for a longer string,
// which the caller reads with strAt.
func shortStrAt(p string, off int) (s string, next int, ok bool) {
	c := p[off]
	if c >= 0xc0 {
		return "", off, false
	}
	next = off + 1 + int(c&0x1f)
	return p[off+1 : next], next, true
}

// strLen is the length of s's msgpack encoding.
func strLen(s string) int { return strHeaderLen(len(s)) + len(s) }

// strHeaderLen is the length of the msgpack header of a string of n bytes.
func strHeaderLen(n int) int {
	switch {
	case n < 32:
		return 1
	case n <= math.MaxUint8:
		return 2
	case n <= math.MaxUint16:
		return 3
	}
	return 5
}

// mapHeaderLen is the length of the msgpack header of a map of n pairs.
func mapHeaderLen(n int) int {
	switch {
	case n < 16:
		return 1
	case n <= math.MaxUint16:
		return 3
	}
	return 5
}

// appendMapHeader appends the msgpack header of a map of n pairs.
func appendMapHeader(b []byte, n int) []byte { return appendCollectionLen(b, n, 0x80, 0xde, 0xdf) }

// IsZero reports whether m is empty (it lets msgpack's omitempty see that).
func (m Metadata) IsZero() bool { return m.p == "" }

// Len returns the number of entries.
func (m Metadata) Len() int {
	if m.p == "" {
		return 0
	}
	switch c := m.p[0]; c {
	case 0xde:
		return int(m.p[1])<<8 | int(m.p[2])
	case 0xdf:
		return int(m.p[1])<<24 | int(m.p[2])<<16 | int(m.p[3])<<8 | int(m.p[4])
	default:
		return int(c & 0x0f)
	}
}

// Get returns the value of key and whether it is present.
func (m Metadata) Get(key string) (string, bool) { return m.find(key, false) }

// find walks the keys in order to key, or with prefix to the first key
// that starts with key, and returns its value. The registration path asks
// it for every instance (Get, hasPrefix).
func (m Metadata) find(key string, prefix bool) (string, bool) {
	p := m.p
	for off := m.first(); off < len(p); {
		k, next, ok := shortStrAt(p, off)
		if !ok {
			k, next = strAt(p, off)
		}
		if k == key || prefix && strings.HasPrefix(k, key) {
			v, _ := strAt(p, next)
			return v, true
		}
		if k != "" && key != "" && k[0] > key[0] {
			break // keys are in order: no later one is key, or starts with it
		}
		if _, off, ok = shortStrAt(p, next); !ok {
			_, off = strAt(p, next)
		}
	}
	return "", false
}

// Value returns the value of key, or "" when it is absent.
func (m Metadata) Value(key string) string {
	v, _ := m.Get(key)
	return v
}

// All iterates over the entries in key order.
func (m Metadata) All() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for off := m.first(); off < len(m.p); {
			var k, v string
			k, off = strAt(m.p, off)
			v, off = strAt(m.p, off)
			if !yield(k, v) {
				return
			}
		}
	}
}

// Map returns a new map holding the entries; nil when m is empty.
func (m Metadata) Map() map[string]string {
	if m.p == "" {
		return nil
	}
	out := make(map[string]string, m.Len())
	for k, v := range m.All() {
		out[k] = v
	}
	return out
}

// With returns a copy of m with key set to value.
func (m Metadata) With(key, value string) Metadata {
	if v, ok := m.Get(key); ok && v == value {
		return m
	}
	kv := m.pairs()
	i, ok := search(kv, key)
	if ok {
		kv[2*i+1] = value
	} else {
		kv = slices.Insert(kv, 2*i, key, value)
	}
	return metadataOf(kv)
}

// Without returns a copy of m without key.
func (m Metadata) Without(key string) Metadata {
	if _, ok := m.Get(key); !ok {
		return m
	}
	kv := m.pairs()
	i, _ := search(kv, key)
	return metadataOf(slices.Delete(kv, 2*i, 2*i+2))
}

// Merge returns m overlaid with over: entries of over win.
func (m Metadata) Merge(over Metadata) Metadata {
	if over.Len() == 0 {
		return m
	}
	if m.Len() == 0 {
		return over
	}
	a, b := m.pairs(), over.pairs()
	kv := make([]string, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch c := strings.Compare(a[i], b[j]); {
		case c < 0:
			kv = append(kv, a[i], a[i+1])
			i += 2
		case c > 0:
			kv = append(kv, b[j], b[j+1])
			j += 2
		default:
			kv = append(kv, b[j], b[j+1])
			i += 2
			j += 2
		}
	}
	kv = append(kv, a[i:]...)
	kv = append(kv, b[j:]...)
	return metadataOf(kv)
}

// SharedIn returns metadata equal to m whose bytes are a window on s, when
// s holds m's encoding (as a payload that m was encoded into does), and m
// itself otherwise. Whoever keeps both s and m then keeps m's bytes once.
// s must never be modified afterwards (see UnmarshalInstanceListShared).
func (m Metadata) SharedIn(s string) Metadata {
	if m.p == "" {
		return m
	}
	if strings.HasSuffix(s, m.p) { // an instance's encoding ends with its metadata
		return Metadata{p: s[len(s)-len(m.p):]}
	}
	if i := strings.Index(s, m.p); i >= 0 {
		return Metadata{p: s[i : i+len(m.p)]}
	}
	return m
}

// Equal reports whether m and o hold the same entries.
func (m Metadata) Equal(o Metadata) bool { return m.p == o.p }

// Size returns the sum of the lengths, in characters, of all keys and
// values: the measure Nacos caps (1024 by default).
func (m Metadata) Size() int {
	n := 0
	for off := m.first(); off < len(m.p); {
		var s string
		s, off = strAt(m.p, off)
		n += utf8.RuneCountInString(s)
	}
	return n
}

// ByteSize returns the sum of the lengths, in bytes, of all keys and
// values: at least Size, and Size itself when they are ASCII.
func (m Metadata) ByteSize() int {
	n := 0
	for off := m.first(); off < len(m.p); {
		s, next, ok := shortStrAt(m.p, off)
		if !ok {
			s, next = strAt(m.p, off)
		}
		n += len(s)
		off = next
	}
	return n
}

// String formats m as "{k1=v1, k2=v2}".
func (m Metadata) String() string {
	var b strings.Builder
	b.WriteByte('{')
	for k, v := range m.All() {
		if b.Len() > 1 {
			b.WriteString(", ")
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(v)
	}
	b.WriteByte('}')
	return b.String()
}

// hasPrefix reports whether some key starts with prefix.
func (m Metadata) hasPrefix(prefix string) bool {
	_, ok := m.find(prefix, true)
	return ok
}

// search returns the index of key among the pairs kv, or where it would be
// inserted.
func search(kv []string, key string) (int, bool) {
	lo, hi := 0, len(kv)/2
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if kv[2*mid] < key {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, lo < len(kv)/2 && kv[2*lo] == key
}

// EncodeMsgpack writes m as a msgpack map in key order.
func (m Metadata) EncodeMsgpack(enc *msgpack.Encoder) error {
	if err := enc.EncodeMapLen(m.Len()); err != nil {
		return err
	}
	for k, v := range m.All() {
		if err := enc.EncodeString(k); err != nil {
			return err
		}
		if err := enc.EncodeString(v); err != nil {
			return err
		}
	}
	return nil
}

// DecodeMsgpack reads a msgpack map (or nil). Duplicate keys keep the last
// value, as a Go map would. It reads the pairs into one slice, then
// encodes them (sorted, if they were not) into the Metadata; the decoders
// on the hot paths (UnmarshalCommands, UnmarshalInstanceList) keep input
// already in that form as it is instead.
func (m *Metadata) DecodeMsgpack(dec *msgpack.Decoder) error {
	n, err := dec.DecodeMapLen()
	if err != nil {
		return err
	}
	if n <= 0 {
		*m = Metadata{}
		return nil
	}
	kv := make([]string, 0, 2*min(n, 1<<16))
	for range n {
		k, err := dec.DecodeString()
		if err != nil {
			return err
		}
		v, err := dec.DecodeString()
		if err != nil {
			return err
		}
		kv = append(kv, k, v)
	}
	*m = metadataOf(sortPairs(kv))
	return nil
}

// sortPairs sorts key/value pairs by key, keeping the last value of a
// duplicate key.
func sortPairs(kv []string) []string {
	sorted := true
	for i := 2; i < len(kv); i += 2 {
		if kv[i-2] >= kv[i] {
			sorted = false
			break
		}
	}
	if sorted {
		return kv
	}
	sort.Stable(pairs(kv))
	out := kv[:0]
	for i := 0; i < len(kv); i += 2 {
		if i+2 < len(kv) && kv[i+2] == kv[i] {
			continue // a later pair has the same key
		}
		out = append(out, kv[i], kv[i+1])
	}
	return out
}

// pairs sorts key/value pairs by key.
type pairs []string

func (p pairs) Len() int           { return len(p) / 2 }
func (p pairs) Less(i, j int) bool { return p[2*i] < p[2*j] }
func (p pairs) Swap(i, j int) {
	p[2*i], p[2*j] = p[2*j], p[2*i]
	p[2*i+1], p[2*j+1] = p[2*j+1], p[2*i+1]
}

// MarshalJSON writes m as a JSON object.
func (m Metadata) MarshalJSON() ([]byte, error) {
	if m.Len() == 0 {
		return []byte("{}"), nil
	}
	return json.Marshal(m.Map())
}

// UnmarshalJSON reads a JSON object of strings (or null).
func (m *Metadata) UnmarshalJSON(b []byte) error {
	var pairs map[string]string
	if err := json.Unmarshal(b, &pairs); err != nil {
		return err
	}
	*m = NewMetadata(pairs)
	return nil
}
