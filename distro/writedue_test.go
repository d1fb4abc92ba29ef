package distro

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestWriteTogetherWithPendingKey: the records of one Write leave in one
// sync message even when one of its keys already has a sync waiting in its
// merge window (an earlier change of that key, less than SyncDelay ago).
// The earlier task used to keep its due time while the Write's other keys
// got a later one, so the peer got the deletion of the old record first and
// the new one a merge window later: a session's ReplaceService (delete the
// old instance record, put the new one) showed the peer neither instance in
// between (nacosd's TestClusterSubscribeAcrossNodes: "callback 3 has 1
// hosts, want 2").
func TestWriteTogetherWithPendingKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		busy bool // the earlier change's task is ready, waiting for a batch in flight
	}{{"due", false}, {"ready", true}} {
		t.Run(tc.name, func(t *testing.T) {
			c, a, bs := withBatchStore(t)
			if _, err := a.Put(KindSession, "s/old", []byte("v1")); err != nil {
				t.Fatal(err)
			}
			c.eventually(time.Second, "b holds s/old", func() bool { _, ok := bs.get("s/old"); return ok })
			c.settle()

			// An earlier change of s/old: its sync waits in the merge window.
			if _, err := a.Put(KindSession, "s/old", []byte("v2")); err != nil {
				t.Fatal(err)
			}
			if tc.busy {
				// Make the peer busy so that s/old's task moves to ready when due
				// and stays there.
				a.mu.Lock()
				a.sched.peer("b").busy = true
				a.mu.Unlock()
				c.step(testConfig().SyncDelay)
				c.settle()
				a.mu.Lock()
				_, ready := a.sched.peer("b").ready["s/old"]
				a.mu.Unlock()
				if !ready {
					t.Fatal("s/old is not ready")
				}
			} else {
				c.step(testConfig().SyncDelay / 2)
				c.settle()
			}
			// One Write: the old record leaves, the new one comes.
			if errs := a.Write([]Change{{Key: "s/old", Delete: true}, {Kind: KindSession, Key: "s/new", Payload: []byte("v")}}); errs != nil {
				t.Fatal(errs)
			}
			if tc.busy {
				a.mu.Lock()
				a.sched.done("b", nil, true, c.clk.Now(), a.rnd)
				a.mu.Unlock()
				a.poke()
			}
			c.eventually(time.Second, "b holds the change", func() bool {
				_, oldLive := bs.get("s/old")
				_, newLive := bs.get("s/new")
				return !oldLive && newLive
			})
			c.settle()
			bs.mu.Lock()
			defer bs.mu.Unlock()
			// After s/old's first sync, every batch carries both keys: the
			// deletion never comes without the put.
			for _, b := range bs.batches[1:] {
				if !slices.Contains(b, "s/new") || !slices.Contains(b, "s/old") {
					t.Fatalf("batches %v: b got s/old's deletion before s/new (neither live in between)", bs.batches)
				}
			}
			c.checkInvariants()
		})
	}
}

// TestRepairLeavesFreshChangesToSync: a verify round whose answer was made
// against a digest older than a Write (the owner wrote while the round was
// under way) does not send one of that Write's records ahead of its sync:
// the repair would carry the deletion of the old record and not the new one
// (its bucket compared equal), so the peer would hold neither until the
// sync. A record whose first sync is still on its way is left to it.
func TestRepairLeavesFreshChangesToSync(t *testing.T) {
	c := newCluster(t, nil, "a", "b")
	a := c.nodes["a"].r
	nb := testConfig().Buckets
	oldKey, newKey := "s/old", ""
	for i := 0; newKey == "" || bucketOf(keyHash(newKey), nb) == bucketOf(keyHash(oldKey), nb); i++ {
		newKey = "s/new" + strconv.Itoa(i)
	}
	if _, err := a.Put(KindSession, oldKey, []byte("v1")); err != nil {
		t.Fatal(err)
	}
	c.eventually(time.Second, "b holds s/old", func() bool { _, ok := c.nodes["b"].store.get(oldKey); return ok })
	c.settle()
	// The Write; its sync waits in the merge window.
	if errs := a.Write([]Change{{Key: oldKey, Delete: true}, {Kind: KindSession, Key: newKey, Payload: []byte("v")}}); errs != nil {
		t.Fatal(errs)
	}
	// b's answer to a digest taken before the Write, in which s/old's bucket
	// differed (b had meanwhile got an earlier change there): b holds
	// s/old at revision 1.
	vr := verifyResp{Buckets: bucketList{uint32(bucketOf(keyHash(oldKey), nb))}, Versions: versionList{{Key: oldKey, Rev: 1, Owner: "a"}}}
	a.mu.Lock()
	send, drop, _ := a.repairPlanLocked("b", vr)
	a.mu.Unlock()
	for _, rec := range send {
		if rec.Key == oldKey {
			t.Fatalf("the repair sends %v ahead of the sync of its Write (drops %v): b would hold neither %s nor %s", rec, drop, oldKey, newKey)
		}
	}
}

// TestAddGroupRetryBecomesFresh: a key whose sync failed and waits for its
// retry (due or ready) is a first attempt again once a Write carries a new
// change of it, like the Write's other keys: a verify repair then leaves
// all of them to their sync instead of sending the old key's change alone.
// The fresh counters return to zero once the batch is acknowledged.
func TestAddGroupRetryBecomesFresh(t *testing.T) {
	for _, ready := range []bool{false, true} {
		t.Run(fmt.Sprintf("ready=%v", ready), func(t *testing.T) {
			s := newSyncSched(100*time.Millisecond, 50*time.Millisecond, 400*time.Millisecond)
			s.nb = 64
			now := time.Unix(1000, 0)
			s.addAt("p", "old", now.Add(300*time.Millisecond)) // a retry: not fresh
			if ready {
				s.take(now.Add(300*time.Millisecond), 0) // due: moves to ready (max 0: nothing sent)
				s.peer("p").busy = true
			}
			if s.fresh("p", "old") {
				t.Fatal("a retry counts as fresh")
			}
			s.addGroup("p", []string{"old", "new"}, now.Add(time.Millisecond))
			for _, k := range []string{"old", "new"} {
				if !s.fresh("p", k) {
					t.Fatalf("%s is not fresh after the Write", k)
				}
			}
			if got := s.freshBuckets("p"); len(got) == 0 {
				t.Fatal("no bucket left out of the digest")
			}
			s.peer("p").busy = false
			batch := s.take(now.Add(time.Second), 10)["p"]
			slices.Sort(batch)
			if !slices.Equal(batch, []string{"new", "old"}) {
				t.Fatalf("batch %v, want both keys in one", batch)
			}
			s.done("p", batch, true, now.Add(time.Second), nil)
			if ps := s.peer("p"); len(ps.fresh) != 0 || s.pending() != 0 {
				t.Fatalf("after the batch: fresh counters %v, %d pending", ps.fresh, s.pending())
			}
		})
	}
}
