package registry_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
)

// TestKindMismatch: a service's kind is fixed by its first registration or
// its creation.
func TestKindMismatch(t *testing.T) {
	r := newReg(t)
	mustRegister(t, r, inst("eph", 1), persistent("per", 1))
	s, _ := r.OpenSession(ctx, registry.SessionOptions{})
	for name, err := range map[string]error{
		"persistent into ephemeral":      r.Register(ctx, persistent("eph", 2)),
		"ephemeral into persistent":      r.Register(ctx, inst("per", 2)),
		"session into persistent":        s.Register(ctx, inst("per", 3)),
		"create persistent over implied": r.CreateService(ctx, model.Service{Key: svcKey("eph")}),
		"update to the other kind":       r.UpdateService(ctx, model.Service{Key: svcKey("per"), Ephemeral: true}),
	} {
		if !errors.Is(err, registry.ErrKindMismatch) {
			t.Errorf("%s: got %v, want ErrKindMismatch", name, err)
		}
	}
	if err := r.CreateService(ctx, model.Service{Key: svcKey("def"), Ephemeral: false}); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(ctx, inst("def", 1)); !errors.Is(err, registry.ErrKindMismatch) {
		t.Errorf("ephemeral into a created persistent service: %v", err)
	}
	if err := r.Register(ctx, persistent("def", 1)); err != nil {
		t.Errorf("persistent into a created persistent service: %v", err)
	}
}

// TestServiceLifecycle: create, get, update, delete refused while instances
// exist, list with paging.
func TestServiceLifecycle(t *testing.T) {
	r := newReg(t)
	def := model.Service{Key: svcKey("orders"), Ephemeral: true, ProtectThreshold: 0.3,
		Metadata: model.NewMetadata(map[string]string{"owner": "team-a"})}
	if err := r.CreateService(ctx, def); err != nil {
		t.Fatal(err)
	}
	if err := r.CreateService(ctx, def); !errors.Is(err, registry.ErrServiceExists) {
		t.Fatalf("second create: %v", err)
	}
	got, err := r.GetService(ctx, svcKey("orders"))
	if err != nil || got.ProtectThreshold != 0.3 || got.Metadata.Value("owner") != "team-a" || got.Key.Group != model.DefaultGroup {
		t.Fatalf("GetService = %+v, %v", got, err)
	}
	mustRegister(t, r, inst("orders", 1))
	if err := r.DeleteService(ctx, svcKey("orders")); !errors.Is(err, registry.ErrServiceNotEmpty) {
		t.Fatalf("delete with instances: %v", err)
	}
	def.ProtectThreshold = 0.6
	if err := r.UpdateService(ctx, def); err != nil {
		t.Fatal(err)
	}
	if v := all(t, r, "orders"); v.Service.ProtectThreshold != 0.6 {
		t.Fatalf("view does not carry the update: %+v", v.Service)
	}
	if err := r.UpdateService(ctx, model.Service{Key: svcKey("nope"), Ephemeral: true}); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("update of a missing service: %v", err)
	}
	if err := r.Deregister(ctx, inst("orders", 1).Key()); err != nil {
		t.Fatal(err)
	}
	if err := r.DeleteService(ctx, svcKey("orders")); err != nil {
		t.Fatalf("delete of an empty service: %v", err)
	}
	if _, err := r.GetService(ctx, svcKey("orders")); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	if err := r.DeleteService(ctx, svcKey("orders")); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}

	// Listing: 25 services in two groups, paged by 10.
	for i := range 25 {
		k := model.ServiceKey{Group: []string{"g1", "g2"}[i%2], Name: "s" + string(rune('a'+i))}
		mustRegister(t, r, model.NewInstance(k, "10.1.1.1", 80))
	}
	mustRegister(t, r, model.NewInstance(model.ServiceKey{Namespace: "other", Name: "x"}, "10.1.1.1", 80))
	page, err := r.ListServices(ctx, registry.ListOptions{PageSize: 10, Page: 3})
	if err != nil || page.Total != 25 || len(page.Services) != 5 {
		t.Fatalf("page 3: %+v, %v", page, err)
	}
	g1, _ := r.ListServices(ctx, registry.ListOptions{Group: "g1"})
	if g1.Total != 13 || g1.Services[0].Key.Name != "sa" || g1.Services[1].Key.Name != "sc" || g1.Services[0].Instances != 1 {
		t.Fatalf("group g1: %+v", g1)
	}
	other, _ := r.ListServices(ctx, registry.ListOptions{Namespace: "other"})
	if other.Total != 1 {
		t.Fatalf("namespace other: %+v", other)
	}
	if _, err := r.ListServices(ctx, registry.ListOptions{Namespace: "bad ns"}); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("bad namespace: %v", err)
	}
}

// TestEmptyServiceCleanup: an implicit service with no instances goes after
// EmptyServiceTTL; a defined one stays.
func TestEmptyServiceCleanup(t *testing.T) {
	r := newReg(t)
	mustRegister(t, r, inst("implicit", 1))
	if err := r.CreateService(ctx, model.Service{Key: svcKey("defined"), Ephemeral: true}); err != nil {
		t.Fatal(err)
	}
	if err := r.Deregister(ctx, inst("implicit", 1).Key()); err != nil {
		t.Fatal(err)
	}
	r.Advance(59 * time.Second)
	if _, err := r.GetService(ctx, svcKey("implicit")); err != nil {
		t.Fatalf("removed before 60 s: %v", err)
	}
	// Its kind still holds while it exists.
	if err := r.Register(ctx, persistent("implicit", 1)); !errors.Is(err, registry.ErrKindMismatch) {
		t.Fatalf("kind not kept by the empty service: %v", err)
	}
	r.Advance(2 * time.Second)
	if _, err := r.GetService(ctx, svcKey("implicit")); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("empty implicit service after 61 s: %v", err)
	}
	if _, err := r.GetService(ctx, svcKey("defined")); err != nil {
		t.Fatalf("defined service removed: %v", err)
	}
	// Gone, the name is free for the other kind.
	mustRegister(t, r, persistent("implicit", 1))

	// A service that gets an instance back in time stays.
	sess, _ := r.OpenSession(ctx, registry.SessionOptions{})
	mustRegister(t, sess, inst("back", 1))
	sess.Deregister(ctx, inst("back", 1).Key())
	r.Advance(30 * time.Second)
	mustRegister(t, sess, inst("back", 2))
	r.Advance(60 * time.Second)
	if len(all(t, r, "back").Instances) != 1 {
		t.Fatal("a service with an instance was cleaned up")
	}
}

// TestPersistentInstances: stored until deregistered; health never deletes
// them; SetHealth only for NONE clusters.
func TestPersistentInstances(t *testing.T) {
	r := newReg(t)
	p := persistent("db", 1)
	mustRegister(t, r, p)
	r.Advance(time.Hour)
	if v := all(t, r, "db"); len(v.Instances) != 1 || v.Instances[0].Ephemeral {
		t.Fatalf("persistent instance after an hour: %+v", v.Instances)
	}
	if err := r.SetHealth(ctx, p.Key(), false); !errors.Is(err, registry.ErrHealthChecked) {
		t.Fatalf("SetHealth on a TCP (default) cluster: %v", err)
	}
	// The service exists through its instance; giving it a definition
	// switches its cluster to manual health.
	none := []model.Cluster{{Name: "DEFAULT", HealthCheck: model.HealthCheck{Type: model.CheckNone}}}
	if err := r.UpdateService(ctx, model.Service{Key: svcKey("db"), Clusters: none}); err != nil {
		t.Fatal(err)
	}
	if err := r.SetHealth(ctx, p.Key(), false); err != nil {
		t.Fatalf("SetHealth on a NONE cluster: %v", err)
	}
	if v := query(t, r, model.Query{Service: svcKey("db")}); v.RealHealthy(0) {
		t.Fatal("SetHealth(false) did not take")
	}
	// Re-registering keeps the health that checks or SetHealth set.
	mustRegister(t, r, p)
	if v := all(t, r, "db"); v.RealHealthy(0) {
		t.Fatal("re-registration reset the health")
	}
	if err := r.SetHealth(ctx, persistent("db", 9).Key(), true); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("SetHealth of a missing instance: %v", err)
	}
	mustRegister(t, r, inst("eph", 1))
	if err := r.SetHealth(ctx, inst("eph", 1).Key(), false); !errors.Is(err, registry.ErrKindMismatch) {
		t.Fatalf("SetHealth of an ephemeral instance: %v", err)
	}
	if err := r.Deregister(ctx, p.Key()); err != nil {
		t.Fatal(err)
	}
	if len(all(t, r, "db").Instances) != 0 {
		t.Fatal("Deregister did not remove the persistent instance")
	}
}

// TestValidationErrors: bad input is refused with an error naming the field.
func TestValidationErrors(t *testing.T) {
	r := newReg(t)
	bad := inst("orders", 1)
	bad.Port = 0
	s, _ := r.OpenSession(ctx, registry.SessionOptions{})
	w := 2.0
	for name, err := range map[string]error{
		"register":       r.Register(ctx, bad),
		"session":        s.Register(ctx, bad),
		"deregister":     r.Deregister(ctx, bad.Key()),
		"create service": r.CreateService(ctx, model.Service{Key: svcKey("a b")}),
		"threshold":      r.CreateService(ctx, model.Service{Key: svcKey("ok"), ProtectThreshold: 2}),
		"patch":          r.PatchInstance(ctx, model.InstancePatch{Key: bad.Key(), Weight: &w}),
		"set health":     r.SetHealth(ctx, bad.Key(), true),
		"delete service": r.DeleteService(ctx, svcKey("@x")),
		"remove patch":   r.RemovePatch(ctx, bad.Key()),
		"query":          func() error { _, err := r.Query(ctx, model.Query{Service: svcKey("a b")}); return err }(),
		"query clusters": func() error {
			_, err := r.Query(ctx, model.Query{Service: svcKey("x"), Clusters: []string{"c.1"}})
			return err
		}(),
		"watch":       func() error { _, err := r.Watch(ctx, model.Query{Service: svcKey("")}); return err }(),
		"get service": func() error { _, err := r.GetService(ctx, svcKey("")); return err }(),
		"metadata too big": r.Register(ctx, func() model.Instance {
			i := inst("orders", 2)
			i.Metadata = model.NewMetadata(map[string]string{"k": string(make([]byte, 2000))})
			return i
		}()),
	} {
		var ve *model.ValidationError
		if !errors.Is(err, model.ErrInvalid) || !errors.As(err, &ve) || ve.Field == "" {
			t.Errorf("%s: got %v, want a validation error naming the field", name, err)
		}
	}
}

// TestMetadataLimitConfigurable: the registry enforces its configured cap.
func TestMetadataLimitConfigurable(t *testing.T) {
	cfg := registry.DefaultConfig()
	cfg.Limits.MaxMetadataSize = 16
	r := registrytest.New(t, registrytest.Options{Config: &cfg})
	in := inst("a", 1)
	in.Metadata = model.NewMetadata(map[string]string{"version": "1.2.3.4.5.6.7"})
	if err := r.Register(ctx, in); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("metadata over the configured cap: %v", err)
	}
}

// TestLifecycle: not ready before Start, ErrClosed after Close, Close
// idempotent, config validated.
func TestLifecycle(t *testing.T) {
	cfg := registry.DefaultConfig()
	cfg.PatchTTL = -time.Second // 0 is the default
	if _, err := registry.New(cfg); !errors.Is(err, registry.ErrInvalidConfig) || !strings.Contains(err.Error(), "PatchTTL must be positive") {
		t.Fatalf("New with PatchTTL -1s: %v, want ErrInvalidConfig naming PatchTTL and its rule", err)
	}
	cfg = registry.DefaultConfig()
	cfg.HistoryEvents = registry.MaxHistoryEvents + 1
	cfg.SweepInterval = -1
	_, err := registry.New(cfg)
	if !errors.Is(err, registry.ErrInvalidConfig) || !strings.Contains(err.Error(), "HistoryEvents must be at most") || !strings.Contains(err.Error(), "SweepInterval must be positive") {
		t.Fatalf("New with too many HistoryEvents and a negative SweepInterval: %v, want ErrInvalidConfig naming both", err)
	}
	r, err := registry.New(registry.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if r.Ready() {
		t.Fatal("ready before Start")
	}
	if _, err := r.Query(ctx, model.Query{Service: svcKey("a")}); !errors.Is(err, registry.ErrNotReady) {
		t.Fatalf("Query before Start: %v", err)
	}
	if err := r.Register(ctx, inst("a", 1)); !errors.Is(err, registry.ErrNotReady) {
		t.Fatalf("Register before Start: %v", err)
	}
	c, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	if err := r.WaitReady(c); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitReady before Start: %v", err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.WaitReady(ctx); err != nil || !r.Ready() {
		t.Fatalf("not ready after Start: %v", err)
	}
	if err := r.Start(ctx); err == nil {
		t.Fatal("second Start succeeded")
	}
	w, err := r.Watch(ctx, model.Query{Service: svcKey("a")})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := r.OpenSession(ctx, registry.SessionOptions{})
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := r.Register(ctx, inst("a", 1)); !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("Register after Close: %v", err)
	}
	if _, err := r.Query(ctx, model.Query{Service: svcKey("a")}); !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("Query after Close: %v", err)
	}
	if _, err := w.Next(ctx); !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("Watcher.Next after Close: %v", err)
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("session not ended by Close")
	}
}

func TestListServicesPaging(t *testing.T) {
	r := newReg(t)
	if _, err := r.ListServices(ctx, registry.ListOptions{Page: -1}); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("negative page: %v", err)
	}
	if _, err := r.ListServices(ctx, registry.ListOptions{Group: "bad group"}); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("bad group: %v", err)
	}
	mustRegister(t, r, inst("one", 1))
	past, err := r.ListServices(ctx, registry.ListOptions{Page: 5, PageSize: 10})
	if err != nil || past.Total != 1 || len(past.Services) != 0 {
		t.Fatalf("page past the end: %+v, %v", past, err)
	}
}

// TestDefinitionsAreCopied: neither the caller's value nor the copy
// GetService returns shares memory with the stored definition.
func TestDefinitionsAreCopied(t *testing.T) {
	r := newReg(t)
	def := model.Service{Key: svcKey("p"), Clusters: []model.Cluster{{Name: "DEFAULT",
		HealthCheck: model.HealthCheck{Type: model.CheckNone, ExpectedCodes: []int{200}, Password: "secret"}}}}
	if err := r.CreateService(ctx, def); err != nil {
		t.Fatal(err)
	}
	mustRegister(t, r, persistent("p", 1))
	def.Clusters[0].HealthCheck.ExpectedCodes[0] = 999
	got, _ := r.GetService(ctx, svcKey("p"))
	if got.Clusters[0].HealthCheck.ExpectedCodes[0] != 200 || got.Clusters[0].HealthCheck.Password != "secret" {
		t.Fatalf("stored definition: %+v", got.Clusters[0].HealthCheck)
	}
	got.Clusters[0].HealthCheck.Type = model.CheckTCP
	if err := r.SetHealth(ctx, persistent("p", 1).Key(), false); err != nil {
		t.Fatalf("editing GetService's result changed the registry: %v", err)
	}
	if v := all(t, r, "p"); v.Service.Clusters[0].HealthCheck.Password != "" {
		t.Fatal("views carry the MySQL password")
	}
}

func TestListServicesHugePage(t *testing.T) {
	r := newReg(t)
	mustRegister(t, r, inst("a", 1))
	page, err := r.ListServices(ctx, registry.ListOptions{Page: math.MaxInt / 50, PageSize: 100})
	if err != nil || len(page.Services) != 0 || page.Total != 1 {
		t.Fatalf("huge page: %+v, %v", page, err)
	}
}
