package raftstore

import (
	"bufio"
	"bytes"
	"errors"
	"testing"

	"github.com/muster-io/muster/model"
)

func fuzzSeeds(f *testing.F) [][]byte {
	w := 1.0
	cmds := []Command{
		{Op: OpCreateService, Service: model.Service{Key: svcKey("s"), Clusters: []model.Cluster{{Name: "c"}}}},
		{Op: OpPutInstance, Instance: persistent("s", "10.0.0.1", 80)},
		{Op: OpPatchInstance, Patch: model.InstancePatch{Key: persistent("s", "10.0.0.1", 80).Key(), Weight: &w}},
		{Op: OpSetHealth, Key: persistent("s", "10.0.0.1", 80).Key(), Healthy: true},
		{Op: OpDeleteService, SvcKey: svcKey("s")},
	}
	var out [][]byte
	for i := range cmds {
		b, err := cmds[i].Marshal()
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// FuzzUnmarshalCommand: decoding and validating arbitrary bytes never
// panics, and a command that decodes and validates re-encodes to one that
// decodes to the same command.
func FuzzUnmarshalCommand(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Add([]byte{0xdc, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := UnmarshalCommand(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not match ErrCorrupt", err)
			}
			return
		}
		if err := c.Validate(model.Limits{}); err != nil {
			if !errors.Is(err, model.ErrInvalid) {
				t.Fatalf("validation error %v does not match model.ErrInvalid", err)
			}
			return
		}
		b2, err := c.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		c2, err := UnmarshalCommand(b2)
		if err != nil {
			t.Fatal(err)
		}
		b3, _ := c2.Marshal()
		if !bytes.Equal(b2, b3) {
			t.Fatalf("round trip differs")
		}
	})
}

// FuzzDecodeEntry: a Raft entry of arbitrary bytes is rejected or decoded,
// never a panic.
func FuzzDecodeEntry(f *testing.F) {
	f.Add(encodeEntry(entryID{1, 2}, fuzzSeeds(f)))
	f.Add(append(make([]byte, entryHdrLen), 0xdd, 0x7f, 0xff, 0xff, 0xff))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, cmds, err := decodeEntry(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatal(err)
			}
			return
		}
		for i := range cmds {
			_ = cmds[i].Validate(model.Limits{})
		}
	})
}

// FuzzSnapshotRecords: reading snapshot records from arbitrary bytes never
// panics or allocates beyond the record cap.
func FuzzSnapshotRecords(f *testing.F) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	_ = writeRecord(w, snapRecord{K: snapMagic, V: []byte{snapVersion}})
	_ = writeRecord(w, snapRecord{K: []byte("s\x01a"), V: []byte{0x80}})
	_ = w.Flush()
	f.Add(buf.Bytes())
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bufio.NewReader(bytes.NewReader(b))
		var scratch []byte
		for range 100 {
			var err error
			if _, scratch, err = readRecord(r, scratch); err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatal(err)
				}
				return
			}
		}
	})
}
