package registry

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/muster-io/muster/model"
)

// Update is one delivery to a watcher: the newest view of its query, and
// what changed since the view of the previous update. A watcher gets these
// kinds of change, alone or together:
//
//   - Instances served added, removed or changed (weight, metadata, served
//     health, enabled): Delta.
//   - The service's definition changed (metadata, protection threshold,
//     cluster configurations), or the service was created or removed (a
//     removed service has an empty view): ServiceChanged.
//   - Protection started or ended (View.Protected): ProtectionChanged; the
//     instances whose served health flips with it are in Delta.Updated.
//   - Under protection, the real health of an instance changed while it is
//     still served as healthy, so Delta does not show it (View.RealHealth
//     does): RealHealthChanged.
//   - A reset (Reset): the view replaces what the reader held.
//
// An update with none of them (an empty Delta, every flag false) says that
// the service's revision moved for a change this query does not show (an
// instance of a cluster it filters out, or a disabled one): the reader's
// view is still right, at a new Revision.
type Update struct {
	// View is the newest view of the watched query (shared; do not modify).
	View *model.ServiceView `json:"view"`
	// Revision is View.Revision.
	Revision uint64 `json:"revision"`
	// Cursor is where the watcher now is: pass it to WatchFrom to resume
	// from this update.
	Cursor Cursor `json:"cursor"`
	// Reset says that View replaces whatever the watcher's reader held,
	// rather than follows it: Delta then has every instance Added, and the
	// flags compare with an empty view. The first update of Watch is a
	// reset, and so is the first update of WatchFrom when the registry no
	// longer has the cursor's revision.
	Reset bool `json:"reset,omitempty"`
	// Delta is the change of the served instances from the view of the
	// previous update delivered to this watcher (everything is Added in a
	// reset). Watchers that move between the same two views share one
	// Delta: do not modify it.
	Delta model.Delta `json:"delta"`
	// ServiceChanged: View.Service differs from the previous update's.
	ServiceChanged bool `json:"serviceChanged,omitempty"`
	// ProtectionChanged: View.Protected differs from the previous update's.
	ProtectionChanged bool `json:"protectionChanged,omitempty"`
	// RealHealthChanged: an instance in both views, protected in either,
	// changed its real health (View.RealHealthy), which its served Healthy
	// may hide.
	RealHealthChanged bool `json:"realHealthChanged,omitempty"`
}

// Cursor is a position in a watch: the revision of the view last
// delivered, and the run of the registry that delivered it.
//
// A view merges what every publisher of the service (sessions, beat
// publishers, the persistent store, from every node) holds, as this node
// has applied it, and Revision counts this node's changes of it: one
// number orders them all, and no per-publisher version is needed to
// resume. Revisions are this node's own, though: another node merges the
// same changes in its own order and numbers them on its own, and a
// restarted node counts from scratch. Run tells them apart (New draws it
// at random): WatchFrom with another node's or another run's cursor
// resumes with a reset, never with a delta against the wrong view.
type Cursor struct {
	Run      uint64 `json:"run"`
	Revision uint64 `json:"revision"`
}

// step is a move of watchers from one view to the next. The notifier makes
// one per pair of views and hands it to every watcher making that move, so
// that the delta is computed once, by the first watcher that reads it, not
// once per watcher.
type step struct {
	prev, view *model.ServiceView
	once       sync.Once
	change     change
}

// change is what an Update says changed between two views.
type change struct {
	delta                         model.Delta
	service, protection, realHeal bool
}

// changeFrom returns the change from delivered to the step's view.
func (s *step) changeFrom(delivered *model.ServiceView) *change {
	if delivered != s.prev {
		c := diffViews(delivered, s.view) // this watcher skipped a step
		return &c
	}
	s.once.Do(func() { s.change = diffViews(s.prev, s.view) })
	return &s.change
}

// diffViews returns the change from one view of a service to another; a nil
// view counts as empty.
func diffViews(from, to *model.ServiceView) change {
	c := change{delta: model.Diff(from, to)}
	if from == nil {
		c.service, c.protection, c.realHeal = true, to.Protected, to.Protected
		return c
	}
	c.service = !from.Service.Equal(&to.Service)
	c.protection = from.Protected != to.Protected
	if from.Protected || to.Protected {
		c.realHeal = realHealthMoved(from, to)
	}
	return c
}

// realHealthMoved reports whether an instance in both views has another
// real health in to than in from.
func realHealthMoved(from, to *model.ServiceView) bool {
	a, b := from.Instances, to.Instances
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch c := a[i].Key().Compare(b[j].Key()); {
		case c < 0:
			i++
		case c > 0:
			j++
		default:
			if from.RealHealthy(i) != to.RealHealthy(j) {
				return true
			}
			i++
			j++
		}
	}
	return false
}

// Watcher delivers the newest view of a query each time it changes. A slow
// reader never slows the registry down: it skips intermediate views and gets
// the newest, with the delta against what it saw last. Next must not be
// called from several goroutines at once; Close may be called from any.
type Watcher struct {
	r   *Registry
	key model.ServiceKey
	q   model.Query

	latest atomic.Pointer[step] // move to the newest view, stored by the notifier
	watchEnd

	delivered *model.ServiceView // owned by Next's caller
}

// watchState is the registry's part of watching. groups and dirty are
// guarded by Registry.mu.
type watchState struct {
	groups map[model.ServiceKey]*watchGroup
	dirty  map[model.ServiceKey]time.Time // services changed since the notifier last ran, and when they first did
	spare  map[model.ServiceKey]time.Time
	signal chan struct{}      // capacity 1: wakes the notifier
	flush  chan chan struct{} // FlushWatchers: closed once the notifier has delivered

	// Catalog watchers (see catalog.go), guarded by Registry.mu like groups.
	catalogs map[string]*catalogGroup // by namespace
	catDirty map[string]struct{}      // namespaces whose list changed since the notifier last ran
	catSpare map[string]struct{}
	catRev   uint64 // the last catalog revision handed out

	buf []delivery // the notifier's scratch space
}

type watchGroup struct {
	// watchers grows in place; closed watchers stay until they are half of
	// it, then a compacted copy replaces it. The notifier reads a snapshot
	// (the slice header) and skips closed ones, so adding and closing
	// watchers costs O(1) amortised and never disturbs a delivery.
	watchers []*Watcher
	dead     int
	gone     *model.ServiceView // the empty view of a removed service, or nil
	first    *step              // the first step handed to new watchers, shared
}

type delivery struct {
	w *Watcher
	s *step
}

func (ws *watchState) init() {
	ws.groups = make(map[model.ServiceKey]*watchGroup)
	ws.dirty = make(map[model.ServiceKey]time.Time)
	ws.spare = make(map[model.ServiceKey]time.Time)
	ws.signal = make(chan struct{}, 1)
	ws.catalogs = make(map[string]*catalogGroup)
	ws.catDirty = make(map[string]struct{})
	ws.catSpare = make(map[string]struct{})
	ws.flush = make(chan chan struct{})
}

// markDirty tells the notifier that key changed. The caller holds mu.
func (r *Registry) markDirty(key model.ServiceKey) {
	if _, ok := r.watch.groups[key]; !ok {
		return
	}
	if _, ok := r.watch.dirty[key]; !ok {
		r.watch.dirty[key] = r.now() // the delivery latency runs from the first change
	}
	select {
	case r.watch.signal <- struct{}{}:
	default:
	}
}

// Watch returns a watcher of q. Its first Next returns the current view at
// once (a service the registry does not hold has an empty view), as a
// reset. The watcher is closed when ctx ends, when Close is called, or when
// the registry closes. Watchers are local to this registry, as subscribers
// are in Nacos.
//
// It fails with ErrNotReady while the registry is not started or still
// loading its data (retry once WaitReady returns), ErrClosed once it is
// closed, ErrLimit at Limits.MaxWatchers (retry after closing watchers),
// model.ErrInvalid for an invalid query, or ctx's error.
func (r *Registry) Watch(ctx context.Context, q model.Query) (*Watcher, error) {
	return r.WatchFrom(ctx, q, Cursor{})
}

// WatchFrom returns a watcher of q that resumes from cursor, the Cursor of
// the last update a previous watcher of q delivered (a reconnecting
// client's). When the registry still has the cursor's revision of the
// service (see Config.WatchHistory), the first Next returns the change
// since, against the view at that revision, or waits for the next change
// when there is none; otherwise (a revision too old, a cursor of another
// node or of a previous run, the zero Cursor) it returns the current view
// as a reset, like Watch. Either way the reader ends up with the current
// view. It fails as Watch does.
func (r *Registry) WatchFrom(ctx context.Context, q model.Query, cursor Cursor) (*Watcher, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	q = q.WithDefaults()
	if err := q.Validate(); err != nil {
		return nil, err
	}
	q.Clusters = slices.Clone(q.Clusters)
	w := &Watcher{r: r, key: q.Service, q: q, watchEnd: newWatchEnd()}

	r.mu.Lock()
	if err := r.checkRead(); err != nil {
		r.mu.Unlock()
		return nil, err
	}
	if err := r.core.admitWatcher(); err != nil {
		r.mu.Unlock()
		return nil, err
	}
	g := r.watch.groups[q.Service]
	if g == nil {
		g = &watchGroup{}
		r.watch.groups[q.Service] = g
	}
	g.watchers = append(g.watchers, w)
	v := r.currentView(q.Service, g, &w.q)
	if g.first == nil || g.first.view != v {
		g.first = &step{view: v} // watchers that start together share the first delta
	}
	w.latest.Store(g.first)
	if cursor.Run == r.run && cursor.Revision != 0 {
		if cursor.Revision == v.Revision {
			w.delivered = v // up to date: the first Next waits for a change
		} else if s := r.core.service(&q.Service); s != nil {
			w.delivered = s.viewAt(cursor.Revision, &w.q) // nil when too old: a reset
		}
	}
	r.mu.Unlock()

	stop := context.AfterFunc(ctx, func() { w.close(context.Cause(ctx)) })
	r.mu.Lock()
	closed := w.closed.Load() != nil // ctx ended already, or the registry closed
	if !closed {
		w.stopCtx = stop
	}
	r.mu.Unlock()
	if closed {
		stop()
	}
	return w, nil
}

// currentView returns the view of q for a watcher. The caller holds mu.
func (r *Registry) currentView(key model.ServiceKey, g *watchGroup, q *model.Query) *model.ServiceView {
	if s := r.core.service(&key); s != nil {
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
	done := ctx.Done()
	for {
		if err := w.closed.Load(); err != nil {
			return Update{}, *err
		}
		if s := w.latest.Load(); s != nil && (w.delivered == nil || s.view.Revision > w.delivered.Revision) {
			c := s.changeFrom(w.delivered)
			u := Update{
				View:              s.view,
				Revision:          s.view.Revision,
				Cursor:            Cursor{Run: w.r.run, Revision: s.view.Revision},
				Reset:             w.delivered == nil,
				Delta:             c.delta,
				ServiceChanged:    c.service,
				ProtectionChanged: c.protection,
				RealHealthChanged: c.realHeal,
			}
			w.delivered = s.view
			return u, nil
		}
		if done == nil {
			<-w.sig
			continue
		}
		select {
		case <-w.sig:
		case <-done:
			return Update{}, ctx.Err()
		}
	}
}

// Query returns the watched query.
func (w *Watcher) Query() model.Query {
	q := w.q
	q.Clusters = slices.Clone(q.Clusters)
	return q
}

// Close stops the watcher; Next then returns ErrWatchClosed. It is
// idempotent.
func (w *Watcher) Close() { w.close(ErrWatchClosed) }

func (w *Watcher) close(err error) {
	w.end(w.r, err, func() {
		r := w.r
		if g := r.watch.groups[w.key]; g != nil {
			g.dead++
			if g.dead == len(g.watchers) {
				delete(r.watch.groups, w.key)
			} else if 2*g.dead > len(g.watchers) {
				live := make([]*Watcher, 0, len(g.watchers)-g.dead)
				for _, x := range g.watchers {
					if x.closed.Load() == nil {
						live = append(live, x)
					}
				}
				g.watchers, g.dead = live, 0
			}
		}
	})
}

// watchEnd is what a Watcher and a CatalogWatcher share: the wake-up
// signal and the closing.
type watchEnd struct {
	// sig (capacity 1) says "latest may have moved, or the watcher closed".
	// Next waits on it alone, so a wake-up costs one channel receive.
	sig chan struct{}

	once    sync.Once
	closed  atomic.Pointer[error] // why the watcher closed, once it has
	stopCtx func() bool           // unregisters the context hook; guarded by Registry.mu
}

func newWatchEnd() watchEnd { return watchEnd{sig: make(chan struct{}, 1)} }

// end closes the watcher once, with err (context.Canceled when nil):
// under r.mu it records why, gives back its MaxWatchers quota and calls
// unlink, which takes it out of its group; then it wakes Next and drops
// the context hook.
func (e *watchEnd) end(r *Registry, err error, unlink func()) {
	e.once.Do(func() {
		if err == nil {
			err = context.Canceled
		}
		r.mu.Lock()
		e.closed.Store(&err)
		r.core.watcherClosed()
		stop := e.stopCtx
		unlink()
		r.mu.Unlock()
		e.wake()
		if stop != nil {
			stop()
		}
	})
}

// closeAll closes every watcher with err.
func (ws *watchState) closeAll(r *Registry, err error) {
	r.mu.Lock()
	var all []*Watcher
	for _, g := range ws.groups {
		for _, w := range g.watchers {
			if w.closed.Load() == nil {
				all = append(all, w)
			}
		}
	}
	var cats []*CatalogWatcher
	for _, g := range ws.catalogs {
		cats = append(cats, g.watchers...)
	}
	r.mu.Unlock()
	for _, w := range all {
		w.close(err)
	}
	for _, w := range cats {
		w.close(err)
	}
}

// notifier delivers changed views to watchers. It builds each view once per
// revision and query shape (the view cache does), and delivers without
// holding the registry's lock: a delivery is an atomic store and a
// non-blocking send.
func (r *Registry) notifier() {
	for {
		var flushed chan struct{}
		select {
		case <-r.stop:
			return
		case <-r.watch.signal:
		case flushed = <-r.watch.flush:
			// Every change made before the flush was called has marked its
			// service dirty: a pass now delivers it (an earlier pass that
			// took it has finished, this loop being sequential).
		}
		r.deliverDirty()
		if flushed != nil {
			close(flushed)
		}
	}
}

// deliverDirty hands the newest views of the services changed since the
// last pass to their watchers. Only the notifier calls it.
func (r *Registry) deliverDirty() {
	r.mu.Lock()
	dirty := r.watch.dirty
	r.watch.dirty, r.watch.spare = r.watch.spare, dirty
	catDirty := r.watch.catDirty
	r.watch.catDirty, r.watch.catSpare = r.watch.catSpare, catDirty
	r.mu.Unlock()

	var now time.Time // read once, when the first view is handed out
	for key, since := range dirty {
		buf := r.watch.buf[:0]
		var last *step
		r.mu.RLock()
		if g := r.watch.groups[key]; g != nil {
			for _, w := range g.watchers {
				if w.closed.Load() != nil {
					continue
				}
				v := r.currentView(key, g, &w.q)
				prev := w.latest.Load().view // only the notifier stores latest
				if v.Revision <= prev.Revision {
					continue
				}
				if last == nil || last.prev != prev || last.view != v {
					last = &step{prev: prev, view: v}
				}
				buf = append(buf, delivery{w: w, s: last})
			}
		}
		r.mu.RUnlock()
		for _, d := range buf {
			d.w.offer(d.s)
		}
		if len(buf) > 0 {
			if now.IsZero() {
				now = r.now()
			}
			r.stats.watchDelivery.ObserveN(now.Sub(since), uint64(len(buf)))
		}
		clear(buf)
		r.watch.buf = buf[:0]
	}
	clear(dirty)
	r.notifyCatalogs(catDirty)
	clear(catDirty)
}

// offer makes s the watcher's latest step. Only the notifier calls it, so
// there is one writer.
func (w *Watcher) offer(s *step) {
	w.latest.Store(s)
	w.wake()
}

// wake signals Next without blocking: a signal already pending covers this
// one too.
func (w *watchEnd) wake() {
	select {
	case w.sig <- struct{}{}:
	default:
	}
}
