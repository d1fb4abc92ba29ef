package model

import (
	"bytes"
	"encoding/binary"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/muster-io/muster/internal/testutil"
	"github.com/vmihailenco/msgpack/v5"
)

// randomMetaString returns a key or value of a length that exercises every
// msgpack string header: fixstr, str8, str16 and (rarely) str32.
func randomMetaString(r *rand.Rand) string {
	switch r.IntN(12) {
	case 0:
		return ""
	case 1:
		return strings.Repeat("m", 32+r.IntN(224)) // str8
	case 2:
		return strings.Repeat("n", 256+r.IntN(300)) // str16
	}
	if r.IntN(500) == 0 {
		return strings.Repeat("o", 1<<16+r.IntN(10)) // str32
	}
	return "k" + strconv.Itoa(r.IntN(40))
}

// sortedMsgpack is the msgpack encoding of m with its keys in order: what
// Metadata's encoding must be.
func sortedMsgpack(t testing.TB, m map[string]string) []byte {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(m); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestMetadataAgainstMap: Metadata's operations agree with a Go map's, and
// its encoding is msgpack's of the map with sorted keys, at every header
// size (fixmap and map16; fixstr, str8, str16, str32).
func TestMetadataAgainstMap(t *testing.T) {
	testutil.Seeds(t, 0, 1, func(t *testing.T, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 7))
		for range 400 {
			ref := map[string]string{}
			for range r.IntN(3) * r.IntN(12) { // 0 to 22 entries: fixmap and map16
				ref[randomMetaString(r)] = randomMetaString(r)
			}
			m := NewMetadata(ref)
			for range 6 {
				k, v := randomMetaString(r), randomMetaString(r)
				switch r.IntN(3) {
				case 0:
					m, ref[k] = m.With(k, v), v
				case 1:
					m = m.Without(k)
					delete(ref, k)
				default:
					over := map[string]string{k: v, randomMetaString(r): v}
					m = m.Merge(NewMetadata(over))
					maps.Copy(ref, over)
				}
			}
			checkAgainstMap(t, m, ref)
		}
	})
}

func checkAgainstMap(t *testing.T, m Metadata, ref map[string]string) {
	t.Helper()
	if m.Len() != len(ref) || m.IsZero() != (len(ref) == 0) {
		t.Fatalf("Len %d, IsZero %v; the map has %d", m.Len(), m.IsZero(), len(ref))
	}
	keys := slices.Sorted(maps.Keys(ref))
	var got []string
	size, nbytes := 0, 0
	for k, v := range m.All() {
		got = append(got, k)
		if ref[k] != v {
			t.Fatalf("All: %q=%q, the map has %q", k, v, ref[k])
		}
	}
	if !slices.Equal(got, keys) {
		t.Fatalf("All's keys %q, want %q", got, keys)
	}
	for _, k := range keys {
		if v, ok := m.Get(k); !ok || v != ref[k] {
			t.Fatalf("Get(%q) = %q, %v; want %q", k, v, ok, ref[k])
		}
		size += len([]rune(k)) + len([]rune(ref[k]))
		nbytes += len(k) + len(ref[k])
		if !m.hasPrefix(k[:len(k)/2]) {
			t.Fatalf("hasPrefix(%q) false with key %q", k[:len(k)/2], k)
		}
	}
	if _, ok := m.Get("absent"); ok {
		t.Fatal("Get found an absent key")
	}
	if m.hasPrefix("zz") {
		t.Fatal("hasPrefix(zz) true")
	}
	if m.Size() != size || m.ByteSize() != nbytes {
		t.Fatalf("Size %d, ByteSize %d; want %d, %d", m.Size(), m.ByteSize(), size, nbytes)
	}
	want := sortedMsgpack(t, ref)
	if len(ref) == 0 {
		want = []byte{0x80}
	}
	if got := m.appendMsgpack(nil); !bytes.Equal(got, want) {
		t.Fatalf("encoding %x, want %x", got, want)
	}
	if got, err := msgpack.Marshal(m); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("EncodeMsgpack %x, %v; want %x", got, err, want)
	}
	if !m.Equal(NewMetadata(ref)) || !testutil.Equal(m.Map(), mapOrNil(ref)) {
		t.Fatalf("Equal or Map: %v against %v", m, ref)
	}
}

func mapOrNil(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}

// TestMetadataDecoding: input in Metadata's own form (what the registry
// writes) is kept as it is, a window on the input when the decoder shares;
// other forms of the same map (keys out of order, duplicate keys, longer
// headers than needed) decode to the same Metadata as msgpack's path, in
// its one form.
func TestMetadataDecoding(t *testing.T) {
	canonical := NewMetadata(map[string]string{"a": "1", "b": strings.Repeat("x", 40), "c": ""})
	in := canonical.appendMsgpack(nil)
	for _, share := range []bool{false, true} {
		d := cmdDecoder{b: in, share: share}
		var m Metadata
		if !d.metadata(&m) || d.off != len(in) || !m.Equal(canonical) {
			t.Fatalf("share %v: %v, off %d of %d", share, m, d.off, len(in))
		}
		window := unsafe.StringData(m.p) == unsafe.SliceData(in)
		if window != share {
			t.Fatalf("share %v: the metadata is a window on the input: %v", share, window)
		}
	}
	str8 := func(s string) []byte { return append([]byte{0xd9, byte(len(s))}, s...) }
	fix := func(s string) []byte { return appendStr(nil, s) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	map16 := binary.BigEndian.AppendUint16([]byte{0xde}, 2)
	for name, b := range map[string][]byte{
		"keys out of order": cat([]byte{0x82}, fix("b"), fix("2"), fix("a"), fix("1")),
		"duplicate key":     cat([]byte{0x83}, fix("a"), fix("0"), fix("b"), fix("2"), fix("a"), fix("1")),
		"str8 for a short":  cat([]byte{0x82}, fix("a"), str8("1"), fix("b"), fix("2")),
		"map16 for two":     cat(map16, fix("a"), fix("1"), fix("b"), fix("2")),
	} {
		want := NewMetadata(map[string]string{"a": "1", "b": "2"})
		var viaMsgpack Metadata
		if err := msgpack.Unmarshal(b, &viaMsgpack); err != nil || !viaMsgpack.Equal(want) {
			t.Fatalf("%s: msgpack's path %v, %v", name, viaMsgpack, err)
		}
		var ref map[string]string
		if err := msgpack.Unmarshal(b, &ref); err != nil || !NewMetadata(ref).Equal(want) {
			t.Fatalf("%s: msgpack into a map %v, %v", name, ref, err)
		}
		for _, share := range []bool{false, true} {
			d := cmdDecoder{b: slices.Clone(b), share: share}
			var m Metadata
			if !d.metadata(&m) || d.off != len(b) || !m.Equal(want) {
				t.Fatalf("%s, share %v: %v (%x), off %d of %d", name, share, m, m.p, d.off, len(b))
			}
			clear(d.b) // the result must not be a window on non-canonical input
			if !m.Equal(want) {
				t.Fatalf("%s, share %v: the result changed with the input", name, share)
			}
		}
	}
}

// BenchmarkMetadataGet: the registry reads the preserved beat keys on every
// registration.
func BenchmarkMetadataGet(b *testing.B) {
	m := NewMetadata(map[string]string{"app": "shop", "env": "prod", MetaHeartBeatInterval: "5000", "version": "1.2.3", "zone": "a"})
	for b.Loop() {
		if _, ok := m.Get(MetaHeartBeatInterval); !ok {
			b.Fatal("missing")
		}
		if _, ok := m.Get(MetaIPDeleteTimeout); ok {
			b.Fatal("present")
		}
	}
}

// FuzzMetadataDecode: on any bytes, the hand decoder (sharing the input or
// not) and msgpack's path agree, never panic, and whatever they decode is
// in Metadata's one form: it encodes as NewMetadata encodes its pairs.
func FuzzMetadataDecode(f *testing.F) {
	f.Add(NewMetadata(map[string]string{"a": "1", "b": strings.Repeat("x", 300)}).appendMsgpack(nil))
	f.Add([]byte{0x82, 0xa1, 'b', 0xa1, '2', 0xa1, 'a', 0xa1, '1'})
	f.Add([]byte{0x82, 0xa1, 'a', 0xd9, 1, '1', 0xa1, 'a', 0xa1, '2'})
	f.Add([]byte{0xde, 0, 1, 0xa0, 0xa0})
	f.Add([]byte{0xc0})
	f.Fuzz(func(t *testing.T, b []byte) {
		// The reference: msgpack's own decoding into a map (the last of
		// duplicate keys wins there too), then NewMetadata.
		var ref map[string]string
		werr := msgpack.Unmarshal(b, &ref)
		want := NewMetadata(ref)
		for _, share := range []bool{false, true} {
			d := cmdDecoder{b: slices.Clone(b), share: share}
			var m Metadata
			if !d.metadata(&m) {
				continue // msgpack's path is the fallback, and may read more (nil, bin)
			}
			if werr != nil && d.off == len(b) {
				t.Fatalf("the hand decoder read %x, msgpack refused it: %v", b, werr)
			}
			if d.off == len(b) && !m.Equal(want) {
				t.Fatalf("share %v: hand %v, msgpack %v", share, m, want)
			}
			if again := NewMetadata(m.Map()); !again.Equal(m) {
				t.Fatalf("share %v: %x is not in Metadata's form (%x)", share, m.p, again.p)
			}
		}
		var viaDecodeMsgpack Metadata
		if err := msgpack.Unmarshal(b, &viaDecodeMsgpack); (err == nil) != (werr == nil) || err == nil && !viaDecodeMsgpack.Equal(want) {
			t.Fatalf("DecodeMsgpack %v (%v), msgpack into a map %v (%v)", viaDecodeMsgpack, err, want, werr)
		}
	})
}

// TestMetadataSharedIn: SharedIn answers equal metadata, a window on the
// string when it holds the encoding (at its end, as an instance's payload
// does, or anywhere), and m itself when it does not.
func TestMetadataSharedIn(t *testing.T) {
	m := NewMetadata(map[string]string{"zone": "zone-a", "version": "1.4.2"})
	enc := string(m.appendMsgpack(nil))
	within := func(got Metadata, s string) bool {
		p, base := uintptr(unsafe.Pointer(unsafe.StringData(got.p))), uintptr(unsafe.Pointer(unsafe.StringData(s)))
		return p >= base && p+uintptr(len(got.p)) <= base+uintptr(len(s))
	}
	for _, tc := range []struct {
		name   string
		s      string
		within bool
	}{
		{"at the end", "\x81\xa1i" + enc, true},
		{"in the middle", "head" + enc + "tail", true},
		{"alone", strings.Clone(enc), true},
		{"absent", "\x81\xa1i\x80", false},
		{"a prefix of it", enc[:len(enc)-1], false},
	} {
		got := m.SharedIn(tc.s)
		if !got.Equal(m) {
			t.Errorf("%s: %v, want %v", tc.name, got, m)
		}
		if w := within(got, tc.s); w != tc.within {
			t.Errorf("%s: a window on the string: %v, want %v", tc.name, w, tc.within)
		}
	}
	if got := (Metadata{}).SharedIn(enc); !got.IsZero() {
		t.Errorf("empty metadata shared as %v", got)
	}
}
