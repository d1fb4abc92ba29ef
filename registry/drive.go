package registry

// The driver of the index core (core.go, core_replica.go): the Registry
// calls the core's methods (r.core.…) under mu, with the start of any
// countdown (leaseStart), and then carries out their effects (carryOut)
// before it releases mu.

// carryOut carries out the effects of the core's changes so far, which
// the core hands out as a value (index.pending, and index.ready when
// there are rarer ones), and hands them back (index.advance): watchers told, the query snapshot invalidated, health
// checks re-targeted, records replicated, the journal written, sessions
// ended, conflicts logged, the housekeeper woken for a new deadline. The
// caller holds mu, and calls it after every change of the core.
func (r *Registry) carryOut() {
	dirty, wake, rare := r.core.pending()
	for _, key := range dirty {
		r.markDirty(key)
	}
	if rare {
		fx := r.core.ready()
		// The rarer effects are carried out of line (carryOutGone,
		// retarget, carryOutEnds), in the same order: this runs on the
		// apply path of peers' records, a goroutine per message whose
		// stack grows (a copy) with every frame.
		if len(fx.gone) > 0 || len(fx.catalogs) > 0 {
			r.carryOutGone(&fx)
		}
		if fx.services {
			r.svcGen.Add(1)
		}
		if len(fx.targets) > 0 {
			r.retarget(fx.targets)
		}
		for _, n := range fx.notes {
			if n.published {
				r.notePublished(n.pi.pub, n.pi)
			} else {
				r.noteUnpublished(n.pi)
			}
		}
		for _, p := range fx.replicate {
			r.replicate(p)
		}
		for i := range fx.events {
			e := &fx.events[i]
			r.noteBy(e.instKey, e.kind, e.pub, e.remote, e.why)
		}
		if len(fx.lapsed) > 0 || len(fx.ended) > 0 || len(fx.conflicts) > 0 {
			r.carryOutEnds(&fx)
		}
		for _, pi := range fx.released { // last: the notes above read them
			pi.release()
		}
	}
	if !wake.IsZero() {
		r.wakeAt(wake)
	}
	r.core.advance(rare)
}

// carryOutGone tells the watchers of the services that left, and those of
// the catalogs that changed (see carryOut).
func (r *Registry) carryOutGone(fx *effects) {
	for _, s := range fx.gone {
		r.serviceGone(s)
	}
	for _, ns := range fx.catalogs {
		r.catalogChanged(ns)
	}
}

// retarget re-evaluates health-check targets (see carryOut).
func (r *Registry) retarget(targets []target) {
	for _, t := range targets {
		switch {
		case t.svc == nil:
			r.untarget(t.instKey)
		case t.sl == nil:
			r.syncTargets(t.svc)
		default:
			r.syncTarget(t.svc, t.sl)
		}
	}
}

// carryOutEnds logs the lapsed keep-alives, ends the sessions closed and
// logs the conflicts (see carryOut).
func (r *Registry) carryOutEnds(fx *effects) {
	for _, id := range fx.lapsed {
		r.log.Info("session keep-alive lapsed", "session", id)
	}
	for _, s := range fx.ended {
		s.end()
	}
	for i := range fx.conflicts {
		r.logConflict(&fx.conflicts[i])
	}
}

// logConflict logs data that the index kept out.
func (r *Registry) logConflict(c *conflict) {
	switch c.what {
	case conflictDefinition:
		r.log.Warn("a stored definition conflicts with this node's instances; keeping the instances' kind",
			"service", c.name, "ephemeral", c.ephemeral)
	case conflictInstance:
		r.log.Warn("a stored instance conflicts with this node's ephemeral instances", "instance", c.name, "err", c.err)
	case conflictReplicated:
		r.log.Warn("a replicated instance conflicts with this node's index", "instance", c.name, "err", c.err)
	case conflictMergeCap:
		r.log.Warn("not merging instances past the endpoint's cap", "record", c.name, "unmerged", c.n, "err", c.err)
	case conflictHanded:
		r.log.Warn("a handed-over instance conflicts with this node's index", "instance", c.name, "err", c.err)
	}
}
