package raftstore

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
	"github.com/muster-io/muster/internal/testutil"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/transport"
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
	stale := make([]Command, 2, 8) // what Update's buffer may hold from the entry before
	for i := range stale[:cap(stale)] {
		stale[:cap(stale)][i] = Command{Op: OpPutInstance, Instance: persistent("stale", "10.0.0.1", i)}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, cmds, err := decodeEntry(nil, b)
		// Into a reused buffer (Update's way), the same commands after
		// the buffer's own, or the same error with the buffer as it was.
		_, again, err2 := decodeEntry(stale[:2:8], b)
		if (err == nil) != (err2 == nil) || err != nil && err.Error() != err2.Error() || len(again) != 2+len(cmds) ||
			len(cmds) > 0 && !testutil.Equal(again[2:], cmds) || again[0].Instance.Port != 0 || again[1].Instance.Port != 1 {
			t.Fatalf("into a reused buffer: %d commands, %v; into nil: %d, %v", len(again), err2, len(cmds), err)
		}
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

// FuzzSplitEntry: a merged entry's parts cover it exactly (its header,
// then each part after its length), or it is refused as corrupt; a plain
// entry is its own single part.
func FuzzSplitEntry(f *testing.F) {
	a, b := encodeEntry(entryID{1}, fuzzSeeds(f)), encodeEntry(entryID{2}, nil)
	f.Add(a)
	f.Add(encodeMerged([][]byte{a, b}))
	f.Add([]byte{mergedVersion, maxMergedParts, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, e []byte) {
		parts, err := splitEntry(e)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) || len(e) == 0 || e[0] != mergedVersion {
				t.Fatalf("%v for an entry of version %d", err, e[0])
			}
			return
		}
		if len(e) == 0 || e[0] != mergedVersion {
			if len(parts) != 1 || len(parts[0]) != len(e) {
				t.Fatalf("a plain entry split in %d parts", len(parts))
			}
			return
		}
		n := 2
		for _, p := range parts {
			n += 4 + len(p)
		}
		if n != len(e) || len(parts) != int(e[1]) || len(parts) > maxMergedParts {
			t.Fatalf("%d parts covering %d of %d bytes", len(parts), n, len(e))
		}
		if again := encodeMerged(parts); string(again) != string(e) {
			t.Fatalf("parts encode to %x, not %x", again, e)
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

// tapTransport records the Raft batches its node sends to one peer.
type tapTransport struct {
	transport.Transport
	to  string
	mu  sync.Mutex
	got [][]byte
}

func (t *tapTransport) record(to string, kind transport.Kind, body []byte) {
	if kind != KindRaftMessages || to != t.to {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.got) < 64 {
		t.got = append(t.got, bytes.Clone(body))
	}
}

func (t *tapTransport) Send(ctx context.Context, to string, kind transport.Kind, body []byte) error {
	t.record(to, kind, body)
	return t.Transport.Send(ctx, to, kind, body)
}

func (t *tapTransport) Request(ctx context.Context, to string, kind transport.Kind, body []byte) ([]byte, error) {
	t.record(to, kind, body)
	return t.Transport.Request(ctx, to, kind, body)
}

func (t *tapTransport) captured() [][]byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.got)
}

// fuzzPeers are the authenticated peers a fuzzed body comes from: members
// r2 and r3 (replicas 2 and 3) and a non-member holding the credentials.
var fuzzPeers = []string{"r2", "r3", "evil"}

// wantBatch is the rule for an inbound batch to replica 1 of shard 1 from
// peer, written independently of the guard.
func wantBatch(b *pb.MessageBatch, peer string) bool {
	nodes := map[uint64]string{2: "r2", 3: "r3"}
	travels := map[pb.MessageType]bool{pb.Propose: true, pb.Replicate: true, pb.ReplicateResp: true,
		pb.RequestVote: true, pb.RequestVoteResp: true, pb.Heartbeat: true, pb.HeartbeatResp: true,
		pb.ReadIndex: true, pb.ReadIndexResp: true, pb.SnapshotReceived: true, pb.LeaderTransfer: true,
		pb.TimeoutNow: true, pb.RateLimit: true, pb.RequestPreVote: true, pb.RequestPreVoteResp: true}
	if b.DeploymentId != testDeployment || b.BinVer != raftio.TransportBinVersion || b.SourceAddress != peer || len(b.Requests) == 0 {
		return false
	}
	for _, m := range b.Requests {
		if m.ShardID != 1 || m.To != 1 || nodes[m.From] != peer || !travels[m.Type] {
			return false
		}
	}
	return true
}

// wantChunk is the rule for an inbound snapshot chunk, written
// independently of the guard.
func wantChunk(c *pb.Chunk, peer string) bool {
	nodes := map[uint64]string{1: "r1", 2: "r2", 3: "r3"}
	if c.DeploymentId != testDeployment || c.BinVer != raftio.TransportBinVersion || c.ShardID != 1 || c.ReplicaID != 1 ||
		c.From == 1 || nodes[c.From] != peer || c.Index == 0 || c.Filepath != fmt.Sprintf("snapshot-%016X.gbsnap", c.Index) ||
		c.HasFileInfo || c.FileInfo.Filepath != "" || c.Witness || c.FileChunkId != c.ChunkId ||
		c.ChunkCount == pb.PoisonChunkCount || (c.ChunkCount != 0 && c.ChunkCount != pb.LastChunkCount && c.ChunkId >= c.ChunkCount) ||
		c.ChunkSize != uint64(len(c.Data)) || c.FileSize != 0 || c.OnDiskIndex > c.Index {
		return false
	}
	for _, set := range []map[uint64]string{c.Membership.Addresses, c.Membership.NonVotings, c.Membership.Witnesses} {
		for id, a := range set {
			if k, ok := nodes[id]; id == 0 || a == "" || (ok && k != a) {
				return false
			}
		}
	}
	return true
}

// FuzzInbound feeds arbitrary bytes, and mutations of batches a member
// really sent, to replica 1 of a running 3-replica cluster over a Muster
// transport, from a member or from a non-member, as Raft batches and as
// snapshot chunks. Whatever breaks the inbound rules (wantBatch,
// wantChunk) must be refused and counted as dropped, and must never reach
// Dragonboat (which would panic on most of them: the node is real, a panic
// fails the target). Bodies that keep to the rules are sent only if they
// replay a batch the member sent (a Raft message from a member is trusted
// with Raft's semantics). The seeds are batches captured from the running
// cluster, and a few made by hand.
func FuzzInbound(f *testing.F) {
	var mem transport.MemNetwork
	// Whoever leads, r2 or r3 (or both) send to r1.
	taps := map[string]*tapTransport{"r2": {to: "r1"}, "r3": {to: "r1"}}
	members := map[uint64]string{1: "r1", 2: "r2", 3: "r3"}
	c := newClusterAt(f, members, func(cfg *Config) {
		memTransport(f, &mem, cfg)
		if tap := taps[cfg.RaftAddress]; tap != nil {
			tap.Transport = cfg.Transport
			cfg.Transport = tap
		}
		cfg.Insecure = false
	})
	for p := range 10 {
		mustPropose(f, c.nodes[2], Command{Op: OpPutInstance, Instance: persistent("svc", "10.0.0.1", p+1)})
	}
	replays := map[string]string{} // body → the member that sent it
	for i, peer := range fuzzPeers[:2] {
		for _, b := range taps[peer].captured() {
			replays[string(b)] = peer
			f.Add(b, uint8(i), false)
		}
	}
	if len(replays) == 0 {
		f.Fatal("captured no batch from r2 or r3 to r1")
	}
	hb := raftBatch("r2", 2, pb.Heartbeat)
	hb.Requests[0].To = 0
	f.Add(mustMarshal(f, &hb), uint8(0), false)
	ch := raftChunk(2)
	f.Add(mustMarshal(f, &ch), uint8(0), true)
	ch.Filepath = "../x"
	f.Add(mustMarshal(f, &ch), uint8(2), true)
	f.Add([]byte{0x0a, 0x80}, uint8(1), false)

	from := map[string]transport.Transport{"r2": c.cfgs[2].Transport, "r3": c.cfgs[3].Transport}
	evil, err := mem.Node("evil")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = evil.Close() })
	from["evil"] = evil
	n1 := c.nodes[1]

	f.Fuzz(func(t *testing.T, body []byte, peerSel uint8, isChunk bool) {
		peer := fuzzPeers[int(peerSel)%len(fuzzPeers)]
		kind, valid := KindRaftMessages, false
		if isChunk {
			kind = KindRaftChunk
			var ch pb.Chunk
			if unmarshal(&ch, body) == nil {
				valid = wantChunk(&ch, peer)
			}
		} else {
			var b pb.MessageBatch
			if unmarshal(&b, body) == nil {
				valid = wantBatch(&b, peer)
			}
		}
		if valid && (isChunk || replays[string(body)] != peer) {
			return // keeps to the rules: a member's own message, trusted
		}
		before := n1.InboundStats()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := from[peer].Request(ctx, "r1", kind, body)
		after := n1.InboundStats()
		if valid {
			if err != nil || after.Batches <= before.Batches {
				t.Fatalf("a replayed batch of %s was refused: %v (%+v)", peer, err, after)
			}
			return
		}
		var re *transport.RemoteError
		if !errors.As(err, &re) || after.Dropped <= before.Dropped {
			t.Fatalf("a body against the rules was not refused: err %v, stats before %+v, after %+v", err, before, after)
		}
	})
}
