package raftstore

import (
	"encoding/binary"
	"log/slog"
	"strconv"
	"testing"

	"github.com/dgraph-io/badger/v4"
	sm "github.com/lni/dragonboat/v4/statemachine"
)

// BenchmarkApply: the state machine's Update alone (no Raft, no fsync),
// one entry of 64 commands per call, each entry with its own ID (so the
// dedupe record is looked up and written); ns/op is per entry, cmd/s per
// command.
//
//   - put: new persistent instances (a service of growing size);
//   - reput: the same 64 instances again (a re-put keeps the stored health);
//   - health: SetHealth flipping the health of 64 stored instances.
func BenchmarkApply(b *testing.B) {
	const perEntry = 64
	for _, mode := range []string{"put", "reput", "health"} {
		b.Run(mode, func(b *testing.B) {
			db, err := badger.Open(badgerOptions(b.TempDir(), slog.New(slog.DiscardHandler)))
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			s := newStateMachine(db, NopListener{}, slog.New(slog.DiscardHandler))
			if _, err := s.Open(nil); err != nil {
				b.Fatal(err)
			}
			var index, seq uint64
			entry := func(first int, healthy bool) sm.Entry {
				encs := make([][]byte, perEntry)
				for j := range encs {
					n := first + j
					inst := persistent("bench", "10."+strconv.Itoa(n>>16&255)+"."+strconv.Itoa(n>>8&255)+"."+strconv.Itoa(n&255), 8080)
					cmd := Command{Op: OpPutInstance, Instance: inst}
					if mode == "health" {
						cmd = Command{Op: OpSetHealth, Key: inst.Key(), Healthy: healthy}
					}
					enc, err := cmd.Marshal()
					if err != nil {
						b.Fatal(err)
					}
					encs[j] = enc
				}
				seq++
				var id entryID
				binary.BigEndian.PutUint64(id[8:], seq)
				index += 2
				return sm.Entry{Index: index, Cmd: encodeEntry(id, encs)}
			}
			if mode != "put" {
				// Store the instances first.
				mode0 := mode
				mode = "put"
				if _, err := s.Update([]sm.Entry{entry(0, false)}); err != nil {
					b.Fatal(err)
				}
				mode = mode0
			}
			ents := make([]sm.Entry, b.N)
			for i := range ents {
				first := 0
				if mode == "put" {
					first = i * perEntry
				}
				ents[i] = entry(first, i%2 == 0)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range ents {
				if _, err := s.Update(ents[i : i+1]); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N*perEntry)/b.Elapsed().Seconds(), "cmd/s")
		})
	}
}
