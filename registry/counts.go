package registry

// Counts is a snapshot of what a registry holds on this node, from the
// counters its limits keep: reading it costs a lock and a copy of the
// per-namespace map, never a walk of the index.
type Counts struct {
	// Services counts the services in the index, defined or implicit, of
	// every namespace; Namespaces has the count per namespace (those with
	// none are absent).
	Services   int            `json:"services"`
	Namespaces map[string]int `json:"namespaces"`
	// Instances counts the instances in the index: ephemeral ones of every
	// node, replicated here, and persistent ones.
	Instances int `json:"instances"`
	// Sessions counts the sessions open on this node (those of other
	// nodes, replicated here, count on their own node).
	Sessions int `json:"sessions"`
	// Watchers counts the open watchers of this node (Watch and
	// WatchServices).
	Watchers int `json:"watchers"`
}

// Counts returns the registry's counts (see Counts). It is safe for
// concurrent use and works on a closed registry.
func (r *Registry) Counts() Counts {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.countsLocked()
}

// countsLocked is Counts; the caller holds mu (read or write).
func (r *Registry) countsLocked() Counts { return r.core.counts() }
