package console_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/muster-io/muster/model"
)

// TestPatchAndUnpatch: a patch from the console changes what the registry
// serves, the page marks it, and removing it restores the published values.
func TestPatchAndUnpatch(t *testing.T) {
	reg := newRegistry(t)
	in := register(t, reg, orders, "10.0.0.1", 8080, nil)
	srv, _ := server(t, reg, nil)
	ctx := context.Background()
	if code, out := post(t, srv, "/api/patch", map[string]any{"instance": in.Key(), "weight": 2.5, "enabled": false}); code != 200 {
		t.Fatalf("patch: %d %v", code, out)
	}
	got, err := reg.GetInstance(ctx, in.Key())
	if err != nil || got.Weight != 2.5 || got.Enabled {
		t.Fatalf("after the patch: %+v %v", got, err)
	}
	if _, body := get(t, srv, servicePath(orders)); !strings.Contains(body, "patched") || !strings.Contains(body, "Unpatch") {
		t.Errorf("the service page does not mark the patch:\n%s", body)
	}
	if _, body := get(t, srv, instancePath(in.Key())); !strings.Contains(body, "patch is in force") {
		t.Errorf("the instance page does not show the patch:\n%s", body)
	}
	if code, out := post(t, srv, "/api/unpatch", map[string]any{"instance": in.Key()}); code != 200 {
		t.Fatalf("unpatch: %d %v", code, out)
	}
	if got, _ := reg.GetInstance(ctx, in.Key()); got.Weight != 1 || !got.Enabled {
		t.Fatalf("after the unpatch: %+v", got)
	}
	// A patch of an instance the registry does not hold: 404.
	k := in.Key()
	k.Port = 9
	if code, _ := post(t, srv, "/api/patch", map[string]any{"instance": k, "weight": 1}); code != http.StatusNotFound {
		t.Errorf("a patch of a missing instance: %d", code)
	}
}

// TestPatchCountdown: once a patched instance is gone, its page counts down
// to the patch's end (PatchTTL after the removal).
func TestPatchCountdown(t *testing.T) {
	reg := newRegistry(t)
	in := register(t, reg, orders, "10.0.0.1", 8080, nil)
	srv, _ := server(t, reg, nil)
	if code, out := post(t, srv, "/api/patch", map[string]any{"instance": in.Key(), "weight": 3}); code != 200 {
		t.Fatalf("patch: %d %v", code, out)
	}
	if err := reg.Deregister(context.Background(), in.Key()); err != nil {
		t.Fatal(err)
	}
	_, body := get(t, srv, instancePath(in.Key()))
	for _, want := range []string{`class="countdown" data-deadline=`, "gone: deregistered", "removed: deregistered"} {
		if !strings.Contains(body, want) {
			t.Errorf("the gone instance's page lacks %q:\n%s", want, body)
		}
	}
}

// TestDeregisterPersistentOnly: a persistent instance is deregistered; an
// ephemeral one is its client's, and is refused.
func TestDeregisterPersistentOnly(t *testing.T) {
	reg := newRegistry(t)
	p := registerPersistent(t, reg, db, "10.0.0.9", 3306)
	e := register(t, reg, orders, "10.0.0.1", 8080, nil)
	srv, _ := server(t, reg, nil)
	ctx := context.Background()
	if code, out := post(t, srv, "/api/deregister", map[string]any{"instance": e.Key()}); code != http.StatusBadRequest {
		t.Errorf("deregistering an ephemeral instance: %d %v", code, out)
	}
	if _, err := reg.GetInstance(ctx, e.Key()); err != nil {
		t.Fatalf("the refused deregistration removed it: %v", err)
	}
	if code, out := post(t, srv, "/api/deregister", map[string]any{"instance": p.Key()}); code != 200 {
		t.Fatalf("deregister: %d %v", code, out)
	}
	if _, err := reg.GetInstance(ctx, p.Key()); err == nil {
		t.Fatal("the persistent instance is still there")
	}
}

// TestEditService: the threshold and a cluster's check change; a MySQL
// password is never shown and is kept unless a new one is sent.
func TestEditService(t *testing.T) {
	reg := newRegistry(t)
	ctx := context.Background()
	def := model.Service{Key: db, Clusters: []model.Cluster{{Name: "DEFAULT", HealthCheck: model.HealthCheck{
		Type: model.CheckMySQL, User: "root", Password: "hunter2-secret"}}}}
	if err := reg.CreateService(ctx, def); err != nil {
		t.Fatal(err)
	}
	registerPersistent(t, reg, db, "10.0.0.9", 3306)
	srv, _ := server(t, reg, nil)
	if _, body := get(t, srv, servicePath(db)); strings.Contains(body, "hunter2") {
		t.Fatal("the service page shows the MySQL password")
	}
	if code, body := get(t, srv, "/api/service?ns=public&group=infra&name=db"); code != 200 || strings.Contains(body, "hunter2") {
		t.Fatalf("api/service: %d, or it shows the password: %s", code, body)
	}
	code, out := post(t, srv, "/api/service", map[string]any{"service": db, "protectThreshold": 0.6,
		"clusters": []map[string]any{{"name": "DEFAULT", "healthCheck": map[string]any{"type": "MYSQL", "user": "monitor"}}}})
	if code != 200 {
		t.Fatalf("edit: %d %v", code, out)
	}
	got, err := reg.GetService(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	hc := got.Cluster("DEFAULT").HealthCheck
	if got.ProtectThreshold != 0.6 || hc.User != "monitor" || hc.Password != "hunter2-secret" {
		t.Fatalf("after the edit: threshold %v, check %+v", got.ProtectThreshold, hc)
	}
	code, _ = post(t, srv, "/api/service", map[string]any{"service": db,
		"clusters": []map[string]any{{"name": "DEFAULT", "healthCheck": map[string]any{"type": "TCP", "port": 3307}, "password": ""}}})
	if got, _ := reg.GetService(ctx, db); code != 200 || got.Cluster("DEFAULT").HealthCheck.Port != 3307 || got.Cluster("DEFAULT").HealthCheck.Password != "" {
		t.Fatalf("the second edit: %d %+v", code, got.Cluster("DEFAULT").HealthCheck)
	}
	// An invalid threshold names the field; an ephemeral service is refused.
	if code, out := post(t, srv, "/api/service", map[string]any{"service": db, "protectThreshold": 2}); code != http.StatusBadRequest || !strings.Contains(strings.ToLower(jsonOf(out)), "protect") {
		t.Errorf("threshold 2: %d %v", code, out)
	}
	register(t, reg, orders, "10.0.0.1", 8080, nil)
	if code, _ := post(t, srv, "/api/service", map[string]any{"service": orders, "protectThreshold": 0.5}); code != http.StatusBadRequest {
		t.Errorf("editing an ephemeral service: %d", code)
	}
}
