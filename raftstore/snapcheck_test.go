package raftstore

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	pb "github.com/lni/dragonboat/v4/raftpb"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/transport"
	"github.com/vmihailenco/msgpack/v5"
)

// nilClusters is the reviewer's value: a Service map whose "clusters"
// array declares n elements, all nil (1 byte each). Plain msgpack decoding
// allocated about 352 times its size.
func nilClusters(n int) []byte {
	b := []byte{0x81, 0xa8}
	b = append(b, "clusters"...)
	b = append(b, 0xdd, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	return append(b, bytes.Repeat([]byte{0xc0}, n)...)
}

// ampNils makes a record that fits in one snapshot record (1 MiB).
const ampNils = 1<<20 - 512

// snapStream encodes a raftstore snapshot stream of pairs as SaveSnapshot
// writes it (header, pairs, trailer).
func snapStream(t testing.TB, pairs ...snapRecord) []byte {
	t.Helper()
	var buf bytes.Buffer
	bw := bufio.NewWriter(&buf)
	recs := append([]snapRecord{{K: snapMagic, V: []byte{snapVersion}}}, pairs...)
	recs = append(recs, snapRecord{V: encodeIndex(uint64(len(pairs)))})
	for _, r := range recs {
		if err := writeRecord(bw, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func mustPack(t testing.TB, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func totalAlloc() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// hostileRecords are snapshot pairs a peer may send that must never be
// stored: each would decode without bound or bypass the commands' rules.
func hostileRecords(t testing.TB) map[string]snapRecord {
	bad := model.Service{Key: model.ServiceKey{Namespace: "public", Group: "DEFAULT_GROUP", Name: "../etc"}}
	good := model.Service{Key: svcKey("ok").WithDefaults()}
	eph := persistent("svc", "10.0.0.9", 80).WithDefaults()
	eph.Ephemeral = true
	return map[string]snapRecord{
		"1M nil clusters":           {K: serviceKey(svcKey("amp").WithDefaults()), V: nilClusters(ampNils)},
		"a name model refuses":      {K: serviceKey(bad.Key), V: mustPack(t, &bad)},
		"a value under another key": {K: serviceKey(svcKey("other").WithDefaults()), V: mustPack(t, &good)},
		"an ephemeral instance":     {K: instKey(kindInstance, eph.Key()), V: mustPack(t, &eph)},
		"not msgpack":               {K: serviceKey(good.Key), V: []byte{0xc1}},
		"an unknown key kind":       {K: []byte("zzz"), V: nil},
		"a short dedupe record":     {K: dedupeKey(entryID{1}), V: []byte{1}},
	}
}

// A snapshot with a hostile record is refused whole, with an ErrCorrupt
// error naming the record, in bounded memory; the state it would have
// replaced is untouched, and the store reopens (restarts) with it. Before
// the fix the 1M-nil record was stored as sent and decoding it allocated
// about 369 MB, on every later Open.
func TestRecoverRefusesHostileSnapshot(t *testing.T) {
	goodInst := persistent("keep", "10.0.0.1", 80).WithDefaults()
	goodPair := snapRecord{K: instKey(kindInstance, goodInst.Key()), V: mustPack(t, &goodInst)}
	for name, rec := range hostileRecords(t) {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			db, err := badger.Open(badgerOptions(dir, slog.New(slog.DiscardHandler)))
			if err != nil {
				t.Fatal(err)
			}
			s := &testSM{stateMachine: newStateMachine(db, newRecListener(), slog.New(slog.DiscardHandler))}
			s.apply(t, Command{Op: OpPutInstance, Instance: persistent("old", "10.0.0.3", 80)})
			want := s.state(t)

			stream := snapStream(t, goodPair, rec)
			runtime.GC()
			before := totalAlloc()
			err = s.RecoverFromSnapshot(bytes.NewReader(stream), nil)
			alloc := totalAlloc() - before
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "snapshot record") {
				t.Fatalf("hostile snapshot: %v, want an ErrCorrupt error naming the record", err)
			}
			t.Logf("refused (%d bytes, allocated %d): %v", len(stream), alloc, err)
			if limit := uint64(16*len(stream)) + 8<<20; alloc > limit {
				t.Fatalf("refusing a %d-byte snapshot allocated %d bytes, want at most %d", len(stream), alloc, limit)
			}
			if got := s.state(t); !sameData(got, want) || got.Index != want.Index {
				t.Fatalf("state after the refused snapshot:\n%+v\nwant\n%+v", got, want)
			}
			if err := s.Sync(); err != nil {
				t.Fatal(err)
			}
			db.Close()
			s2 := openTestSM(t, dir) // a restart
			if got := s2.state(t); !sameData(got, want) || s2.index != want.Index {
				t.Fatalf("after a restart:\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

// Values already on disk (a snapshot an older version took in) decode
// under the committed-data bound: Open fails with ErrCorrupt naming the
// key instead of allocating hundreds of MB.
func TestOpenBoundsStoredValues(t *testing.T) {
	dir := t.TempDir()
	db, err := badger.Open(badgerOptions(dir, slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	v := nilClusters(ampNils)
	if err := db.Update(func(txn *badger.Txn) error { return txn.Set(serviceKey(svcKey("amp").WithDefaults()), v) }); err != nil {
		t.Fatal(err)
	}
	s := newStateMachine(db, nil, slog.New(slog.DiscardHandler))
	runtime.GC()
	before := totalAlloc()
	_, err = s.Open(nil)
	alloc := totalAlloc() - before
	db.Close()
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "key") {
		t.Fatalf("Open over a hostile stored value: %v, want ErrCorrupt naming the key", err)
	}
	if limit := uint64(16*len(v)) + 8<<20; alloc > limit {
		t.Fatalf("Open allocated %d bytes for a %d-byte value, want at most %d", alloc, len(v), limit)
	}
}

// dragonboatChunks frames a state machine's stream as Dragonboat streams
// it: the file (header block, the empty session record and the stream in
// blocks of dragonboatBlockSize bytes, each with its CRC, the tail) cut
// into chunks of at most size bytes after the first, then the empty last
// chunk.
func dragonboatChunks(t testing.TB, from, index uint64, smBytes []byte, size int) []pb.Chunk {
	t.Helper()
	h := pb.SnapshotHeader{PayloadChecksum: []byte{0, 0, 0, 0}, ChecksumType: pb.CRC32IEEE, Version: 2}
	hb := mustMarshal(t, &h)
	file := make([]byte, dragonboatHeaderSize)
	binary.LittleEndian.PutUint64(file, uint64(len(hb)))
	copy(file[8:], hb)
	binary.BigEndian.PutUint32(file[8+len(hb):], crc32.ChecksumIEEE(hb))
	session := make([]byte, sessionSize)
	binary.LittleEndian.PutUint64(session, 4096)
	data := append(session, smBytes...)
	var total uint64
	for len(data) > 0 {
		n := min(dragonboatBlockSize, len(data))
		file = append(file, data[:n]...)
		file = binary.BigEndian.AppendUint32(file, crc32.ChecksumIEEE(data[:n]))
		total += uint64(n + dragonboatCRCSize)
		data = data[n:]
	}
	file = binary.LittleEndian.AppendUint64(file, total)
	file = append(file, 0x3F, 0x5B, 0xCB, 0xF1, 0xFA, 0xBA, 0x81, 0x9F)
	base := raftChunk(from)
	base.Index, base.Filepath, base.Term = index, snapshotFilename(index), 3
	var out []pb.Chunk
	add := func(payload []byte, last bool) {
		c := base
		c.ChunkId, c.FileChunkId = uint64(len(out)), uint64(len(out))
		c.Data, c.ChunkSize = payload, uint64(len(payload))
		if last {
			c.ChunkCount, c.FileChunkCount = pb.LastChunkCount, pb.LastChunkCount
		}
		out = append(out, c)
	}
	first := min(len(file), dragonboatHeaderSize+size)
	add(file[:first], false)
	for file = file[first:]; len(file) > 0; {
		n := min(size, len(file))
		add(file[:n], false)
		file = file[n:]
	}
	add(nil, true)
	return out
}

// streamCheck passes a real snapshot in chunks cut anywhere and refuses one
// carrying a hostile record on the chunk that completes it.
func TestStreamCheck(t *testing.T) {
	src := openTestSM(t, "")
	for p := range 50 {
		src.apply(t, Command{Op: OpPutInstance, Instance: persistent("svc", "10.0.0.1", p+1)})
	}
	ctx, _ := src.PrepareSnapshot()
	var buf bytes.Buffer
	if err := src.SaveSnapshot(ctx, &buf, nil); err != nil {
		t.Fatal(err)
	}
	for _, block := range []int{1, 7, 100, 1 << 20, 3 << 20} {
		c := streamCheck{}
		for _, ch := range dragonboatChunks(t, 2, 900, buf.Bytes(), block) {
			if err := c.chunk(&ch); err != nil {
				t.Fatalf("block %d: chunk %d of a real snapshot: %v", block, ch.ChunkId, err)
			}
		}
	}
	// Several blocks: records cross block ends, chunks cut anywhere.
	var pairs []snapRecord
	for p := range 30000 {
		i := persistent("svc", "10.0.0.1", p+1).WithDefaults()
		pairs = append(pairs, snapRecord{K: instKey(kindInstance, i.Key()), V: mustPack(t, &i)})
	}
	big := snapStream(t, pairs...)
	for _, size := range []int{1<<20 + 3, 2 << 20, 3 << 20} {
		c := streamCheck{}
		for _, ch := range dragonboatChunks(t, 2, 900, big, size) {
			if err := c.chunk(&ch); err != nil {
				t.Fatalf("a %d-byte snapshot in chunks of %d: chunk %d: %v", len(big), size, ch.ChunkId, err)
			}
		}
	}
	c := streamCheck{}
	var err error
	for _, ch := range dragonboatChunks(t, 2, 900, buf.Bytes()[:buf.Len()-2], 100) {
		if err = c.chunk(&ch); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a truncated stream: %v, want ErrCorrupt", err)
	}
	for name, rec := range hostileRecords(t) {
		c := streamCheck{}
		for _, ch := range dragonboatChunks(t, 2, 900, snapStream(t, rec), 64<<10) {
			if err = c.chunk(&ch); err != nil {
				break
			}
		}
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
}

// A member streams a snapshot carrying the reviewer's record over Muster's
// TCP transport: the chunk is dropped under the Chunk rule before
// Dragonboat sees it (it would keep the snapshot and fail recovering it on
// every start), the stream is abandoned, and the cluster keeps serving.
// Before the fix the chunk was handed to Dragonboat.
func TestHostileSnapshotOverTCP(t *testing.T) {
	c, _, trs := musterTCPCluster(t)
	c.waitLeader()
	stream := snapStream(t, snapRecord{K: serviceKey(svcKey("amp").WithDefaults()), V: nilClusters(ampNils)})
	chunks := dragonboatChunks(t, 2, 900, stream, 2<<20)
	n1 := c.nodes[1]
	before := n1.InboundStats()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	_, err := trs["r2"].Request(ctx, "r1", KindRaftChunk, mustMarshal(t, &chunks[0]))
	cancel()
	var re *transport.RemoteError
	if !errors.As(err, &re) {
		t.Fatalf("the sender got %v, want the refusal", err)
	}
	after := n1.InboundStats()
	if after.Chunk <= before.Chunk || after.Chunks != before.Chunks {
		t.Fatalf("hostile snapshot chunk: before %+v, after %+v", before, after)
	}
	// Its later chunks are refused too (the stream was abandoned).
	ctx, cancel = context.WithTimeout(t.Context(), 5*time.Second)
	_, err = trs["r2"].Request(ctx, "r1", KindRaftChunk, mustMarshal(t, &chunks[1]))
	cancel()
	if !errors.As(err, &re) || n1.InboundStats().Chunks != before.Chunks {
		t.Fatalf("a later chunk of the refused stream: %v, %+v", err, n1.InboundStats())
	}
	for p := range 10 {
		mustPropose(t, c.nodes[uint64(p%3+1)], Command{Op: OpPutInstance, Instance: persistent("svc", "10.0.0.1", p+1)})
	}
	if st := c.converged(c.waitLeader()); len(st.Instances) != 10 || len(st.Services) != 0 {
		t.Fatalf("after the hostile snapshot: %+v", st)
	}
}

// What streamCheck passes, RecoverFromSnapshot accepts; neither panics.
func FuzzSnapshotStream(f *testing.F) {
	src := openTestSM(f, "")
	src.apply(f, Command{Op: OpPutInstance, Instance: persistent("svc", "10.0.0.1", 80)},
		Command{Op: OpCreateService, Service: model.Service{Key: svcKey("svc")}})
	ctx, _ := src.PrepareSnapshot()
	var buf bytes.Buffer
	if err := src.SaveSnapshot(ctx, &buf, nil); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add(snapStream(f, snapRecord{K: serviceKey(svcKey("amp").WithDefaults()), V: nilClusters(1000)}))
	f.Add(snapStream(f))
	f.Fuzz(func(t *testing.T, b []byte) {
		c := streamCheck{}
		var err error
		for _, ch := range dragonboatChunks(t, 2, 900, b, 97) {
			if err = c.chunk(&ch); err != nil {
				break
			}
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("refused with %v, want ErrCorrupt", err)
			}
			return
		}
		if err := openTestSM(t, "").RecoverFromSnapshot(bytes.NewReader(b), nil); err != nil {
			t.Fatalf("streamCheck passed what RecoverFromSnapshot refuses: %v", err)
		}
	})
}
