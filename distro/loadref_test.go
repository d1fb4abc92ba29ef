package distro

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/transport"
)

// A joining node pulls each record about once, not once per peer: the first peer to answer is
// loaded whole, the others send only the buckets whose sums differ from its. The merge is still
// that of every peer's snapshot: here the first peer to answer (n2) is stale, missing a record,
// an update and a deletion of n3's that n1 has; the joiner ends with n3's versions.
func TestLoadTakesOtherPeersDifferingBucketsOnly(t *testing.T) {
	c := newCluster(t, func(cfg *Config) {
		cfg.VerifyInterval, cfg.TombstoneTTL = time.Hour, 2*time.Hour // no repair during the test
	}, "n1", "n2", "n3")
	const n = 12000 // three snapshot pages
	for i := range n {
		owner := c.nodes[fmt.Sprintf("n%d", i%3+1)]
		if _, err := owner.r.Put(KindSession, fmt.Sprintf("s/%s/%d", owner.id, i), []byte(fmt.Sprintf("payload of record %d", i))); err != nil {
			t.Fatal(err)
		}
	}
	c.eventually(10*time.Second, "the records everywhere", func() bool {
		return c.converged() && len(held(c.nodes["n1"].r)) == n
	})

	// n2 misses three changes of n3's.
	c.net.PartitionOneWay("n3", "n2")
	n3 := c.nodes["n3"].r
	added, err := n3.Put(KindSession, "s/n3/new", []byte("new"))
	if err != nil {
		t.Fatal(err)
	}
	updated, err := n3.Put(KindSession, "s/n3/2", []byte("updated"))
	if err != nil {
		t.Fatal(err)
	}
	deleted, err := n3.Delete("s/n3/5")
	if err != nil {
		t.Fatal(err)
	}
	c.eventually(time.Second, "n1 has n3's changes", func() bool {
		r, ok := c.nodes["n1"].r.Get(deleted.Key)
		return ok && r.Deleted
	})

	// The joiner's requests to n1 and n3 wait on the clock: n2 answers first.
	c.net.ResetStats()
	j := c.add("n4")
	c.setMembers("n1", "n2", "n3", "n4")
	c.net.SetLink("n4", "n1", transport.LinkConfig{Delay: 50 * time.Millisecond})
	c.net.SetLink("n4", "n3", transport.LinkConfig{Delay: 50 * time.Millisecond})
	c.startNode("n4")
	// Until the clock moves, only n2 answers: it is the primary, loaded whole.
	deadline := time.Now().Add(10 * time.Second)
	for j.r.Stats().Records < n {
		if time.Now().After(deadline) {
			t.Fatalf("n2's snapshot not loaded: the joiner holds %d records", j.r.Stats().Records)
		}
		time.Sleep(time.Millisecond)
	}
	c.waitReady("n4")
	if got := j.r.Stats().LoadPeers; got != 3 {
		t.Fatalf("loaded from %d peers, want 3", got)
	}
	for _, want := range []Record{added, updated, deleted} {
		got, ok := j.r.Get(want.Key)
		if !ok || !got.sameVersion(want) || got.Deleted != want.Deleted {
			t.Errorf("the joiner holds %v (%v), want %v", got, ok, want)
		}
	}
	if h, w := held(j.r), held(c.nodes["n1"].r); !mapsEqual(h, w) {
		t.Errorf("the joiner holds %d live records, n1 %d", len(h), len(w))
	}
	if m := c.storeMismatch(j); m != "" {
		t.Error(m)
	}
	c.checkInvariants()

	whole := c.net.Stats("n2", "n4").Bytes
	for _, p := range []string{"n1", "n3"} {
		// The first page (a third of the records) whole, then the three differing buckets.
		if got := c.net.Stats(p, "n4").Bytes; got > whole/2 {
			t.Errorf("%s sent %d bytes of snapshot, the primary %d: more than the first page and the differing buckets", p, got, whole)
		}
	}
}

// A primary whose pages carry its bucket sums but not the records they
// sum (a faulty or hostile member) does not become the reference: the
// other peers then send everything, and the joiner holds every record.
// (With the sums trusted, they would leave every bucket out.)
func TestLoadRefusesSumsThatDoNotMatchTheRecords(t *testing.T) {
	c := newCluster(t, func(cfg *Config) {
		cfg.VerifyInterval, cfg.TombstoneTTL = time.Hour, 2*time.Hour // no repair during the test
	}, "n1", "n2", "n3")
	const n = 12000 // three pages: each peer's first page is taken whole anyway
	for i := range n {
		owner := c.nodes[fmt.Sprintf("n%d", i%3+1)]
		if _, err := owner.r.Put(KindSession, fmt.Sprintf("s/%s/%d", owner.id, i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	c.eventually(10*time.Second, "the records everywhere", func() bool {
		return c.converged() && len(held(c.nodes["n1"].r)) == n
	})
	// n2 answers snapshots with the true sums and no records.
	liar := c.nodes["n2"]
	liar.tr.Handle(kindSnapshot, func(ctx context.Context, from string, body []byte) ([]byte, error) {
		out, err := liar.r.handleSnapshot(ctx, from, body)
		if err != nil {
			return out, err
		}
		_, m, err := decodeSnapResp(out)
		if err != nil {
			return nil, err
		}
		m.Records = nil
		return model.Marshal(m)
	})
	j := c.add("n4")
	c.setMembers("n1", "n2", "n3", "n4")
	c.net.SetLink("n4", "n1", transport.LinkConfig{Delay: 50 * time.Millisecond})
	c.net.SetLink("n4", "n3", transport.LinkConfig{Delay: 50 * time.Millisecond})
	c.startNode("n4") // n2 answers first: it would be the primary
	c.waitReady("n4")
	if h := held(j.r); len(h) != n {
		t.Fatalf("the joiner holds %d records, want %d", len(h), n)
	}
}
