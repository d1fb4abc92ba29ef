package registry

import (
	"context"
	"slices"
	"sync/atomic"

	"github.com/muster-io/muster/model"
)

// Catalog is the list of the services of one namespace, defined or
// implicit, at one revision of that list.
type Catalog struct {
	Namespace string `json:"namespace"`
	// Revision increases each time a service is added to the namespace or
	// removed from it. It counts catalog changes on this node, apart from
	// the revisions of services and views.
	Revision uint64 `json:"revision"`
	// Services is sorted by group, then name. It is shared by the watchers
	// of the namespace: do not modify it.
	Services []model.ServiceKey `json:"services"`
}

// CatalogUpdate is one delivery to a CatalogWatcher.
type CatalogUpdate struct {
	// Catalog is the namespace's newest list (shared; do not modify).
	Catalog *Catalog `json:"catalog"`
	// Added and Removed are the services added and removed since the
	// previous update delivered to this watcher, sorted as in Catalog
	// (every service is Added in the first update).
	Added   []model.ServiceKey `json:"added"`
	Removed []model.ServiceKey `json:"removed"`
}

// CatalogWatcher delivers the newest list of a namespace's services each
// time a service appears in it or leaves it (see WatchServices). A slow
// reader never slows the registry down: it skips intermediate lists and
// gets the newest, with the services added and removed since what it saw
// last. Next must not be called from several goroutines at once; Close may
// be called from any.
type CatalogWatcher struct {
	r  *Registry
	ns string

	latest atomic.Pointer[Catalog] // stored by the notifier
	watchEnd

	delivered *Catalog // owned by Next's caller
}

// catalogGroup holds the catalog watchers of one namespace. It is guarded
// by Registry.mu, except cur, which the notifier fills under the read lock.
type catalogGroup struct {
	// watchers is replaced, never changed in place, when one leaves: the
	// notifier reads a snapshot outside the lock.
	watchers []*CatalogWatcher
	rev      uint64                  // the catalog's current revision
	cur      atomic.Pointer[Catalog] // the catalog at rev once built, or older
}

// WatchServices returns a watcher of the list of the services of namespace
// (empty: the default namespace). Its first Next returns the current list at
// once; each later one returns a newer list, once services have been added
// to the namespace or removed from it (by registrations, definitions,
// deletions and clean-ups, here or replicated from other nodes). Changes
// of the services themselves do not count: watch those with Watch.
//
// Like Watch, it never blocks the registry: a slow watcher skips
// intermediate lists. Each new list is built once for all the watchers of
// the namespace, by a walk of the index. The watcher counts against
// Limits.MaxWatchers (ErrLimit), fails with ErrNotReady before the registry
// serves, and with an error matching model.ErrInvalid for an invalid
// namespace. It is closed when ctx ends, when Close is called, or when the
// registry closes. Watchers are local to this node.
func (r *Registry) WatchServices(ctx context.Context, namespace string) (*CatalogWatcher, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	probe := model.ServiceKey{Namespace: namespace, Group: model.DefaultGroup, Name: "x"}
	if err := probe.Validate(); err != nil {
		return nil, err
	}
	ns := probe.WithDefaults().Namespace
	w := &CatalogWatcher{r: r, ns: ns, watchEnd: newWatchEnd()}

	r.mu.Lock()
	if err := r.checkRead(); err != nil {
		r.mu.Unlock()
		return nil, err
	}
	if err := r.core.admitWatcher(); err != nil {
		r.mu.Unlock()
		return nil, err
	}
	g := r.watch.catalogs[ns]
	if g == nil {
		// A fresh revision: a list built for an earlier group of this
		// namespace may differ from this one.
		r.watch.catRev++
		g = &catalogGroup{rev: r.watch.catRev}
		r.watch.catalogs[ns] = g
	}
	g.watchers = append(g.watchers, w)
	w.latest.Store(r.catalogOf(ns, g))
	r.mu.Unlock()

	stop := context.AfterFunc(ctx, func() { w.close(context.Cause(ctx)) })
	r.mu.Lock()
	closed := w.closed.Load() != nil
	if !closed {
		w.stopCtx = stop
	}
	r.mu.Unlock()
	if closed {
		stop()
	}
	return w, nil
}

// catalogChanged records that a service was added to namespace ns or
// removed from it. The caller holds mu.
func (r *Registry) catalogChanged(ns string) {
	g := r.watch.catalogs[ns]
	if g == nil {
		return
	}
	r.watch.catRev++
	g.rev = r.watch.catRev
	r.watch.catDirty[ns] = struct{}{}
	select {
	case r.watch.signal <- struct{}{}:
	default:
	}
}

// catalogOf returns the catalog of ns at g's revision, building it if need
// be. The caller holds mu (read or write); only the notifier and
// WatchServices, under the write lock, call it.
func (r *Registry) catalogOf(ns string, g *catalogGroup) *Catalog {
	if c := g.cur.Load(); c != nil && c.Revision == g.rev {
		return c
	}
	c := &Catalog{Namespace: ns, Revision: g.rev, Services: make([]model.ServiceKey, 0, r.core.namespaceServices(ns))}
	for key := range r.core.allServices() {
		if key.Namespace == ns {
			c.Services = append(c.Services, key)
		}
	}
	slices.SortFunc(c.Services, model.ServiceKey.Compare)
	g.cur.Store(c)
	return c
}

// notifyCatalogs delivers the new catalogs of the namespaces in dirty. Only
// the notifier calls it.
func (r *Registry) notifyCatalogs(dirty map[string]struct{}) {
	for ns := range dirty {
		r.mu.RLock()
		g := r.watch.catalogs[ns]
		if g == nil {
			r.mu.RUnlock()
			continue
		}
		c := r.catalogOf(ns, g)
		watchers := g.watchers
		r.mu.RUnlock()
		for _, w := range watchers {
			if w.closed.Load() == nil && w.latest.Load().Revision < c.Revision {
				w.latest.Store(c)
				w.wake()
			}
		}
	}
}

// Next blocks until a list newer than the last one it returned is
// available and returns it, with the services added and removed since. It
// fails with ctx's error, or with the reason the watcher closed: the
// WatchServices context's error, ErrWatchClosed, or ErrClosed.
func (w *CatalogWatcher) Next(ctx context.Context) (CatalogUpdate, error) {
	done := ctx.Done()
	for {
		if err := w.closed.Load(); err != nil {
			return CatalogUpdate{}, *err
		}
		if c := w.latest.Load(); c != nil && (w.delivered == nil || c.Revision > w.delivered.Revision) {
			u := CatalogUpdate{Catalog: c}
			var prev []model.ServiceKey
			if w.delivered != nil {
				prev = w.delivered.Services
			}
			u.Added, u.Removed = diffKeys(prev, c.Services)
			w.delivered = c
			return u, nil
		}
		select {
		case <-w.sig:
		case <-done:
			return CatalogUpdate{}, ctx.Err()
		}
	}
}

// diffKeys returns the keys of next not in prev and those of prev not in
// next; both are sorted.
func diffKeys(prev, next []model.ServiceKey) (added, removed []model.ServiceKey) {
	i, j := 0, 0
	for i < len(prev) || j < len(next) {
		switch {
		case j == len(next) || i < len(prev) && prev[i].Compare(next[j]) < 0:
			removed = append(removed, prev[i])
			i++
		case i == len(prev) || prev[i].Compare(next[j]) > 0:
			added = append(added, next[j])
			j++
		default:
			i++
			j++
		}
	}
	return added, removed
}

// Namespace returns the watched namespace.
func (w *CatalogWatcher) Namespace() string { return w.ns }

// Close stops the watcher; Next then returns ErrWatchClosed. It is
// idempotent.
func (w *CatalogWatcher) Close() { w.close(ErrWatchClosed) }

func (w *CatalogWatcher) close(err error) {
	w.end(w.r, err, func() {
		r := w.r
		if g := r.watch.catalogs[w.ns]; g != nil {
			rest := make([]*CatalogWatcher, 0, len(g.watchers))
			for _, x := range g.watchers {
				if x != w {
					rest = append(rest, x)
				}
			}
			if len(rest) == 0 {
				delete(r.watch.catalogs, w.ns)
			} else {
				g.watchers = rest
			}
		}
	})
}
