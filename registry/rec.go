package registry

import (
	"strings"

	"github.com/muster-io/muster/model"
)

// rec is how the index stores an instance: a model.Instance without what its
// slot already knows (the service key, the kind), packed. At a million
// instances the saving is tens of megabytes. A rec's content is immutable
// once stored; a change stores a new one. (Its strings may be pointed at
// equal bytes elsewhere: shareIn. One that a change replaced, or a
// session's publication removed from a slot that stays, is emptied:
// pubInst.setInst, pubInst.release.)
//
// The key's fields come first: findSlot's binary search reads them (with
// the slot's first publication, just before the rec in a slotBlock) at
// every step, so they share the cache lines that those are in.
type rec struct {
	cluster string
	ip      string
	port    uint16
	healthy bool
	enabled bool
	ipKey   uint32 // ipOrder(ip): in the padding before weight, so free
	weight  float64
	id      string
	md      model.Metadata
}

// newRec packs inst, which is valid and has its defaults.
func newRec(inst *model.Instance) *rec {
	r := recOf(inst)
	return &r
}

// recOf is newRec's rec as a value, for a block that holds it.
func recOf(inst *model.Instance) rec { return recOfKey(inst, ipOrder(inst.IP)) }

// recOfKey is recOf knowing ipKey, ipOrder(inst.IP).
func recOfKey(inst *model.Instance, ipKey uint32) rec {
	return rec{
		id:      inst.ID,
		cluster: inst.Cluster,
		ip:      inst.IP,
		ipKey:   ipKey,
		md:      inst.Metadata,
		weight:  inst.Weight,
		port:    uint16(inst.Port),
		healthy: inst.Healthy,
		enabled: inst.Enabled,
	}
}

// instance unpacks r as an instance of service s.
func (r *rec) instance(s *service) model.Instance {
	return model.Instance{
		ID:        r.id,
		Service:   s.key,
		Cluster:   r.cluster,
		IP:        r.ip,
		Port:      int(r.port),
		Weight:    r.weight,
		Healthy:   r.healthy,
		Enabled:   r.enabled,
		Ephemeral: s.ephemeral,
		Metadata:  r.md,
	}
}

// withHealth returns r with healthy set, sharing r when nothing changes.
func (r *rec) withHealth(healthy bool) *rec {
	if r.healthy == healthy {
		return r
	}
	next := *r
	next.healthy = healthy
	return &next
}

// equal reports whether r and o hold the same instance.
func (r *rec) equal(o *rec) bool {
	return r.id == o.id && r.cluster == o.cluster && r.ip == o.ip && r.port == o.port &&
		r.weight == o.weight && r.healthy == o.healthy && r.enabled == o.enabled && r.md.Equal(o.md)
}

// shareIn points r's strings at the same bytes in p, a payload that r was
// just encoded into and that is never modified (distro's), so that a node
// that keeps both keeps those bytes once. Every holder of r sees equal
// strings before and after. The caller holds mu.
func (r *rec) shareIn(p string) {
	r.id = windowOn(p, r.id)
	r.cluster = windowOn(p, r.cluster)
	r.ip = windowOn(p, r.ip)
	r.md = r.md.SharedIn(p)
}

// retire empties r, which no publication holds any longer (a change
// replaced it), so that it keeps no strings alive: it may be the rec of a
// slot's block (slotBlock), which lives as long as the slot, and its
// strings may be windows on a whole payload (shareIn, decodeInstRecord).
// The caller holds mu, and nothing else holds r but an undo record, which
// keeps r's content (replaceService).
func (r *rec) retire() { *r = rec{} }

// windowOn returns s as a window on p when p holds s's bytes, s otherwise.
func windowOn(p, s string) string {
	if s == "" {
		return s
	}
	if i := strings.Index(p, s); i >= 0 {
		return p[i : i+len(s)]
	}
	return s
}
