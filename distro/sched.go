package distro

import (
	"container/heap"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// syncSched is the pure core of change sync: one task per (key, peer), merged within the delay
// window anchored at the first unsent change, retried with capped exponential backoff and
// jitter, dropped when the peer leaves. It holds keys only: the driver reads each record's state
// when it sends. At most one batch per peer is in flight, which keeps a peer's syncs in order.
type syncSched struct {
	delay    time.Duration
	min, max time.Duration
	due      map[taskKey]dueTask
	h        dueHeap
	peers    map[string]*peerSync
	// nb is the number of digest buckets, for the per-bucket counts of fresh tasks (0: none
	// kept; the driver sets it).
	nb int
}

// dueTask is a task waiting for its time. A fresh task carries changes whose first attempt has
// not ended yet (in the merge window, then ready, then in flight); a retry after a failure is
// not fresh.
type dueTask struct {
	at    time.Time
	fresh bool
}

type taskKey struct{ peer, key string }

type peerSync struct {
	attempt int             // consecutive failures
	busy    bool            // a batch is in flight
	ready   map[string]bool // keys due, waiting for the peer to be free (value: fresh)
	flight  map[string]bool // the keys of the batch in flight (value: fresh)
	// readyBig: ready held more than smallBurst keys since it was made.
	readyBig bool
	// fresh counts, per bucket, the fresh tasks (see dueTask) of this peer: the peer may hold an
	// older version of those records only because their sync has not arrived yet.
	fresh map[int]int
	// skipped are the buckets the previous verify digest to this peer left out (freshBuckets).
	skipped map[int]bool
}

type dueItem struct {
	at time.Time
	tk taskKey
}

type dueHeap []dueItem

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(dueItem)) }
func (h *dueHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

func newSyncSched(delay, retryMin, retryMax time.Duration) *syncSched {
	return &syncSched{delay: delay, min: retryMin, max: retryMax, due: map[taskKey]dueTask{}, peers: map[string]*peerSync{}}
}

func (s *syncSched) peer(p string) *peerSync {
	ps := s.peers[p]
	if ps == nil {
		ps = &peerSync{ready: map[string]bool{}, fresh: map[int]int{}}
		s.peers[p] = ps
	}
	return ps
}

// add schedules a sync of key to peer after the delay, unless one is already pending (then the
// pending one, anchored at the earlier change, carries this change too).
func (s *syncSched) add(peer, key string, now time.Time) {
	s.addTask(peer, key, now.Add(s.delay), true)
}

// addAt schedules a sync of key to peer at at (a retry, or the rest of a batch cut short), unless
// one is already pending.
func (s *syncSched) addAt(peer, key string, at time.Time) { s.addTask(peer, key, at, false) }

func (s *syncSched) addTask(peer, key string, at time.Time, fresh bool) {
	ps := s.peer(peer)
	if _, ok := ps.ready[key]; ok {
		return
	}
	tk := taskKey{peer, key}
	if _, ok := s.due[tk]; ok {
		return
	}
	s.due[tk] = dueTask{at: at, fresh: fresh}
	if fresh {
		s.count(ps, key, 1)
	}
	heap.Push(&s.h, dueItem{at: at, tk: tk})
}

// addGroup schedules the syncs to peer of keys, the records of one write, so that they leave
// together: a key whose change is already waiting (due later, or ready for a busy peer) would
// otherwise keep its task while the others got a later one, and the peer would get the write in
// two messages (a session's ReplaceService: the old instance's deletion a merge window before
// the new instance). They share the earliest of their pending tasks, or the ready set if one of
// them is there; a key without a task gets a fresh one, as add gives it. Every task of the group
// is fresh, a waiting retry included: it now carries this write, which the peer lacks only
// because it has not been sent, so a verify repair leaves it to the sync (with the rest of the
// write) instead of sending it alone. Best effort: a ready set larger than the batch limits
// (MaxBatch, maxBatchBytes) still leaves in several messages.
func (s *syncSched) addGroup(peer string, keys []string, now time.Time) {
	ps := s.peer(peer)
	at, ready := now.Add(s.delay), false
	for _, k := range keys {
		if _, ok := ps.ready[k]; ok {
			ready = true
			break
		}
		if t, ok := s.due[taskKey{peer, k}]; ok && t.at.Before(at) {
			at = t.at
		}
	}
	for _, k := range keys {
		if fresh, ok := ps.ready[k]; ok {
			if !fresh {
				ps.ready[k] = true
				s.count(ps, k, 1)
			}
			continue
		}
		tk := taskKey{peer, k}
		t, had := s.due[tk]
		if !had || !t.fresh {
			t.fresh = true
			s.count(ps, k, 1)
		}
		if ready {
			delete(s.due, tk) // its heap entry goes stale
			ps.ready[k] = t.fresh
			continue
		}
		if had && t.at.Equal(at) {
			s.due[tk] = t // fresh now, if it was a retry
			continue
		}
		t.at = at
		s.due[tk] = t
		heap.Push(&s.h, dueItem{at: at, tk: tk}) // an earlier entry of the key goes stale
	}
}

// fresh reports whether key has a fresh task to peer (see dueTask): due, ready or in flight, on
// its first attempt.
func (s *syncSched) fresh(peer, key string) bool {
	ps := s.peers[peer]
	if ps == nil {
		return false
	}
	if t, ok := s.due[taskKey{peer, key}]; ok && t.fresh {
		return true
	}
	return ps.ready[key] || ps.flight[key]
}

// count adds d to the fresh tasks of key's bucket.
func (s *syncSched) count(ps *peerSync, key string, d int) {
	if s.nb <= 0 {
		return
	}
	b := bucketOf(keyHash(key), s.nb)
	if ps.fresh[b] += d; ps.fresh[b] <= 0 {
		delete(ps.fresh, b)
	}
}

// freshBuckets returns the buckets a verify digest to peer leaves out: those holding records
// whose sync to peer is on its first attempt (the peer lacks the change only because it has not
// arrived yet: comparing would report it, and the repair would send it twice), except buckets
// left out of the previous digest too, so that a bucket whose records change all the time is
// still compared every other round. It remembers the result for the next call.
func (s *syncSched) freshBuckets(peer string) []uint32 {
	ps := s.peers[peer]
	if ps == nil {
		return nil
	}
	var out []uint32
	next := map[int]bool{}
	for b := range ps.fresh {
		if !ps.skipped[b] {
			out = append(out, uint32(b))
			next[b] = true
		}
	}
	ps.skipped = next
	slices.Sort(out)
	return out
}

// pending reports the number of scheduled tasks (due later or ready).
func (s *syncSched) pending() int {
	n := len(s.due)
	for _, ps := range s.peers {
		n += len(ps.ready)
	}
	return n
}

// smallBurst is the most keys a peer's ready and in-flight sets hold and are then kept for
// reuse once emptied (a sync of a few keys, the common case, allocates no map). A map keeps the
// size of its largest burst, and iterating it costs that much: after a bigger one, a new map.
const smallBurst = 8

// take moves the tasks due at now to their peers' ready sets and returns, for every peer not
// busy, up to max ready keys, marking those peers busy. The driver sends each batch and reports
// back with done.
func (s *syncSched) take(now time.Time, max int) map[string][]string {
	for len(s.h) > 0 && !s.h[0].at.After(now) {
		it := heap.Pop(&s.h).(dueItem)
		t, ok := s.due[it.tk]
		if !ok || !t.at.Equal(it.at) {
			continue // stale heap entry
		}
		delete(s.due, it.tk)
		s.peer(it.tk.peer).ready[it.tk.key] = t.fresh
	}
	var out map[string][]string
	for p, ps := range s.peers {
		if ps.busy || len(ps.ready) == 0 {
			continue
		}
		if len(ps.ready) > smallBurst {
			ps.readyBig = true
		}
		n := min(max, len(ps.ready))
		keys := make([]string, 0, n)
		if ps.flight == nil {
			ps.flight = make(map[string]bool, n)
		}
		for k, fresh := range ps.ready {
			if len(keys) == max {
				break
			}
			keys = append(keys, k)
			ps.flight[k] = fresh
			delete(ps.ready, k)
		}
		if len(ps.ready) == 0 && ps.readyBig {
			ps.ready, ps.readyBig = map[string]bool{}, false // see smallBurst
		}
		ps.busy = true
		if out == nil {
			out = map[string][]string{}
		}
		out[p] = keys
	}
	return out
}

// done reports the outcome of a batch sent to peer. On failure the batch, and everything else
// ready for that peer, is retried after the peer's backoff. It returns the backoff (0 on success).
func (s *syncSched) done(peer string, keys []string, ok bool, now time.Time, rnd *rand.Rand) time.Duration {
	ps := s.peers[peer]
	if ps == nil {
		return 0 // the peer left: its tasks were dropped
	}
	ps.busy = false
	for k, fresh := range ps.flight { // the first attempt of these ended
		if fresh {
			s.count(ps, k, -1)
		}
	}
	if len(ps.flight) > smallBurst {
		ps.flight = nil // see smallBurst
	} else {
		clear(ps.flight)
	}
	if ok {
		ps.attempt = 0
		return 0
	}
	ps.attempt++
	d := s.backoff(ps.attempt, rnd)
	at := now.Add(d)
	if len(ps.ready) > smallBurst {
		ps.readyBig = true // emptied here, replaced by take once emptied there
	}
	// The retries take copies of their keys. A key is often a window on its record's allocation
	// (a received record's key and payload are one, and the registry writes its own records so):
	// retried for as long as an unreachable peer stays a member, a task would keep that
	// version's payload alive, in due, the heap and ready, long after the table let it go. A
	// first attempt keeps its window at most the merge window and the flight. A task that was
	// already due keeps its key (addAt leaves it); so does a heap item left stale (by addGroup,
	// flush or dropPeer) until take or next pops it, at its time: a merge window or a backoff
	// (at most the retry cap) after it was pushed.
	for k, fresh := range ps.ready {
		delete(ps.ready, k)
		if fresh {
			s.count(ps, k, -1)
		}
		s.addAt(peer, strings.Clone(k), at)
	}
	for _, k := range keys {
		s.addAt(peer, strings.Clone(k), at)
	}
	return d
}

// backoff is min·2^(attempt−1) capped at max, drawn in [d/2, d).
func (s *syncSched) backoff(attempt int, rnd *rand.Rand) time.Duration {
	d := s.min
	for i := 1; i < attempt && d < s.max; i++ {
		d *= 2
	}
	d = min(d, s.max)
	half := d / 2
	if half <= 0 {
		return d
	}
	return half + time.Duration(rnd.Int64N(int64(d-half)))
}

// dropPeer forgets every task of peer. Its heap entries go stale and are skipped.
func (s *syncSched) dropPeer(peer string) {
	if _, ok := s.peers[peer]; !ok {
		return
	}
	delete(s.peers, peer)
	for tk := range s.due {
		if tk.peer == peer {
			delete(s.due, tk)
		}
	}
}

// next returns when take next has work: the earliest due time, or now-or-earlier (zero time) if
// a free peer has ready keys; ok is false when nothing is pending.
func (s *syncSched) next() (at time.Time, ok bool) {
	for _, ps := range s.peers {
		if !ps.busy && len(ps.ready) > 0 {
			return time.Time{}, true
		}
	}
	for len(s.h) > 0 {
		it := s.h[0]
		if t, ok := s.due[it.tk]; ok && t.at.Equal(it.at) {
			return it.at, true
		}
		heap.Pop(&s.h)
	}
	return time.Time{}, false
}

// flush makes every scheduled task due at now, ending merge windows and
// backoffs early.
func (s *syncSched) flush(now time.Time) {
	for tk, t := range s.due {
		if t.at.After(now) {
			s.due[tk] = dueTask{at: now, fresh: t.fresh}
			heap.Push(&s.h, dueItem{at: now, tk: tk})
		}
	}
	for _, ps := range s.peers {
		ps.attempt = 0
	}
}

// quiet reports whether nothing is in flight or due by now: every task has
// been sent, or failed and waits for a retry.
func (s *syncSched) quiet(now time.Time) bool {
	for _, ps := range s.peers {
		if ps.busy || len(ps.ready) > 0 {
			return false
		}
	}
	at, ok := s.next()
	return !ok || at.After(now)
}
