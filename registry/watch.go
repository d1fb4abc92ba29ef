package registry

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/muster-io/muster/model"
)

// Update is one delivery to a watcher.
type Update struct {
	// View is the newest view of the watched query (shared; do not modify).
	View *model.ServiceView
	// Revision is View.Revision.
	Revision uint64
	// Delta is the change from the view of the previous update delivered to
	// this watcher (everything is Added in the first update).
	Delta model.Delta
}

// Watcher delivers the newest view of a query each time it changes. A slow
// reader never slows the registry down: it skips intermediate views and gets
// the newest, with the delta against what it saw last. Next must not be
// called from several goroutines at once; Close may be called from any.
type Watcher struct {
	r   *Registry
	key model.ServiceKey
	q   model.Query

	latest atomic.Pointer[model.ServiceView] // newest view, stored by the notifier
	sig    chan struct{}                     // capacity 1: "latest may have moved"

	once    sync.Once
	done    chan struct{}
	err     error       // why the watcher closed; set before done is closed
	stopCtx func() bool // unregisters the context hook

	delivered *model.ServiceView // owned by Next's caller
}

// watchState is the registry's part of watching. groups and dirty are
// guarded by Registry.mu.
type watchState struct {
	groups map[model.ServiceKey]*watchGroup
	dirty  map[model.ServiceKey]struct{} // services changed since the notifier last ran
	spare  map[model.ServiceKey]struct{}
	signal chan struct{} // capacity 1: wakes the notifier

	buf []delivery // the notifier's scratch space
}

type watchGroup struct {
	watchers []*Watcher         // copy-on-write
	gone     *model.ServiceView // the empty view of a removed service, or nil
}

type delivery struct {
	w *Watcher
	v *model.ServiceView
}

func (ws *watchState) init() {
	ws.groups = make(map[model.ServiceKey]*watchGroup)
	ws.dirty = make(map[model.ServiceKey]struct{})
	ws.spare = make(map[model.ServiceKey]struct{})
	ws.signal = make(chan struct{}, 1)
}

// markDirty tells the notifier that key changed. The caller holds mu.
func (r *Registry) markDirty(key model.ServiceKey) {
	if _, ok := r.watch.groups[key]; !ok {
		return
	}
	r.watch.dirty[key] = struct{}{}
	select {
	case r.watch.signal <- struct{}{}:
	default:
	}
}

// Watch returns a watcher of q. Its first Next returns the current view at
// once (a service the registry does not hold has an empty view). The watcher
// is closed when ctx ends, when Close is called, or when the registry
// closes. Watchers are local to this registry, as subscribers are in Nacos.
func (r *Registry) Watch(ctx context.Context, q model.Query) (*Watcher, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	q.Service = q.Service.WithDefaults()
	if err := q.Validate(); err != nil {
		return nil, err
	}
	q.Clusters = slices.Clone(q.Clusters)
	w := &Watcher{r: r, key: q.Service, q: q, sig: make(chan struct{}, 1), done: make(chan struct{})}

	r.mu.Lock()
	if err := r.checkRead(); err != nil {
		r.mu.Unlock()
		return nil, err
	}
	g := r.watch.groups[q.Service]
	if g == nil {
		g = &watchGroup{}
		r.watch.groups[q.Service] = g
	}
	g.watchers = append(slices.Clip(g.watchers), w)
	w.latest.Store(r.currentView(q.Service, g, &w.q))
	r.mu.Unlock()

	w.stopCtx = context.AfterFunc(ctx, func() { w.close(ctx.Err()) })
	return w, nil
}

// currentView returns the view of q for a watcher. The caller holds mu.
func (r *Registry) currentView(key model.ServiceKey, g *watchGroup, q *model.Query) *model.ServiceView {
	if s := r.services[key]; s != nil {
		return viewOf(s, q)
	}
	if g.gone != nil {
		return g.gone
	}
	return emptyView(key)
}

// serviceGone records that s left the index, so that its watchers get an
// empty view with a fresh revision. The caller holds mu and has called
// changed(s).
func (r *Registry) serviceGone(s *service) {
	if g := r.watch.groups[s.key]; g != nil {
		v := emptyView(s.key)
		v.Revision = s.rev
		g.gone = v
	}
}

// Next blocks until a view newer than the last one it returned is available
// and returns it with the delta. It fails with ctx's error, or with the
// reason the watcher closed: the Watch context's error, ErrWatchClosed, or
// ErrClosed.
func (w *Watcher) Next(ctx context.Context) (Update, error) {
	for {
		select {
		case <-w.done:
			return Update{}, w.err
		default:
		}
		if v := w.latest.Load(); v != nil && (w.delivered == nil || v.Revision > w.delivered.Revision) {
			u := Update{View: v, Revision: v.Revision, Delta: model.Diff(w.delivered, v)}
			w.delivered = v
			return u, nil
		}
		select {
		case <-w.sig:
		case <-w.done:
			return Update{}, w.err
		case <-ctx.Done():
			return Update{}, ctx.Err()
		}
	}
}

// Query returns the watched query.
func (w *Watcher) Query() model.Query { return w.q }

// Close stops the watcher; Next then returns ErrWatchClosed. It is
// idempotent.
func (w *Watcher) Close() { w.close(ErrWatchClosed) }

func (w *Watcher) close(err error) {
	w.once.Do(func() {
		r := w.r
		r.mu.Lock()
		if g := r.watch.groups[w.key]; g != nil {
			if i := slices.Index(g.watchers, w); i >= 0 {
				g.watchers = slices.Delete(slices.Clone(g.watchers), i, i+1)
			}
			if len(g.watchers) == 0 {
				delete(r.watch.groups, w.key)
			}
		}
		r.mu.Unlock()
		w.err = err
		close(w.done)
		if w.stopCtx != nil {
			w.stopCtx()
		}
	})
}

// closeAll closes every watcher with err.
func (ws *watchState) closeAll(r *Registry, err error) {
	r.mu.Lock()
	var all []*Watcher
	for _, g := range ws.groups {
		all = append(all, g.watchers...)
	}
	r.mu.Unlock()
	for _, w := range all {
		w.close(err)
	}
}

// notifier delivers changed views to watchers. It builds each view once per
// revision and query shape (the view cache does), and delivers without
// holding the registry's lock: a delivery is an atomic store and a
// non-blocking send.
func (r *Registry) notifier() {
	for {
		select {
		case <-r.stop:
			return
		case <-r.watch.signal:
		}
		r.mu.Lock()
		dirty := r.watch.dirty
		r.watch.dirty, r.watch.spare = r.watch.spare, dirty
		r.mu.Unlock()

		for key := range dirty {
			buf := r.watch.buf[:0]
			r.mu.RLock()
			if g := r.watch.groups[key]; g != nil {
				for _, w := range g.watchers {
					buf = append(buf, delivery{w: w, v: r.currentView(key, g, &w.q)})
				}
			}
			r.mu.RUnlock()
			for _, d := range buf {
				d.w.offer(d.v)
			}
			clear(buf)
			r.watch.buf = buf[:0]
		}
		clear(dirty)
	}
}

// offer makes v the watcher's latest view if it is newer. Only the notifier
// calls it, so there is one writer.
func (w *Watcher) offer(v *model.ServiceView) {
	if old := w.latest.Load(); old != nil && v.Revision <= old.Revision {
		return
	}
	w.latest.Store(v)
	select {
	case w.sig <- struct{}{}:
	default:
	}
}
