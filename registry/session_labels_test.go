package registry_test

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
)

// TestSessionLabels: labels given to OpenSession are kept as a copy and
// listed by Sessions with the instance count and the opening time (on the
// registry's clock), oldest first; a session leaves the list when it ends.
func TestSessionLabels(t *testing.T) {
	r := newReg(t)
	in := map[string]string{"clientIp": "10.1.2.3", "sdk": "Nacos-Go-Client:v2.3.2", "app": "orders"}
	a, err := r.OpenSession(ctx, registry.SessionOptions{Labels: in})
	if err != nil {
		t.Fatal(err)
	}
	in["app"] = "changed by the caller" // the registry kept a copy
	r.Advance(time.Second)
	b, err := r.OpenSession(ctx, registry.SessionOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	mustRegister(t, a, inst("lab", 1), inst("lab", 2))
	mustRegister(t, b, inst("lab", 3))

	want := map[string]string{"clientIp": "10.1.2.3", "sdk": "Nacos-Go-Client:v2.3.2", "app": "orders"}
	if got := a.Labels(); !maps.Equal(got, want) {
		t.Fatalf("Labels() = %v, want %v", got, want)
	}
	a.Labels()["app"] = "x" // a copy each time
	list, err := r.Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != a.ID() || list[1].ID != b.ID() {
		t.Fatalf("Sessions() = %+v, want a then b", list)
	}
	if got := list[0]; !maps.Equal(got.Labels, want) || got.Instances != 2 || !got.Opened.Equal(registrytest.Epoch) {
		t.Fatalf("a listed as %+v", got)
	}
	if got := list[1]; got.Labels != nil || got.Instances != 1 || !got.Opened.Equal(registrytest.Epoch.Add(time.Second)) {
		t.Fatalf("b listed as %+v", got)
	}

	r.Advance(11 * time.Second) // b's keep-alive lapses
	_ = a.Close()
	if list, err := r.Sessions(ctx); err != nil || len(list) != 0 {
		t.Fatalf("Sessions() after both ended = %+v, %v", list, err)
	}
	if c := r.Counts(); c.Sessions != 0 {
		t.Fatalf("Counts().Sessions = %d", c.Sessions)
	}
}

// TestSessionLabelsValidated: labels follow the rules and limits of
// metadata, and a refused session is not opened.
func TestSessionLabelsValidated(t *testing.T) {
	cfg := registry.DefaultConfig()
	cfg.Limits.MaxMetadataEntries = 2
	cfg.Limits.MaxMetadataSize = 16
	r := registrytest.New(t, registrytest.Options{Config: &cfg})
	for _, tc := range []struct {
		name   string
		labels map[string]string
		limit  bool
	}{
		{"empty key", map[string]string{"": "x"}, false},
		{"control character in a key", map[string]string{"a\nb": "x"}, false},
		{"control character in a value", map[string]string{"app": "a\x00"}, false},
		{"invalid UTF-8", map[string]string{"app": "\xff"}, false},
		{"too many entries", map[string]string{"a": "1", "b": "2", "c": "3"}, true},
		{"too long", map[string]string{"app": strings.Repeat("x", 14)}, true},
	} {
		_, err := r.OpenSession(ctx, registry.SessionOptions{Labels: tc.labels})
		if !errors.Is(err, model.ErrInvalid) || errors.Is(err, registry.ErrLimit) != tc.limit || !strings.Contains(err.Error(), "session.labels") {
			t.Errorf("%s: OpenSession = %v; want model.ErrInvalid (ErrLimit: %v) naming session.labels", tc.name, err, tc.limit)
		}
	}
	if c := r.Counts(); c.Sessions != 0 {
		t.Fatalf("refused sessions were opened: %d", c.Sessions)
	}
	// A tab in a value is allowed, as in metadata; at the limits exactly.
	if _, err := r.OpenSession(ctx, registry.SessionOptions{Labels: map[string]string{"app": "a\tb", "v": strings.Repeat("x", 9)}}); err != nil {
		t.Fatalf("labels at the limits: %v", err)
	}
}

// TestSessionsClosed: Sessions fails once the registry is closed.
func TestSessionsClosed(t *testing.T) {
	r, err := registry.New(registry.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	_ = r.Close()
	if _, err := r.Sessions(ctx); !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("Sessions after Close: %v, want ErrClosed", err)
	}
}

// TestSessionsLocal: a node lists its own sessions, not those of its peers
// whose instances it holds.
func TestSessionsLocal(t *testing.T) {
	c := registrytest.NewCluster(t, clusterOpts())
	s, err := c.Node(0).OpenSession(ctx, registry.SessionOptions{Labels: map[string]string{"app": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	mustRegister(t, s, inst("local", 1))
	c.Settle()
	if got := ipsOn(t, c.Node(1), "local"); len(got) != 1 {
		t.Fatalf("node 1 does not hold the session's instance: %v", got)
	}
	if l, _ := c.Node(0).Sessions(ctx); len(l) != 1 || l[0].ID != s.ID() {
		t.Fatalf("node 0 lists %+v", l)
	}
	if l, _ := c.Node(1).Sessions(ctx); len(l) != 0 {
		t.Fatalf("node 1 lists %+v, want none", l)
	}
}
