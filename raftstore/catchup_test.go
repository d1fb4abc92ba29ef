package raftstore

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/lni/dragonboat/v4/raftpb"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/transport"
)

// snapshotDirName matches Dragonboat's snapshot directories (the shard's
// own directory is snapshot-<shard>-<replica>).
var snapshotDirName = regexp.MustCompile(`^snapshot-[0-9A-F]{16}`)

// snapshotDirs lists the snapshot directories under a node's Dir (final,
// being received, being generated).
func snapshotDirs(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(filepath.Join(dir, "raft"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && snapshotDirName.MatchString(d.Name()) {
			out = append(out, d.Name())
		}
		return nil
	})
	return out
}

// chunkDelay is how long a snapshot chunk takes on the slow link of
// TestRestartCatchUpUnderWrites.
const chunkDelay = 700 * time.Millisecond

// slowChunks delays every snapshot chunk it sends: a slow link (or a busy
// sender) on which a snapshot takes seconds to stream.
type slowChunks struct {
	transport.Transport
	delay time.Duration
}

func (s slowChunks) Request(ctx context.Context, to string, kind transport.Kind, body []byte) ([]byte, error) {
	if kind == KindRaftChunk {
		t := time.NewTimer(s.delay) // the fault: a slow link
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Transport.Request(ctx, to, kind, body)
}

// A replica restarted while four writers keep writing catches up, with
// the small snapshot settings of the field report (a snapshot every 16
// entries, 8 kept behind it), a state of a few MiB and a link on which a
// snapshot takes more than a second to stream, and the snapshots
// it received do not pile up. Before the fix every snapshot it received
// was stale by the time it was installed: the leader had compacted its
// log past it, and sent another.
func TestRestartCatchUpUnderWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a few MiB through Raft")
	}
	var mem transport.MemNetwork
	c := memCluster(t, &mem, []string{"r1", "r2", "r3"}, func(cfg *Config) {
		cfg.SnapshotEntries, cfg.CompactionOverhead = 16, 8
		cfg.ProposeTimeout = 10 * time.Second // elections come and go on a loaded machine
		cfg.Transport = slowChunks{cfg.Transport, chunkDelay}
	})
	leader := c.waitLeader()
	md := model.NewMetadata(map[string]string{"blob": strings.Repeat("m", 1000)})
	put := func(n *Node, port int) error {
		in := persistent("catchup", "10.8.0.1", port)
		in.Metadata = md
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := n.Propose(ctx, Command{Op: OpPutInstance, Instance: in})
		return err
	}
	// A state of about 4 MiB: two snapshot chunks.
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := w; p < 4000; p += 32 {
				if err := put(c.nodes[leader], 1+p); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	var lagging uint64 = 1
	if leader == 1 {
		lagging = 2
	}
	c.stop(lagging)
	leaderNode := c.nodes[leader] // the writers' node: c.nodes changes below

	// Four steady writers on the leader, until the end of the test.
	writes := steadyWriters(t, func(port int) error { return put(leaderNode, port) }, 10000)
	target := writes.Load() + 200
	c.eventually(20*time.Second, "writes while the replica is down", func() bool { return writes.Load() >= target })

	sentBefore := leaderNode.Stats() // streams to the other follower, or to this one while it was down, do not count
	n := c.start(lagging)
	// Alone it is ready within about 5 s (20 s under the race detector
	// beside two busy cores); CI's race step, with other packages' tests
	// beside it, twice took more than 60 s, with one stream still being
	// received. The bug this test is for shows as streams sent one after
	// another, each stale once installed: that fails at once; a slow
	// machine only makes the one stream slow, and is waited out.
	readyWithFewStreams(t, n, leaderNode, sentBefore, 3, func() string {
		return fmt.Sprintf("snapshot dirs %v", snapshotDirs(t, c.cfgs[lagging].Dir))
	})
	l := c.lis[lagging]
	l.mu.Lock()
	resets := l.resets
	l.mu.Unlock()
	t.Logf("ready; %d writes so far; %d listener resets; %d streams sent; snapshot dirs %v", writes.Load(), resets, leaderNode.Stats().SnapshotsSent, snapshotDirs(t, c.cfgs[lagging].Dir))
	// Dragonboat removes the snapshots it no longer needs as it takes new
	// ones; alone that leaves two within a second or two of ready. On a
	// loaded machine (CI's race step, fsyncs of seconds) the replica,
	// which takes a snapshot every 16 entries, is saving one nearly all
	// the time, and the one before may not be gone yet: a snapshot being
	// generated is not one received, and up to four left are not a
	// pile-up. The pile-up this is for (a directory per abandoned stream,
	// 330 in the field report) does not clear at all, so a long bound on
	// four still catches it.
	var left []string
	c.eventually(60*time.Second, "received snapshots to be cleaned up", func() bool {
		left = slices.DeleteFunc(snapshotDirs(t, c.cfgs[lagging].Dir), func(d string) bool { return strings.HasSuffix(d, ".generating") })
		return len(left) <= 4
	})
	t.Logf("snapshot dirs then %v", left)
}

// retention keeps the log from a stream in flight, and after it was sent
// for twice the entries written meanwhile (plus the overhead); the
// compaction index never goes back.
func TestRetention(t *testing.T) {
	r := &retention{overhead: 8}
	floor := uint64(0)
	step := func(applied, want uint64, wantOK bool) {
		t.Helper()
		got, ok := r.compactTo(applied, floor)
		if got != want || ok != wantOK {
			t.Fatalf("compactTo(%d) = %d, %v; want %d, %v", applied, got, ok, want, wantOK)
		}
	}
	step(5, 0, false) // nothing to let go yet
	step(16, 8, true)
	step(32, 24, true)
	r.streamStarted(40)
	step(48, 32, true)   // keeps from 40 - 8
	step(64, 0, false)   // still 32: never back, never past the stream
	r.streamSent(100, 0) // 60 entries written during the stream: keep until 100 + 120 + 8
	step(150, 0, false)
	step(227, 0, false)
	step(228, 220, true) // the window is over
	step(230, 222, true)
	floor = 300 // recovered from a snapshot, Dragonboat compacted to 300
	step(304, 0, false)
	step(309, 301, true)
}

// With its receiver's messages seen, a window goes on after its entries
// keeping the log from what the receiver acknowledged (it may still be
// installing the snapshot, then catching up from the log), while it is
// heard from and up to the window's limit; an aborted stream (no
// receiver) holds the log for the window's entries only.
func TestRetentionWaitsForReceiver(t *testing.T) {
	var r *retention
	step := func(applied, want uint64, wantOK bool) {
		t.Helper()
		got, ok := r.compactTo(applied, 0)
		if got != want || ok != wantOK {
			t.Fatalf("compactTo(%d) = %d, %v; want %d, %v", applied, got, ok, want, wantOK)
		}
	}
	r = &retention{overhead: 8, acks: true}
	r.streamStarted(40)
	r.streamSent(100, 2) // the entries window: until 228
	step(300, 32, true)  // past it, replica 2 still installing: keep from 40
	r.heard(2, 40, 300)  // installed
	step(310, 0, false)  // still from 40
	r.heard(2, 305, 315)
	step(320, 297, true) // from what it acknowledged
	r.heard(2, 398, 399)
	step(400, 390, true)

	// A receiver that is no longer heard from holds the log for
	// receiverHold entries after its last message.
	r = &retention{overhead: 8, acks: true}
	r.streamStarted(400)
	r.streamSent(410, 3)
	step(800, 392, true) // from 400
	r.heard(3, 0, 800)   // a heartbeat answer, no acknowledgement
	step(800+receiverHold-1, 0, false)
	step(800+receiverHold, 800+receiverHold-8, true) // silent too long: let go

	// One heard from but behind holds it up to the limit: receiverHold +
	// 16 windows (of 2 × 10 + 8 entries) after the stream.
	r = &retention{overhead: 8, acks: true}
	r.streamStarted(100)
	r.streamSent(110, 4)
	r.heard(4, 100, 1500)
	step(110+receiverHold+16*28-1, 92, true) // from 100
	r.heard(4, 100, 1580)
	step(110+receiverHold+16*28, 110+receiverHold+16*28-8, true) // the limit: let go

	// An aborted stream: its window's entries only.
	r = &retention{overhead: 8, acks: true}
	r.streamStarted(1900)
	r.streamSent(1910, 0)  // until 1938
	step(1937, 1892, true) // from 1900
	step(1938, 1930, true) // over
}

// An abandoned snapshot stream's directory is removed when the next one
// starts, and its later chunks never reach Dragonboat.
func TestReceivesAbandoned(t *testing.T) {
	root := t.TempDir()
	dirA := filepath.Join(root, "host", "did", "snapshot-part-1", "snapshot-1-1", "snapshot-0000000000000064-2.receiving")
	if err := os.MkdirAll(dirA, 0o755); err != nil {
		t.Fatal(err)
	}
	r := &receives{dir: root}
	var handed []pb.Chunk
	take := func(c pb.Chunk) bool { handed = append(handed, c); return true }
	a0 := pb.Chunk{From: 2, Index: 100, ChunkId: 0}
	a1 := pb.Chunk{From: 2, Index: 100, ChunkId: 1}
	b0 := pb.Chunk{From: 3, Index: 120, ChunkId: 0}
	if taken, ab, _ := r.deliver(&a0, take); !taken || ab {
		t.Fatal("the first chunk of a stream was not handed on")
	}
	if taken, ab, _ := r.deliver(&b0, take); !taken || ab {
		t.Fatal("the first chunk of a newer stream was not handed on")
	}
	if _, err := os.Stat(dirA); !os.IsNotExist(err) {
		t.Fatalf("the abandoned stream's directory is still there: %v", err)
	}
	if taken, ab, _ := r.deliver(&a1, take); taken || !ab {
		t.Fatal("a chunk of the abandoned stream was handed on")
	}
	if len(handed) != 2 {
		t.Fatalf("%d chunks handed to Dragonboat, want 2", len(handed))
	}
	if taken, _, _ := r.deliver(&a0, take); !taken { // sent again from the start
		t.Fatal("a restarted stream was refused")
	}
}

// steadyWriters starts four writers that put from port base on, until
// the test ends, and counts their acknowledged writes.
func steadyWriters(t *testing.T, put func(port int) error, base int) *atomic.Int64 {
	stop := make(chan struct{})
	var writes atomic.Int64
	var writers sync.WaitGroup
	for w := range 4 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for p := 0; ; p++ {
				select {
				case <-stop:
					return
				default:
				}
				if put(base+w*20000+p%20000) == nil {
					writes.Add(1)
				}
			}
		}()
	}
	t.Cleanup(func() {
		close(stop)
		writers.Wait()
	})
	return &writes
}

// readyWithFewStreams waits for the restarted replica n to be ready, for
// up to 3 minutes, failing at once when the leader sent more than
// maxStreams snapshot streams since before (the signature of streams that
// are stale once installed); detail describes the replica on failure.
func readyWithFewStreams(t *testing.T, n, leader *Node, before Stats, maxStreams uint64, detail func() string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		err := n.WaitReady(ctx)
		cancel()
		if err == nil {
			return
		}
		st := leader.Stats()
		sent, aborted := st.SnapshotsSent-before.SnapshotsSent, st.SnapshotsAborted-before.SnapshotsAborted
		if sent+aborted > maxStreams {
			t.Fatalf("the leader sent %d snapshot streams (%d aborted) since the restart and the replica is not ready: each was stale once installed (%s)", sent+aborted, aborted, detail())
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted replica is not ready after 3 minutes of steady writes: %v (%s)", err, detail())
		}
	}
}

// slowReset makes a replica slow to install a state: every Reset (Open's,
// and a received snapshot's) takes delay first, as installing a large
// state on a busy machine does.
type slowReset struct {
	*recListener
	delay time.Duration
}

func (s slowReset) Reset(st State) {
	t := time.NewTimer(s.delay) // the fault: a slow install
	<-t.C
	s.recListener.Reset(st)
}

// A replica that takes longer to install a streamed snapshot than the
// writes of the entries window take (16-entry snapshots, 8 kept, four
// steady writers) catches up with one stream: the leader keeps the log
// from what the receiver acknowledged while it is behind. Before, the
// window closed while the receiver was still installing, the log was
// compacted past its snapshot, and it got stream after stream, each stale
// once installed (SIGKILL rounds: 12–41 s to be ready, three streams).
func TestSlowInstallCatchesUp(t *testing.T) {
	if testing.Short() {
		t.Skip("steady writes through Raft")
	}
	var mem transport.MemNetwork
	c := memCluster(t, &mem, []string{"r1", "r2", "r3"}, func(cfg *Config) {
		cfg.SnapshotEntries, cfg.CompactionOverhead = 16, 8
		cfg.ProposeTimeout = 10 * time.Second
	})
	leader := c.waitLeader()
	leaderNode := c.nodes[leader]
	put := func(port int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := leaderNode.Propose(ctx, Command{Op: OpPutInstance, Instance: persistent("install", "10.8.0.3", port)})
		return err
	}
	for p := range 100 {
		if err := put(1 + p); err != nil {
			t.Fatal(err)
		}
	}
	var lagging uint64 = 1
	if leader == 1 {
		lagging = 2
	}
	c.stop(lagging)
	writes := steadyWriters(t, put, 1000)
	target := writes.Load() + 200
	c.eventually(20*time.Second, "writes while the replica is down", func() bool { return writes.Load() >= target })

	sentBefore := leaderNode.Stats()
	cfg := c.cfgs[lagging]
	l := newRecListener()
	cfg.Listener = slowReset{l, 1500 * time.Millisecond}
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.nodes[lagging], c.lis[lagging] = n, l
	readyWithFewStreams(t, n, leaderNode, sentBefore, 2, func() string { return "a slow install" })
	st := leaderNode.Stats()
	t.Logf("ready; %d writes; %d streams sent since the restart", writes.Load(), st.SnapshotsSent-sentBefore.SnapshotsSent)
}

// inStream is what the snapshot loop asks before it calls a timeout during
// a stream expected (Debug) rather than a failure (Warn).
func TestRetentionInStream(t *testing.T) {
	r := &retention{overhead: 8, acks: true}
	if r.inStream() {
		t.Fatal("in a stream before any started")
	}
	r.streamStarted(40)
	if !r.inStream() {
		t.Fatal("not in a stream after streamStarted")
	}
	r.streamSent(100, 2)
	if r.inStream() {
		t.Fatal("still in a stream after streamSent")
	}
}
