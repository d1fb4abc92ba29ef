package distro

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// A verify digest leaves out the buckets of records whose sync to the peer is on its first
// attempt, but never the same bucket two rounds in a row; retries do not count.
func TestFreshBuckets(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := newSyncSched(time.Second, 100*time.Millisecond, time.Second)
	s.nb = 64
	b := uint32(bucketOf(keyHash("k"), 64))
	s.add("p", "k", now)
	if got := s.freshBuckets("p"); !slices.Equal(got, []uint32{b}) {
		t.Fatalf("fresh buckets %v, want [%d]", got, b)
	}
	if got := s.freshBuckets("p"); len(got) != 0 {
		t.Fatalf("bucket %v left out twice in a row", got)
	}
	if got := s.freshBuckets("p"); !slices.Equal(got, []uint32{b}) {
		t.Fatalf("fresh buckets %v, want [%d] again", got, b)
	}
	if got := s.freshBuckets("q"); len(got) != 0 {
		t.Fatalf("another peer's fresh buckets %v", got)
	}
	batch := s.take(now.Add(time.Second), 10)["p"]
	if !slices.Equal(batch, []string{"k"}) {
		t.Fatalf("batch %v", batch)
	}
	s.add("p", "k", now.Add(time.Second)) // a change while the first is in flight
	s.freshBuckets("p")                   // (the previous round left it out)
	s.done("p", batch, false, now.Add(time.Second), rand.New(rand.NewPCG(1, 2)))
	// The in-flight attempt ended; the change made meanwhile is still fresh, the retry is not.
	if got := s.freshBuckets("p"); !slices.Equal(got, []uint32{b}) {
		t.Fatalf("fresh buckets %v after a failed attempt and a new change, want [%d]", got, b)
	}
	batch = s.take(now.Add(10*time.Second), 10)["p"]
	s.done("p", batch, true, now.Add(10*time.Second), nil)
	if s.freshBuckets("p"); len(s.peers["p"].fresh) != 0 {
		t.Fatalf("fresh counts %v after every attempt ended", s.peers["p"].fresh)
	}
	// A retry alone is not fresh.
	s.add("p", "k", now.Add(11*time.Second))
	batch = s.take(now.Add(12*time.Second), 10)["p"]
	s.done("p", batch, false, now.Add(12*time.Second), rand.New(rand.NewPCG(1, 2)))
	if len(s.peers["p"].fresh) != 0 {
		t.Fatalf("fresh counts %v with only a retry pending", s.peers["p"].fresh)
	}
}

// Changes waiting in their merge window when a verify round runs are not reported as divergent
// (before, each made its bucket's versions travel in the answer and the record in a repair,
// ahead of its sync); they arrive by sync, and the cluster converges.
func TestVerifyLeavesOutBucketsWithSyncsUnderWay(t *testing.T) {
	c := newCluster(t, nil, "n1", "n2", "n3")
	n1 := c.nodes["n1"]
	for i := range 300 {
		if _, err := n1.r.Put(KindSession, fmt.Sprintf("s/n1/%d", i), []byte("v1")); err != nil {
			t.Fatal(err)
		}
	}
	c.eventually(5*time.Second, "converged", func() bool { return c.converged() && len(held(c.nodes["n3"].r)) == 300 })
	// A verify round has run; the next is due at nextVerify. Change records half a SyncDelay
	// before it.
	n1.r.mu.Lock()
	next := n1.r.nextVerify
	n1.r.mu.Unlock()
	for c.clk.Now().Before(next.Add(-50 * time.Millisecond)) {
		c.step(10 * time.Millisecond)
	}
	c.settle()
	before := n1.r.Stats()
	for i := range 20 {
		if _, err := n1.r.Put(KindSession, fmt.Sprintf("s/n1/%d", i*7), []byte("v2")); err != nil {
			t.Fatal(err)
		}
	}
	c.eventually(200*time.Millisecond, "a verify round", func() bool { return n1.r.Stats().VerifyRounds >= before.VerifyRounds+2 })
	after := n1.r.Stats()
	if d := after.DivergentBuckets - before.DivergentBuckets; d != 0 {
		t.Errorf("%d buckets reported divergent while their syncs were under way", d)
	}
	if d := after.RepairRecords - before.RepairRecords; d != 0 {
		t.Errorf("%d records sent in repairs ahead of their syncs", d)
	}
	c.eventually(3*time.Second, "converged", c.converged)
	c.checkInvariants()
}
