package registry

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/muster-io/muster/distro"
	"github.com/muster-io/muster/model"
	"github.com/vmihailenco/msgpack/v5"
)

// newLimitedRegistry returns a started standalone registry on a fake clock
// with the per-publisher caps set to n.
func newLimitedRegistry(t *testing.T, n int) *Registry {
	t.Helper()
	cfg := DefaultConfig()
	cfg.HealthChecks = nil
	cfg.Clock = clockwork.NewFakeClock()
	cfg.Limits.MaxInstancesPerSession, cfg.Limits.MaxInstancesPerEndpoint = n, n
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Internals().CheckConsistency(); err != nil {
			t.Errorf("inconsistent index: %v", err)
		}
		r.Close()
	})
	return r
}

// payloadOf encodes a publisher record of insts, as an owner does.
func payloadOf(t *testing.T, insts []model.Instance) []byte {
	t.Helper()
	b, err := model.Marshal(&pubPayload{Instances: insts})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// endpointInsts returns n ephemeral instances at one ip:port, one per
// service.
func endpointInsts(n int) []model.Instance {
	out := make([]model.Instance, n)
	for i := range out {
		out[i] = model.NewInstance(model.ServiceKey{Name: fmt.Sprintf("svc-%d", i)}, "10.1.1.1", 7000).WithDefaults()
	}
	return out
}

// held counts the instances in r's index.
func held(r *Registry) int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	n := 0
	for _, s := range r.core.services {
		n += len(s.slots)
	}
	return n
}

// TestReplicatedRecordCapped: a peer's publisher record with more
// instances than the per-publisher cap is refused whole at decoding (the
// declared length decides, before any instance is built) and nothing of it
// is stored; one at the cap is installed whole.
func TestReplicatedRecordCapped(t *testing.T) {
	for _, kind := range []distro.Kind{distro.KindSession, distro.KindBeat} {
		t.Run(kind.String(), func(t *testing.T) {
			r := newLimitedRegistry(t, 3)
			key := "s/n2-0000000000000001"
			if kind == distro.KindBeat {
				key = beatRecordKey("10.1.1.1", 7000)
			}
			dr := distro.Record{Key: key, Kind: kind, Owner: "n2", Revision: 1, Payload: payloadOf(t, endpointInsts(4))}
			if _, err := r.decodePayload(dr); !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "(3)") {
				t.Fatalf("decoding 4 instances under a cap of 3: %v, want ErrLimit naming the cap", err)
			}
			ds := distroStore{r}
			ds.Apply(dr)
			ds.Adopt(dr, r.now())
			if n := held(r); n != 0 {
				t.Fatalf("%d instances stored from a record past the cap, want 0", n)
			}
			dr.Payload = payloadOf(t, endpointInsts(3))
			ds.Apply(dr)
			if n := held(r); n != 3 {
				t.Fatalf("%d instances stored from a record at the cap, want all 3", n)
			}
		})
	}
}

// TestDecodeInstancesHostile: nil elements are refused, and a payload
// declaring a huge list of 1-byte elements allocates next to nothing.
func TestDecodeInstancesHostile(t *testing.T) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	_ = enc.EncodeMapLen(1)
	_ = enc.EncodeString("i")
	_ = enc.EncodeArrayLen(2)
	_ = enc.EncodeNil()
	_ = enc.EncodeNil()
	if _, err := decodeInstances(buf.Bytes(), 10, "MaxInstancesPerSession"); !errors.Is(err, model.ErrMalformed) {
		t.Fatalf("a list of nils: %v, want model.ErrMalformed", err)
	}

	const n = 1 << 20
	buf.Reset()
	_ = enc.EncodeMapLen(1)
	_ = enc.EncodeString("i")
	_ = enc.EncodeArrayLen(n)
	buf.Write(bytes.Repeat([]byte{0xc0}, n)) // nil, n times: 1 MiB
	in := buf.Bytes()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := decodeInstances(in, 1000, "MaxInstancesPerSession")
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrLimit) {
		t.Fatalf("a list of %d: %v, want ErrLimit", n, err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > uint64(len(in)) {
		t.Fatalf("refusing a %d-byte payload allocated %d bytes, want at most its size", len(in), got)
	}
}

// TestDecodeInstancesBounded: payloads whose instances are hollow (a map of
// nil metadata pairs, the cheapest bytes that make msgpack allocate) are
// refused or decoded within model.Unmarshal's bound: 16 times the input plus
// its slack, for the whole payload, not per instance.
func TestDecodeInstancesBounded(t *testing.T) {
	small := []byte{0x81, 0xa1, 'i', 0xdc, 1000 >> 8, 1000 & 0xff}
	for range 1000 {
		small = append(small, 0x81, 0xa2, 'm', 'd', 0x8f)
		for range 15 {
			small = append(small, 0xc0, 0xc0)
		}
	}
	const pairs = 32768
	large := []byte{0x81, 0xa1, 'i', 0xdc, 0, 16}
	for range 16 {
		large = append(large, 0x81, 0xa2, 'm', 'd', 0xdf, 0, pairs>>16, pairs>>8&0xff, pairs&0xff)
		large = append(large, bytes.Repeat([]byte{0xc0, 0xc0}, pairs)...)
	}
	for name, in := range map[string][]byte{"1000 instances of 15 nil pairs": small, "16 instances of 32768 nil pairs": large} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := decodeInstances(in, 1000, "MaxInstancesPerSession")
		runtime.ReadMemStats(&after)
		if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(model.MaxDecodeRatio*len(in)+model.DecodeSlack)+uint64(len(in)); got > limit {
			t.Errorf("%s (%d bytes, err %v): allocated %d, want at most %d", name, len(in), err, got, limit)
		}
	}
}

// TestMergeKeepsEndpointCap: a beat record of an endpoint this node owns
// and publishes, written elsewhere (membership views differed), is merged
// only up to the endpoint's cap: the owner's cap holds, and what is left
// out is logged, not stored.
func TestMergeKeepsEndpointCap(t *testing.T) {
	r := newLimitedRegistry(t, 3)
	local := endpointInsts(5)
	for _, in := range local[:2] {
		if err := r.Register(t.Context(), in); err != nil {
			t.Fatal(err)
		}
	}
	dr := distro.Record{Key: beatRecordKey("10.1.1.1", 7000), Kind: distro.KindBeat, Owner: "n2", Revision: 9, Payload: payloadOf(t, local[2:])}
	distroStore{r}.Apply(dr) // three more, one of which fits
	if n := held(r); n != 3 {
		t.Fatalf("%d instances after merging 3 into an endpoint holding 2 of 3, want 3", n)
	}
	if err := r.Register(t.Context(), local[4]); !errors.Is(err, ErrLimit) {
		t.Fatalf("a register past the cap after the merge: %v, want ErrLimit", err)
	}
}
