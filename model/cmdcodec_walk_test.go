package model

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/muster-io/muster/internal/testutil"
)

// batchWriter writes random batches of commands in msgpack with random
// header forms (shortest or longer), fields in random order and subsets,
// strings around the scratch buffer's steps (64 bytes, 1 MiB), large
// metadata, cluster and code counts; with weird set, also forms the one
// pass refuses (bin strings, an integer where a float goes, unknown
// fields).
type rw struct {
	r     *rand.Rand
	b     []byte
	weird bool // allow forms the one pass refuses
}

func (w *rw) strHdr(n int) {
	// choose the shortest form or a longer one
	forms := []int{}
	if n < 32 {
		forms = append(forms, 0)
	}
	if n < 256 {
		forms = append(forms, 1)
	}
	if n < 65536 {
		forms = append(forms, 2)
	}
	forms = append(forms, 3)
	f := forms[0]
	if w.r.IntN(4) == 0 {
		f = forms[w.r.IntN(len(forms))]
	}
	if w.weird && w.r.IntN(40) == 0 { // bin instead of str
		switch {
		case n < 256:
			w.b = append(w.b, 0xc4, byte(n))
		case n < 65536:
			w.b = append(w.b, 0xc5, byte(n>>8), byte(n))
		default:
			w.b = append(w.b, 0xc6)
			w.b = binary.BigEndian.AppendUint32(w.b, uint32(n))
		}
		return
	}
	switch f {
	case 0:
		w.b = append(w.b, 0xa0|byte(n))
	case 1:
		w.b = append(w.b, 0xd9, byte(n))
	case 2:
		w.b = append(w.b, 0xda, byte(n>>8), byte(n))
	default:
		w.b = append(w.b, 0xdb)
		w.b = binary.BigEndian.AppendUint32(w.b, uint32(n))
	}
}

// count returns a collection's length: mostly 0–3, now and then up to max.
func (w *rw) count(max int) int {
	if w.r.IntN(10) == 0 {
		return w.r.IntN(max)
	}
	return w.r.IntN(4)
}

func (w *rw) str(s string) { w.strHdr(len(s)); w.b = append(w.b, s...) }

func (w *rw) coll(n int, fix, b16, b32 byte) {
	f := 0
	if n >= 16 {
		f = 1
	}
	if n >= 65536 {
		f = 2
	}
	if w.r.IntN(4) == 0 {
		f += w.r.IntN(3 - f)
	}
	switch f {
	case 0:
		w.b = append(w.b, fix|byte(n))
	case 1:
		w.b = append(w.b, b16, byte(n>>8), byte(n))
	default:
		w.b = append(w.b, b32)
		w.b = binary.BigEndian.AppendUint32(w.b, uint32(n))
	}
}
func (w *rw) mapHdr(n int) { w.coll(n, 0x80, 0xde, 0xdf) }
func (w *rw) arrHdr(n int) { w.coll(n, 0x90, 0xdc, 0xdd) }

func (w *rw) int(v int64) {
	switch w.r.IntN(3) {
	case 0:
		if v >= 0 && v <= 127 {
			w.b = append(w.b, byte(v))
			return
		}
	case 1:
		if v >= 0 && v <= math.MaxUint32 {
			w.b = append(w.b, 0xce)
			w.b = binary.BigEndian.AppendUint32(w.b, uint32(v))
			return
		}
	}
	w.b = append(w.b, 0xd3)
	w.b = binary.BigEndian.AppendUint64(w.b, uint64(v))
}

func (w *rw) float(f float64) {
	if w.weird && w.r.IntN(40) == 0 {
		w.b = append(w.b, 0x05)
		return
	}
	w.b = append(w.b, 0xcb)
	w.b = binary.BigEndian.AppendUint64(w.b, math.Float64bits(f))
}

func (w *rw) bool(v bool) {
	if v {
		w.b = append(w.b, 0xc3)
	} else {
		w.b = append(w.b, 0xc2)
	}
}

// object writes a map with a random subset of fields, in random order.
func (w *rw) object(fields map[string]func()) {
	names := make([]string, 0, len(fields))
	for k := range fields {
		if w.r.IntN(3) != 0 {
			names = append(names, k)
		}
	}
	// map order is random already; shuffle anyway for determinism
	w.r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	extra := w.weird && w.r.IntN(40) == 0
	n := len(names)
	if extra {
		n++
	}
	w.mapHdr(n)
	for _, k := range names {
		w.str(k)
		fields[k]()
	}
	if extra {
		w.str("unknownfield_" + strings.Repeat("u", w.r.IntN(100)))
		w.str("v")
	}
}

var lens = []int{0, 1, 2, 3, 15, 16, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 255, 256, 1000, 4096, 70000}

func (w *rw) rstr() string {
	switch w.r.IntN(8) {
	case 0:
		return DefaultGroup
	case 1:
		return DefaultNamespace
	case 2:
		return DefaultCluster
	case 3:
		return string(rune('a' + w.r.IntN(26)))
	}
	n := lens[w.r.IntN(len(lens))]
	if w.r.IntN(200) == 0 {
		n = 1<<20 + w.r.IntN(3) - 1
	}
	return strings.Repeat(string(rune('a'+w.r.IntN(3))), n)
}

func (w *rw) md() {
	n := w.r.IntN(5)
	if w.r.IntN(30) == 0 {
		n = 20 + w.r.IntN(300)
	}
	w.mapHdr(n)
	for range n {
		var k string
		if w.r.IntN(2) == 0 {
			k = string(rune('a' + w.r.IntN(5)))
		} else {
			k = w.rstr()
		}
		w.str(k)
		w.str(w.rstr())
	}
}

func (w *rw) skey() {
	w.object(map[string]func(){
		"ns":    func() { w.str(w.rstr()) },
		"group": func() { w.str(w.rstr()) },
		"name":  func() { w.str(w.rstr()) },
	})
}

func (w *rw) ikey() {
	w.object(map[string]func(){
		"svc":     w.skey,
		"cluster": func() { w.str(w.rstr()) },
		"ip":      func() { w.str(w.rstr()) },
		"port":    func() { w.int(int64(w.r.IntN(1<<17)) - 1<<16) },
	})
}

func (w *rw) command() {
	w.object(map[string]func(){
		"op": func() { w.int(int64(w.r.IntN(10))) },
		"svc": func() {
			w.object(map[string]func(){
				"key":       w.skey,
				"ephemeral": func() { w.bool(w.r.IntN(2) == 0) },
				"protect":   func() { w.float(w.r.Float64()) },
				"md":        w.md,
				"clusters": func() {
					n := w.count(500)
					w.arrHdr(n)
					for range n {
						w.object(map[string]func(){
							"name": func() { w.str(w.rstr()) },
							"md":   w.md,
							"check": func() {
								w.object(map[string]func(){
									"type":    func() { w.str(w.rstr()) },
									"port":    func() { w.int(int64(w.r.IntN(70000))) },
									"path":    func() { w.str(w.rstr()) },
									"headers": w.md,
									"codes": func() {
										n := w.count(300)
										w.arrHdr(n)
										for range n {
											w.int(int64(w.r.IntN(600)))
										}
									},
									"user":     func() { w.str(w.rstr()) },
									"password": func() { w.str(w.rstr()) },
									"cmd":      func() { w.str(w.rstr()) },
								})
							},
						})
					}
				},
			})
		},
		"up":   func() { w.bool(w.r.IntN(2) == 0) },
		"skey": w.skey,
		"inst": func() {
			w.object(map[string]func(){
				"id":        func() { w.str(w.rstr()) },
				"svc":       w.skey,
				"cluster":   func() { w.str(w.rstr()) },
				"ip":        func() { w.str(w.rstr()) },
				"port":      func() { w.int(int64(w.r.IntN(1<<17)) - 1<<16) },
				"weight":    func() { w.float(w.r.Float64()) },
				"healthy":   func() { w.bool(w.r.IntN(2) == 0) },
				"enabled":   func() { w.bool(w.r.IntN(2) == 0) },
				"ephemeral": func() { w.bool(w.r.IntN(2) == 0) },
				"md":        w.md,
			})
		},
		"key": w.ikey,
		"patch": func() {
			w.object(map[string]func(){
				"key":     w.ikey,
				"weight":  func() { w.float(w.r.Float64()) },
				"enabled": func() { w.bool(w.r.IntN(2) == 0) },
				"md":      w.md,
			})
		},
		"healthy": func() { w.bool(w.r.IntN(2) == 0) },
	})
}

func (w *rw) batch() []byte {
	n := w.r.IntN(5)
	if w.r.IntN(20) == 0 {
		n = w.r.IntN(200)
	}
	w.arrHdr(n)
	for range n {
		if w.r.IntN(10) == 0 {
			w.b = append(w.b, 0x80) // {}
			continue
		}
		w.command()
	}
	return w.b
}

func walkThreshold(t *testing.T, b []byte, o DecodeOptions) (int64, bool) {
	p, err := planFor(commandsType)
	if err != nil {
		t.Fatal(err)
	}
	o.MaxAlloc = 1 << 50
	if walkPlan(p, b, o) != nil {
		return 0, false
	}
	lo, hi := int64(0), int64(1)<<50
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		o.MaxAlloc = mid
		if walkPlan(p, b, o) == nil {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, true
}

func sameAs(t *testing.T, b []byte, o DecodeOptions, what string) {
	t.Helper()
	got, err := UnmarshalCommands(b, o)
	var want []Command
	werr := UnmarshalWith(b, &want, o)
	if (err == nil) != (werr == nil) || err != nil && err.Error() != werr.Error() || err == nil && !testutil.Equal(got, want) {
		t.Fatalf("%s %+v: UnmarshalCommands %v; UnmarshalWith %v (len %d)", what, o, err, werr, len(b))
	}
	// AppendCommands into a buffer full of stale data.
	stale := make([]Command, 3, 3+len(want)+8)
	r := rand.New(rand.NewPCG(uint64(len(b)), 9))
	for i := range stale[:cap(stale)] {
		stale[:cap(stale)][i] = randomCommand(r)
	}
	keep := append([]Command(nil), stale...)
	got2, err2 := AppendCommands(stale, b, o)
	if (err2 == nil) != (werr == nil) || err2 != nil && err2.Error() != werr.Error() {
		t.Fatalf("%s: AppendCommands %v; UnmarshalWith %v", what, err2, werr)
	}
	if err2 != nil {
		if len(got2) != 3 || !testutil.Equal(got2, keep) {
			t.Fatalf("%s: AppendCommands changed dst on error", what)
		}
		return
	}
	if len(got2) != 3+len(want) || !testutil.Equal(got2[:3], keep) || len(want) > 0 && !testutil.Equal(got2[3:], want) {
		t.Fatalf("%s: AppendCommands differs (stale leak?)", what)
	}
}

// TestUnmarshalCommandsAgainstWalk: on random batches in every header form
// (batchWriter), UnmarshalCommands and AppendCommands answer what
// UnmarshalWith answers one byte below, at and above the least MaxAlloc the
// walk accepts, at the default bound, at a random one and around MaxLen;
// the one pass alone never accepts below that least MaxAlloc; and
// AppendCommands keeps a stale buffer's elements and leaks nothing of them.
func TestUnmarshalCommandsAgainstWalk(t *testing.T) {
	testutil.Seeds(t, 0, 1, func(t *testing.T, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 99))
		onePass, batches := 0, 100
		if testutil.Race {
			batches = 25
		}
		for i := range batches {
			w := &rw{r: r, weird: i%3 == 0}
			b := w.batch()
			hi, ok := walkThreshold(t, b, DecodeOptions{})
			if !ok {
				sameAs(t, b, DecodeOptions{MaxAlloc: 1 << 40}, "walk refuses")
				continue
			}
			for _, lim := range []int64{hi - 1, hi, hi + 1} {
				d := walkDecoder(b, DecodeOptions{MaxAlloc: lim})
				_, ok := d.commands(nil)
				ok = ok && d.off == len(b)
				if ok && lim < hi {
					t.Fatalf("the one pass accepts at %d, the walk from %d: %x", lim, hi, b[:min(len(b), 200)])
				}
				if ok && lim == hi {
					onePass++
				}
				sameAs(t, b, DecodeOptions{MaxAlloc: lim}, "threshold")
			}
			sameAs(t, b, DecodeOptions{}, "default")
			sameAs(t, b, DecodeOptions{MaxAlloc: 1 + r.Int64N(hi)}, "random")
			if n := int(b[0] & 0x0f); b[0]&0xf0 == 0x90 {
				for _, ml := range []int{n - 1, n, n + 1} {
					sameAs(t, b, DecodeOptions{MaxLen: ml, MaxAlloc: hi}, "maxlen")
				}
			}
		}
		if onePass < batches/4 {
			t.Fatalf("the one pass took only %d of %d batches at the walk's bound", onePass, batches)
		}
	})
}
