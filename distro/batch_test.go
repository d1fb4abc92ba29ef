package distro

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// batchStore is a testStore that also takes batches (BatchStore), and
// records the keys of each, sorted.
type batchStore struct {
	*testStore
	mu      sync.Mutex
	batches [][]string
}

func (s *batchStore) ApplyBatch(recs []Record) {
	keys := make([]string, 0, len(recs))
	for _, rec := range recs {
		keys = append(keys, rec.Key)
	}
	slices.Sort(keys)
	s.mu.Lock()
	s.batches = append(s.batches, keys)
	s.mu.Unlock()
	for _, rec := range recs {
		s.testStore.Apply(rec) // checks the per-key order, and that calls never overlap
	}
}

// sizes returns the sizes of the batches so far.
func (s *batchStore) sizes() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]int, len(s.batches))
	for i, b := range s.batches {
		out[i] = len(b)
	}
	return out
}

// addBatchNode adds node id to c, its Store a batchStore, and returns that.
func addBatchNode(c *cluster, id string) *batchStore {
	n := c.add(id)
	bs := &batchStore{testStore: n.store}
	n.r.cfg.Store = bs
	return bs
}

// withBatchStore starts nodes a and b, b's store a batchStore, and returns
// a's replicator and b's store.
func withBatchStore(t *testing.T) (*cluster, *Replicator, *batchStore) {
	t.Helper()
	c := newCluster(t, nil)
	c.add("a")
	bs := addBatchNode(c, "b")
	c.setMembers("a", "b")
	c.startNode("a")
	c.startNode("b")
	c.waitReady("a", "b")
	return c, c.nodes["a"].r, bs
}

// TestBatchStoreGetsSyncTogether: the records of one sync reach a
// BatchStore in one call, in the order and under the contract of Apply.
func TestBatchStoreGetsSyncTogether(t *testing.T) {
	c, a, bs := withBatchStore(t)
	nb := c.nodes["b"]
	for i := range 20 {
		if _, err := a.Put(KindSession, fmt.Sprintf("s/k%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	c.eventually(time.Second, "b holds the 20 records", func() bool { return len(held(nb.r)) == 20 })
	c.settle()
	got := bs.sizes()
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
	c, a, bs := withBatchStore(t)
	nb := c.nodes["b"]
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
	got := bs.sizes()
	if !slices.Contains(got, 10) || !slices.Contains(got, 2) {
		t.Fatalf("batches %v: the records of one Write did not come together", got)
	}
	c.checkInvariants()
}

// TestLoadHandsLoadedRecordsOverInLists: a joining node hands a BatchStore what it loaded in
// lists of about loadApplyBatch records (whole buckets), each record once, all before ready.
func TestLoadHandsLoadedRecordsOverInLists(t *testing.T) {
	const n = 10000
	c := newCluster(t, nil)
	na := c.add("a")
	c.setMembers("a")
	c.startNode("a")
	c.waitReady("a")
	for i := range n {
		if _, err := na.r.Put(KindSession, fmt.Sprintf("s/k%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	bs := addBatchNode(c, "b")
	nb := c.nodes["b"]
	c.setMembers("a", "b")
	c.startNode("b")
	c.waitReady("b")
	sizes := bs.sizes() // as of ready
	nb.r.mu.Lock()
	bucket := 0 // the most records of one bucket
	for i := range nb.r.tab.buckets {
		bucket = max(bucket, nb.r.tab.buckets[i].len())
	}
	nb.r.mu.Unlock()
	total := 0
	for _, s := range sizes {
		total += s
		if s >= loadApplyBatch+bucket { // a list ends with the bucket that reaches loadApplyBatch
			t.Errorf("a list of %d loaded records, want fewer than %d + %d", s, loadApplyBatch, bucket)
		}
	}
	if total != n || len(sizes) < n/loadApplyBatch {
		t.Fatalf("lists %v: %d records in all at ready, want %d in at least %d lists", sizes, total, n, n/loadApplyBatch)
	}
	if m := c.storeMismatch(nb); m != "" {
		t.Fatal(m)
	}
	c.checkInvariants()
}

// TestFreshDropsOvertakenLoadedRecords: a list of loaded records is delivered whole if the
// table has not changed since it was taken, without the records another version replaced since
// if it has.
func TestFreshDropsOvertakenLoadedRecords(t *testing.T) {
	c := newCluster(t, nil)
	r := c.add("a").r
	now := c.clk.Now()
	x := Record{Key: "x", Kind: KindSession, Owner: "b", Revision: 1, Payload: []byte("1")}
	y := Record{Key: "y", Kind: KindSession, Owner: "b", Revision: 1, Payload: []byte("1")}
	r.mu.Lock()
	r.tab.install(x, now)
	r.tab.install(y, now)
	l := &loadedList{recs: []Record{x, y}, gen: r.tab.changes}
	r.mu.Unlock()
	if got := r.fresh(l); len(got) != 2 {
		t.Fatalf("%d of 2 records fresh, the table unchanged", len(got))
	}
	r.mu.Lock()
	x2 := x
	x2.Revision = 2
	r.tab.install(x2, now)
	r.mu.Unlock()
	got := r.fresh(&loadedList{recs: []Record{x, y}, gen: l.gen})
	if len(got) != 1 || got[0].Key != "y" {
		t.Fatalf("fresh after x changed: %v, want y alone", got)
	}
}
