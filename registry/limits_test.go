package registry_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
)

// limitedReg returns a registry whose limits set changed.
func limitedReg(t *testing.T, set func(*registry.Limits)) *registrytest.Registry {
	t.Helper()
	cfg := registry.DefaultConfig()
	cfg.HealthChecks = nil
	set(&cfg.Limits)
	return registrytest.New(t, registrytest.Options{Config: &cfg})
}

// dumpNamespaces are the namespaces the limit tests write to.
var dumpNamespaces = []string{"", "a", "b", "c"}

// dump renders everything a client can read of r in dumpNamespaces: each
// service with its definition, its revision and its instances. Two equal
// dumps mean nothing changed (every change moves a revision).
func dump(t *testing.T, r *registrytest.Registry) string {
	t.Helper()
	var b strings.Builder
	for _, ns := range dumpNamespaces {
		l, err := r.ListServices(ctx, registry.ListOptions{Namespace: ns, PageSize: 1000})
		if err != nil {
			t.Fatalf("ListServices(%q): %v", ns, err)
		}
		for _, s := range l.Services {
			def, err := r.GetService(ctx, s.Key)
			if err != nil {
				t.Fatalf("GetService(%s): %v", s.Key, err)
			}
			v := query(t, r, model.Query{Service: s.Key, IncludeDisabled: true})
			fmt.Fprintf(&b, "%s defined=%v meta=%v clusters=%d rev=%d:", s.Key, s.Defined, def.Metadata, len(def.Clusters), v.Revision)
			for _, in := range v.Instances {
				fmt.Fprintf(&b, " %s/%s:%d%v", in.Cluster, in.IP, in.Port, in.Metadata)
			}
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// at returns instance i of service svc in namespace ns.
func at(ns, svc string, i int) model.Instance {
	in := inst(svc, i)
	in.Service.Namespace = ns
	return in
}

// sameEndpoint returns an instance of svc at one fixed ip:port.
func sameEndpoint(svc string) model.Instance {
	return model.NewInstance(svcKey(svc), "10.9.9.9", 9000)
}

func meta(n int) model.Metadata {
	m := map[string]string{}
	for i := range n {
		m[fmt.Sprintf("k%d", i)] = "v"
	}
	return model.NewMetadata(m)
}

func mustDo(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestLimits: for every limit and every path that creates what it
// bounds, filling up to the cap works, one more fails with ErrLimit naming
// the limit and its value, and the failed write changes nothing.
func TestLimits(t *testing.T) {
	type env struct {
		r    *registrytest.Registry
		sess *registry.Session // opened by fill when it needs one
	}
	openSess := func(t *testing.T, e *env) *registry.Session {
		t.Helper()
		if e.sess == nil {
			s, err := e.r.OpenSession(ctx, registry.SessionOptions{})
			mustDo(t, "OpenSession", err)
			e.sess = s
		}
		return e.sess
	}
	for _, tc := range []struct {
		name   string // case: limit/path
		limit  string
		value  int
		set    func(*registry.Limits, int)
		fill   func(t *testing.T, e *env)
		breach func(t *testing.T, e *env) error
		// ok, when set, is a write that the cap still allows (it creates
		// nothing: a replacement); it runs after the breach.
		ok func(t *testing.T, e *env) error
		// invalid: the breach also matches model.ErrInvalid.
		invalid bool
	}{
		{
			name: "MaxSessions/OpenSession", limit: "MaxSessions", value: 2,
			set: func(l *registry.Limits, n int) { l.MaxSessions = n },
			fill: func(t *testing.T, e *env) {
				for range 2 {
					_, err := e.r.OpenSession(ctx, registry.SessionOptions{})
					mustDo(t, "OpenSession", err)
				}
			},
			breach: func(t *testing.T, e *env) error {
				_, err := e.r.OpenSession(ctx, registry.SessionOptions{})
				return err
			},
		},
		{
			name: "MaxInstancesPerSession/Session.Register", limit: "MaxInstancesPerSession", value: 2,
			set: func(l *registry.Limits, n int) { l.MaxInstancesPerSession = n },
			fill: func(t *testing.T, e *env) {
				s := openSess(t, e)
				mustDo(t, "Register", s.Register(ctx, inst("a", 1)))
				mustDo(t, "Register", s.Register(ctx, inst("b", 2)))
			},
			breach: func(t *testing.T, e *env) error { return e.sess.Register(ctx, inst("a", 3)) },
			ok: func(t *testing.T, e *env) error {
				in := inst("a", 1)
				in.Weight = 3
				return e.sess.Register(ctx, in)
			},
		},
		{
			name: "MaxInstancesPerEndpoint/Register", limit: "MaxInstancesPerEndpoint", value: 2,
			set: func(l *registry.Limits, n int) { l.MaxInstancesPerEndpoint = n },
			fill: func(t *testing.T, e *env) {
				mustRegister(t, e.r, sameEndpoint("a"), sameEndpoint("b"))
			},
			breach: func(t *testing.T, e *env) error { return e.r.Register(ctx, sameEndpoint("c")) },
			ok:     func(t *testing.T, e *env) error { return e.r.Register(ctx, sameEndpoint("b")) },
		},
		{
			name: "MaxInstancesPerEndpoint/HeartbeatInstance", limit: "MaxInstancesPerEndpoint", value: 2,
			set: func(l *registry.Limits, n int) { l.MaxInstancesPerEndpoint = n },
			fill: func(t *testing.T, e *env) {
				mustRegister(t, e.r, sameEndpoint("a"), sameEndpoint("b"))
			},
			breach: func(t *testing.T, e *env) error {
				_, err := e.r.HeartbeatInstance(ctx, sameEndpoint("c"))
				return err
			},
			ok: func(t *testing.T, e *env) error {
				_, err := e.r.HeartbeatInstance(ctx, sameEndpoint("a"))
				return err
			},
		},
		{
			name: "MaxInstancesPerService/Register", limit: "MaxInstancesPerService", value: 2,
			set:    func(l *registry.Limits, n int) { l.MaxInstancesPerService = n },
			fill:   func(t *testing.T, e *env) { mustRegister(t, e.r, inst("a", 1), inst("a", 2)) },
			breach: func(t *testing.T, e *env) error { return e.r.Register(ctx, inst("a", 3)) },
			ok:     func(t *testing.T, e *env) error { return e.r.Register(ctx, inst("a", 2)) },
		},
		{
			name: "MaxInstancesPerService/HeartbeatInstance", limit: "MaxInstancesPerService", value: 2,
			set:  func(l *registry.Limits, n int) { l.MaxInstancesPerService = n },
			fill: func(t *testing.T, e *env) { mustRegister(t, e.r, inst("a", 1), inst("a", 2)) },
			breach: func(t *testing.T, e *env) error {
				_, err := e.r.HeartbeatInstance(ctx, inst("a", 3))
				return err
			},
		},
		{
			name: "MaxInstancesPerService/Session.Register", limit: "MaxInstancesPerService", value: 2,
			set: func(l *registry.Limits, n int) { l.MaxInstancesPerService = n },
			fill: func(t *testing.T, e *env) {
				mustRegister(t, e.r, inst("a", 1))
				mustDo(t, "Register", openSess(t, e).Register(ctx, inst("a", 2)))
			},
			breach: func(t *testing.T, e *env) error { return e.sess.Register(ctx, inst("a", 3)) },
			// A second publisher of an instance the service holds adds none.
			ok: func(t *testing.T, e *env) error { return e.sess.Register(ctx, inst("a", 1)) },
		},
		{
			name: "MaxInstancesPerService/persistent Register", limit: "MaxInstancesPerService", value: 2,
			set:    func(l *registry.Limits, n int) { l.MaxInstancesPerService = n },
			fill:   func(t *testing.T, e *env) { mustRegister(t, e.r, persistent("p", 1), persistent("p", 2)) },
			breach: func(t *testing.T, e *env) error { return e.r.Register(ctx, persistent("p", 3)) },
			ok:     func(t *testing.T, e *env) error { return e.r.Register(ctx, persistent("p", 1)) },
		},
		{
			name: "MaxInstances/Register", limit: "MaxInstances", value: 3,
			set:    func(l *registry.Limits, n int) { l.MaxInstances = n },
			fill:   func(t *testing.T, e *env) { mustRegister(t, e.r, inst("a", 1), inst("a", 2), inst("b", 1)) },
			breach: func(t *testing.T, e *env) error { return e.r.Register(ctx, inst("c", 1)) },
			ok:     func(t *testing.T, e *env) error { return e.r.Register(ctx, inst("b", 1)) },
		},
		{
			name: "MaxInstances/persistent Register", limit: "MaxInstances", value: 3,
			set:    func(l *registry.Limits, n int) { l.MaxInstances = n },
			fill:   func(t *testing.T, e *env) { mustRegister(t, e.r, inst("a", 1), persistent("p", 1), persistent("p", 2)) },
			breach: func(t *testing.T, e *env) error { return e.r.Register(ctx, persistent("p", 3)) },
		},
		{
			name: "MaxServices/CreateService", limit: "MaxServices", value: 2,
			set: func(l *registry.Limits, n int) { l.MaxServices = n },
			fill: func(t *testing.T, e *env) {
				mustDo(t, "CreateService", e.r.CreateService(ctx, model.Service{Key: svcKey("s1")}))
				mustRegister(t, e.r, at("a", "s2", 1))
			},
			breach: func(t *testing.T, e *env) error {
				return e.r.CreateService(ctx, model.Service{Key: model.ServiceKey{Namespace: "b", Name: "s3"}})
			},
		},
		{
			name: "MaxServices/Register", limit: "MaxServices", value: 2,
			set:    func(l *registry.Limits, n int) { l.MaxServices = n },
			fill:   func(t *testing.T, e *env) { mustRegister(t, e.r, inst("s1", 1), persistent("s2", 1)) },
			breach: func(t *testing.T, e *env) error { return e.r.Register(ctx, at("c", "s3", 1)) },
		},
		{
			name: "MaxServicesPerNamespace/CreateService", limit: "MaxServicesPerNamespace", value: 2,
			set: func(l *registry.Limits, n int) { l.MaxServicesPerNamespace = n },
			fill: func(t *testing.T, e *env) {
				mustDo(t, "CreateService", e.r.CreateService(ctx, model.Service{Key: svcKey("s1")}))
				mustRegister(t, e.r, inst("s2", 1), at("a", "s3", 1)) // another namespace counts apart
			},
			breach: func(t *testing.T, e *env) error {
				return e.r.CreateService(ctx, model.Service{Key: svcKey("s4")})
			},
			// A definition of a service that exists creates none.
			ok: func(t *testing.T, e *env) error {
				return e.r.CreateService(ctx, model.Service{Key: svcKey("s2"), Ephemeral: true})
			},
		},
		{
			name: "MaxServicesPerNamespace/Register", limit: "MaxServicesPerNamespace", value: 2,
			set:    func(l *registry.Limits, n int) { l.MaxServicesPerNamespace = n },
			fill:   func(t *testing.T, e *env) { mustRegister(t, e.r, inst("s1", 1), persistent("s2", 1)) },
			breach: func(t *testing.T, e *env) error { return e.r.Register(ctx, inst("s3", 1)) },
			ok:     func(t *testing.T, e *env) error { return e.r.Register(ctx, inst("s1", 2)) },
		},
		{
			name: "MaxServicesPerNamespace/persistent Register", limit: "MaxServicesPerNamespace", value: 2,
			set:    func(l *registry.Limits, n int) { l.MaxServicesPerNamespace = n },
			fill:   func(t *testing.T, e *env) { mustRegister(t, e.r, inst("s1", 1), persistent("s2", 1)) },
			breach: func(t *testing.T, e *env) error { return e.r.Register(ctx, persistent("s3", 1)) },
		},
		{
			name: "MaxServicesPerNamespace/Session.Register", limit: "MaxServicesPerNamespace", value: 2,
			set: func(l *registry.Limits, n int) { l.MaxServicesPerNamespace = n },
			fill: func(t *testing.T, e *env) {
				s := openSess(t, e)
				mustDo(t, "Register", s.Register(ctx, inst("s1", 1)))
				mustDo(t, "Register", s.Register(ctx, inst("s2", 1)))
			},
			breach: func(t *testing.T, e *env) error { return e.sess.Register(ctx, inst("s3", 1)) },
		},
		{
			name: "MaxNamespaces/CreateService", limit: "MaxNamespaces", value: 2,
			set: func(l *registry.Limits, n int) { l.MaxNamespaces = n },
			fill: func(t *testing.T, e *env) {
				mustDo(t, "CreateService", e.r.CreateService(ctx, model.Service{Key: model.ServiceKey{Namespace: "a", Name: "x"}}))
				mustRegister(t, e.r, inst("y", 1))
			},
			breach: func(t *testing.T, e *env) error {
				return e.r.CreateService(ctx, model.Service{Key: model.ServiceKey{Namespace: "b", Name: "x"}})
			},
			ok: func(t *testing.T, e *env) error { return e.r.Register(ctx, at("a", "z", 1)) },
		},
		{
			name: "MaxNamespaces/Register", limit: "MaxNamespaces", value: 2,
			set:    func(l *registry.Limits, n int) { l.MaxNamespaces = n },
			fill:   func(t *testing.T, e *env) { mustRegister(t, e.r, at("a", "x", 1), at("b", "x", 1)) },
			breach: func(t *testing.T, e *env) error { return e.r.Register(ctx, at("c", "x", 1)) },
		},
		{
			name: "MaxWatchers/Watch", limit: "MaxWatchers", value: 2,
			set: func(l *registry.Limits, n int) { l.MaxWatchers = n },
			fill: func(t *testing.T, e *env) {
				for _, svc := range []string{"a", "b"} {
					_, err := e.r.Watch(ctx, model.Query{Service: svcKey(svc)})
					mustDo(t, "Watch", err)
				}
			},
			breach: func(t *testing.T, e *env) error {
				_, err := e.r.Watch(ctx, model.Query{Service: svcKey("a")})
				return err
			},
		},
		{
			name: "MaxMetadataEntries/Register", limit: "MaxMetadataEntries", value: 2, invalid: true,
			set: func(l *registry.Limits, n int) { l.MaxMetadataEntries = n },
			fill: func(t *testing.T, e *env) {
				in := inst("a", 1)
				in.Metadata = meta(2)
				mustRegister(t, e.r, in)
			},
			breach: func(t *testing.T, e *env) error {
				in := inst("a", 1)
				in.Metadata = meta(3)
				return e.r.Register(ctx, in)
			},
		},
		{
			name: "MaxMetadataEntries/Session.Register", limit: "MaxMetadataEntries", value: 2, invalid: true,
			set:  func(l *registry.Limits, n int) { l.MaxMetadataEntries = n },
			fill: func(t *testing.T, e *env) { openSess(t, e) },
			breach: func(t *testing.T, e *env) error {
				in := inst("a", 1)
				in.Metadata = meta(3)
				return e.sess.Register(ctx, in)
			},
		},
		{
			name: "MaxMetadataEntries/CreateService", limit: "MaxMetadataEntries", value: 2, invalid: true,
			set:  func(l *registry.Limits, n int) { l.MaxMetadataEntries = n },
			fill: func(t *testing.T, e *env) {},
			breach: func(t *testing.T, e *env) error {
				return e.r.CreateService(ctx, model.Service{Key: svcKey("a"), Clusters: []model.Cluster{{Name: "c", Metadata: meta(3)}}})
			},
		},
		{
			name: "MaxMetadataEntries/PatchInstance merged", limit: "MaxMetadataEntries", value: 2, invalid: true,
			set: func(l *registry.Limits, n int) { l.MaxMetadataEntries = n },
			fill: func(t *testing.T, e *env) {
				mustRegister(t, e.r, inst("a", 1))
				mustDo(t, "PatchInstance", e.r.PatchInstance(ctx, model.InstancePatch{Key: inst("a", 1).Key(), Metadata: meta(2)}))
			},
			// Two entries alone, three once merged with the patch held.
			breach: func(t *testing.T, e *env) error {
				return e.r.PatchInstance(ctx, model.InstancePatch{Key: inst("a", 1).Key(), Metadata: model.NewMetadata(map[string]string{"k1": "w", "k9": "v"})})
			},
			ok: func(t *testing.T, e *env) error {
				return e.r.PatchInstance(ctx, model.InstancePatch{Key: inst("a", 1).Key(), Metadata: model.NewMetadata(map[string]string{"k1": "w"})})
			},
		},
		{
			name: "MaxMetadataSize/Register", limit: "MaxMetadataSize", value: 8, invalid: true,
			set: func(l *registry.Limits, n int) { l.MaxMetadataSize = n },
			fill: func(t *testing.T, e *env) {
				in := inst("a", 1)
				in.Metadata = model.NewMetadata(map[string]string{"abc": "12345"})
				mustRegister(t, e.r, in)
			},
			breach: func(t *testing.T, e *env) error {
				in := inst("a", 1)
				in.Metadata = model.NewMetadata(map[string]string{"abc": "123456"})
				return e.r.Register(ctx, in)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &env{r: limitedReg(t, func(l *registry.Limits) { tc.set(l, tc.value) })}
			tc.fill(t, e)
			before := dump(t, e.r)
			err := tc.breach(t, e)
			want := fmt.Sprintf("registry: limit reached: %s (%d)", tc.limit, tc.value)
			if !errors.Is(err, registry.ErrLimit) || !strings.Contains(err.Error(), want) {
				t.Fatalf("one past the cap: %v, want ErrLimit saying %q", err, want)
			}
			if tc.invalid != errors.Is(err, model.ErrInvalid) {
				t.Errorf("matches model.ErrInvalid = %v, want %v", !tc.invalid, tc.invalid)
			}
			if after := dump(t, e.r); after != before {
				t.Fatalf("the refused write changed the registry:\nbefore:\n%s\nafter:\n%s", before, after)
			}
			if tc.ok != nil {
				if err := tc.ok(t, e); err != nil {
					t.Fatalf("a write that adds nothing, at the cap: %v", err)
				}
			}
		})
	}
}

// TestLimitsFreed: what is released makes room again: a closed session,
// a closed watcher, a deregistered instance, a deleted service.
func TestLimitsFreed(t *testing.T) {
	r := limitedReg(t, func(l *registry.Limits) {
		l.MaxSessions, l.MaxWatchers, l.MaxInstancesPerService, l.MaxServicesPerNamespace = 1, 1, 1, 1
	})
	s, err := r.OpenSession(ctx, registry.SessionOptions{})
	mustDo(t, "OpenSession", err)
	if _, err := r.OpenSession(ctx, registry.SessionOptions{}); !errors.Is(err, registry.ErrLimit) {
		t.Fatalf("second session: %v, want ErrLimit", err)
	}
	mustDo(t, "Close", s.Close())
	_, err = r.OpenSession(ctx, registry.SessionOptions{})
	mustDo(t, "OpenSession after a Close", err)

	w, err := r.Watch(ctx, model.Query{Service: svcKey("a")})
	mustDo(t, "Watch", err)
	if _, err := r.Watch(ctx, model.Query{Service: svcKey("b")}); !errors.Is(err, registry.ErrLimit) {
		t.Fatalf("second watcher: %v, want ErrLimit", err)
	}
	w.Close()
	wctx, cancel := context.WithCancel(ctx)
	w, err = r.Watch(wctx, model.Query{Service: svcKey("b")})
	mustDo(t, "Watch after a Close", err)
	next(t, w) // the first view
	cancel()   // a watcher closed by its context frees its place too
	if _, err := w.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next after its Watch context ended: %v, want context.Canceled", err)
	}
	_, err = r.Watch(ctx, model.Query{Service: svcKey("c")})
	mustDo(t, "Watch after a cancelled one", err)

	mustRegister(t, r, persistent("p", 1))
	if err := r.Register(ctx, persistent("p", 2)); !errors.Is(err, registry.ErrLimit) {
		t.Fatalf("second instance: %v, want ErrLimit", err)
	}
	mustDo(t, "Deregister", r.Deregister(ctx, persistent("p", 1).Key()))
	mustRegister(t, r, persistent("p", 2))
	if err := r.CreateService(ctx, model.Service{Key: svcKey("q")}); !errors.Is(err, registry.ErrLimit) {
		t.Fatalf("second service: %v, want ErrLimit", err)
	}
	mustDo(t, "Deregister", r.Deregister(ctx, persistent("p", 2).Key()))
	mustDo(t, "DeleteService", r.DeleteService(ctx, svcKey("p")))
	mustDo(t, "CreateService after a delete", r.CreateService(ctx, model.Service{Key: svcKey("q")}))
}

// TestLimitsDefaults: DefaultConfig carries DefaultLimits; a zero Limits
// means the defaults, and they are enforced.
func TestLimitsDefaults(t *testing.T) {
	if got := registry.DefaultConfig().Limits; got != registry.DefaultLimits() {
		t.Fatalf("DefaultConfig().Limits = %+v, want DefaultLimits()", got)
	}
	cfg := registry.DefaultConfig()
	cfg.HealthChecks = nil
	cfg.Limits = registry.Limits{}
	r := registrytest.New(t, registrytest.Options{Config: &cfg})
	s, err := r.OpenSession(ctx, registry.SessionOptions{})
	mustDo(t, "OpenSession", err)
	max := registry.DefaultLimits().MaxInstancesPerSession
	for i := range max {
		mustDo(t, "Register", s.Register(ctx, inst(fmt.Sprintf("s%d", i%7), i)))
	}
	err = s.Register(ctx, inst("s0", max))
	if want := fmt.Sprintf("MaxInstancesPerSession (%d)", max); !errors.Is(err, registry.ErrLimit) || !strings.Contains(err.Error(), want) {
		t.Fatalf("instance %d of a session under zero Limits: %v, want ErrLimit naming %s", max+1, err, want)
	}
}

// TestLimitsValidate: a negative limit, or a metadata limit past its hard
// ceiling, is refused by name.
func TestLimitsValidate(t *testing.T) {
	for _, tc := range []struct {
		set  func(*registry.Limits)
		want string
	}{
		{func(l *registry.Limits) { l.MaxSessions = -1 }, "Limits.MaxSessions must not be negative"},
		{func(l *registry.Limits) { l.MaxInstancesPerSession = -1 }, "Limits.MaxInstancesPerSession must not be negative"},
		{func(l *registry.Limits) { l.MaxInstancesPerEndpoint = -1 }, "Limits.MaxInstancesPerEndpoint must not be negative"},
		{func(l *registry.Limits) { l.MaxInstancesPerService = -1 }, "Limits.MaxInstancesPerService must not be negative"},
		{func(l *registry.Limits) { l.MaxInstances = -1 }, "Limits.MaxInstances must not be negative"},
		{func(l *registry.Limits) { l.MaxServices = -1 }, "Limits.MaxServices must not be negative"},
		{func(l *registry.Limits) { l.MaxServicesPerNamespace = -1 }, "Limits.MaxServicesPerNamespace must not be negative"},
		{func(l *registry.Limits) { l.MaxNamespaces = -1 }, "Limits.MaxNamespaces must not be negative"},
		{func(l *registry.Limits) { l.MaxWatchers = -1 }, "Limits.MaxWatchers must not be negative"},
		{func(l *registry.Limits) { l.MaxMetadataEntries = -1 }, "Limits.MaxMetadataEntries must not be negative"},
		{func(l *registry.Limits) { l.MaxMetadataSize = -1 }, "Limits.MaxMetadataSize must not be negative"},
		{func(l *registry.Limits) { l.MaxMetadataSize = registry.HardMaxMetadataSize + 1 }, fmt.Sprintf("Limits.MaxMetadataSize must be at most %d", registry.HardMaxMetadataSize)},
		{func(l *registry.Limits) { l.MaxMetadataEntries = registry.HardMaxMetadataEntries + 1 }, fmt.Sprintf("Limits.MaxMetadataEntries must be at most %d", registry.HardMaxMetadataEntries)},
	} {
		cfg := registry.DefaultConfig()
		tc.set(&cfg.Limits)
		if err := cfg.Validate(); !errors.Is(err, registry.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate: %v, want ErrInvalidConfig saying %q", err, tc.want)
		}
	}
	cfg := registry.DefaultConfig()
	cfg.Limits.MaxMetadataSize, cfg.Limits.MaxMetadataEntries = registry.HardMaxMetadataSize, registry.HardMaxMetadataEntries
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate at the hard ceilings: %v", err)
	}
}

// TestLimitForwarded: a beat write forwarded to its owner that the owner
// refuses on a limit fails at the caller with ErrLimit, naming the limit.
func TestLimitForwarded(t *testing.T) {
	cfg := registry.DefaultConfig()
	cfg.HealthChecks = nil
	cfg.Limits.MaxInstancesPerService = 1
	opts := clusterOpts()
	opts.Config = &cfg
	c := registrytest.NewCluster(t, opts)
	first := ownedBy(t, c, "n1", "fw")
	mustRegister(t, c.Node(0), first)
	c.Settle()
	second := ownedBy(t, c, "n2", "fw")
	err := c.Node(0).Register(ctx, second) // forwarded to n2, which holds "fw" at its cap
	if !errors.Is(err, registry.ErrLimit) || !strings.Contains(err.Error(), "MaxInstancesPerService (1)") {
		t.Fatalf("forwarded register past the cap: %v, want ErrLimit naming MaxInstancesPerService (1)", err)
	}
	c.Settle()
	for _, n := range c.Nodes() {
		if got := ipsOn(t, n, "fw"); !slices.Equal(got, []string{first.IP}) {
			t.Fatalf("%s holds %v, want only %s", n.ID, got, first.IP)
		}
	}
}
