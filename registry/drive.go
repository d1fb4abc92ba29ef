package registry

import (
	"time"

	"github.com/muster-io/muster/model"
)

// The driver of the index core (core.go): the Registry calls the index's
// methods under mu, with the start of any countdown (leaseStart), and then
// carries out their effects (carryOut) before it releases mu.

// carryOut carries out, and clears, the effects of the index's changes so
// far: watchers told, the query snapshot invalidated, health checks
// re-targeted, the housekeeper woken for a new deadline, conflicts logged.
// The caller holds mu.
func (r *Registry) carryOut() {
	fx := &r.index.fx
	for _, key := range fx.dirty {
		r.markDirty(key)
	}
	// A standalone write records a changed service and maybe a deadline,
	// nothing else: one test (the lists' lengths or-ed) passes the rest.
	if len(fx.gone)|len(fx.catalogs)|len(fx.targets)|len(fx.notes)|len(fx.replicate)|len(fx.events)|
		len(fx.lapsed)|len(fx.ended)|len(fx.conflicts) != 0 || fx.services {
		// The rarer effects are carried out of line (carryOutGone,
		// retarget, carryOutEnds), in the same order: this runs on the
		// apply path of peers' records, a goroutine per message whose
		// stack grows (a copy) with every frame.
		if len(fx.gone) > 0 || len(fx.catalogs) > 0 {
			r.carryOutGone(fx)
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
			r.carryOutEnds(fx)
		}
		fx.resetRest()
	}
	if !fx.wake.IsZero() {
		r.wakeAt(fx.wake)
		fx.wake = time.Time{}
	}
	cut(&fx.dirty)
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

// The index's changes that the Registry's code makes directly, each
// carried out at once. The caller holds mu.

// changed records a change of s.
func (r *Registry) changed(s *service) {
	r.index.changed(s)
	r.carryOut()
}

// startPatchCountdown starts the PatchTTL countdown of the patch of
// instKey, whose instance is gone.
func (r *Registry) startPatchCountdown(instKey model.InstanceKey) {
	r.index.startPatchCountdown(instKey, r.leaseStart())
	r.carryOut()
}

// mirrorLocked applies cmd, which the rules accepted, to the index (see
// index.apply).
func (r *Registry) mirrorLocked(cmd *model.Command) { r.mirrorAs(cmd, model.Origin{}) }

// mirrorAs is mirrorLocked of a command from o.
func (r *Registry) mirrorAs(cmd *model.Command, o model.Origin) {
	r.index.apply(cmd, o, r.leaseStart())
	r.carryOut()
}

// mirrorService stores a definition, creating the service if needed.
func (r *Registry) mirrorService(def model.Service) {
	r.index.putService(def)
	r.carryOut()
}

// mirrorPutInstance stores a persistent instance as given, health
// included.
func (r *Registry) mirrorPutInstance(inst model.Instance) {
	r.index.putInstance(inst)
	r.carryOut()
}

// expireIndex handles the index's countdowns that ended by now and
// returns the orphaned patches to remove.
func (r *Registry) expireIndex(now time.Time) []model.InstanceKey {
	orphans := r.index.expire(now)
	r.carryOut()
	return orphans
}

// publish adds or replaces pub's publication of inst (see index.publish).
// The caller bumps pub.rev (pubChanged).
func (r *Registry) publish(pub *publisher, inst model.Instance, limited bool) (*pubInst, error) {
	pi, err := r.index.publish(pub, inst, limited)
	r.carryOut()
	return pi, err
}

// publishAt is publish with inst's key looked up already (see
// index.publishAt).
func (r *Registry) publishAt(s *service, i int, found bool, pub *publisher, inst model.Instance, limited bool) (*pubInst, error) {
	pi, err := r.index.publishAt(s, i, found, pub, inst, limited)
	r.carryOut()
	return pi, err
}

// unpublish removes one publication, why (see index.unpublish).
func (r *Registry) unpublish(pi *pubInst, detach bool, why string) {
	r.index.unpublish(pi, detach, why, r.leaseStart())
	r.carryOut()
}

// replaceInst swaps a publication's instance for next and records the
// change.
func (r *Registry) replaceInst(pi *pubInst, next *rec) {
	r.index.replaceInst(pi, next)
	r.carryOut()
}

// pubChanged records a change of pub: its revision moves on, and its
// record goes to the replicator.
func (r *Registry) pubChanged(pub *publisher) {
	r.index.pubChanged(pub)
	r.carryOut()
}

// dropBeat removes a beat publication, and its publisher once it has no
// other, why (see index.dropBeat).
func (r *Registry) dropBeat(pi *pubInst, why string) {
	r.index.dropBeat(pi, why, r.leaseStart())
	r.carryOut()
}

// closeSessionLocked closes the session p, why (see index.closeSession).
func (r *Registry) closeSessionLocked(p *publisher, why string) {
	r.index.closeSession(p, why, r.leaseStart())
	r.carryOut()
}

// promote makes the remote beat publisher p this node's own (see
// index.promote), its leases continuing from lastBeat.
func (r *Registry) promote(p *publisher, lastBeat time.Time) {
	r.index.promote(p, lastBeat)
	r.carryOut()
}

// noteDeregistered remembers, for as long as its lease would have run, that
// the beat instance with instKey (published by pi, or not held here: nil)
// was deregistered on this node, so that a lease handed over later does not
// bring it back (see index.takeLease). Standalone, no lease is handed over.
func (r *Registry) noteDeregistered(instKey model.InstanceKey, pi *pubInst) {
	if !r.cluster {
		return
	}
	ttl := model.DefaultIPDeleteTimeout
	if pi != nil {
		ttl = pi.inst.instance(pi.slot.svc).BeatTimings().Delete
	}
	r.index.noteDeregistered(instKey, ttl, r.leaseStart())
	r.carryOut()
}
