package model

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/muster-io/muster/internal/testutil"
	"github.com/vmihailenco/msgpack/v5"
)

// randomInstanceList returns an InstanceList of up to 20 random instances
// (values need not be valid: the codec does not judge).
func randomInstanceList(r *rand.Rand) InstanceList {
	l := InstanceList{Instances: make([]Instance, r.IntN(21))}
	for i := range l.Instances {
		l.Instances[i] = randomCommand(r).Instance
	}
	return l
}

// TestUnmarshalInstanceListRandom: lists of random instances as Marshal
// writes them take the one-pass decoder, and decode as msgpack decodes
// them.
func TestUnmarshalInstanceListRandom(t *testing.T) {
	testutil.Seeds(t, 0, 1, func(t *testing.T, seed uint64) { instanceListRandom(t, rand.New(rand.NewPCG(seed, 2))) })
}

func instanceListRandom(t *testing.T, r *rand.Rand) {
	for range 300 {
		l := randomInstanceList(r)
		b, err := Marshal(&l)
		if err != nil {
			t.Fatal(err)
		}
		d := cmdDecoder{b: b, limit: int64(MaxDecodeRatio*len(b) + DecodeSlack)}
		fast, ok := d.instanceList(len(l.Instances))
		if !ok || d.off != len(b) {
			t.Fatalf("the one-pass decoder refused Marshal's output %x", b)
		}
		var want InstanceList
		if err := decodeInto(b, &want); err != nil {
			t.Fatal(err)
		}
		got, n, err := UnmarshalInstanceList(b, len(l.Instances))
		if err != nil || n != len(l.Instances) {
			t.Fatalf("UnmarshalInstanceList: %d instances, %v", n, err)
		}
		if !reflect.DeepEqual(fast, want.Instances) || !reflect.DeepEqual(got, want) {
			t.Fatalf("one pass %+v\nUnmarshalInstanceList %+v\nmsgpack %+v", fast, got, want)
		}
	}
}

// TestInstanceListAppendMsgpack: the hand encoder writes what msgpack
// writes.
func TestInstanceListAppendMsgpack(t *testing.T) {
	testutil.Seeds(t, 0, 1, func(t *testing.T, seed uint64) { instanceListAppend(t, rand.New(rand.NewPCG(seed, 3))) })
}

func instanceListAppend(t *testing.T, r *rand.Rand) {
	lists := []InstanceList{{}, {Instances: []Instance{}}, {Instances: benchInstances(20)}}
	for range 300 {
		lists = append(lists, randomInstanceList(r))
	}
	for _, l := range lists {
		want, err := Marshal(&l)
		if err != nil {
			t.Fatal(err)
		}
		if got := l.AppendMsgpack([]byte{0xff}); !bytes.Equal(got[1:], want) || got[0] != 0xff {
			t.Fatalf("AppendMsgpack % x\nMarshal       % x", got, want)
		}
	}
}

// futureInstance is an Instance of a later version, with a field this one
// does not know.
type futureInstance struct {
	Instance
	Zone string `msgpack:"zone"`
}

func (f futureInstance) EncodeMsgpack(e *msgpack.Encoder) error {
	type plain Instance // Instance's fields and tags, without its methods
	b, err := msgpack.Marshal(plain(f.Instance))
	if err != nil {
		return err
	}
	var m map[string]any
	if err := msgpack.Unmarshal(b, &m); err != nil {
		return err
	}
	m["zone"] = f.Zone
	return e.Encode(m)
}

// TestUnmarshalInstanceListOthers: what the one pass does not take is
// decoded, or refused, as Unmarshal does it: a list past max (from its
// declared length, decoding nothing), nil instances, trailing bytes, and
// instances with a field of a later version (skipped).
func TestUnmarshalInstanceListOthers(t *testing.T) {
	three := InstanceList{Instances: benchInstances(3)}
	b, _ := Marshal(&three)
	var got InstanceList
	var n int
	var err error
	if a := allocated(func() { got, n, err = UnmarshalInstanceList(b, 2) }); n != 3 || !errors.Is(err, ErrTooLarge) || got.Instances != nil || a > 512 {
		t.Fatalf("3 instances under a max of 2: %d, %v, %d instances, %d bytes allocated; want 3, ErrTooLarge, none, next to nothing",
			n, err, len(got.Instances), a)
	}
	nils := []byte{0x81, 0xa1, 'i', 0x92, 0xc0, 0xc0}
	if _, _, err := UnmarshalInstanceList(nils, 10); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a list of nils: %v, want ErrMalformed", err)
	}
	if _, _, err := UnmarshalInstanceList(append(b, 0xc0), 10); !errors.Is(err, ErrMalformed) {
		t.Fatalf("trailing bytes: %v, want ErrMalformed", err)
	}
	nilList := []byte{0x81, 0xa1, 'i', 0xc0}
	var none InstanceList
	if err := Unmarshal(nilList, &none); err != nil {
		t.Fatal(err)
	}
	if l, n, err := UnmarshalInstanceList(nilList, 10); err != nil || n != 0 || len(l.Instances) != 0 || !reflect.DeepEqual(l, none) {
		t.Fatalf("a nil list: %+v, %d, %v; want %+v, 0", l, n, err, none)
	}

	var future struct {
		Instances []futureInstance `msgpack:"i"`
	}
	for _, in := range benchInstances(2) {
		future.Instances = append(future.Instances, futureInstance{Instance: in, Zone: "z1"})
	}
	fb, err := msgpack.Marshal(&future)
	if err != nil {
		t.Fatal(err)
	}
	if d := (cmdDecoder{b: fb, limit: 1 << 20}); func() bool { _, ok := d.instanceList(10); return ok }() {
		t.Fatal("the one pass took an unknown field")
	}
	var want InstanceList
	if err := Unmarshal(fb, &want); err != nil {
		t.Fatal(err)
	}
	if l, n, err := UnmarshalInstanceList(fb, 10); err != nil || n != 2 || !reflect.DeepEqual(l, want) {
		t.Fatalf("a later version's instances: %+v, %d, %v; want %+v", l, n, err, want)
	}
}

// TestUnmarshalInstanceListBound: inputs built to make the one pass
// allocate (instances of many empty metadata pairs, in the form it takes)
// are refused or decoded within Unmarshal's bound, also when the pass
// gives up at the last instance and Unmarshal decodes the whole again.
func TestUnmarshalInstanceListBound(t *testing.T) {
	build := func(n, pairs int, lastUnknown bool) []byte {
		b := []byte{0x81, 0xa1, 'i', 0xdc, byte(n >> 8), byte(n)}
		for i := range n {
			b = append(b, 0x81, 0xa2, 'm', 'd', 0xde, byte(pairs>>8), byte(pairs))
			if lastUnknown && i == n-1 {
				b[len(b)-6] = 'x' // "xd": a key the one pass does not know
			}
			b = append(b, bytes.Repeat([]byte{0xa0}, 2*pairs)...)
		}
		return b
	}
	for name, in := range map[string][]byte{
		"1000 instances of 15 pairs":                    build(1000, 15, false),
		"1000 instances of 15 pairs, the last unknown":  build(1000, 15, true),
		"16 instances of 30000 pairs":                   build(16, 30000, false),
		"16 instances of 30000 pairs, the last unknown": build(16, 30000, true),
		"1000 instances of 1 pair":                      build(1000, 1, false),
		"1000 empty instances":                          build(1000, 0, false),
	} {
		limit := uint64(MaxDecodeRatio*len(in) + DecodeSlack)
		var err error
		if got := allocated(func() { _, _, err = UnmarshalInstanceList(in, 1000) }); got > limit {
			t.Errorf("%s (%d bytes, err %v): allocated %d, want at most %d", name, len(in), err, got, limit)
		}
	}
	// A review's shape: thousands of unknown top-level keys (their strings
	// are allocated before the fallback decodes), then "i" with about as
	// many empty maps as the bound allows (a count scanned across the edge).
	for _, keyLen := range []int{9, 16, 17} {
		const keys = 3000
		total := keys + 1
		head := []byte{0xde, byte(total >> 8), byte(total)}
		for k := range keys {
			head = append(head, 0xa0|byte(keyLen))
			head = append(head, fmt.Sprintf("%0*d", keyLen, k)...)
			head = append(head, 0xc0)
		}
		for n := 1000; n <= 4000; n += 50 {
			b := append(slices.Clip(head), 0xa1, 'i', 0xdc, byte(n>>8), byte(n))
			b = append(b, bytes.Repeat([]byte{0x80}, n)...)
			limit := uint64(MaxDecodeRatio*len(b) + DecodeSlack)
			var err error
			if got := allocated(func() { _, _, err = UnmarshalInstanceList(b, 1<<20) }); got > limit {
				t.Errorf("%d unknown keys of %d bytes, %d empty instances (%d bytes, err %v): allocated %d, want at most %d", keys, keyLen, n, len(b), err, got, limit)
			}
		}
	}
}

// TestUnmarshalInstanceListRepeatedKey: a map that repeats "i" decodes to
// its last list (msgpack's rule), so the cap on instances holds against
// the last one, not the first.
func TestUnmarshalInstanceListRepeatedKey(t *testing.T) {
	in, _ := Marshal(&Instance{Service: ServiceKey{Namespace: "public", Group: "g", Name: "s"}, Cluster: "DEFAULT", IP: "10.0.0.1", Port: 80, Weight: 1, Ephemeral: true})
	b := []byte{0x82, 0xa1, 'i', 0x90, 0xa1, 'i', 0xdc, 0, 50}
	for range 50 {
		b = append(b, in...)
	}
	l, n, err := UnmarshalInstanceList(b, 10)
	if !errors.Is(err, ErrTooLarge) || n != 50 {
		t.Fatalf("{i: [], i: [50 instances]} with a cap of 10: %d instances, n %d, err %v; want ErrTooLarge for 50", len(l.Instances), n, err)
	}
	if l, n, err := UnmarshalInstanceList(b, 50); err != nil || n != 50 || len(l.Instances) != 50 {
		t.Fatalf("the same with a cap of 50: %d instances, n %d, err %v; want the last list's 50", len(l.Instances), n, err)
	}
}

// FuzzUnmarshalInstanceList: on any bytes UnmarshalInstanceList allocates
// within Unmarshal's bound, never panics, and agrees with Unmarshal: the
// same instances when both decode; otherwise one refused for a bound of
// allocation (the one pass counts what it allocates; Unmarshal's walk
// bounds msgpack's decoding, which allocates more) or of length.
func FuzzUnmarshalInstanceList(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 6 {
		l := randomInstanceList(r)
		b, _ := Marshal(&l)
		f.Add(b, uint16(len(l.Instances)))
	}
	f.Add([]byte{0x81, 0xa1, 'i', 0x92, 0xc0, 0xc0}, uint16(10))
	nan := randomInstanceList(r)
	for i := range nan.Instances {
		nan.Instances[i].Weight = math.NaN()
	}
	b, _ := Marshal(&nan)
	f.Add(b, uint16(len(nan.Instances)))
	f.Add([]byte{0x81, 0xa1, 'i', 0xdd, 0xff, 0xff, 0xff, 0xff}, uint16(1000))
	for _, b := range hostile(4096) {
		f.Add(b, uint16(1000))
	}
	f.Fuzz(func(t *testing.T, b []byte, max uint16) {
		limit := uint64(MaxDecodeRatio*len(b) + DecodeSlack)
		var got InstanceList
		var n int
		var err error
		a := ^uint64(0)
		for range 3 { // the least of a few runs: see FuzzUnmarshalBound
			a = min(a, allocated1(func() { got, n, err = UnmarshalInstanceList(b, int(max)) }))
			if a <= limit {
				break
			}
		}
		if a > limit {
			t.Fatalf("decoding % x allocated %d bytes, over %d", b, a, limit)
		}
		var want InstanceList
		werr := Unmarshal(b, &want)
		switch {
		case err == nil && werr == nil:
			if !testutil.Equal(got, want) || n != len(want.Instances) { // NaN weights decode too
				t.Fatalf("UnmarshalInstanceList %+v (%d)\nUnmarshal %+v", got, n, want)
			}
			if n > int(max) {
				t.Fatalf("%d instances accepted under a max of %d", n, max)
			}
		case err == nil:
			if !errors.Is(werr, ErrTooLarge) {
				t.Fatalf("UnmarshalInstanceList accepted what Unmarshal refuses: %v", werr)
			}
		case werr == nil:
			if !errors.Is(err, ErrTooLarge) { // past max, or past what the one pass left
				t.Fatalf("UnmarshalInstanceList refused what Unmarshal accepts: %v", err)
			}
		}
	})
}
