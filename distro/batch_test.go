package distro

import (
	"errors"
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

// TestWriteTogether: Write makes each change as Put and Delete would, says
// which failed, and the records written leave in one sync message.
func TestWriteTogether(t *testing.T) {
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
	var changes []Change
	for i := range 10 {
		changes = append(changes, Change{Kind: KindSession, Key: fmt.Sprintf("s/w%d", i), Payload: []byte("v")})
	}
	notOurs := beatKeyOwnedBy(a.Members(), "b", 1)
	changes = append(changes,
		Change{Key: "s/unknown", Delete: true},             // nothing to delete
		Change{Kind: KindBeat, Key: notOurs, Payload: nil}, // b owns it
		Change{Kind: KindSession, Key: "", Payload: nil},   // invalid
	)
	errs := a.Write(changes)
	if len(errs) != len(changes) {
		t.Fatalf("errs %v", errs)
	}
	for i := range 10 {
		if errs[i] != nil {
			t.Fatalf("change %d: %v", i, errs[i])
		}
	}
	if !errors.Is(errs[10], ErrNotFound) || !errors.Is(errs[11], ErrNotOwner) || !errors.Is(errs[12], ErrInvalidRecord) {
		t.Fatalf("errors %v", errs[10:])
	}
	c.eventually(time.Second, "b holds the 10 records", func() bool { return len(held(nb.r)) == 10 })
	// A delete and a put in one Write.
	if errs := a.Write([]Change{{Key: "s/w0", Delete: true}, {Kind: KindSession, Key: "s/w1", Payload: []byte("v2")}}); errs != nil {
		t.Fatal(errs)
	}
	c.eventually(time.Second, "b holds the change", func() bool {
		rec, ok := nb.r.Get("s/w0")
		return ok && rec.Deleted && string(held(nb.r)["s/w1"]) != ""
	})
	c.settle()
	bs.mu.Lock()
	got := slices.Clone(bs.batches)
	bs.mu.Unlock()
	if !slices.Contains(got, 10) || !slices.Contains(got, 2) {
		t.Fatalf("batches %v: the records of one Write did not come together", got)
	}
	c.checkInvariants()
}
