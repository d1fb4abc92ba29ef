package raftstore

import (
	"errors"
	"strings"
	"testing"

	"github.com/lni/vfs"
)

// TestConfigFS: Dragonboat panics on an FS that is neither the OS's, a
// *vfs.MemFS nor a *vfs.ErrorFS (and NewNodeHost then returns no NodeHost
// and no error): Validate refuses one, naming the field.
func TestConfigFS(t *testing.T) {
	type otherFS struct{ vfs.FS }
	cfg := testConfig(t, t.TempDir(), 1, "127.0.0.1:1")
	cfg.InitialMembers = map[uint64]string{1: cfg.RaftAddress}
	for _, fs := range []vfs.FS{nil, vfs.NewMem(), vfs.NewStrictMem(), vfs.Wrap(vfs.NewStrictMem(), vfs.OnIndex(-1, vfs.OpSync))} {
		cfg.FS = fs
		if err := cfg.Validate(); err != nil {
			t.Fatalf("FS %T: %v", fs, err)
		}
	}
	cfg.FS = otherFS{vfs.NewMem()}
	err := cfg.Validate()
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "FS must be") {
		t.Fatalf("Validate with an FS of type %T: %v", cfg.FS, err)
	}
}

// TestPowerLossKeepsAcknowledgedWrites keeps each replica's Raft log on a
// strict in-memory FS, cuts the power of all three at once (syncs stop
// counting, the replicas close, every unsynced write is dropped) and
// restarts them on what was synced: every acknowledged write is there, and
// the commit index held back by the LogDB wrapper was lost (a replica
// restarted below what its state machine had applied), which is what the
// wrapper claims is safe. bench/faultlab does the same to one node of a
// cluster of processes under load, at a random WAL sync.
func TestPowerLossKeepsAcknowledgedWrites(t *testing.T) {
	fss := map[uint64]*vfs.MemFS{}
	c := newCluster(t, 3, func(cfg *Config) {
		fs := vfs.NewStrictMem()
		fss[cfg.ReplicaID] = fs
		cfg.FS = fs
	})
	const writes = 40
	for p := range writes {
		mustPropose(t, c.any(), Command{Op: OpPutInstance, Instance: persistent("power", "10.0.9.2", p+1)})
	}
	want := c.converged(1)
	for _, fs := range fss {
		fs.SetIgnoreSyncs(true) // the power goes: nothing written from now on survives
	}
	for id := range c.cfgs {
		c.stop(id) // Close writes the held commit index: not durable now
	}
	for _, fs := range fss {
		fs.ResetToSyncedState()
		fs.SetIgnoreSyncs(false)
	}
	for id := range c.cfgs {
		c.start(id)
	}
	c.waitLeader()
	got := c.converged(1)
	if !sameData(got, want) || len(got.Instances) != writes {
		t.Fatalf("after the power loss: %d instances, want %d", len(got.Instances), writes)
	}
	lagged := false
	for id, n := range c.nodes {
		if n.logdb == nil {
			t.Fatalf("node %d runs without the commit-index wrapper", id)
		}
		if r, opened := n.logdb.restoredState(), c.lis[id].opened; r.Commit < opened {
			lagged = true
		}
	}
	if !lagged {
		t.Fatal("no replica restarted with a stored commit index below its applied index: the power loss dropped nothing the wrapper held")
	}
	mustPropose(t, c.any(), Command{Op: OpPutInstance, Instance: persistent("power", "10.0.9.2", writes+1)})
}
