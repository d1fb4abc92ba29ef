package model

import (
	"bytes"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"

	"github.com/muster-io/muster/internal/testutil"
	"github.com/vmihailenco/msgpack/v5"
)

// randomCommand builds a command of a random op with random fields, each
// set or left zero (values need not be valid: the codec does not judge).
func randomCommand(r *rand.Rand) Command {
	str := func() string {
		switch r.IntN(5) {
		case 0:
			return ""
		case 1:
			return DefaultGroup
		case 2:
			return string(bytes.Repeat([]byte{'x'}, r.IntN(300))) // str8 and str16
		}
		return "s" + strconv.Itoa(r.IntN(1000))
	}
	num := func() int {
		return []int{0, 1, 127, 128, -1, -33, 255, 256, 65535, 65536, -70000, 1 << 40, -(1 << 40)}[r.IntN(13)]
	}
	md := func() Metadata {
		m := map[string]string{}
		for range r.IntN(4) {
			m[str()] = str()
		}
		return NewMetadata(m)
	}
	skey := func() ServiceKey { return ServiceKey{Namespace: str(), Group: str(), Name: str()} }
	ikey := func() InstanceKey { return InstanceKey{Service: skey(), Cluster: str(), IP: str(), Port: num()} }
	c := Command{Op: Op(r.IntN(10)), Upsert: r.IntN(2) == 0, Healthy: r.IntN(2) == 0, SvcKey: skey(), Key: ikey()}
	c.Instance = Instance{ID: str(), Service: skey(), Cluster: str(), IP: str(), Port: num(), Weight: r.Float64() * 100,
		Healthy: r.IntN(2) == 0, Enabled: r.IntN(2) == 0, Ephemeral: r.IntN(2) == 0, Metadata: md()}
	c.Patch = InstancePatch{Key: ikey(), Metadata: md()}
	if r.IntN(2) == 0 {
		w := r.Float64()
		c.Patch.Weight = &w
	}
	if r.IntN(2) == 0 {
		e := r.IntN(2) == 0
		c.Patch.Enabled = &e
	}
	c.Service = Service{Key: skey(), Ephemeral: r.IntN(2) == 0, ProtectThreshold: float64(r.IntN(3)) / 2, Metadata: md()}
	for range r.IntN(3) {
		cl := Cluster{Name: str(), Metadata: md(), HealthCheck: HealthCheck{Type: CheckType(str()), Port: num(), Path: str(),
			Headers: md(), User: str(), Password: str(), Command: str()}}
		for range r.IntN(3) {
			cl.HealthCheck.ExpectedCodes = append(cl.HealthCheck.ExpectedCodes, num())
		}
		c.Service.Clusters = append(c.Service.Clusters, cl)
	}
	return c
}

func encodeBatch(t testing.TB, cmds []Command) []byte {
	b, err := Marshal(cmds)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestUnmarshalCommandsRandom: batches of random commands as Marshal
// writes them take the hand decoder and decode as msgpack decodes them.
func TestUnmarshalCommandsRandom(t *testing.T) {
	testutil.Seeds(t, 0, 1, func(t *testing.T, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 1))
		for range 300 {
			cmds := make([]Command, r.IntN(20))
			for i := range cmds {
				cmds[i] = randomCommand(r)
			}
			b := encodeBatch(t, cmds)
			d := cmdDecoder{b: b}
			got, ok := d.commands(nil)
			if !ok || d.off != len(b) {
				t.Fatalf("the hand decoder refused Marshal's output %x", b)
			}
			var want []Command
			if err := decodeInto(b, &want); err != nil {
				t.Fatal(err)
			}
			if !testutil.Equal(got, want) {
				t.Fatalf("hand decoder %+v\nmsgpack %+v", got, want)
			}
		}
	})
}

// TestUnmarshalCommandsWalkCharge: the one pass charges exactly what the
// walk charges, so UnmarshalCommands takes it at exactly the MaxAlloc from
// which UnmarshalWith accepts the batch, and below that refuses with the
// walk's error. Batches: random commands as Marshal writes them, metadata
// out of order (sorted again by the one pass), an empty metadata, and
// strings past the 64-byte first scratch buffer and past 1 MiB.
func TestUnmarshalCommandsWalkCharge(t *testing.T) {
	p, err := planFor(commandsType)
	if err != nil {
		t.Fatal(err)
	}
	big := string(bytes.Repeat([]byte{'b'}, 1<<20+5))
	// {"op": 3, "inst": {"md": {"z": "1", "a": "2"}}}: keys out of order.
	unsorted := []byte{0x91, 0x82, 0xa2, 'o', 'p', 0x03, 0xa4, 'i', 'n', 's', 't', 0x81, 0xa2, 'm', 'd', 0x82, 0xa1, 'z', 0xa1, '1', 0xa1, 'a', 0xa1, '2'}
	empty := []byte{0x91, 0x82, 0xa2, 'o', 'p', 0x03, 0xa4, 'i', 'n', 's', 't', 0x81, 0xa2, 'm', 'd', 0x80}
	fixed := [][]byte{
		unsorted, empty,
		encodeBatch(t, []Command{{Op: OpPutInstance, Instance: Instance{ID: big, Metadata: NewMetadata(map[string]string{"k": big[:70]})}}}),
		encodeBatch(t, []Command{{Op: OpCreateService, Service: Service{Clusters: []Cluster{{}, {Name: "c"}}}}}),
	}
	testutil.Seeds(t, 0, 1, func(t *testing.T, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 7))
		batches := fixed
		for range 200 {
			cmds := make([]Command, r.IntN(8))
			for i := range cmds {
				cmds[i] = randomCommand(r)
			}
			batches = append(batches, encodeBatch(t, cmds))
		}
		for _, b := range batches {
			lo, hi := int64(1), int64(1)<<40 // the walk refuses at lo and accepts at hi
			for hi-lo > 1 {
				mid := lo + (hi-lo)/2
				if walkPlan(p, b, DecodeOptions{MaxAlloc: mid}) == nil {
					hi = mid
				} else {
					lo = mid
				}
			}
			for _, limit := range []int64{hi - 1, hi} {
				o := DecodeOptions{MaxAlloc: limit}
				d := walkDecoder(b, o)
				if _, ok := d.commands(nil); ok != (limit == hi) {
					t.Fatalf("the one pass with MaxAlloc %d (the walk accepts from %d): ok = %v, for %x", limit, hi, ok, b[:min(len(b), 64)])
				}
				got, err := UnmarshalCommands(b, o)
				var want []Command
				werr := UnmarshalWith(b, &want, o)
				if (err == nil) != (werr == nil) || err != nil && err.Error() != werr.Error() || err == nil && !testutil.Equal(got, want) {
					t.Fatalf("MaxAlloc %d: UnmarshalCommands %v; UnmarshalWith %v", limit, err, werr)
				}
			}
		}
	})
}

// TestAppendCommands: batches appended into one reused buffer decode as
// UnmarshalCommands decodes them, with nothing left over from what the
// buffer held before (the one pass fills only the fields present); a batch
// the one pass leaves to msgpack (a float field written as an integer) is
// appended too, and an error leaves dst as it was.
func TestAppendCommands(t *testing.T) {
	testutil.Seeds(t, 0, 1, func(t *testing.T, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 4))
		full := make([]Command, 5)
		for i := range full {
			full[i] = randomCommand(r)
		}
		// [{"op": 3, "inst": {"weight": 5}}]: msgpack decodes the integer.
		intWeight := []byte{0x91, 0x82, 0xa2, 'o', 'p', 0x03, 0xa4, 'i', 'n', 's', 't', 0x81, 0xa6, 'w', 'e', 'i', 'g', 'h', 't', 0x05}
		var buf []Command
		for _, b := range [][]byte{encodeBatch(t, full), encodeBatch(t, []Command{{Op: OpDeleteInstance}}), intWeight, encodeBatch(t, []Command{})} {
			want, err := UnmarshalCommands(b, DecodeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			head := Command{Op: OpRemovePatch}
			got, err := AppendCommands(append(buf[:0], head), b, DecodeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1+len(want) || !testutil.Equal(got[0], head) || len(want) > 0 && !testutil.Equal(got[1:], want) {
				t.Fatalf("AppendCommands %+v\nwant %+v after the head", got, want)
			}
			buf = got
		}
		if got, err := AppendCommands(buf[:1], []byte{0x91, 0xc1}, DecodeOptions{}); err == nil || len(got) != 1 {
			t.Fatalf("malformed: %d commands, %v", len(got), err)
		}
		// [the first of full, {"op": "x"}]: the one pass decodes the first
		// into the spare capacity before it meets the second.
		first := encodeBatch(t, full[:1])
		refused := append(append([]byte{0x92}, first[1:]...), 0x81, 0xa2, 'o', 'p', 0xa1, 'x')
		buf = append(make([]Command, 0, 8), Command{Op: OpRemovePatch})
		if got, err := AppendCommands(buf, refused, DecodeOptions{}); err == nil || len(got) != 1 || got[0].Op != OpRemovePatch {
			t.Fatalf("refused: %d commands, %v", len(got), err)
		}
		// A whole batch, then a byte after it: decoded, then refused.
		trailing := append(encodeBatch(t, full[:2]), 0xc0)
		if got, err := AppendCommands(buf, trailing, DecodeOptions{}); err == nil || len(got) != 1 || got[0].Op != OpRemovePatch {
			t.Fatalf("trailing: %d commands, %v", len(got), err)
		}
		for i, c := range buf[1:cap(buf)] {
			if !reflect.ValueOf(c).IsZero() {
				t.Fatalf("a refused batch left %+v in the spare capacity at %d", c, i)
			}
		}
		if got, err := AppendCommands(nil, encodeBatch(t, []Command{}), DecodeOptions{}); err != nil || got == nil || len(got) != 0 {
			t.Fatalf("an empty batch into nil: %#v, %v", got, err)
		}
	})
}

// FuzzUnmarshalCommands: on any bytes UnmarshalCommands answers what
// UnmarshalWith answers (the same error, or the same commands), whichever
// decoder it took, and never panics.
func FuzzUnmarshalCommands(f *testing.F) {
	var all [][]byte
	for _, h := range goldenEncodings {
		b, _ := hex.DecodeString(h)
		all = append(all, b)
	}
	f.Add(append([]byte{0x98}, bytes.Join(all, nil)...))
	r := rand.New(rand.NewPCG(1, 2))
	for range 8 {
		f.Add(encodeBatch(f, []Command{randomCommand(r), randomCommand(r)}))
	}
	f.Add([]byte{0x91, 0x81, 0xa2, 'o', 'p', 0xcd, 0x01, 0x04}) // op 260: msgpack truncates
	f.Add([]byte{0x91, 0x82, 0xa2, 'o', 'p', 0x04, 0xa2, 'o', 'p', 0x05})
	nan := randomCommand(r)
	nan.Instance.Weight, nan.Service.ProtectThreshold = math.NaN(), math.NaN()
	f.Add(encodeBatch(f, []Command{nan}))
	opts := DecodeOptions{MaxLen: 256, MaxAlloc: 1 << 20}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := UnmarshalCommands(b, opts)
		var want []Command
		werr := UnmarshalWith(b, &want, opts)
		if (err == nil) != (werr == nil) || err != nil && err.Error() != werr.Error() {
			t.Fatalf("UnmarshalCommands: %v; UnmarshalWith: %v", err, werr)
		}
		if err == nil && !testutil.Equal(got, want) { // a NaN weight decodes; validation refuses it later
			t.Fatalf("UnmarshalCommands %+v\nUnmarshalWith %+v", got, want)
		}
	})
}

// TestInstanceAppendMsgpack: the hand encoder writes what msgpack writes.
func TestInstanceAppendMsgpack(t *testing.T) {
	testutil.Seeds(t, 0, 1, func(t *testing.T, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 3))
		insts := []Instance{goldenCommands()[3].Instance, {}}
		for range 2000 {
			insts = append(insts, randomCommand(r).Instance)
		}
		big := map[string]string{}
		for i := range 20 {
			big[strconv.Itoa(i)] = string(bytes.Repeat([]byte{'v'}, 70000*(i%2)))
		}
		insts = append(insts, Instance{ID: string(bytes.Repeat([]byte{'i'}, 70000)), Metadata: NewMetadata(big), Port: 1 << 33, Weight: -0.5})
		for _, p := range []int{-(1 << 33), -40000, -200, -32, 1 << 20} {
			insts = append(insts, Instance{Port: p})
		}
		for i := range insts {
			want, err := Marshal(&insts[i])
			if err != nil {
				t.Fatal(err)
			}
			if got := insts[i].AppendMsgpack([]byte{0xff}); !bytes.Equal(got[1:], want) || got[0] != 0xff {
				t.Fatalf("instance %+v:\n got %x\nwant %x", insts[i], got[1:], want)
			}
			if bound := insts[i].encodedLenBound(); len(want) > bound {
				t.Fatalf("instance %+v: %d bytes, more than the bound %d", insts[i], len(want), bound)
			}
		}
	})
}

// FuzzInstanceAppendMsgpack: for any instance that decodes from arbitrary
// bytes, the hand encoder writes what msgpack writes.
func FuzzInstanceAppendMsgpack(f *testing.F) {
	b, _ := Marshal(goldenCommands()[3].Instance)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		var in Instance
		if Unmarshal(b, &in) != nil {
			return
		}
		want, err := Marshal(&in)
		if err != nil {
			t.Fatal(err)
		}
		if got := in.AppendMsgpack(nil); !bytes.Equal(got, want) {
			t.Fatalf("got %x, want %x", got, want)
		}
		if bound := in.encodedLenBound(); len(want) > bound {
			t.Fatalf("%d bytes, more than the bound %d", len(want), bound)
		}
	})
}

// TestCommandAppendMsgpack: the hand encoder of commands writes what
// msgpack writes, for the golden commands and random ones.
func TestCommandAppendMsgpack(t *testing.T) {
	testutil.Seeds(t, 0, 1, func(t *testing.T, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 4))
		cmds := append(goldenCommands(), Command{})
		for range 3000 {
			cmds = append(cmds, randomCommand(r))
		}
		many := Command{Op: OpCreateService}
		for i := range 20 {
			many.Service.Clusters = append(many.Service.Clusters, Cluster{Name: strconv.Itoa(i), HealthCheck: HealthCheck{ExpectedCodes: make([]int, 17)}})
		}
		neg := -0.0
		cmds = append(cmds, many, Command{Op: 255, Patch: InstancePatch{Weight: &neg}}, Command{Service: Service{ProtectThreshold: neg}})
		for i := range cmds {
			want, err := msgpack.Marshal(&cmds[i])
			if err != nil {
				t.Fatal(err)
			}
			if got := cmds[i].AppendMsgpack(nil); !bytes.Equal(got, want) {
				t.Fatalf("command %+v:\n got %x\nwant %x", cmds[i], got, want)
			}
		}
	})
}

// FuzzCommandAppendMsgpack: for any command that decodes from arbitrary
// bytes, the hand encoder writes what msgpack writes.
func FuzzCommandAppendMsgpack(f *testing.F) {
	for _, h := range goldenEncodings {
		b, _ := hex.DecodeString(h)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var c Command
		if Unmarshal(b, &c) != nil {
			return
		}
		want, err := msgpack.Marshal(&c)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.AppendMsgpack(nil); !bytes.Equal(got, want) {
			t.Fatalf("got %x, want %x", got, want)
		}
	})
}

// BenchmarkCommandCodec: a batch of 64 PutInstance commands (a Raft
// entry's body), decoded by UnmarshalCommands (the walk, then by hand)
// and by UnmarshalWith (the walk, then msgpack); one command encoded by
// AppendMsgpack and by msgpack.
func BenchmarkCommandCodec(b *testing.B) {
	cmds := make([]Command, 64)
	for i := range cmds {
		in := NewInstance(ServiceKey{Name: "bench"}.WithDefaults(), "10.1.0."+strconv.Itoa(i), 8080)
		in.Ephemeral, in.Cluster = false, DefaultCluster
		cmds[i] = Command{Op: OpPutInstance, Instance: in}
	}
	batch := encodeBatch(b, cmds)
	opts := DecodeOptions{MaxLen: 256, MaxAlloc: 64 << 20}
	b.Run("decode-hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := UnmarshalCommands(batch, opts); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode-msgpack", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var out []Command
			if err := UnmarshalWith(batch, &out, opts); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encode-hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = cmds[0].AppendMsgpack(make([]byte, 0, 320))
		}
	})
	b.Run("encode-msgpack", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := msgpack.Marshal(&cmds[0]); err != nil {
				b.Fatal(err)
			}
		}
	})
}
