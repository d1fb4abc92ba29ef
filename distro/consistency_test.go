package distro

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/transport"
)

func diffsOf(rep ConsistencyReport) map[string]Diff {
	out := map[string]Diff{}
	for _, d := range rep.Diffs {
		out[d.Key] = d.Diff
	}
	return out
}

func mustCompare(t *testing.T, n *node, peer string) ConsistencyReport {
	t.Helper()
	rep, err := n.r.Compare(context.Background(), peer)
	if err != nil {
		t.Fatalf("%s compares with %s: %v", n.id, peer, err)
	}
	return rep
}

// A partition between a and b: c, which hears both, sees b's copies of a's newest writes as
// older or missing; b sees the reverse. After the heal the report is clean.
func TestCompareAcrossPartition(t *testing.T) {
	c := newCluster(t, nil, "a", "b", "c")
	a, b, cn := c.nodes["a"], c.nodes["b"], c.nodes["c"]
	for _, k := range []string{"s0", "s1", "s2"} {
		a.r.Put(KindSession, k, []byte("v1"))
	}
	b.r.Put(KindSession, "t0", []byte("v1"))
	c.eventually(2*time.Second, "converged", c.converged)
	if rep := mustCompare(t, cn, "b"); !rep.Consistent() || rep.Equal != 4 || rep.Here != 4 || rep.There != 4 || rep.DivergentBuckets != 0 {
		t.Fatalf("agreeing nodes: %+v", rep)
	}

	c.net.Partition("a", "b")
	a.r.Put(KindSession, "s0", []byte("v2")) // b keeps revision 1: older there
	a.r.Delete("s1")                         // b keeps it live: older there
	a.r.Put(KindSession, "s3", []byte("v1")) // b lacks it
	b.r.Put(KindSession, "t1", []byte("v1")) // reaches a and c
	c.eventually(2*time.Second, "c heard both sides", func() bool {
		s3, ok3 := cn.r.Get("s3")
		t1, ok1 := cn.r.Get("t1")
		s1, _ := cn.r.Get("s1")
		return ok3 && ok1 && s3.Revision == rev(a, 1) && t1.Revision == rev(b, 1) && s1.Deleted
	})
	if _, err := a.r.Compare(context.Background(), "b"); !errors.Is(err, transport.ErrUnreachable) {
		t.Fatalf("compare across the partition: %v", err)
	}

	rep := mustCompare(t, cn, "b")
	want := map[string]Diff{"s0": DiffNewer, "s1": DiffNewer, "s3": DiffMissingThere}
	if got := diffsOf(rep); !mapsEqualDiff(got, want) || rep.Newer != 2 || rep.MissingThere != 1 || rep.MissingHere != 0 ||
		rep.Here != 6 || rep.There != 5 || rep.Equal != 3 || rep.DivergentBuckets == 0 || rep.Consistent() {
		t.Fatalf("c vs b: %+v, want diffs %v", rep, want)
	}
	for _, d := range rep.Diffs {
		if d.Key == "s1" && (!d.Here.Deleted || d.There.Deleted || d.Here.Revision != rev(a, 2) || d.There.Revision != rev(a, 1) || d.Here.Owner != "a") {
			t.Fatalf("s1: %+v", d)
		}
		if d.Key == "s3" && (d.There != RecordVersion{}) {
			t.Fatalf("s3: %+v", d)
		}
	}
	rep = mustCompare(t, b, "c")
	want = map[string]Diff{"s0": DiffOlder, "s1": DiffOlder, "s3": DiffMissingHere}
	if got := diffsOf(rep); !mapsEqualDiff(got, want) || rep.Older != 2 || rep.MissingHere != 1 || rep.Equal != 3 {
		t.Fatalf("b vs c: %+v, want diffs %v", rep, want)
	}

	c.net.Heal()
	c.eventually(3*time.Second, "converged after the heal", c.converged)
	for _, pair := range [][2]string{{"a", "b"}, {"b", "c"}, {"c", "a"}} {
		if rep := mustCompare(t, c.nodes[pair[0]], pair[1]); !rep.Consistent() || rep.Equal != 6 || rep.There != 6 {
			t.Fatalf("%s vs %s after the heal: %+v", pair[0], pair[1], rep)
		}
	}
	c.checkInvariants()
}

// A sync lost on the way leaves the peer's copy older until the retry (or verify) repairs it;
// the report shows it from both sides.
func TestCompareDroppedSync(t *testing.T) {
	c := newCluster(t, nil, "a", "b")
	a, b := c.nodes["a"], c.nodes["b"]
	a.r.Put(KindBeat, beatKeyOwnedBy(a.r.Members(), "a", 0), []byte("v1"))
	a.r.Put(KindSession, "k", []byte("v1"))
	c.eventually(2*time.Second, "converged", c.converged)

	c.net.SetManual(true)
	a.r.Put(KindSession, "k", []byte("v2"))
	dropped := 0
	c.eventually(500*time.Millisecond, "the sync of k sent", func() bool {
		for _, env := range c.net.Pending() {
			if env.Kind == kindSync && env.From == "a" {
				if err := c.net.Drop(env.ID); err != nil {
					t.Fatal(err)
				}
				dropped++
			}
		}
		return dropped > 0
	})
	c.net.DeliverAll()
	c.net.SetManual(false)

	rep := mustCompare(t, b, "a")
	if got := diffsOf(rep); len(got) != 1 || got["k"] != DiffOlder || rep.Equal != 1 || rep.Diffs[0].Here.Revision != rev(a, 1) || rep.Diffs[0].There.Revision != rev(a, 2) {
		t.Fatalf("b vs a after the dropped sync: %+v", rep)
	}
	if rep := mustCompare(t, a, "b"); rep.Newer != 1 || len(rep.Diffs) != 1 || rep.Equal != 1 {
		t.Fatalf("a vs b after the dropped sync: %+v", rep)
	}
	c.eventually(3*time.Second, "repaired", c.converged)
	if rep := mustCompare(t, b, "a"); !rep.Consistent() || rep.Equal != 2 {
		t.Fatalf("after the repair: %+v", rep)
	}
}

// A conflict (one version, deleted on one side only) and the errors.
func TestCompareConflictAndErrors(t *testing.T) {
	c := newCluster(t, nil, "a", "b")
	a, b := c.nodes["a"], c.nodes["b"]
	a.r.Put(KindSession, "k", []byte("v1"))
	c.eventually(2*time.Second, "converged", c.converged)
	rec, _ := b.r.Get("k")
	rec.Deleted, rec.Payload = true, nil
	plant(b, rec) // the same version, deleted: what no correct node produces
	if rep := mustCompare(t, a, "b"); rep.Conflicts != 1 || len(rep.Diffs) != 1 || rep.Diffs[0].Diff != DiffConflict {
		t.Fatalf("conflict: %+v", rep)
	}
	if _, err := a.r.Compare(context.Background(), "a"); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("compare with itself: %v", err)
	}
	if _, err := a.r.handleConsistency(context.Background(), "mallory", nil); !errors.Is(err, ErrNotMember) {
		t.Fatalf("non-member: %v", err)
	}
	fresh := c.add("z")
	if _, err := fresh.r.Compare(context.Background(), "a"); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("before Start: %v", err)
	}
	_ = fresh.r.Close()
	if _, err := fresh.r.Compare(context.Background(), "a"); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// Many divergent buckets, and one bucket too large for an answer: it is skipped, and said so.
func TestCompareManyBuckets(t *testing.T) {
	c := newCluster(t, nil, "a", "b")
	a, b := c.nodes["a"], c.nodes["b"]
	for i := range 300 {
		plant(b, Record{Key: "ghost" + string(rune('a'+i%26)) + string(rune('a'+i/26)), Kind: KindSession, Owner: "q", Revision: 1, Payload: []byte("x")})
	}
	rep := mustCompare(t, a, "b")
	if rep.MissingHere != 300 || rep.There != 300 || rep.Here != 0 || rep.DivergentBuckets == 0 || rep.DivergentBuckets > a.r.cfg.Buckets {
		t.Fatalf("many ghosts: %d missing here, %d there, %d buckets", rep.MissingHere, rep.There, rep.DivergentBuckets)
	}
	for i := 1; i < len(rep.Diffs); i++ {
		if rep.Diffs[i-1].Key >= rep.Diffs[i].Key {
			t.Fatal("diffs not sorted by key")
		}
	}
}

func TestCompareOversizedBucket(t *testing.T) {
	c := newCluster(t, func(cfg *Config) { cfg.Buckets = 1 }, "a", "b")
	a, b := c.nodes["a"], c.nodes["b"]
	b.r.mu.Lock()
	for i := range maxVerifyVersions + 10 {
		b.r.tab.install(Record{Key: fmt.Sprint("g", i), Kind: KindSession, Owner: "q", Revision: 1}, b.r.clk.Now())
	}
	b.r.mu.Unlock()
	rep := mustCompare(t, a, "b")
	if rep.SkippedBuckets != 1 || rep.DivergentBuckets != 0 || len(rep.Diffs) != 0 || rep.Consistent() || rep.There != maxVerifyVersions+10 {
		t.Fatalf("oversized bucket: skipped %d, divergent %d, %d diffs, there %d", rep.SkippedBuckets, rep.DivergentBuckets, len(rep.Diffs), rep.There)
	}
}

func mapsEqualDiff(a, b map[string]Diff) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// FuzzConsistencyWire: the decoders of both messages refuse what they cannot bound, and never
// panic.
func FuzzConsistencyWire(f *testing.F) {
	req, _ := model.Marshal(consistencyReq{Digest: make([]byte, 8*4), From: 0})
	resp, _ := model.Marshal(consistencyResp{Buckets: bucketList{1}, Versions: versionList{{Key: "k", Rev: 1, Owner: "a"}}, Next: 4, Done: true})
	f.Add(req)
	f.Add(resp)
	f.Add([]byte{0x93, 0xc4, 0x00, 0x02, 0xc2})
	f.Fuzz(func(t *testing.T, b []byte) {
		if from, sums, err := decodeConsistencyReq(b, 4); err == nil && (from < 0 || from >= 4 || len(sums) != 4-from) {
			t.Fatalf("accepted from %d with %d sums", from, len(sums))
		}
		if m, err := decodeConsistencyResp(b, 4, 1); err == nil {
			for _, bk := range m.Buckets {
				if bk < 1 || bk >= 4 {
					t.Fatalf("accepted bucket %d", bk)
				}
			}
		}
	})
}
