package distro

// Idle reports whether the replicator has nothing to do until its clock moves or a message
// arrives: no sync due by now and unsent, no batch or verify round in flight, no verify,
// orphan removal or tombstone expiry due, no Store call queued or being delivered. A test
// harness on a fake clock polls it (with the network's in-flight count) to know that a cluster
// has settled, instead of waiting for a quiet moment; a goroutine woken by the clock shows as
// busy here until it has done its work. The load of a starting node is not counted: between
// attempts it waits on the clock, and its requests are on the network.
//
// It takes the replicator's lock briefly and never blocks otherwise. A closed or unstarted
// replicator is idle.
func (r *Replicator) Idle() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || !r.started {
		return true
	}
	now := r.clk.Now()
	if !r.sched.quiet(now) || len(r.verifying) > 0 || len(r.events) > 0 || r.draining {
		return false
	}
	if !now.Before(r.nextVerify) {
		return false // the loop's verify tick is due (it also expires tombstones)
	}
	if r.ready {
		for owner, at := range r.leftAt {
			if _, alive := r.memberSet[owner]; alive {
				return false // the loop forgets it
			}
			if o := r.tab.owners[owner]; o != nil && o.live > 0 && !at.Add(r.cfg.OrphanTimeout).After(now) {
				return false // orphans due
			}
		}
	}
	return true
}
