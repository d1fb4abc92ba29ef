package model

import (
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// BenchmarkUnmarshal decodes typical payloads of the project with Unmarshal:
// a publisher record's payload (registry), a distro sync batch of such
// records, a Raft entry's batch of commands and a service view.
func BenchmarkUnmarshal(b *testing.B) {
	payload := InstanceList{Instances: benchInstances(4)}
	pb, _ := msgpack.Marshal(&payload)
	var batch mSyncMsg
	for i := range 64 {
		batch.Records = append(batch.Records, mWireRecord{Key: "s/session-" + string(rune('a'+i%26)), Kind: 1, Owner: "node-1", Revision: uint64(i + 1), Payload: pb})
	}
	var cmds []mCommand
	for _, inst := range benchInstances(16) {
		inst.Ephemeral = false
		cmds = append(cmds, mCommand{Op: 4, Instance: inst})
	}
	view := ServiceView{Service: Service{Key: ServiceKey{Name: "orders"}}, Revision: 7, Instances: benchInstances(100)}
	for _, c := range []struct {
		name string
		v    any
	}{
		{"payload", &payload},
		{"distroBatch", &batch},
		{"commands", &cmds},
		{"view", &view},
	} {
		in, err := msgpack.Marshal(c.v)
		if err != nil {
			b.Fatal(err)
		}
		typ := reflect.TypeOf(c.v).Elem()
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				if err := Unmarshal(in, reflect.New(typ).Interface()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkUnmarshalHostile: how long rejecting 1 MiB of hostile input
// takes, and what it allocates.
func BenchmarkUnmarshalHostile(b *testing.B) {
	in := hostile(1 << 20)
	for _, c := range []struct {
		input string
		v     any
	}{
		{"array of nil", &[]mCommand{}},
		{"insts of empty maps", &ServiceView{}},
		{"Records of empty maps", &mRepairMsg{}},
		{"insts of empty maps", &mHello{}}, // an unknown field: skipped, accepted
	} {
		typ := reflect.TypeOf(c.v).Elem()
		b.Run(c.input+" into "+typ.String(), func(b *testing.B) {
			b.SetBytes(int64(len(in[c.input])))
			b.ReportAllocs()
			for b.Loop() {
				_ = Unmarshal(in[c.input], reflect.New(typ).Interface())
			}
		})
	}
}

// BenchmarkWalk compares the bound's walk over typical payloads with the
// type-blind Check it replaced and with msgpack's own decoding.
func BenchmarkWalk(b *testing.B) {
	payload := InstanceList{Instances: benchInstances(4)}
	pb, _ := msgpack.Marshal(&payload)
	var batch mSyncMsg
	for i := range 64 {
		batch.Records = append(batch.Records, mWireRecord{Key: "s/x", Kind: 1, Owner: "node-1", Revision: uint64(i + 1), Payload: pb})
	}
	view := ServiceView{Instances: benchInstances(100)}
	for _, c := range []struct {
		name string
		v    any
	}{{"payload", &payload}, {"distroBatch", &batch}, {"view", &view}} {
		in, _ := msgpack.Marshal(c.v)
		p, _ := planFor(reflect.TypeOf(c.v).Elem())
		b.Run(c.name+"/check", func(b *testing.B) {
			for b.Loop() {
				_ = Check(in)
			}
		})
		b.Run(c.name+"/walk", func(b *testing.B) {
			for b.Loop() {
				w := walker{b: in, limit: 1 << 40, bufMax: 64}
				if err := w.value(p, 0, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/msgpack", func(b *testing.B) {
			for b.Loop() {
				_ = msgpack.Unmarshal(in, reflect.New(reflect.TypeOf(c.v).Elem()).Interface())
			}
		})
	}
}
