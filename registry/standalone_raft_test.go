package registry_test

import (
	"testing"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/raftstore"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/raftcp"
	"github.com/muster-io/muster/transport"
	"go.uber.org/goleak"
)

// The durable standalone setup: no Distro, a single-replica Raft group. It
// is ready without peers, and its persistent data survives a restart from
// the same directory.
func TestStandaloneRaftDurable(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Dragonboat")
	}
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	open := func() (*registry.Registry, *transport.MemTransport, time.Duration) {
		t.Helper()
		// One node on an in-memory network: Raft needs a transport, and
		// this one opens no port.
		tr, err := (&transport.MemNetwork{}).Node("solo")
		if err != nil {
			t.Fatal(err)
		}
		rc := raftstore.DefaultConfig()
		rc.ReplicaID, rc.DeploymentID, rc.Dir, rc.Transport = 1, 1, dir, tr
		rc.InitialMembers = map[uint64]string{1: "solo"}
		cfg := registry.DefaultConfig()
		cfg.NodeID, cfg.Store, cfg.HealthChecks = "solo", raftcp.New(rc).Open, nil
		reg, err := registry.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		if err := reg.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := reg.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		return reg, tr, time.Since(began)
	}
	reg, tr, took := open()
	t.Logf("first start ready after %v", took)
	if err := reg.CreateService(ctx, noneService("db")); err != nil {
		t.Fatal(err)
	}
	mustRegister(t, reg, persistent("db", 1))
	if err := reg.Close(); err != nil {
		t.Fatal(err)
	}
	_ = tr.Close()

	reg, tr, took = open()
	t.Logf("restart ready after %v", took)
	defer func() {
		_ = reg.Close()
		_ = tr.Close()
	}()
	v, err := reg.Query(ctx, model.Query{Service: svcKey("db")})
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Instances) != 1 || v.Instances[0].Ephemeral {
		t.Fatalf("after a restart: %+v, want the persistent instance", v.Instances)
	}
	if _, err := reg.GetService(ctx, svcKey("db")); err != nil {
		t.Fatalf("service definition lost across the restart: %v", err)
	}
}
