package registry

import "github.com/muster-io/muster/model"

// rec is how the index stores an instance: a model.Instance without what its
// slot already knows (the service key, the kind), packed. At a million
// instances the saving is tens of megabytes. A rec is immutable once stored;
// a change stores a new one.
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
