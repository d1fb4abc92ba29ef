package distro

import (
	"container/heap"
	"math/rand/v2"
	"time"
)

// syncSched is the pure core of change sync: one task per (key, peer), merged within the delay
// window anchored at the first unsent change, retried with capped exponential backoff and
// jitter, dropped when the peer leaves. It holds keys only: the driver reads each record's state
// when it sends. At most one batch per peer is in flight, which keeps a peer's syncs in order.
type syncSched struct {
	delay    time.Duration
	min, max time.Duration
	due      map[taskKey]time.Time
	h        dueHeap
	peers    map[string]*peerSync
}

type taskKey struct{ peer, key string }

type peerSync struct {
	attempt int                 // consecutive failures
	busy    bool                // a batch is in flight
	ready   map[string]struct{} // keys due, waiting for the peer to be free
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
	return &syncSched{delay: delay, min: retryMin, max: retryMax, due: map[taskKey]time.Time{}, peers: map[string]*peerSync{}}
}

func (s *syncSched) peer(p string) *peerSync {
	ps := s.peers[p]
	if ps == nil {
		ps = &peerSync{ready: map[string]struct{}{}}
		s.peers[p] = ps
	}
	return ps
}

// add schedules a sync of key to peer after the delay, unless one is already pending (then the
// pending one, anchored at the earlier change, carries this change too).
func (s *syncSched) add(peer, key string, now time.Time) {
	s.addAt(peer, key, now.Add(s.delay))
}

func (s *syncSched) addAt(peer, key string, at time.Time) {
	ps := s.peer(peer)
	if _, ok := ps.ready[key]; ok {
		return
	}
	tk := taskKey{peer, key}
	if _, ok := s.due[tk]; ok {
		return
	}
	s.due[tk] = at
	heap.Push(&s.h, dueItem{at: at, tk: tk})
}

// pending reports the number of scheduled tasks (due later or ready).
func (s *syncSched) pending() int {
	n := len(s.due)
	for _, ps := range s.peers {
		n += len(ps.ready)
	}
	return n
}

// take moves the tasks due at now to their peers' ready sets and returns, for every peer not
// busy, up to max ready keys, marking those peers busy. The driver sends each batch and reports
// back with done.
func (s *syncSched) take(now time.Time, max int) map[string][]string {
	for len(s.h) > 0 && !s.h[0].at.After(now) {
		it := heap.Pop(&s.h).(dueItem)
		if at, ok := s.due[it.tk]; !ok || !at.Equal(it.at) {
			continue // stale heap entry
		}
		delete(s.due, it.tk)
		s.peer(it.tk.peer).ready[it.tk.key] = struct{}{}
	}
	var out map[string][]string
	for p, ps := range s.peers {
		if ps.busy || len(ps.ready) == 0 {
			continue
		}
		keys := make([]string, 0, min(max, len(ps.ready)))
		for k := range ps.ready {
			if len(keys) == max {
				break
			}
			keys = append(keys, k)
			delete(ps.ready, k)
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
	if ok {
		ps.attempt = 0
		return 0
	}
	ps.attempt++
	d := s.backoff(ps.attempt, rnd)
	at := now.Add(d)
	for k := range ps.ready {
		delete(ps.ready, k)
		s.addAt(peer, k, at)
	}
	for _, k := range keys {
		s.addAt(peer, k, at)
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
		if at, ok := s.due[it.tk]; ok && at.Equal(it.at) {
			return it.at, true
		}
		heap.Pop(&s.h)
	}
	return time.Time{}, false
}

// flush makes every scheduled task due at now, ending merge windows and
// backoffs early.
func (s *syncSched) flush(now time.Time) {
	for tk, at := range s.due {
		if at.After(now) {
			s.due[tk] = now
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
