package node

import (
	"testing"
	"time"

	"github.com/muster-io/muster/distro"

	"github.com/muster-io/muster/raftstore"
)

// TestExpect: the cluster size a cold start waits for is Expect, else the
// static peers and this node, else the Raft members.
func TestExpect(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want int
	}{
		{"none", Config{NodeID: "n1"}, 0},
		{"raft members", Config{NodeID: "n1", RaftMembers: map[uint64]string{1: "n1", 2: "n2", 3: "n3"}}, 3},
		{"raft nodes", Config{NodeID: "n1", RaftNodes: []string{"n1", "n2", "n3"}}, 3},
		{"peers without self", Config{NodeID: "n1", Peers: map[string]string{"n2": "a:1", "n3": "b:1"}}, 3},
		{"peers with self", Config{NodeID: "n1", Peers: map[string]string{"n1": "x:1", "n2": "a:1"}}, 2},
		{"explicit wins", Config{NodeID: "n1", Expect: 5, RaftMembers: map[uint64]string{1: "n1", 2: "n2", 3: "n3"}}, 5},
	} {
		if got := tc.cfg.expect(); got != tc.want {
			t.Errorf("%s: expect() = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// RaftNodes numbers the replicas from 1 in its order; a node's replica ID
// is its position.
func TestRaftNodes(t *testing.T) {
	c := Config{NodeID: "n2", RaftNodes: []string{"n3", "n2", "n1"}}
	got := c.raftMembers()
	want := map[uint64]string{1: "n3", 2: "n2", 3: "n1"}
	if len(got) != len(want) {
		t.Fatalf("raftMembers() = %v, want %v", got, want)
	}
	for id, n := range want {
		if got[id] != n {
			t.Fatalf("raftMembers() = %v, want %v", got, want)
		}
	}
	if id := c.replicaID(); id != 2 {
		t.Fatalf("replicaID() = %d, want 2", id)
	}
	if !c.raft() {
		t.Fatal("raft() = false with RaftNodes")
	}
}

// LAN and Fast carry raftstore's default batcher wait: a node keeps it
// unless its Timings say otherwise.
func TestTimingsBatchWait(t *testing.T) {
	want := raftstore.DefaultConfig().BatchWait
	if want == 0 {
		t.Fatal("raftstore's default BatchWait is 0")
	}
	for name, tm := range map[string]Timings{"LAN": LAN(), "Fast": Fast()} {
		if tm.RaftBatchWait != want {
			t.Errorf("%s().RaftBatchWait = %v, want %v", name, tm.RaftBatchWait, want)
		}
	}
}

// A zero Timings field takes LAN's value (membership, Raft tick) or
// passes through for its package to derive (TombstoneTTL from Verify,
// Propose from the tick, Sweep left to Registry's); a set one, and a named
// "off" (distro.NoSyncDelay), are kept.
func TestTimingsZeroIsDefault(t *testing.T) {
	got := (Timings{}).withDefaults()
	if got.ProbeInterval != LAN().ProbeInterval || got.SuspicionMult != LAN().SuspicionMult || got.RaftRTT != LAN().RaftRTT {
		t.Fatalf("Timings{}.withDefaults() = %+v: membership and RaftRTT not LAN's %+v", got, LAN())
	}
	partial := Timings{Propose: 7 * time.Second, SyncDelay: distro.NoSyncDelay}
	got = partial.withDefaults()
	if got.Propose != 7*time.Second || got.SyncDelay != distro.NoSyncDelay {
		t.Fatalf("withDefaults kept Propose %v, SyncDelay %v; want 7s, NoSyncDelay", got.Propose, got.SyncDelay)
	}
	c := Config{NodeID: "n1", Insecure: true, Timings: Timings{Verify: time.Minute, RaftRTT: 2 * time.Second}}
	if mc := c.memberlistConfig("127.0.0.1:1"); mc.ProbeInterval != LAN().ProbeInterval || mc.SuspicionMult != LAN().SuspicionMult {
		t.Fatalf("memberlist config from zero Timings: probe %v, suspicion %d; want LAN's", mc.ProbeInterval, mc.SuspicionMult)
	}
	if err := c.tcpConfig().Validate(); err != nil {
		t.Fatalf("transport config from zero Timings: %v", err)
	}
	c.Registry.SweepInterval = 3 * time.Second
	if rc := c.baseRegistryConfig(nil); rc.SweepInterval != 3*time.Second {
		t.Fatalf("a zero Timings.Sweep replaced Registry.SweepInterval: %v", rc.SweepInterval)
	}
}
