package distro

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// blockingBatchStore counts the loaded records its ApplyBatch gets, and
// blocks the call that carries the record "s/sync" until release closes.
type blockingBatchStore struct {
	*testStore
	loaded  atomic.Int64
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (s *blockingBatchStore) ApplyBatch(recs []Record) {
	for _, rec := range recs {
		if rec.Key == "s/sync" {
			s.once.Do(func() { close(s.entered) })
			<-s.release
			continue
		}
		s.loaded.Add(1)
	}
}

// TestReadyWaitsForLoadedDelivery: while another goroutine is draining
// (a message's handler, its Store call in flight), finishLoad's own drain
// returns at once; the node still does not become ready before its Store
// holds every loaded record, and then it holds them all.
func TestReadyWaitsForLoadedDelivery(t *testing.T) {
	c := newCluster(t, nil)
	n := c.add("b")
	bs := &blockingBatchStore{testStore: n.store, entered: make(chan struct{}), release: make(chan struct{})}
	r := n.r
	r.cfg.Store = bs
	now := c.clk.Now()
	const total = 3*loadApplyBatch + 100 // several lists
	r.mu.Lock()
	for i := range total {
		rec := Record{Key: fmt.Sprintf("s/k%d", i), Kind: KindSession, Owner: "a", Revision: 1, Payload: []byte("v")}
		r.offerLoadedLocked(rec, keyHash(rec.Key), now)
	}
	r.mu.Unlock()
	go func() { // the other drainer: blocked in the Store until release
		r.mu.Lock()
		r.emitLocked(storeEvent{op: evApply, rec: Record{Key: "s/sync", Kind: KindSession, Owner: "a", Revision: 1, Payload: []byte("x")}})
		r.mu.Unlock()
		r.drain()
	}()
	<-bs.entered
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(bs.release) }) }
	defer release() // a failure below must not leave the drainer blocked
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.finishLoad(1, false, time.Second)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.mu.Lock()
		queued := r.emitted >= 2 // the first list is queued behind the blocked call
		r.mu.Unlock()
		if queued {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("finishLoad queued no list")
		}
		runtime.Gosched()
	}
	for range 20000 { // give a finishLoad that does not wait every chance to turn ready
		if r.Ready() {
			t.Fatalf("ready with %d of %d loaded records in the Store, its delivery still blocked", bs.loaded.Load(), total)
		}
		runtime.Gosched()
	}
	release()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("finishLoad did not return once the Store was released")
	}
	if !r.Ready() || bs.loaded.Load() != total {
		t.Fatalf("ready %v with %d of %d loaded records in the Store", r.Ready(), bs.loaded.Load(), total)
	}
}
