package raftstore

import (
	"testing"
	"time"

	"github.com/muster-io/muster/model"
)

// The counters move with proposals, elections and snapshots.
func TestStatsMove(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.SnapshotEntries, cfg.CompactionOverhead = 10, 5 })
	leader := c.waitLeader()
	n := c.nodes[leader]
	for p := range 25 {
		mustPropose(t, n, Command{Op: OpPutInstance, Instance: persistent("svc", "10.0.0.1", p+1)})
	}
	// Creating the implicit service's definition again is refused by the state rules.
	mustPropose(t, n, Command{Op: OpCreateService, Service: model.Service{Key: svcKey("svc2")}})
	if res := mustPropose(t, n, Command{Op: OpCreateService, Service: model.Service{Key: svcKey("svc2")}}); res.Rejected == nil {
		t.Fatal("second create of svc2 was not rejected")
	}
	st := n.Stats()
	if st.Proposals != 27 || st.ProposalsRejected != 1 || st.ProposalsFailed != 0 || st.Entries == 0 || st.Entries > 27 || st.EntriesFailed != 0 {
		t.Errorf("proposals: %+v", st)
	}
	if h := st.ProposeLatency; h.Count != 27 || h.Sum <= 0 || len(h.Counts) != len(h.Bounds)+1 {
		t.Errorf("latency histogram: %+v", h)
	}
	if !st.IsLeader || st.LeaderID != leader || st.LeaderChanges == 0 || st.Term == 0 {
		t.Errorf("leadership: %+v", st)
	}
	c.converged(leader)
	// Snapshots follow the entries each replica applied, which batching
	// under load may make fewer: write on (a bounded number of writes) until
	// every replica has taken one. A loaded machine gets 30 s.
	extra := 0
	eventually(t, 30*time.Second, "every replica took a snapshot and applied all", func() bool {
		for _, m := range c.nodes {
			s := m.Stats()
			if s.Applied < 27 || s.LastIndex < s.Applied || s.ApplyLag != s.LastIndex-s.Applied {
				return false
			}
			if s.SnapshotsCreated == 0 {
				if extra < 200 {
					extra++
					mustPropose(t, n, Command{Op: OpPutInstance, Instance: persistent("svc", "10.0.0.2", extra)})
				}
				return false
			}
		}
		return true
	})
	for id, m := range c.nodes {
		if s := m.Stats(); id != leader && (s.IsLeader || s.LeaderID != leader || s.Proposals != 0) {
			t.Errorf("follower %d: %+v", id, s)
		}
	}

	// The leader stops: the others see the change.
	before := c.nodes[otherThan(c, leader)].Stats().LeaderChanges
	c.stop(leader)
	next := c.waitLeader()
	if s := c.nodes[next].Stats(); s.LeaderChanges <= before || !s.IsLeader {
		t.Errorf("after the failover: %+v (changes before %d)", s, before)
	}
	// A closed node still answers: its counters, and zero index gauges.
	if s := n.Stats(); s.Proposals != uint64(27+extra) || s.Applied != 0 || s.ApplyLag != 0 {
		t.Errorf("closed node: %+v", s)
	}
}

func otherThan(c *cluster, id uint64) uint64 {
	for k := range c.nodes {
		if k != id {
			return k
		}
	}
	return 0
}
