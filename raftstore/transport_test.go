package raftstore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/muster-io/muster/transport"
)

// memCluster starts replicas whose Raft traffic goes over a MemNetwork
// (Config.Transport): their RaftAddress is their node ID.
func memCluster(t *testing.T, mem *transport.MemNetwork, ids []string, tweak func(*Config)) *cluster {
	t.Helper()
	members := map[uint64]string{}
	for i, id := range ids {
		members[uint64(i+1)] = id
	}
	return newClusterAt(t, members, func(cfg *Config) {
		memTransport(t, mem, cfg)
		if tweak != nil {
			tweak(cfg)
		}
	})
}

func memTransport(t *testing.T, mem *transport.MemNetwork, cfg *Config) {
	t.Helper()
	tr, err := mem.Node(cfg.RaftAddress)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	cfg.Transport = tr
}

// Over a Muster transport, a replica that joins after the log was compacted
// gets the state as a snapshot streamed in chunks (KindRaftChunk), and the
// cluster's messages flow over the network (KindRaftMessages).
func TestMusterTransportSnapshotJoin(t *testing.T) {
	var mem transport.MemNetwork
	small := func(cfg *Config) { cfg.SnapshotEntries, cfg.CompactionOverhead = 20, 5 }
	c := memCluster(t, &mem, []string{"r1", "r2", "r3"}, small)
	for p := range 60 {
		mustPropose(t, c.any(), Command{Op: OpPutInstance, Instance: persistent("svc", "10.0.0.1", p+1)})
	}
	c.converged(c.waitLeader())
	if st := mem.Stats("r1", "r2"); st.Messages == 0 {
		t.Fatal("no Raft message went over the Muster transport")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.any().AddReplica(ctx, 4, "r4"); err != nil {
		t.Fatal(err)
	}
	var root string
	for _, cfg := range c.cfgs {
		root = filepath.Dir(cfg.Dir)
		break
	}
	cfg := testConfig(t, filepath.Join(root, "4"), 4, "r4")
	cfg.Join = true
	small(&cfg)
	memTransport(t, &mem, &cfg)
	c.cfgs[4] = cfg
	n4 := c.start(4)
	st := c.converged(c.waitLeader())
	if len(st.Instances) != 60 {
		t.Fatalf("after the join: %d instances, want 60", len(st.Instances))
	}
	if err := n4.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if c.lis[4].resets < 2 { // Open of an empty store, then the snapshot
		t.Fatalf("the joined replica's listener saw %d resets, want a snapshot recovery", c.lis[4].resets)
	}
	var chunks uint64
	for _, from := range []string{"r1", "r2", "r3"} {
		chunks += mem.Stats(from, "r4").Bytes
	}
	if chunks == 0 {
		t.Fatal("nothing reached r4 over the Muster transport")
	}
}

// With Transport set, RaftAddress and the members are node IDs.
func TestConfigTransportAddresses(t *testing.T) {
	var mem transport.MemNetwork
	tr, err := mem.Node("n1")
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	cfg := testConfig(t, t.TempDir(), 1, "")
	cfg.Transport = tr
	cfg.InitialMembers = map[uint64]string{1: "n1", 2: "n2"}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("node IDs with Transport: %v", err)
	}
	cfg.RaftAddress = "n2"
	if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "RaftAddress") {
		t.Fatalf("RaftAddress other than the transport's ID: %v", err)
	}
	cfg.RaftAddress = ""
	cfg.InitialMembers = map[uint64]string{1: "n1", 2: ""}
	if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "InitialMembers") {
		t.Fatalf("an empty member node ID: %v", err)
	}
}

// tcpTransports starts Muster TCP transports on loopback for the node IDs,
// each resolving the others; they close when the test ends, after the
// nodes using them.
func tcpTransports(tb testing.TB, ids ...string) map[string]transport.Transport {
	tb.Helper()
	addrs := map[string]string{}
	var mu sync.Mutex
	out := map[string]transport.Transport{}
	for _, id := range ids {
		cfg := transport.DefaultTCPConfig()
		cfg.NodeID, cfg.ListenAddr = id, "127.0.0.1:0"
		cfg.Resolve = func(node string) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			if a, ok := addrs[node]; ok {
				return a, nil
			}
			return "", fmt.Errorf("unknown node %q", node)
		}
		t, err := transport.NewTCP(cfg)
		if err != nil {
			tb.Fatal(err)
		}
		if err := t.Start(context.Background()); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = t.Close() })
		mu.Lock()
		addrs[id] = t.Addr()
		mu.Unlock()
		out[id] = t
	}
	return out
}
