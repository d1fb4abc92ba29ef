package registry_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
)

// nextCatalog returns the catalog watcher's next update, failing the test
// after 5 s.
func nextCatalog(t *testing.T, w *registry.CatalogWatcher) registry.CatalogUpdate {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	u, err := w.Next(c)
	if err != nil {
		t.Fatalf("CatalogWatcher.Next: %v", err)
	}
	return u
}

func keyNames(keys []model.ServiceKey) []string {
	out := []string{}
	for _, k := range keys {
		out = append(out, k.Group+"/"+k.Name)
	}
	return out
}

// TestWatchServices: the first update is the namespace's current list, all
// Added; later ones come when a service of the namespace appears or leaves,
// and only then (not for other namespaces, nor for changes of the services'
// instances), with what was added and removed.
func TestWatchServices(t *testing.T) {
	r := newReg(t)
	mustRegister(t, r, inst("b", 1), model.NewInstance(model.ServiceKey{Group: "g", Name: "a"}, "10.0.0.1", 80))
	w, err := r.WatchServices(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.Namespace() != model.DefaultNamespace {
		t.Fatalf("Namespace() = %q", w.Namespace())
	}
	u := nextCatalog(t, w)
	if got := keyNames(u.Catalog.Services); !slices.Equal(got, []string{"DEFAULT_GROUP/b", "g/a"}) {
		t.Fatalf("first list = %v", got)
	}
	if !slices.Equal(u.Added, u.Catalog.Services) || len(u.Removed) != 0 {
		t.Fatalf("first update = %+v, want everything added", u)
	}
	rev := u.Catalog.Revision

	// Neither another namespace nor another instance of a listed service
	// makes an update: the next one is the service c alone.
	mustRegister(t, r, model.NewInstance(model.ServiceKey{Namespace: "other", Name: "x"}, "10.0.0.1", 80))
	mustRegister(t, r, inst("b", 2))
	mustRegister(t, r, inst("c", 1))
	u = nextCatalog(t, w)
	if got := keyNames(u.Added); !slices.Equal(got, []string{"DEFAULT_GROUP/c"}) || len(u.Removed) != 0 {
		t.Fatalf("update after c = added %v removed %v", got, keyNames(u.Removed))
	}
	if u.Catalog.Revision <= rev || len(u.Catalog.Services) != 3 {
		t.Fatalf("catalog after c: %+v (previous revision %d)", u.Catalog, rev)
	}

	// b's instances leave; the implicit service goes EmptyServiceTTL later.
	for _, i := range []int{1, 2} {
		if err := r.Deregister(ctx, inst("b", i).Key()); err != nil {
			t.Fatal(err)
		}
	}
	r.Advance(31 * time.Second) // the beat instances of c and g/a expire
	r.Advance(60 * time.Second) // and their services go too
	seen := map[string]bool{}
	for len(seen) < 3 {
		u = nextCatalog(t, w)
		if len(u.Added) != 0 {
			t.Fatalf("added %v while services left", keyNames(u.Added))
		}
		for _, k := range keyNames(u.Removed) {
			seen[k] = true
		}
	}
	if len(u.Catalog.Services) != 0 {
		t.Fatalf("catalog after the clean-up: %v", keyNames(u.Catalog.Services))
	}

	// A defined service counts as soon as it is created.
	if err := r.CreateService(ctx, model.Service{Key: svcKey("defined"), Ephemeral: true}); err != nil {
		t.Fatal(err)
	}
	if u = nextCatalog(t, w); !slices.Equal(keyNames(u.Added), []string{"DEFAULT_GROUP/defined"}) {
		t.Fatalf("after CreateService: added %v", keyNames(u.Added))
	}
	if err := r.DeleteService(ctx, svcKey("defined")); err != nil {
		t.Fatal(err)
	}
	if u = nextCatalog(t, w); !slices.Equal(keyNames(u.Removed), []string{"DEFAULT_GROUP/defined"}) {
		t.Fatalf("after DeleteService: removed %v", keyNames(u.Removed))
	}
}

// TestWatchServicesSlowReader: writes never wait for a watcher that does
// not read; when it reads, each update is the difference from the list it
// saw last, and it ends on the newest list. A watcher opened afterwards
// gets the whole list at once.
func TestWatchServicesSlowReader(t *testing.T) {
	r := newReg(t)
	w, err := r.WatchServices(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	first := nextCatalog(t, w)
	const n = 200
	for i := range n {
		mustRegister(t, r, inst(fmt.Sprintf("s%03d", i), 1))
	}
	var want []model.ServiceKey
	for i := range n {
		want = append(want, svcKey(fmt.Sprintf("s%03d", i)).WithDefaults())
	}

	prev, rev := first.Catalog.Services, first.Catalog.Revision
	updates := 0
	for len(prev) < n {
		u := nextCatalog(t, w)
		updates++
		if u.Catalog.Revision <= rev {
			t.Fatalf("revision %d after %d", u.Catalog.Revision, rev)
		}
		if len(u.Removed) != 0 || len(prev)+len(u.Added) != len(u.Catalog.Services) {
			t.Fatalf("update from %d to %d services: added %d, removed %d", len(prev), len(u.Catalog.Services), len(u.Added), len(u.Removed))
		}
		for _, k := range u.Added {
			if slices.Contains(prev, k) || !slices.Contains(u.Catalog.Services, k) {
				t.Fatalf("added %s is not new", k)
			}
		}
		prev, rev = u.Catalog.Services, u.Catalog.Revision
	}
	if !slices.Equal(prev, want) || updates > n {
		t.Fatalf("ended with %d services after %d updates", len(prev), updates)
	}

	late, err := r.WatchServices(ctx, model.DefaultNamespace)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	if u := nextCatalog(t, late); !slices.Equal(u.Catalog.Services, want) || !slices.Equal(u.Added, want) {
		t.Fatalf("late watcher's first list has %d services", len(u.Catalog.Services))
	}
}

// TestWatchServicesLimitsAndClose: catalog watchers count against
// MaxWatchers with Watch's watchers; they end with their context, Close and
// the registry; WatchServices refuses an invalid namespace and an
// unstarted registry.
func TestWatchServicesLimitsAndClose(t *testing.T) {
	cfg := registry.DefaultConfig()
	cfg.Limits.MaxWatchers = 2
	r := registrytest.New(t, registrytest.Options{Config: &cfg})
	sw, err := r.Watch(ctx, model.Query{Service: svcKey("a")})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cw, err := r.WatchServices(cctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Counts(); c.Watchers != 2 {
		t.Fatalf("Counts().Watchers = %d, want 2", c.Watchers)
	}
	if _, err := r.WatchServices(ctx, ""); !errors.Is(err, registry.ErrLimit) {
		t.Fatalf("third watcher (catalog): %v, want ErrLimit", err)
	}
	sw.Close()
	if _, err := r.Watch(ctx, model.Query{Service: svcKey("b")}); err != nil {
		t.Fatalf("a watcher after one closed: %v", err)
	}
	if _, err := r.Watch(ctx, model.Query{Service: svcKey("c")}); !errors.Is(err, registry.ErrLimit) {
		t.Fatalf("third watcher (service): %v, want ErrLimit", err)
	}

	_ = nextCatalog(t, cw)
	cancel()
	if _, err := cw.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next after the context ended: %v", err)
	}
	if c := r.Counts(); c.Watchers != 1 {
		t.Fatalf("Counts().Watchers after the context ended = %d, want 1", c.Watchers)
	}

	cw, err = r.WatchServices(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	cw.Close()
	cw.Close()
	if _, err := cw.Next(ctx); !errors.Is(err, registry.ErrWatchClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
	if _, err := r.WatchServices(ctx, "bad ns"); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("invalid namespace: %v", err)
	}

	cw, err = r.WatchServices(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	_ = nextCatalog(t, cw)
	done := make(chan error, 1)
	go func() { _, err := cw.Next(ctx); done <- err }()
	_ = r.Registry.Close()
	if err := <-done; !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("Next across the registry's Close: %v", err)
	}

	u, err := registry.New(registry.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.WatchServices(ctx, ""); !errors.Is(err, registry.ErrNotReady) {
		t.Fatalf("before Start: %v, want ErrNotReady", err)
	}
}

// TestWatchServicesReplicated: a service that appears through another node
// reaches the catalog watchers of this one.
func TestWatchServicesReplicated(t *testing.T) {
	c := registrytest.NewCluster(t, clusterOpts())
	w, err := c.Node(0).WatchServices(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	_ = nextCatalog(t, w)
	s, err := c.Node(1).OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mustRegister(t, s, inst("far", 1))
	if u := nextCatalog(t, w); !slices.Equal(keyNames(u.Added), []string{"DEFAULT_GROUP/far"}) {
		t.Fatalf("added %v", keyNames(u.Added))
	}
}
