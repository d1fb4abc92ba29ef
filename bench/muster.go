package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/muster-io/muster/distro"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/node"
)

// raftTick is the Muster side's Raft tick: 10 ticks (raftstore's ElectionRTT) make the
// election timeout etcd's (etcdElection).
const raftTick = etcdElection / 10 * time.Millisecond

// startStandalone starts a standalone registry (no Distro, no Raft) on the
// real clock, as an embedder runs it in one process. Active health checks
// are off: they probe persistent instances only, and etcd has none.
func startStandalone(ctx context.Context, limits func(*registry.Limits)) (*registry.Registry, error) {
	cfg := registry.DefaultConfig()
	cfg.HealthChecks = nil
	if limits != nil {
		limits(&cfg.Limits)
	}
	r, err := registry.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := r.Start(ctx); err != nil {
		_ = r.Close()
		return nil, err
	}
	return r, nil
}

// musterCluster is n Muster nodes in this process, assembled by
// registry/node as a production node is: Muster's TCP transport on
// 127.0.0.1 authenticated by a shared secret, memberlist gossip on
// 127.0.0.1 encrypted with a gossip key, Distro, and with raft a Dragonboat
// replica per node (fsync on) over the same transport.
type musterCluster struct {
	nodes []*node.Node
	regs  []*registry.Registry
}

// startMuster starts n nodes with data under dir and waits until every
// one is ready. With raft, every node is a replica of the persistent data.
// Timings are node.Fast (loopback) with SyncDelay distro.NoSyncDelay: a change is sent to
// the peers at once, as etcd sends a proposal at once.
func startMuster(ctx context.Context, n int, dir string, raft bool) (*musterCluster, error) {
	c := &musterCluster{}
	members := map[uint64]string{}
	for i := range n {
		members[uint64(i+1)] = fmt.Sprintf("n%d", i+1)
	}
	for i := range n {
		cfg := node.DefaultConfig()
		cfg.NodeID = fmt.Sprintf("n%d", i+1)
		cfg.Dir = filepath.Join(dir, cfg.NodeID)
		cfg.Secret = []byte("muster-bench-transport-secret-0123")
		cfg.GossipKey = []byte("muster-bench-gossip-key-32bytes!")
		cfg.Expect = n
		cfg.Timings = node.Fast()
		cfg.Timings.SyncDelay = distro.NoSyncDelay
		cfg.Registry.HealthChecks = nil
		if raft {
			cfg.RaftMembers, cfg.DeploymentID = members, 0x62656e6368
			// etcd's election timeout (etcdElection): Dragonboat elects after
			// ElectionRTT (10) ticks, so with node.Fast's 10 ms tick a replica
			// starved for 100 ms on a loaded machine started elections (rounds
			// with leader changes, and one that failed without a quorum).
			cfg.Timings.RaftRTT = raftTick
		}
		if i > 0 {
			cfg.Seeds = []string{c.nodes[0].GossipAddr()}
		}
		nd, err := node.Start(ctx, cfg)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("muster node %s: %w", cfg.NodeID, err)
		}
		c.nodes = append(c.nodes, nd)
		c.regs = append(c.regs, nd.Registry())
	}
	for _, nd := range c.nodes {
		if err := nd.WaitReady(ctx); err != nil {
			c.Close()
			return nil, fmt.Errorf("muster node %s: %w", nd.ID(), err)
		}
	}
	return c, nil
}

// Close closes the nodes, the last started first.
func (c *musterCluster) Close() {
	for i := len(c.nodes) - 1; i >= 0; i-- {
		_ = c.nodes[i].Close()
	}
}
