package model

import "slices"

// Query selects the instances of one service.
type Query struct {
	Service ServiceKey `msgpack:"svc" json:"service"`
	// Clusters keeps only instances of these clusters; empty keeps all.
	Clusters []string `msgpack:"clusters,omitempty" json:"clusters,omitempty"`
	// HealthyOnly drops instances served as unhealthy. Under protection
	// every instance is served as healthy, so none is dropped; see
	// ServiceView.Protected.
	HealthyOnly bool `msgpack:"healthy,omitempty" json:"healthyOnly,omitempty"`
	// IncludeDisabled keeps instances whose Enabled is false. Like Nacos,
	// queries leave them out by default.
	IncludeDisabled bool `msgpack:"disabled,omitempty" json:"includeDisabled,omitempty"`
	// Linearizable makes the query first wait until this node has applied
	// every write of persistent data committed before the query began (a
	// Raft read index), so that it cannot miss a write acknowledged
	// anywhere. It costs a round trip to the Raft leader and changes
	// nothing for ephemeral data, which is replicated AP, or in a
	// standalone registry.
	Linearizable bool `msgpack:"lin,omitempty" json:"linearizable,omitempty"`
}

// ServiceView is the answer to a Query: an immutable snapshot of a service's
// instances. Views are shared between readers and never changed after they
// are built; do not modify one.
type ServiceView struct {
	// Service is the service's definition (defaults if none is stored).
	Service Service `msgpack:"svc" json:"service"`
	// Revision increases with every change of the service on this node.
	// Two views of one service with the same Revision are identical.
	Revision uint64 `msgpack:"rev" json:"revision"`
	// Instances in InstanceKey order, after the query's filters. Healthy is
	// the served health.
	Instances []Instance `msgpack:"insts" json:"instances"`
	// Protected is true when the protection threshold was reached: the
	// healthy share of the cluster- and enabled-filtered instances was at or
	// below Service.ProtectThreshold, so every one of them is returned and
	// served as healthy (Nacos's rule), HealthyOnly notwithstanding.
	Protected bool `msgpack:"protected,omitempty" json:"protected,omitempty"`
	// RealHealth holds the real health of Instances[i] when Protected; it
	// is nil otherwise, when the served health is the real one.
	RealHealth []bool `msgpack:"real,omitempty" json:"realHealth,omitempty"`
}

// RealHealthy returns the real health of Instances[i], which differs from the
// served Healthy only under protection.
func (v *ServiceView) RealHealthy(i int) bool {
	if i < len(v.RealHealth) {
		return v.RealHealth[i]
	}
	return v.Instances[i].Healthy
}

// HealthyCount returns how many instances are really healthy.
func (v *ServiceView) HealthyCount() int {
	n := 0
	for i := range v.Instances {
		if v.RealHealthy(i) {
			n++
		}
	}
	return n
}

// WithDefaults returns q with its service key's and its clusters' empty
// names replaced by their defaults. It copies Clusters rather than change the
// caller's slice.
func (q Query) WithDefaults() Query {
	q.Service = q.Service.WithDefaults()
	if slices.Contains(q.Clusters, "") {
		q.Clusters = slices.Clone(q.Clusters)
		for i, c := range q.Clusters {
			if c == "" {
				q.Clusters[i] = DefaultCluster
			}
		}
	}
	return q
}

// Delta is the change between two views of a service.
type Delta struct {
	Added   []Instance `msgpack:"added,omitempty" json:"added,omitempty"`
	Removed []Instance `msgpack:"removed,omitempty" json:"removed,omitempty"`
	// Updated holds the new value of instances whose key is in both views
	// but whose content changed.
	Updated []Instance `msgpack:"updated,omitempty" json:"updated,omitempty"`
}

// Empty reports whether the delta holds no change.
func (d *Delta) Empty() bool {
	return len(d.Added) == 0 && len(d.Removed) == 0 && len(d.Updated) == 0
}

// Diff returns the change from one view to another. A nil view counts as empty. Both
// views must hold their instances in InstanceKey order, as views do. When one side is
// empty (a watcher's first view, a service that went away), the delta's list is the other
// view's instances themselves, not a copy: views and deltas are read-only.
func Diff(from, to *ServiceView) Delta {
	var a, b []Instance
	if from != nil {
		a = from.Instances
	}
	if to != nil {
		b = to.Instances
	}
	var d Delta
	switch {
	case len(b) == 0:
		if len(a) > 0 {
			d.Removed = a[:len(a):len(a)] // full: an append to it copies
		}
		return d
	case len(a) == 0:
		d.Added = b[:len(b):len(b)]
		return d
	}
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		ka, kb := a[i].Key(), b[j].Key()
		switch c := ka.Compare(kb); {
		case c < 0:
			d.Removed = append(d.Removed, a[i])
			i++
		case c > 0:
			d.Added = append(d.Added, b[j])
			j++
		default:
			if !a[i].Equal(b[j]) {
				d.Updated = append(d.Updated, b[j])
			}
			i++
			j++
		}
	}
	d.Removed = append(d.Removed, a[i:]...)
	d.Added = append(d.Added, b[j:]...)
	return d
}

// SortInstances puts instances in InstanceKey order, the order of views.
func SortInstances(insts []Instance) {
	slices.SortFunc(insts, func(a, b Instance) int { return a.Key().Compare(b.Key()) })
}
