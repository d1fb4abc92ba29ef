package raftstore

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/muster-io/muster/model"
)

func TestConfigValidate(t *testing.T) {
	good := testConfig(t, t.TempDir(), 1, "127.0.0.1:1")
	good.InitialMembers = map[uint64]string{1: "127.0.0.1:1"}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(*Config){
		"ReplicaID":      func(c *Config) { c.ReplicaID = 0 },
		"Dir":            func(c *Config) { c.Dir = "" },
		"RaftAddress":    func(c *Config) { c.RaftAddress = "localhost" },
		"ElectionRTT":    func(c *Config) { c.ElectionRTT = 2 },
		"ProposeTimeout": func(c *Config) { c.ProposeTimeout = 1 },
		"ReadTimeout":    func(c *Config) { c.ReadTimeout = 1 },
		"MaxBatch":       func(c *Config) { c.MaxBatch = -1 },
		"InitialMembers": func(c *Config) { c.InitialMembers = map[uint64]string{2: "127.0.0.1:2"} },
	}
	for field, breakIt := range cases {
		c := good.clone()
		breakIt(&c)
		err := c.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v", field, err)
		}
		if _, err := New(c); err == nil {
			t.Errorf("%s: New accepted it", field)
		}
	}
	join := good.clone()
	join.Join = true
	if err := join.Validate(); err == nil {
		t.Error("Join with InitialMembers accepted")
	}
	// BatchWait has an upper bound too.
	long := good.clone()
	long.BatchWait = long.ProposeTimeout/4 + 1
	if err := long.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "BatchWait") {
		t.Errorf("BatchWait above ProposeTimeout/4: %v", err)
	}
	// Every broken rule at once, in one error.
	all := good.clone()
	for _, breakIt := range cases {
		breakIt(&all)
	}
	err := all.Validate()
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("every field broken: %v, want ErrInvalidConfig", err)
	}
	// One complete line per broken rule, each with the package's prefix,
	// then its field.
	lines := strings.Split(err.Error(), "\n")
	for field := range cases {
		if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, ErrInvalidConfig.Error()+": "+field+" ") }) {
			t.Errorf("every field broken: no rule of %s in %q", field, lines)
		}
	}
}

// TestConfigZeroIsDefault: a Config with only its required fields is
// valid and takes DefaultConfig's values; NoSnapshots and NoBatchWait are
// valid and turn their feature off (the Node's snapshot loop does not run
// with NoSnapshots, so TestReplayAfterLostState replays the whole log).
func TestConfigZeroIsDefault(t *testing.T) {
	c := Config{ReplicaID: 1, DeploymentID: 7, Dir: t.TempDir(), RaftAddress: "127.0.0.1:1",
		InitialMembers: map[uint64]string{1: "127.0.0.1:1"}, Insecure: true}
	if err := c.Validate(); err != nil {
		t.Fatalf("required fields only: %v", err)
	}
	d, want := c.withDefaults(), DefaultConfig()
	if d.ShardID != want.ShardID || d.RTTMillisecond != want.RTTMillisecond || d.ElectionRTT != want.ElectionRTT ||
		d.HeartbeatRTT != want.HeartbeatRTT || d.SnapshotEntries != want.SnapshotEntries ||
		d.CompactionOverhead != want.CompactionOverhead || d.ProposeTimeout != want.ProposeTimeout ||
		d.ReadTimeout != want.ReadTimeout || d.MaxBatch != want.MaxBatch || d.BatchWait != want.BatchWait {
		t.Fatalf("zero fields: got %+v, want DefaultConfig's", d)
	}
	slow := c
	slow.RTTMillisecond = 2000 // the default timeouts would be under 2 RTT
	if err := slow.Validate(); err != nil {
		t.Fatalf("zero timeouts beside a long RTT: %v", err)
	}
	off := c
	off.SnapshotEntries, off.BatchWait = NoSnapshots, NoBatchWait
	if err := off.Validate(); err != nil {
		t.Fatalf("NoSnapshots, NoBatchWait: %v", err)
	}
	if off.snapshotEvery() != 0 {
		t.Fatal("NoSnapshots still takes snapshots")
	}
}

func TestNodeLifecycleAndValidation(t *testing.T) {
	c := newCluster(t, 1, nil)
	n := c.any()
	ctx := context.Background()

	// Invalid commands never reach the log.
	before := n.Info().Applied
	for _, cmd := range []Command{
		{Op: 0},
		{Op: OpPutInstance, Instance: model.Instance{Service: svcKey("v"), IP: "10.0.0.1", Port: 0}},
		{Op: OpPutInstance, Instance: model.NewInstance(svcKey("v"), "10.0.0.1", 80)}, // ephemeral
		{Op: OpPatchInstance, Patch: model.InstancePatch{Key: persistent("v", "10.0.0.1", 80).Key()}},
		{Op: OpCreateService, Service: model.Service{Key: svcKey(""), ProtectThreshold: 2}},
	} {
		var ve *model.ValidationError
		if _, err := n.Propose(ctx, cmd); !errors.As(err, &ve) {
			t.Errorf("%s: %v", cmd.Op, err)
		}
	}
	huge := persistent("v", "10.0.0.1", 80)
	md := map[string]string{}
	for i := range 200 {
		md[strings.Repeat("k", 3)+string(rune('a'+i%26))+strings.Repeat("x", i)] = strings.Repeat("v", 400)
	}
	huge.Metadata = model.NewMetadata(md)
	if _, err := n.Propose(ctx, Command{Op: OpPutInstance, Instance: huge}); !errors.Is(err, model.ErrInvalid) {
		t.Errorf("huge command: %v", err)
	}
	if got := n.Info().Applied; got != before {
		t.Fatalf("applied index moved from %d to %d", before, got)
	}

	// Rejections come back in the Result, with the index.
	res := mustPropose(t, n, Command{Op: OpDeleteService, SvcKey: svcKey("nope")})
	if !errors.Is(res.Rejected, ErrServiceNotFound) || res.Index == 0 {
		t.Fatalf("result %+v", res)
	}
	res = mustPropose(t, n, Command{Op: OpCreateService, Service: model.Service{Key: model.ServiceKey{Name: "ok"}}})
	if res.Rejected != nil {
		t.Fatal(res.Rejected)
	}
	if s, ok, err := n.GetService(ctx, model.ServiceKey{Name: "ok"}, ReadOptions{}); err != nil || !ok || s.Key.Group != model.DefaultGroup {
		t.Fatalf("GetService: %+v %v %v", s, ok, err)
	}
	info := n.Info()
	if !n.IsLeader() || n.ReplicaID() != 1 {
		t.Fatal("single replica is not the leader")
	}
	if !info.IsLeader || info.LeaderID != 1 || info.Applied < res.Index || info.Members[1] == "" {
		t.Fatalf("info %+v", info)
	}

	// Closed: every call says so; Close is idempotent.
	c.stop(1)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Propose(ctx, Command{Op: OpDeleteService, SvcKey: svcKey("x")}); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
	if _, _, err := n.GetService(ctx, svcKey("ok"), ReadOptions{}); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
	if err := n.Barrier(ctx); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
	if _, ok := n.Leader(); ok {
		t.Fatal("closed node knows a leader")
	}
	if err := n.Start(ctx); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
}

// Close while many proposals are in flight: every call returns (applied,
// or ErrClosed), nothing hangs, no goroutine is left behind (TestMain).
func TestCloseWithProposalsInFlight(t *testing.T) {
	c := newCluster(t, 1, nil)
	n := c.any()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				_, err := n.Propose(context.Background(), Command{Op: OpPutInstance, Instance: persistent("close", "10.0.0.11", w*1000+i+1)})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	eventually(t, 10*time.Second, "some writes", func() bool { return n.Info().Applied > 20 })
	c.stop(1)
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("in-flight proposal: %v", err)
		}
	}
}

// Close called twice at once: both calls return only once Badger is
// closed, with the same result.
func TestConcurrentCloseWaits(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Dragonboat")
	}
	c := newCluster(t, 1, nil)
	n := c.nodes[1]
	delete(c.nodes, 1)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			n.dbMu.RLock()
			open := n.db != nil
			n.dbMu.RUnlock()
			if open {
				t.Error("Close returned before Badger was closed")
			}
		}()
	}
	wg.Wait()
}
