package registry

import (
	"time"

	"github.com/muster-io/muster/health"
)

// beatLeaseSet holds the leases of beat publications. It keys each by a
// number of the publication's own (pubInst.lease), handed out from a free
// list, most recently freed first, and hashes numbers by identity
// (health.Leases.SetHash): a new lease takes a number whose cell a lease
// that ended lately used, or the next one after the last, so creating it
// touches a cell in the caches, where keying by the publication's pointer
// put every new lease in a random cell, a cache miss in a large table on
// every beat registration. A touch still reads one cell.
//
// Its methods are health.Leases's, by publication; a publication without
// a number has no lease. Guarded, as the index, by Registry.mu.
type beatLeaseSet struct {
	l     health.Leases[uint32]
	byNum []*pubInst // the publication of each number in use; nil for a free one ([0] unused)
	free  []uint32   // numbers to hand out again, the last freed last
}

// Put starts or resets pi's lease (health.Leases.Put). It fails, changing
// nothing, only for invalid timeouts.
func (b *beatLeaseSet) Put(pi *pubInst, now time.Time, t health.Timeouts) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if pi.lease == 0 {
		b.number(pi)
	}
	return b.l.Put(pi.lease, now, t)
}

// number gives pi, which has none, a lease number.
func (b *beatLeaseSet) number(pi *pubInst) {
	if b.byNum == nil {
		b.l.SetHash(func(n uint32) uint64 { return uint64(n) })
		b.byNum = []*pubInst{nil}
	}
	if n := len(b.free); n > 0 {
		pi.lease = b.free[n-1]
		b.free = b.free[:n-1]
		b.byNum[pi.lease] = pi
		return
	}
	pi.lease = uint32(len(b.byNum))
	b.byNum = append(b.byNum, pi)
}

// release takes pi's number back, its lease gone.
func (b *beatLeaseSet) release(pi *pubInst) {
	b.byNum[pi.lease] = nil
	b.free = append(b.free, pi.lease)
	pi.lease = 0
}

// Touch renews pi's lease (health.Leases.Touch).
func (b *beatLeaseSet) Touch(pi *pubInst, now time.Time) (found, revived bool) {
	if pi.lease == 0 {
		return false, false
	}
	return b.l.Touch(pi.lease, now)
}

// Remove ends pi's lease, reporting whether it had one.
func (b *beatLeaseSet) Remove(pi *pubInst) bool {
	if pi.lease == 0 {
		return false
	}
	b.l.Remove(pi.lease)
	b.release(pi)
	return true
}

// Get returns pi's lease (health.Leases.Get).
func (b *beatLeaseSet) Get(pi *pubInst) (health.State, bool) {
	if pi.lease == 0 {
		return health.State{}, false
	}
	return b.l.Get(pi.lease)
}

// ExpireAt reports the leases due at now (health.Leases.ExpireAt); an
// expired one has ended, and its number is free, when fn is called.
func (b *beatLeaseSet) ExpireAt(now time.Time, fn func(pi *pubInst, ev health.Event, at time.Time)) int {
	return b.l.ExpireAt(now, func(n uint32, ev health.Event, at time.Time) {
		pi := b.byNum[n]
		if ev == health.EventExpired {
			b.release(pi)
		}
		fn(pi, ev, at)
	})
}

// Next returns the earliest deadline (health.Leases.Next).
func (b *beatLeaseSet) Next() (time.Time, bool) { return b.l.Next() }

// Len returns the number of leases.
func (b *beatLeaseSet) Len() int { return b.l.Len() }

// check reports, through bad, numbers that do not name their publication.
func (b *beatLeaseSet) check(bad func(format string, args ...any)) {
	used := 0
	for n, pi := range b.byNum {
		if pi == nil {
			continue
		}
		used++
		if pi.lease != uint32(n) {
			bad("lease number %d names a publication numbered %d", n, pi.lease)
		}
		if _, ok := b.l.Get(uint32(n)); !ok {
			bad("lease number %d is in use without a lease", n)
		}
	}
	if used != b.l.Len() || used+len(b.free) != max(len(b.byNum)-1, 0) {
		bad("%d lease numbers in use, %d free, %d handed out, %d leases", used, len(b.free), max(len(b.byNum)-1, 0), b.l.Len())
	}
}
