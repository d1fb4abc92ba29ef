package model

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"unicode"

	"github.com/vmihailenco/msgpack/v5"
)

// FuzzValidateInstance: validation never panics, and an accepted instance
// survives encode → decode unchanged and is still accepted.
func FuzzValidateInstance(f *testing.F) {
	f.Add("public", "DEFAULT_GROUP", "orders", "DEFAULT", "10.0.0.1", 8080, 1.0, "version", "1.0", "")
	f.Add("", "", "a@@b", "c_1", "::1", 0, math.NaN(), "preserved.heart.beat.timeout", "x", "id")
	f.Add("ns", "g:1", "s", "", "db.example.com", 65535, 10000.0, "preserved.heart.beat.interval", "20000", "")
	f.Add("..", "..", "../etc", "", "10.0.0.1", 80, 1.0, "k\x00", "v\r\n", "")
	f.Add(".", ".", "a/./b", "", "10.0.0.1", 80, 1.0, "k", "a\tb\x7f", "")
	f.Add("", "g", "team/orders", "", "10.0.0.1", 80, 1.0, "k\u0085", "\x1b", "")
	f.Fuzz(func(t *testing.T, ns, group, name, cluster, ip string, port int, weight float64, mk, mv, id string) {
		inst := Instance{
			ID: id, Service: ServiceKey{Namespace: ns, Group: group, Name: name}, Cluster: cluster,
			IP: ip, Port: port, Weight: weight, Healthy: true, Enabled: port%2 == 0, Ephemeral: true,
			Metadata: NewMetadata(map[string]string{mk: mv}),
		}
		err := inst.Validate(Limits{})
		// ValidateInService, for a caller that checked the service key
		// already, answers as Validate does whenever the key is valid.
		if inst.Service.Validate() == nil {
			if inService := inst.ValidateInService(Limits{}); fmt.Sprint(inService) != fmt.Sprint(err) {
				t.Fatalf("ValidateInService = %v, Validate = %v", inService, err)
			}
			// And so does ValidateInServiceIPv4 for a caller that found the
			// IP to be a plain IPv4 address.
			if plainIPv4(inst.IP) {
				if v4 := inst.ValidateInServiceIPv4(Limits{}, true); fmt.Sprint(v4) != fmt.Sprint(err) {
					t.Fatalf("ValidateInServiceIPv4 = %v, Validate = %v", v4, err)
				}
			}
		}
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not match ErrInvalid", err)
			}
			return
		}
		k := inst.Service.WithDefaults()
		for _, n := range []string{k.Namespace, k.Group, k.Name} {
			if n == "." || n == ".." || strings.Contains(n, "../") || strings.Contains(n, "/..") || strings.ContainsRune(n, '\\') {
				t.Fatalf("path-like name %q accepted", n)
			}
		}
		for k, v := range inst.Metadata.All() {
			if strings.IndexFunc(k, unicode.IsControl) >= 0 || strings.IndexFunc(v, isValueControl) >= 0 {
				t.Fatalf("control character accepted in metadata %q=%q", k, v)
			}
		}
		b, err := msgpack.Marshal(&inst)
		if err != nil {
			t.Fatal(err)
		}
		var back Instance
		if err := Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if !back.Equal(inst) {
			t.Fatalf("round trip changed the instance:\n got %+v\nwant %+v", back, inst)
		}
		if err := back.Validate(Limits{}); err != nil {
			t.Fatalf("decoded copy rejected: %v", err)
		}
		got, err := ParseGroupedName(inst.Service.GroupedName())
		if k := inst.Service.WithDefaults(); err != nil || got.Group != k.Group || got.Name != k.Name {
			t.Fatalf("grouped name round trip: %+v %v", got, err)
		}
	})
}

// FuzzValidateService: validation of service definitions never panics.
func FuzzValidateService(f *testing.F) {
	f.Add("orders", 0.5, "c1", "HTTP", 80, "/health", "X-A", "1", 200, "u", "select 1")
	f.Add("", math.Inf(1), "", "PING", -1, "x", "", "\r\n", 99, "", "")
	f.Add("..", 0.5, "c1", "HTTP", 80, "/health", "X-A", "\x00", 200, "", "")
	f.Fuzz(func(t *testing.T, name string, threshold float64, cluster, typ string, port int, path, hk, hv string, code int, user, cmd string) {
		s := Service{
			Key: ServiceKey{Name: name}, ProtectThreshold: threshold,
			Clusters: []Cluster{{Name: cluster, HealthCheck: HealthCheck{
				Type: CheckType(typ), Port: port, Path: path, Headers: NewMetadata(map[string]string{hk: hv}),
				ExpectedCodes: []int{code}, User: user, Command: cmd,
			}}},
		}
		if err := s.Validate(Limits{}); err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatalf("error %v does not match ErrInvalid", err)
		}
	})
}

// FuzzDecode: decoding arbitrary bytes into any wire type never panics nor
// allocates without bound, and whatever decodes re-encodes.
func FuzzDecode(f *testing.F) {
	for _, v := range []any{validInstance(), Service{Key: svc}, InstancePatch{Key: validKey()}, ServiceView{Revision: 1}} {
		b, _ := msgpack.Marshal(v)
		f.Add(b)
	}
	f.Add([]byte{0x81, 0xa2, 'm', 'd', 0xdf, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0xc1})
	f.Add([]byte{0x81, 0xa5, 'i', 'n', 's', 't', 's', 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0x81, 0xa4, 'r', 'e', 'a', 'l', 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, v := range []any{&Instance{}, &Service{}, &InstancePatch{}, &Query{}, &ServiceView{}, &Delta{}, &Metadata{}, &InstanceKey{}} {
			v := reflect.New(reflect.TypeOf(v).Elem()).Interface()
			if err := Unmarshal(b, v); err != nil {
				continue
			}
			if _, err := msgpack.Marshal(v); err != nil {
				t.Fatalf("%T decoded but does not encode: %v", v, err)
			}
		}
	})
}

// FuzzUnmarshalBound: decoding any input into any destination type of the
// project allocates at most MaxDecodeRatio × its length + DecodeSlack, and
// what Unmarshal accepts, msgpack decodes to the same value.
func FuzzUnmarshalBound(f *testing.F) {
	targets := wireTargets()
	seed := func(v any) {
		b, err := msgpack.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, v := range targets {
		seed(v)
	}
	seed(&InstanceList{Instances: benchInstances(3)})
	seed(&ServiceView{Instances: benchInstances(2), RealHealth: []bool{true, false}})
	seed(&mSyncMsg{Records: []mWireRecord{{Key: "s/1", Kind: 1, Revision: 1, Payload: []byte("x")}}})
	seed(&[]mCommand{{Op: 4, Instance: validInstance()}})
	for _, b := range hostile(4096) {
		f.Add(b)
	}
	// Shapes the project does not decode today, for the bound only (maps
	// in interfaces encode in random order).
	others := []any{&[]any{}, &map[string]any{}, &map[int]*ServiceKey{}, &[4]ServiceKey{}, &[]*Instance{}, &[][]string{}}
	f.Fuzz(func(t *testing.T, b []byte) {
		limit := uint64(MaxDecodeRatio*len(b) + DecodeSlack)
		for i, target := range append(targets, others...) {
			typ := reflect.TypeOf(target).Elem()
			// The least of a few runs: the first may build msgpack's and
			// Unmarshal's per-type caches, and another goroutine may
			// allocate meanwhile; a real breach repeats.
			got := ^uint64(0)
			var err error
			for range 3 {
				got = min(got, allocated1(func() { err = Unmarshal(b, reflect.New(typ).Interface()) }))
				if got <= limit {
					break
				}
			}
			if got > limit {
				t.Fatalf("decoding % x into %v allocated %d bytes, over %d", b, typ, got, limit)
			}
			if err != nil || i >= len(targets) {
				continue
			}
			want := reflect.New(typ).Interface()
			if err := msgpack.Unmarshal(b, want); err != nil {
				t.Fatalf("%v: Unmarshal accepted what msgpack rejects: %v", typ, err)
			}
			back := reflect.New(typ).Interface()
			_ = Unmarshal(b, back)
			e1, err1 := msgpack.Marshal(back)
			e2, err2 := msgpack.Marshal(want)
			if err1 != nil || err2 != nil || !bytes.Equal(e1, e2) {
				t.Fatalf("%v: Unmarshal and msgpack.Unmarshal disagree: %x vs %x (%v, %v)", typ, e1, e2, err1, err2)
			}
		}
	})
}

func allocated1(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

func TestUnmarshalRejectsHostileLengths(t *testing.T) {
	for _, b := range [][]byte{
		{0x81, 0xa5, 'i', 'n', 's', 't', 's', 0xdd, 0xff, 0xff, 0xff, 0xff}, // 4G instances
		{0x81, 0xa2, 'm', 'd', 0xdf, 0xff, 0xff, 0xff, 0xff},                // 4G metadata pairs
		{0xdb, 0xff, 0xff, 0xff, 0xff, 'a'},                                 // 4 GB string
		{0x91},                                                              // array missing its element
		{0xc0, 0xc0},                                                        // trailing bytes
		{0xc1},                                                              // never-used code
	} {
		var v ServiceView
		if err := Unmarshal(b, &v); !errors.Is(err, ErrMalformed) {
			t.Errorf("Unmarshal(% x) = %v, want ErrMalformed", b, err)
		}
	}
	deep := make([]byte, 0, 100)
	for range 40 {
		deep = append(deep, 0x91)
	}
	deep = append(deep, 0xc0)
	if err := Check(deep); !errors.Is(err, ErrMalformed) {
		t.Errorf("Check(40-deep) = %v", err)
	}
}
