package raftstore

import (
	"context"
	"encoding/binary"
	"errors"
	"runtime"
	"testing"
	"time"

	pb "github.com/lni/dragonboat/v4/raftpb"
	"github.com/muster-io/muster/transport"
)

// The reviewer's batches: one message of n empty entries (3 bytes each on
// the wire: tag, length, Dragonboat's end-of-entry byte; 80 decoded), and
// n/4 empty messages.
func ampBatches(t testing.TB, n int) (entries, messages []byte) {
	t.Helper()
	m := raftBatch("r2", 2, pb.Replicate).Requests[0]
	mb := mustMarshal(t, &m)
	for range n {
		mb = append(mb, fieldMsgEntries<<3|2, 1, 0x7f)
	}
	b := raftBatch("r2", 2, pb.Replicate)
	b.Requests = nil
	entries = mustMarshal(t, &b)
	entries = append(entries, fieldBatchRequests<<3|2)
	entries = binary.AppendUvarint(entries, uint64(len(mb)))
	entries = append(entries, mb...)
	b2 := raftBatch("r2", 2, pb.Heartbeat)
	b2.Requests = make([]pb.Message, n/4)
	return entries, mustMarshal(t, &b2)
}

// realBatches are batches as Dragonboat sends them: heartbeats, votes, and
// catch-up Replicate messages of real entries (and an empty no-op entry).
func realBatches(t testing.TB) [][]byte {
	cmd := Command{Op: OpPutInstance, Instance: persistent("svc", "10.0.0.1", 80)}
	enc, err := cmd.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	entry := encodeEntry(entryID{1, 2, 3}, [][]byte{enc})
	var out [][]byte
	hb := raftBatch("r2", 2, pb.Heartbeat)
	hb.Requests[0].Term, hb.Requests[0].Commit = 3, 12345
	out = append(out, mustMarshal(t, &hb))
	for _, n := range []int{1, 64, 4096, 20000} {
		b := raftBatch("r2", 2, pb.Replicate)
		m := &b.Requests[0]
		m.Term, m.LogTerm, m.LogIndex, m.Commit = 3, 3, 1000, 1000
		m.Entries = append(m.Entries, pb.Entry{Term: 3, Index: 1001}) // the leader's no-op
		for i := range n {
			m.Entries = append(m.Entries, pb.Entry{Term: 3, Index: uint64(1002 + i), Cmd: entry})
		}
		b.Requests = append(b.Requests, hb.Requests[0])
		out = append(out, mustMarshal(t, &b))
	}
	return out
}

// walkBatch refuses the reviewer's batches and passes real ones; its
// estimate is never below what Dragonboat's decoder allocates.
func TestWalkBatch(t *testing.T) {
	entries, messages := ampBatches(t, 1<<20)
	var dec pb.MessageBatch
	if err := unmarshal(&dec, entries); err != nil || len(dec.Requests) != 1 || len(dec.Requests[0].Entries) != 1<<20 {
		t.Fatalf("the attack does not decode as the reviewer's: %v", err)
	}
	dec = pb.MessageBatch{}
	ratio, _ := ampBatches(t, 200000) // under the count caps, over the ratio
	for name, body := range map[string][]byte{"1M empty entries": entries, "256K empty messages": messages, "200K empty entries": ratio} {
		runtime.GC()
		before := totalAlloc()
		_, err := walkBatch(body)
		alloc := totalAlloc() - before
		if !errors.Is(err, errBatchTooLarge) {
			t.Fatalf("%s (%d bytes): %v, want refused", name, len(body), err)
		}
		if alloc > 64<<10 {
			t.Fatalf("%s: walking allocated %d bytes", name, alloc)
		}
		t.Logf("%s: %v", name, err)
	}
	for _, body := range realBatches(t) {
		c, err := walkBatch(body)
		if err != nil {
			t.Fatalf("a real batch of %d bytes refused: %v", len(body), err)
		}
		runtime.GC()
		before := totalAlloc()
		var b pb.MessageBatch
		if err := unmarshal(&b, body); err != nil {
			t.Fatal(err)
		}
		alloc := totalAlloc() - before
		n := 0
		for _, m := range b.Requests {
			n += len(m.Entries)
		}
		if c.messages != len(b.Requests) || c.entries != n {
			t.Fatalf("counted %d messages and %d entries, decoded %d and %d", c.messages, c.entries, len(b.Requests), n)
		}
		if int64(alloc) > c.alloc+4096 {
			t.Fatalf("estimated %d bytes, the decoder allocated %d", c.alloc, alloc)
		}
	}
}

// The reviewer's batches sent by a member over Muster's TCP transport are
// dropped under the Oversized rule before Dragonboat's decoder runs, and
// the cluster keeps serving (the catch-up tests show real traffic passes).
// Before the fix, each was decoded (about 85 MB for the first).
func TestOversizedBatchOverTCP(t *testing.T) {
	c, _, trs := musterTCPCluster(t)
	c.waitLeader()
	entries, _ := ampBatches(t, 1<<20)
	_, messages := ampBatches(t, 1<<18) // 65,536 messages: 3.2 MB
	n1 := c.nodes[1]
	for _, body := range [][]byte{entries, messages} {
		before := n1.InboundStats()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		_, err := trs["r2"].Request(ctx, "r1", KindRaftMessages, body)
		cancel()
		var re *transport.RemoteError
		if !errors.As(err, &re) {
			t.Fatalf("the sender got %v, want the refusal", err)
		}
		if after := n1.InboundStats(); after.Oversized <= before.Oversized || after.Dropped <= before.Dropped {
			t.Fatalf("not counted as oversized: before %+v, after %+v", before, after)
		}
	}
	// A chunk with a huge membership is refused the same way.
	ch := raftChunk(2)
	ch.Membership.Removed = map[uint64]bool{}
	for i := range 100000 {
		ch.Membership.Removed[uint64(1000+i)] = true
	}
	before := n1.InboundStats()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	_, err := trs["r2"].Request(ctx, "r1", KindRaftChunk, mustMarshal(t, &ch))
	cancel()
	if after := n1.InboundStats(); err == nil || after.Oversized <= before.Oversized {
		t.Fatalf("a chunk with 100,000 membership entries: %v, %+v", err, after)
	}
	for p := range 10 {
		mustPropose(t, c.nodes[uint64(p%3+1)], Command{Op: OpPutInstance, Instance: persistent("svc", "10.0.0.1", p+1)})
	}
	if st := c.converged(c.waitLeader()); len(st.Instances) != 10 {
		t.Fatalf("after the attack: %d instances", len(st.Instances))
	}
}

// walkBatch never panics, and what it passes decodes into what it counted.
func FuzzWalkBatch(f *testing.F) {
	for _, b := range realBatches(f)[:3] {
		f.Add(b)
	}
	entries, messages := ampBatches(f, 1<<12)
	f.Add(entries)
	f.Add(messages)
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 1, 2, 3})
	f.Add([]byte{0x0a, 0x02, 0x5a, 0x00})
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := walkBatch(body)
		if err := walkChunk(body); err != nil && !errors.Is(err, errBatchTooLarge) && !errors.Is(err, errWire) {
			t.Fatal(err)
		}
		if err != nil {
			return
		}
		var b pb.MessageBatch
		if unmarshal(&b, body) != nil {
			return
		}
		n := 0
		for _, m := range b.Requests {
			n += len(m.Entries)
		}
		if c.messages != len(b.Requests) || c.entries != n {
			t.Fatalf("counted %d messages and %d entries, decoded %d and %d", c.messages, c.entries, len(b.Requests), n)
		}
	})
}
