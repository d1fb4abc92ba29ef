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
	if fx.empty() {
		return // a change that means nothing outside the index (most of a standalone write's)
	}
	for _, key := range fx.dirty {
		r.markDirty(key)
	}
	// The rarer effects are carried out of line (carryOutGone, retarget,
	// carryOutEnds), in the same order: this runs on the apply path of
	// peers' records, a goroutine per message whose stack grows (a copy)
	// with every frame.
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
		r.note(e.key, e.kind, e.pub, e.why)
	}
	if len(fx.lapsed) > 0 || len(fx.ended) > 0 || len(fx.conflicts) > 0 {
		r.carryOutEnds(fx)
	}
	if !fx.wake.IsZero() {
		r.wakeAt(fx.wake)
	}
	fx.reset()
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
			r.untarget(t.key)
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
	for _, c := range fx.conflicts {
		if c.what == "definition" {
			r.log.Warn("a stored definition conflicts with this node's instances; keeping the instances' kind",
				"service", c.key, "ephemeral", c.ephemeral)
		} else {
			r.log.Warn("a stored instance conflicts with this node's ephemeral instances", "instance", c.key, "err", c.err)
		}
	}
}

// The index's changes that the Registry's code makes directly, each
// carried out at once. The caller holds mu.

// changed records a change of s.
func (r *Registry) changed(s *service) {
	r.index.changed(s)
	r.carryOut()
}

// addService puts s in the index.
func (r *Registry) addService(s *service) {
	r.index.addService(s)
	r.carryOut()
}

// ensureService returns the service of key, creating an implicit one of the
// given kind, or ErrKindMismatch when it exists with the other kind.
func (r *Registry) ensureService(key model.ServiceKey, ephemeral bool) (*service, error) {
	s, err := r.index.ensureService(key, ephemeral)
	r.carryOut()
	return s, err
}

// dropSlotIfDead removes sl from its service once nothing publishes it
// (see index.dropSlotIfDead).
func (r *Registry) dropSlotIfDead(sl *slot, last *rec) {
	r.index.dropSlotIfDead(sl, last, r.leaseStart())
	r.carryOut()
}

// startPatchCountdown starts the PatchTTL countdown of the patch of key,
// whose instance is gone.
func (r *Registry) startPatchCountdown(key model.InstanceKey) {
	r.index.startPatchCountdown(key, r.leaseStart())
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

// noteChange records pi's instance becoming next for the journal (see
// index.noteChange).
func (r *Registry) noteChange(pi *pubInst, next *model.Instance, pub *publisher) {
	r.index.noteChange(pi, next, pub)
	r.carryOut()
}
