package registry_test

import (
	"errors"
	"testing"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
)

// TestGetInstance: the served instance, patched, disabled or not, with its
// served health; ErrNotFound for what the registry does not hold, in a
// service it holds or not.
func TestGetInstance(t *testing.T) {
	r := newReg(t)
	a, b := inst("get", 1), inst("get", 2)
	a.Metadata = model.NewMetadata(map[string]string{"v": "1"})
	mustRegister(t, r, a, b)

	got, err := r.GetInstance(ctx, a.Key())
	if err != nil || got.IP != a.IP || got.Metadata.Value("v") != "1" || !got.Healthy || !got.Enabled {
		t.Fatalf("GetInstance(a) = %+v, %v", got, err)
	}
	// An empty cluster stands for the default one, as elsewhere.
	k := b.Key()
	k.Cluster = ""
	if got, err := r.GetInstance(ctx, k); err != nil || got.IP != b.IP {
		t.Fatalf("GetInstance(b, default cluster) = %+v, %v", got, err)
	}

	w, off := 7.5, false
	if err := r.PatchInstance(ctx, model.InstancePatch{Key: a.Key(), Weight: &w, Enabled: &off,
		Metadata: model.NewMetadata(map[string]string{"v": "2"})}); err != nil {
		t.Fatal(err)
	}
	got, err = r.GetInstance(ctx, a.Key())
	if err != nil || got.Weight != 7.5 || got.Enabled || got.Metadata.Value("v") != "2" {
		t.Fatalf("GetInstance(a) after a patch = %+v, %v; want weight 7.5, disabled, v=2", got, err)
	}

	// Both unhealthy: the default threshold (0) protects the service, and
	// the served health is healthy, as in Query.
	r.Advance(16 * time.Second)
	if v := all(t, r, "get"); !v.Protected {
		t.Fatalf("service not protected: %+v", v)
	}
	if got, err := r.GetInstance(ctx, b.Key()); err != nil || !got.Healthy {
		t.Fatalf("GetInstance(b) under protection = %+v, %v; want served healthy", got, err)
	}

	for _, key := range []model.InstanceKey{
		inst("get", 3).Key(),   // a service it holds, an instance it does not
		inst("other", 1).Key(), // a service it does not hold
		{Service: a.Service, Cluster: "c2", IP: a.IP, Port: a.Port},
		{Service: a.Service, Cluster: a.Cluster, IP: a.IP, Port: a.Port + 1},
	} {
		if _, err := r.GetInstance(ctx, key); !errors.Is(err, registry.ErrNotFound) {
			t.Errorf("GetInstance(%s) = %v, want ErrNotFound", key, err)
		}
	}
	if _, err := r.GetInstance(ctx, model.InstanceKey{Service: a.Service, IP: "not an ip", Port: 1}); !errors.Is(err, model.ErrInvalid) {
		t.Errorf("GetInstance of an invalid key = %v, want model.ErrInvalid", err)
	}

	r.Advance(15 * time.Second) // expired
	if _, err := r.GetInstance(ctx, a.Key()); !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("GetInstance of an expired instance = %v, want ErrNotFound", err)
	}
}

// TestGetInstanceNotReady: like Query, GetInstance refuses before the
// registry serves and after it closes.
func TestGetInstanceNotReady(t *testing.T) {
	r, err := registry.New(registry.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	key := inst("get", 1).Key()
	if _, err := r.GetInstance(ctx, key); !errors.Is(err, registry.ErrNotReady) {
		t.Fatalf("before Start: %v, want ErrNotReady", err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	_ = r.Close()
	if _, err := r.GetInstance(ctx, key); !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}
}
