package model

import (
	"encoding/json"
	"iter"
	"maps"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"
)

// Metadata is an immutable set of string key/value pairs, kept sorted by
// key. Its zero value is empty and ready to use.
//
// Metadata is immutable so that instances and views can be shared between
// readers without copies: nothing a caller does to a value it got from the
// registry can change what other readers see. It is also compact (one slice,
// no hash table) and encodes deterministically, which matters for snapshots
// and digests.
type Metadata struct {
	kv []string // kv[2i] is a key, kv[2i+1] its value; keys strictly ascending
}

// NewMetadata copies m into a Metadata.
func NewMetadata(m map[string]string) Metadata {
	if len(m) == 0 {
		return Metadata{}
	}
	keys := slices.Sorted(maps.Keys(m))
	kv := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		kv = append(kv, k, m[k])
	}
	return Metadata{kv: kv}
}

// IsZero reports whether m is empty (it lets msgpack's omitempty see that).
func (m Metadata) IsZero() bool { return len(m.kv) == 0 }

// Len returns the number of entries.
func (m Metadata) Len() int { return len(m.kv) / 2 }

// Get returns the value of key and whether it is present.
func (m Metadata) Get(key string) (string, bool) {
	i, ok := m.search(key)
	if !ok {
		return "", false
	}
	return m.kv[2*i+1], true
}

// Value returns the value of key, or "" when it is absent.
func (m Metadata) Value(key string) string {
	v, _ := m.Get(key)
	return v
}

// All iterates over the entries in key order.
func (m Metadata) All() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for i := 0; i < len(m.kv); i += 2 {
			if !yield(m.kv[i], m.kv[i+1]) {
				return
			}
		}
	}
}

// Map returns a new map holding the entries; nil when m is empty.
func (m Metadata) Map() map[string]string {
	if len(m.kv) == 0 {
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
	i, ok := m.search(key)
	if ok && m.kv[2*i+1] == value {
		return m
	}
	kv := make([]string, 0, len(m.kv)+2)
	kv = append(kv, m.kv[:2*i]...)
	kv = append(kv, key, value)
	if ok {
		i++
	}
	kv = append(kv, m.kv[2*i:]...)
	return Metadata{kv: kv}
}

// Without returns a copy of m without key.
func (m Metadata) Without(key string) Metadata {
	i, ok := m.search(key)
	if !ok {
		return m
	}
	kv := make([]string, 0, len(m.kv)-2)
	kv = append(kv, m.kv[:2*i]...)
	kv = append(kv, m.kv[2*i+2:]...)
	return Metadata{kv: kv}
}

// Merge returns m overlaid with over: entries of over win.
func (m Metadata) Merge(over Metadata) Metadata {
	if over.Len() == 0 {
		return m
	}
	if m.Len() == 0 {
		return over
	}
	kv := make([]string, 0, len(m.kv)+len(over.kv))
	i, j := 0, 0
	for i < len(m.kv) && j < len(over.kv) {
		switch c := strings.Compare(m.kv[i], over.kv[j]); {
		case c < 0:
			kv = append(kv, m.kv[i], m.kv[i+1])
			i += 2
		case c > 0:
			kv = append(kv, over.kv[j], over.kv[j+1])
			j += 2
		default:
			kv = append(kv, over.kv[j], over.kv[j+1])
			i += 2
			j += 2
		}
	}
	kv = append(kv, m.kv[i:]...)
	kv = append(kv, over.kv[j:]...)
	return Metadata{kv: kv}
}

// Equal reports whether m and o hold the same entries.
func (m Metadata) Equal(o Metadata) bool { return slices.Equal(m.kv, o.kv) }

// Size returns the sum of the lengths, in characters, of all keys and
// values: the measure Nacos caps (1024 by default).
func (m Metadata) Size() int {
	n := 0
	for _, s := range m.kv {
		n += utf8.RuneCountInString(s)
	}
	return n
}

// ByteSize returns the sum of the lengths, in bytes, of all keys and
// values: at least Size, and Size itself when they are ASCII.
func (m Metadata) ByteSize() int {
	n := 0
	for _, s := range m.kv {
		n += len(s)
	}
	return n
}

// String formats m as "{k1=v1, k2=v2}".
func (m Metadata) String() string {
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i < len(m.kv); i += 2 {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(m.kv[i])
		b.WriteByte('=')
		b.WriteString(m.kv[i+1])
	}
	b.WriteByte('}')
	return b.String()
}

// hasPrefix reports whether some key starts with prefix.
func (m Metadata) hasPrefix(prefix string) bool {
	i, _ := m.search(prefix)
	return i < m.Len() && strings.HasPrefix(m.kv[2*i], prefix)
}

// search returns the index of key among the entries, or where it would be
// inserted.
func (m Metadata) search(key string) (int, bool) {
	lo, hi := 0, m.Len()
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if m.kv[2*mid] < key {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, lo < m.Len() && m.kv[2*lo] == key
}

// EncodeMsgpack writes m as a msgpack map in key order.
func (m Metadata) EncodeMsgpack(enc *msgpack.Encoder) error {
	if err := enc.EncodeMapLen(m.Len()); err != nil {
		return err
	}
	for _, s := range m.kv {
		if err := enc.EncodeString(s); err != nil {
			return err
		}
	}
	return nil
}

// DecodeMsgpack reads a msgpack map (or nil). Duplicate keys keep the last
// value, as a Go map would. The pairs are read into one slice, which is all
// it allocates besides the strings; input in key order, as EncodeMsgpack
// writes it, is not sorted again.
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
	*m = Metadata{kv: sortPairs(kv)}
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
