package distro

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// batchStore is a testStore that also takes batches (BatchStore).
type batchStore struct {
	*testStore
	mu      sync.Mutex
	batches []int
}

func (s *batchStore) ApplyBatch(recs []Record) {
	s.mu.Lock()
	s.batches = append(s.batches, len(recs))
	s.mu.Unlock()
	for _, rec := range recs {
		s.testStore.Apply(rec) // checks the per-key order, and that calls never overlap
	}
}

// TestBatchStoreGetsSyncTogether: the records of one sync reach a
// BatchStore in one call, in the order and under the contract of Apply.
func TestBatchStoreGetsSyncTogether(t *testing.T) {
	c := newCluster(t, nil)
	c.add("a")
	nb := c.add("b")
	bs := &batchStore{testStore: nb.store}
	nb.r.cfg.Store = bs
	c.setMembers("a", "b")
	c.startNode("a")
	c.startNode("b")
	c.waitReady("a", "b")
	a := c.nodes["a"].r
	for i := range 20 {
		if _, err := a.Put(KindSession, fmt.Sprintf("s/k%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	c.eventually(time.Second, "b holds the 20 records", func() bool { return len(held(nb.r)) == 20 })
	c.settle()
	bs.mu.Lock()
	got := slices.Clone(bs.batches)
	bs.mu.Unlock()
	if !slices.Contains(got, 20) {
		t.Fatalf("batches %v: the 20 records of one sync did not come together", got)
	}
	for i := range 20 {
		if _, ok := bs.get(fmt.Sprintf("s/k%d", i)); !ok {
			t.Fatalf("the store lacks s/k%d", i)
		}
	}
	c.checkInvariants()
}
