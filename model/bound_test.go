package model

import (
	"bytes"
	"errors"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// allocated returns the bytes f allocates, the least of a few runs (a
// concurrent allocation in the runtime or the test framework can only add).
func allocated(f func()) uint64 {
	best := ^uint64(0)
	var a, b runtime.MemStats
	for range 3 {
		runtime.ReadMemStats(&a)
		f()
		runtime.ReadMemStats(&b)
		best = min(best, b.TotalAlloc-a.TotalAlloc)
	}
	return best
}

// hostile returns msgpack inputs of about size bytes built to make a decoder
// allocate: arrays of nil and of empty maps, maps of nils, deep nesting,
// lengths declared far beyond the input.
func hostile(size int) map[string][]byte {
	arr := func(fill byte, per int) []byte {
		n := (size - 5) / per
		b := []byte{0xdd, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
		for range n {
			b = append(b, fill)
			if per == 2 {
				b = append(b, 0xc0)
			}
		}
		return b
	}
	field := func(name string, v []byte) []byte {
		return append(append([]byte{0x81, 0xa0 | byte(len(name))}, name...), v...)
	}
	deep := bytes.Repeat([]byte{0x91}, 32)
	deep = append(deep, 0xc0)
	emptyStrs := arr(0xa0, 1)
	metaPairs := append([]byte{0xdf, 0, 0, 0, 0}, bytes.Repeat([]byte{0xa1, 'k', 0xa0}, (size-5)/3)...)
	n := (size - 5) / 3
	metaPairs[1], metaPairs[2], metaPairs[3], metaPairs[4] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	// Instances whose metadata holds bin, not str: msgpack reads them as
	// strings, the one-pass decoders do not (Metadata's fallback path).
	binMeta := []byte{0x81, 0xa2, 'm', 'd', 0x82, 0xa0, 0xc4, 6, 'x', 'x', 'x', 'x', 'x', 'x', 0xa0, 0xa0}
	nb := (size - 8) / len(binMeta)
	binMetas := append([]byte{0x81, 0xa1, 'i', 0xdd, byte(nb >> 24), byte(nb >> 16), byte(nb >> 8), byte(nb)}, bytes.Repeat(binMeta, nb)...)
	return map[string][]byte{
		"insts of bin metadata": binMetas,
		"array of nil":          arr(0xc0, 1),
		"array of empty maps":   arr(0x80, 1),
		"array of empty arrays": arr(0x90, 1),
		"array of empty strs":   emptyStrs,
		"array of zeros":        arr(0x00, 1),
		"map of nils":           append([]byte{0xdf, 0, 0, byte((size / 2) >> 8), byte(size / 2)}, bytes.Repeat([]byte{0xc0}, size-5)...),
		"insts of nil":          field("insts", arr(0xc0, 1)),
		"insts of empty maps":   field("insts", arr(0x80, 1)),
		"i of empty maps":       field("i", arr(0x80, 1)),
		"Records of empty maps": field("Records", arr(0x80, 1)),
		"array[Records]":        append([]byte{0x91}, arr(0x80, 1)...),
		"md of pairs":           field("md", metaPairs),
		"deep":                  deep,
		"huge declared":         {0x81, 0xa5, 'i', 'n', 's', 't', 's', 0xdd, 0xff, 0xff, 0xff, 0xff},
	}
}

// TestUnmarshalBound decodes 256 KiB hostile inputs into every destination
// type of the project and checks what that allocates.
func TestUnmarshalBound(t *testing.T) {
	size := 1 << 18
	if testing.Short() {
		size = 1 << 12
	}
	for name, in := range hostile(size) {
		for _, target := range wireTargets() {
			typ := reflect.TypeOf(target).Elem()
			got := allocated(func() { _ = Unmarshal(in, reflect.New(typ).Interface()) })
			if limit := uint64(MaxDecodeRatio*len(in) + DecodeSlack); got > limit {
				t.Errorf("%s into %v: allocated %d bytes (%.1f×), over %d", name, typ, got, float64(got)/float64(len(in)), limit)
			}
		}
	}
}

func TestUnmarshalRejectsNil(t *testing.T) {
	for _, tc := range []struct {
		in []byte
		v  any
	}{
		{[]byte{0x91, 0xc0}, &[]Instance{}},
		{[]byte{0x81, 0xa5, 'i', 'n', 's', 't', 's', 0x91, 0xc0}, &ServiceView{}},
		{[]byte{0x81, 0xa8, 'c', 'l', 'u', 's', 't', 'e', 'r', 's', 0x91, 0xc0}, &Query{}},
		{[]byte{0x81, 0xa2, 'm', 'd', 0x81, 0xc0, 0xa0}, &Instance{}},
		{[]byte{0x81, 0xa2, 'm', 'd', 0x81, 0xa1, 'k', 0xc0}, &Instance{}},
		{[]byte{0x81, 0xa4, 'p', 'o', 'r', 't', 0xc0}, &Instance{}},
		{[]byte{0xc0}, &Instance{}},
		{[]byte{0x91, 0x91, 0xc0}, &mSyncMsg{}},
	} {
		err := Unmarshal(tc.in, tc.v)
		var de *DecodeError
		if !errors.Is(err, ErrMalformed) || !errors.As(err, &de) {
			t.Errorf("Unmarshal(% x, %T) = %v, want a nil rejected", tc.in, tc.v, err)
		}
	}
	// Nil is fine where the Go type has one.
	for _, tc := range []struct {
		in []byte
		v  any
	}{
		{[]byte{0x81, 0xa5, 'i', 'n', 's', 't', 's', 0xc0}, &ServiceView{}},
		{[]byte{0x81, 0xa2, 'm', 'd', 0xc0}, &Instance{}},
		{[]byte{0x81, 0xa6, 'w', 'e', 'i', 'g', 'h', 't', 0xc0}, &InstancePatch{}},
		{[]byte{0xc0}, &[]Instance{}},
		{[]byte{0x91, 0xc0}, &[]*Instance{}},
	} {
		if err := Unmarshal(tc.in, tc.v); err != nil {
			t.Errorf("Unmarshal(% x, %T) = %v", tc.in, tc.v, err)
		}
	}
}

func TestUnmarshalErrorNamesThePath(t *testing.T) {
	v := ServiceView{Instances: []Instance{validInstance(), validInstance()}}
	b, _ := msgpack.Marshal(&v)
	// Turn the second instance's port (a fixint 0x1f90 is uint16) into nil:
	// find "port" followed by 0xcd the second time.
	i := bytes.LastIndex(b, []byte("port"))
	b = append(append(append([]byte{}, b[:i+4]...), 0xc0), b[i+4+3:]...)
	err := Unmarshal(b, &ServiceView{})
	var de *DecodeError
	if !errors.As(err, &de) || de.Path != ".insts[1].port" || de.Type != "model.ServiceView" {
		t.Fatalf("err = %v (%#v)", err, de)
	}
	t.Log(err)
}

func TestUnmarshalMaxLen(t *testing.T) {
	type capped struct {
		Items []int           `msgpack:"items" maxlen:"2"`
		Name  string          `msgpack:"name" maxlen:"3"`
		Pairs map[string]bool `msgpack:"pairs" maxlen:"1"`
		Ptr   *[]int          `msgpack:"ptr" maxlen:"1"`
	}
	for _, tc := range []struct {
		v    capped
		path string
	}{
		{capped{Items: []int{1, 2, 3}}, ".items"},
		{capped{Name: "abcd"}, ".name"},
		{capped{Pairs: map[string]bool{"a": true, "b": true}}, ".pairs"},
		{capped{Ptr: &[]int{1, 2}}, ".ptr"},
	} {
		b, _ := msgpack.Marshal(&tc.v)
		err := Unmarshal(b, &capped{})
		var de *DecodeError
		if !errors.Is(err, ErrTooLarge) || !errors.As(err, &de) || de.Path != tc.path {
			t.Errorf("%+v: err = %v", tc.v, err)
		}
	}
	ok := capped{Items: []int{1, 2}, Name: "abc", Pairs: map[string]bool{"a": true}, Ptr: &[]int{1}}
	b, _ := msgpack.Marshal(&ok)
	var back capped
	if err := Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, ok) {
		t.Fatalf("within the caps: %v, %+v", err, back)
	}
	list, _ := msgpack.Marshal([]int{1, 2, 3})
	if err := UnmarshalWith(list, &[]int{}, DecodeOptions{MaxLen: 2}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("top-level MaxLen: %v", err)
	}
	if err := UnmarshalWith(list, &[]int{}, DecodeOptions{MaxLen: 3}); err != nil {
		t.Fatal(err)
	}
}

func TestUnmarshalUnsupportedTypes(t *testing.T) {
	type embedded struct{ ServiceKey }
	for _, v := range []any{&struct{ C chan int }{}, &struct{ E error }{}, &embedded{}, &struct{ R msgpack.RawMessage }{}} {
		if err := Unmarshal([]byte{0x80}, v); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("%T: %v", v, err)
		}
	}
	if err := Unmarshal([]byte{0x80}, Instance{}); err == nil {
		t.Error("a non-pointer was accepted")
	}
}

// TestUnmarshalAcceptsMarshal: everything Marshal writes for the project's
// types decodes, to the same value.
func TestUnmarshalAcceptsMarshal(t *testing.T) {
	weight, enabled := 2.5, false
	var any1 any = map[string]any{"a": []any{int8(1), "x", nil, true, 2.5, []byte("b")}}
	for _, v := range []any{
		ptr(validInstance()),
		&Service{Key: svc, ProtectThreshold: 0.5, Metadata: NewMetadata(map[string]string{"a": "b"}), Clusters: []Cluster{{Name: "c", HealthCheck: HealthCheck{Type: CheckHTTP, ExpectedCodes: []int{200}, Headers: NewMetadata(map[string]string{"X": "y"})}}}},
		&InstancePatch{Key: validKey(), Weight: &weight, Enabled: &enabled},
		&ServiceView{Revision: 3, Instances: benchInstances(3), Protected: true, RealHealth: []bool{true, false, true}},
		&Delta{Added: benchInstances(2)},
		&Query{Service: svc, Clusters: []string{"a", "b"}, HealthyOnly: true},
		&mSyncMsg{Records: []mWireRecord{{Key: "s/1", Kind: 1, Owner: "n1", Revision: 9, Payload: []byte{1, 2}}}},
		&mVerifyResp{Buckets: []uint32{1, 70000}, Versions: []mVersion{{Key: "k", Rev: 1}}},
		&mFwdResponse{Code: 2, Msg: "no", Interval: 5e9},
		&mHello{Magic: "muster", Version: 1, Node: "n1", Nonce: make([]byte, 32)},
		&[]mCommand{{Op: 4, Instance: validInstance()}, {Op: 3, SvcKey: svc}},
		&mSnapRecord{K: []byte("k"), V: []byte("v")},
		&any1,
		&map[string]int{"a": 1},
		&[3]uint16{1, 2, 3},
	} {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		back := reflect.New(reflect.TypeOf(v).Elem())
		if err := Unmarshal(b, back.Interface()); err != nil {
			t.Errorf("%T: %v", v, err)
			continue
		}
		want := reflect.New(reflect.TypeOf(v).Elem())
		_ = msgpack.Unmarshal(b, want.Interface())
		if !reflect.DeepEqual(back.Elem().Interface(), want.Elem().Interface()) {
			t.Errorf("%T: Unmarshal and msgpack.Unmarshal disagree:\n%+v\n%+v", v, back.Elem(), want.Elem())
		}
	}
}

var sink []byte

// TestAllocSizeBoundsTheAllocator: allocSize is an upper bound of what the
// runtime takes for an object, across the size classes and large objects.
func TestAllocSizeBoundsTheAllocator(t *testing.T) {
	step := 1
	for n := 1; n < 100<<10; n += step {
		if n > 4096 {
			step = 61
		}
		got := allocated(func() { sink = make([]byte, n) })
		if want := allocSize(int64(n)); got > uint64(want) {
			t.Fatalf("make([]byte, %d) took %d bytes, allocSize says %d", n, got, want)
		}
	}
	sink = nil
}

// TestUnmarshalRealisticValues: realistic values of the project's types,
// and Marshal's smallest encodings of its large structs, stay within the
// ratio; the one known exception (many minimal clusters) decodes with
// MaxAlloc.
func TestUnmarshalRealisticValues(t *testing.T) {
	zeroCmds := make([]mCommand, 256)
	minimal := func(n int) *Service {
		s := &Service{Key: ServiceKey{Name: "s"}}
		for i := range n {
			s.Clusters = append(s.Clusters, Cluster{Name: string(rune('a' + i%26))})
		}
		return s
	}
	for _, v := range []any{
		&zeroCmds,
		&[]Instance{{}, {}, {}},
		&mSyncMsg{Records: make([]mWireRecord, 100)},
		&mVerifyResp{Buckets: make([]uint32, 1000), Versions: make([]mVersion, 100)},
		&ServiceView{Instances: make([]Instance, 50), RealHealth: make([]bool, 50)},
		&InstanceList{Instances: benchInstances(64)},
		minimal(20),
	} {
		b, _ := msgpack.Marshal(v)
		if err := Unmarshal(b, reflect.New(reflect.TypeOf(v).Elem()).Interface()); err != nil {
			t.Errorf("%T (%d bytes): %v", v, len(b), err)
		}
	}
	b, _ := msgpack.Marshal(minimal(500))
	if err := Unmarshal(b, &Service{}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("500 minimal clusters: %v", err)
	}
	if err := UnmarshalWith(b, &Service{}, DecodeOptions{MaxAlloc: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if err := UnmarshalWith(b, &Service{}, DecodeOptions{MaxAlloc: 1 << 10}); !errors.Is(err, ErrTooLarge) {
		t.Fatal(err)
	}
}

// TestUnmarshalFieldLookup: fields found in order, out of order, by alias,
// and where two fields share a name (msgpack decodes the last).
func TestUnmarshalFieldLookup(t *testing.T) {
	type shadow struct {
		A string `msgpack:"x"`
		B string `msgpack:"x"`
		C []int  `msgpack:"c,alias:cc"`
	}
	for _, in := range []map[string]any{
		{"x": "v", "c": []int{1}},
		{"c": []int{1}, "x": "v"},
		{"cc": []int{1, 2}},
	} {
		b, _ := msgpack.Marshal(in)
		var got, want shadow
		if err := Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		_ = msgpack.Unmarshal(b, &want)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%v: got %+v, msgpack %+v", in, got, want)
		}
	}
	// The shadowed field's type is not the one checked for "x".
	type typed struct {
		A []Instance `msgpack:"x"`
		B string     `msgpack:"x"`
	}
	b, _ := msgpack.Marshal(map[string]any{"x": "s"})
	if err := Unmarshal(b, &typed{}); err != nil {
		t.Fatal(err)
	}
}

// selfBounded decodes itself: a BoundedDecoder.
type selfBounded struct{ n int }

func (s *selfBounded) DecodeMsgpack(d *msgpack.Decoder) error {
	n, err := d.DecodeArrayLen()
	if err != nil {
		return err
	}
	s.n = n
	for range n {
		if err := d.Skip(); err != nil {
			return err
		}
	}
	return nil
}

func (*selfBounded) DecodeBounded() {}

// TestBoundedDecoder: a BoundedDecoder decodes with its own code, with no
// plan below it, while the walk still refuses malformed input and trailing
// bytes; a type with a decoder of its own that is not marked stays refused.
func TestBoundedDecoder(t *testing.T) {
	var v struct {
		L selfBounded `msgpack:"l"`
	}
	b, err := msgpack.Marshal(map[string]any{"l": []any{nil, nil, nil}})
	if err != nil {
		t.Fatal(err)
	}
	if err := Unmarshal(b, &v); err != nil || v.L.n != 3 {
		t.Fatalf("Unmarshal into a BoundedDecoder: %v, n=%d", err, v.L.n)
	}
	if err := Unmarshal(b[:len(b)-1], &v); !errors.Is(err, ErrMalformed) {
		t.Fatalf("truncated input: %v, want ErrMalformed", err)
	}
	if err := Unmarshal(append(b, 0xc0), &v); !errors.Is(err, ErrMalformed) {
		t.Fatalf("trailing bytes: %v, want ErrMalformed", err)
	}
	var u struct {
		T time.Time `msgpack:"t"`
	}
	if err := Unmarshal([]byte{0x81, 0xa1, 't', 0xc0}, &u); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("a decoder of its own, unmarked: %v, want ErrUnsupported", err)
	}
}

// TestBoundedDecoderTopLevel: a BoundedDecoder as the destination itself
// takes the length walk alone, which still refuses malformed input,
// trailing bytes and declared lengths past the input.
func TestBoundedDecoderTopLevel(t *testing.T) {
	var v selfBounded
	b := []byte{0x93, 0xc0, 0xc0, 0xc0}
	if err := Unmarshal(b, &v); err != nil || v.n != 3 {
		t.Fatalf("Unmarshal into a BoundedDecoder: %v, n=%d", err, v.n)
	}
	for name, in := range map[string][]byte{
		"truncated":       b[:3],
		"trailing":        append(b[:4:4], 0xc0),
		"declared 2^32-1": {0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0},
	} {
		if err := Unmarshal(in, &v); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

// TestBinMetadataBound: instances whose metadata strings come as bin, which
// msgpack reads as strings and Metadata's own decoding does not, stay
// within Unmarshal's bound at every count (a review found 1.44 times the
// bound when that path copied the value and decoded it again).
func TestBinMetadataBound(t *testing.T) {
	one := []byte{0x81, 0xa2, 'm', 'd', 0x82, 0xa0, 0xc4, 6, 'x', 'x', 'x', 'x', 'x', 'x', 0xa0, 0xa0}
	for _, count := range []int{1, 4, 16, 64, 256} {
		b := []byte{0x81, 0xa1, 'i', 0xdc, byte(count >> 8), byte(count)}
		for range count {
			b = append(b, one...)
		}
		limit := uint64(MaxDecodeRatio*len(b) + DecodeSlack)
		var err error
		got := allocated(func() {
			var l InstanceList
			err = Unmarshal(b, &l)
		})
		if err == nil && got > limit {
			t.Errorf("%d instances (%d bytes): %d bytes allocated, over the bound of %d", count, len(b), got, limit)
		}
	}
}
