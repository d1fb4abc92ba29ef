package metrics_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	pmodel "github.com/prometheus/common/model"
	"go.uber.org/goleak"

	"github.com/muster-io/muster/distro"
	"github.com/muster-io/muster/health"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/raftstore"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/metrics"
	"github.com/muster-io/muster/registry/node"
	"github.com/muster-io/muster/registry/registrytest"
	"github.com/muster-io/muster/transport"
)

// scrape serves reg through promhttp, as a host's /metrics would, and parses the text format.
func scrape(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.PanicOnError}).ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: status %d: %s", rec.Code, rec.Body)
	}
	p := expfmt.NewTextParser(pmodel.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parse the scrape: %v", err)
	}
	return mfs
}

// value returns the value of the sample of name whose labels include want ("k", "v", ...);
// a histogram's value is its sample count. It fails the test if there is none.
func value(t *testing.T, mfs map[string]*dto.MetricFamily, name string, want ...string) float64 {
	t.Helper()
	v, ok := lookup(mfs, name, want...)
	if !ok {
		t.Fatalf("no sample %s%v in the scrape", name, want)
	}
	return v
}

func lookup(mfs map[string]*dto.MetricFamily, name string, want ...string) (float64, bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for i := 0; i+1 < len(want); i += 2 {
			if have[want[i]] != want[i+1] {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// store is a minimal distro.Store: it keeps what it is given.
type store struct {
	mu   sync.Mutex
	recs map[string]distro.Record
}

func (s *store) Apply(rec distro.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec.Deleted {
		delete(s.recs, rec.Key)
		return
	}
	s.recs[rec.Key] = rec
}
func (s *store) Adopt(distro.Record, time.Time) {}
func (s *store) MembersChanged([]string)        {}
func (s *store) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.recs)
}

var secret = []byte("metrics-test-transport-secret!!!")

// tcpNode is a real TCP transport on loopback and, for members, a Distro replicator over it.
type tcpNode struct {
	tr    *transport.TCP
	r     *distro.Replicator
	store *store
}

func startTCP(t *testing.T, id string, addrs *sync.Map) *transport.TCP {
	t.Helper()
	cfg := transport.DefaultTCPConfig()
	cfg.NodeID, cfg.ListenAddr, cfg.Secret = id, "127.0.0.1:0", secret
	cfg.Resolve = func(n string) (string, error) {
		if a, ok := addrs.Load(n); ok {
			return a.(string), nil
		}
		return "", fmt.Errorf("unknown node %q", n)
	}
	tr, err := transport.NewTCP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	addrs.Store(id, tr.Addr())
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// Distro over real TCP: a register-like write on a moves a's sync and transport counters and
// b's received and applied ones; a non-member's message is counted as refused.
func TestScrapeDistroOverTCP(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // registered first: runs after the other clean-ups
	var addrs sync.Map
	ids := []string{"a", "b"}
	nodes := map[string]*tcpNode{}
	members := []distro.Member{{ID: "a"}, {ID: "b"}}
	for _, id := range ids {
		n := &tcpNode{tr: startTCP(t, id, &addrs), store: &store{recs: map[string]distro.Record{}}}
		mem := distro.NewStatic(distro.Member{ID: id})
		mem.Set(members...)
		cfg := distro.DefaultConfig()
		cfg.NodeID, cfg.Transport, cfg.Membership, cfg.Store = id, n.tr, mem, n.store
		cfg.SyncDelay, cfg.LoadTimeout, cfg.ColdStartMembers = distro.NoSyncDelay, 2*time.Second, 2
		r, err := distro.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		n.r = r
		nodes[id] = n
	}
	for _, id := range ids {
		if err := nodes[id].r.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = nodes[id].r.Close() })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, id := range ids {
		if err := nodes[id].r.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}

	reg := prometheus.NewPedanticRegistry()
	for _, id := range ids {
		reg.MustRegister(metrics.New(metrics.Sources{Node: id, Transport: nodes[id].tr, Distro: nodes[id].r}))
	}
	before := scrape(t, reg)
	if v := value(t, before, "muster_distro_ready", "node", "a"); v != 1 {
		t.Fatalf("ready = %v", v)
	}
	sentBefore := value(t, before, "muster_transport_sent_bytes_total", "node", "a")

	a, b := nodes["a"], nodes["b"]
	for i := range 5 {
		if _, err := a.r.Put(distro.KindSession, fmt.Sprint("session-", i), []byte("payload")); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "b applied a's records", func() bool { return b.store.len() == 5 })
	waitFor(t, 5*time.Second, "a counted the acknowledged syncs", func() bool { return a.r.Stats().SyncRecordsSent == 5 })

	after := scrape(t, reg)
	checks := []struct {
		name   string
		labels []string
		want   func(float64) bool
		what   string
	}{
		{"muster_distro_sync_records_sent_total", []string{"node", "a"}, func(v float64) bool { return v == 5 }, "5"},
		{"muster_distro_syncs_sent_total", []string{"node", "a"}, func(v float64) bool { return v >= 1 && v <= 5 }, "1 to 5"},
		{"muster_distro_records_applied_total", []string{"node", "b"}, func(v float64) bool { return v == 5 }, "5"},
		{"muster_distro_records_received_total", []string{"node", "b"}, func(v float64) bool { return v == 5 }, "5"},
		{"muster_distro_syncs_received_total", []string{"node", "b"}, func(v float64) bool { return v >= 1 }, ">= 1"},
		{"muster_distro_owned_records", []string{"node", "a"}, func(v float64) bool { return v == 5 }, "5"},
		{"muster_distro_records", []string{"node", "b", "state", "live"}, func(v float64) bool { return v == 5 }, "5"},
		{"muster_distro_records_refused_total", []string{"node", "b", "reason", "stale"}, func(v float64) bool { return v == 0 }, "0"},
		{"muster_distro_members", []string{"node", "a"}, func(v float64) bool { return v == 2 }, "2"},
		{"muster_transport_sent_bytes_total", []string{"node", "a"}, func(v float64) bool { return v > sentBefore }, fmt.Sprintf("> %v", sentBefore)},
		{"muster_transport_received_bytes_total", []string{"node", "b"}, func(v float64) bool { return v > 0 }, "> 0"},
		// With a Secret alone each node calls over the connection it
		// dialled: a holds its own and b's (transport's pathByDial).
		{"muster_transport_connections", []string{"node", "a"}, func(v float64) bool { return v >= 1 && v <= 2 }, "1 or 2"},
		{"muster_transport_handshakes_accepted_total", []string{"node", "b"}, func(v float64) bool {
			return v+value(t, after, "muster_transport_handshakes_accepted_total", "node", "a") >= 1
		}, ">= 1 on one side"},
	}
	for _, c := range checks {
		if v := value(t, after, c.name, c.labels...); !c.want(v) {
			t.Errorf("%s%v = %v, want %s", c.name, c.labels, v, c.what)
		}
	}

	// A node with the transport secret but not a Distro member: its sync is refused.
	intruder := startTCP(t, "x", &addrs)
	if _, err := intruder.Request(ctx, "a", transport.Kind(1), []byte{0x80}); err == nil {
		t.Fatal("a accepted a sync from a non-member")
	}
	last := scrape(t, reg)
	if v := value(t, last, "muster_distro_messages_refused_total", "node", "a", "reason", "not_member"); v != 1 {
		t.Errorf("not_member refusals = %v, want 1", v)
	}
	if v := value(t, last, "muster_transport_handshakes_accepted_total", "node", "a"); v < 1 {
		t.Errorf("a accepted %v handshakes, want the intruder's at least", v)
	}
}

// A registry cluster on loopback (registry/node: TCP, memberlist, Raft): the registry's
// counts, Raft's proposals and transport traffic move with a session register and a
// persistent register.
func TestScrapeNodeCluster(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // registered first: runs after the other clean-ups
	dir := t.TempDir()
	raft := map[uint64]string{1: "n1", 2: "n2", 3: "n3"}
	var nodes []*node.Node
	var seeds []string
	ctx := context.Background()
	for i := range 3 {
		cfg := node.DefaultConfig()
		id := fmt.Sprintf("n%d", i+1)
		cfg.NodeID, cfg.Dir, cfg.Seeds = id, filepath.Join(dir, id), seeds
		cfg.Secret, cfg.GossipKey = secret, []byte("metrics-test-gossip-key-32bytes!")
		cfg.RaftMembers, cfg.DeploymentID = raft, 9
		cfg.Timings = node.Fast()
		cfg.Registry.HealthChecks = nil
		cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
		nd, err := node.Start(ctx, cfg)
		if err != nil {
			t.Fatalf("start %s: %v", id, err)
		}
		t.Cleanup(func() { _ = nd.Close() })
		nodes = append(nodes, nd)
		if seeds == nil {
			seeds = []string{nd.GossipAddr()}
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, nd := range nodes {
		if err := nd.WaitReady(wctx); err != nil {
			t.Fatalf("%s not ready: %v", nd.ID(), err)
		}
	}
	n1 := nodes[0]
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.New(metrics.Sources{Registry: n1.Registry(), Transport: n1.Transport(), Raft: n1.Raft()}))
	before := scrape(t, reg)
	if v := value(t, before, "muster_registry_instances"); v != 0 {
		t.Fatalf("instances before = %v", v)
	}
	if v := value(t, before, "muster_raft_has_leader"); v != 1 {
		t.Fatalf("has_leader = %v", v)
	}
	applied := value(t, before, "muster_raft_proposals_total", "outcome", "applied")
	sent := value(t, before, "muster_transport_sent_bytes_total")

	sess, err := n1.Registry().OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eph := model.ServiceKey{Group: "g", Name: "eph"}
	if err := sess.Register(ctx, model.NewInstance(eph, "10.0.0.1", 80)); err != nil {
		t.Fatal(err)
	}
	per := model.NewInstance(model.ServiceKey{Group: "g", Name: "db"}, "10.0.0.2", 5432)
	per.Ephemeral = false
	if err := n1.Registry().Register(ctx, per); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "n1's session instance reaches n3", func() bool {
		v, err := nodes[2].Registry().Query(ctx, model.Query{Service: eph})
		return err == nil && len(v.Instances) == 1
	})

	after := scrape(t, reg)
	if v := value(t, after, "muster_registry_instances"); v != 2 {
		t.Errorf("instances = %v, want 2", v)
	}
	if v := value(t, after, "muster_registry_sessions"); v != 1 {
		t.Errorf("sessions = %v, want 1", v)
	}
	if v := value(t, after, "muster_registry_services", "namespace", model.DefaultNamespace); v != 2 {
		t.Errorf("services in %s = %v, want 2", model.DefaultNamespace, v)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"muster_registry_writes_total", []string{"op", "session_register"}, 1},
		{"muster_registry_writes_total", []string{"op", "register"}, 1},
		{"muster_registry_namespace_instances", []string{"namespace", model.DefaultNamespace, "kind", "ephemeral"}, 1},
		{"muster_registry_namespace_instances", []string{"namespace", model.DefaultNamespace, "kind", "persistent"}, 1},
		{"muster_registry_namespace_sessions", []string{"namespace", model.DefaultNamespace}, 1},
	} {
		if v := value(t, after, c.name, c.labels...); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
	if v := value(t, after, "muster_raft_proposals_total", "outcome", "applied"); v <= applied {
		t.Errorf("applied proposals %v, want more than %v", v, applied)
	}
	if v := value(t, after, "muster_raft_proposal_duration_seconds"); v < 1 {
		t.Errorf("proposal latency histogram holds %v samples", v)
	}
	if v := value(t, after, "muster_transport_sent_bytes_total"); v <= sent {
		t.Errorf("sent bytes %v, want more than %v", v, sent)
	}
	if err := sess.Close(); err != nil {
		t.Fatal(err)
	}
}

// Health checks: a failing target flips, and the checks count by type and result.
func TestScrapeHealth(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // registered first: runs after the other clean-ups
	clk := clockwork.NewFakeClock()
	var mu sync.Mutex
	healthy := false
	check := checkerFunc(func(context.Context, health.Target) health.Result {
		mu.Lock()
		defer mu.Unlock()
		if healthy {
			return health.Result{Healthy: true, Reason: "ok"}
		}
		return health.Result{Definite: true, Reason: "connection refused"}
	})
	cfg := health.DefaultConfig()
	cfg.Clock = clk
	cfg.HealthyAfter, cfg.UnhealthyAfter = 1, 1
	cfg.Checkers = map[model.CheckType]health.Checker{model.CheckTCP: check, model.CheckHTTP: check}
	s, err := health.NewScheduler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	key := model.InstanceKey{Service: model.ServiceKey{Name: "svc"}, IP: "10.0.0.1", Port: 80}
	s.Set(key, health.Target{IP: key.IP, Port: key.Port}, true)
	settle := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Settle(ctx); err != nil {
			t.Fatal(err)
		}
	}
	settle()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.New(metrics.Sources{Health: s}))
	mfs := scrape(t, reg)
	if v := value(t, mfs, "muster_health_flips_total", "to", "unhealthy"); v != 1 {
		t.Errorf("flips to unhealthy = %v, want 1", v)
	}
	if v := value(t, mfs, "muster_health_checks_total", "type", "tcp", "result", "definite_failure"); v != 1 {
		t.Errorf("definite tcp failures = %v, want 1", v)
	}
	if v := value(t, mfs, "muster_health_targets"); v != 1 {
		t.Errorf("targets = %v", v)
	}
	mu.Lock()
	healthy = true
	mu.Unlock()
	clk.Advance(10 * time.Second)
	settle()
	mfs = scrape(t, reg)
	if v := value(t, mfs, "muster_health_flips_total", "to", "healthy"); v != 1 {
		t.Errorf("flips to healthy = %v, want 1", v)
	}
	if v := value(t, mfs, "muster_health_checks_total", "type", "tcp", "result", "healthy"); v != 1 {
		t.Errorf("healthy tcp checks = %v, want 1", v)
	}
}

type checkerFunc func(context.Context, health.Target) health.Result

func (f checkerFunc) Check(ctx context.Context, t health.Target) health.Result { return f(ctx, t) }

// The names follow the Prometheus conventions (promlint), Describe and Collect agree (the
// pedantic registry), and absent sources (a typed nil too) are skipped.
func TestLintAndAbsentSources(t *testing.T) {
	srcs := metrics.Sources{
		Registry:  countsFunc(func() registry.Counts { return registry.Counts{Namespaces: map[string]int{"public": 1}} }),
		Transport: tcpStats{},
		Distro:    distroStats{},
		Health:    healthStats{},
		Raft:      raftStats{},
	}
	problems, err := testutil.CollectAndLint(metrics.New(srcs))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	if n := testutil.CollectAndCount(metrics.New(metrics.Sources{Raft: (*raftstore.Node)(nil), Transport: (*transport.TCP)(nil)})); n != 0 {
		t.Fatalf("typed nil sources collected %d metrics", n)
	}
	if n := testutil.CollectAndCount(metrics.New(srcs)); n < 80 {
		t.Fatalf("collected %d metrics, want every one", n)
	}
}

type countsFunc func() registry.Counts

func (f countsFunc) Stats() registry.Stats { return registry.Stats{Counts: f()} }

type tcpStats struct{}

func (tcpStats) Stats() transport.TCPStats { return transport.TCPStats{} }

type distroStats struct{}

func (distroStats) Stats() distro.Stats { return distro.Stats{} }

type healthStats struct{}

func (healthStats) Stats() health.SchedulerStats { return health.SchedulerStats{} }

type raftStats struct{}

func (raftStats) Stats() raftstore.Stats { return raftstore.Stats{} }

// A partition: the cut-off node's membership drops to itself, and the
// instance registered on the other side reaches neither it nor its scrape;
// the heal brings both back.
func TestScrapePartition(t *testing.T) {
	dc := distro.DefaultConfig()
	dc.SyncDelay = distro.NoSyncDelay
	c := registrytest.NewCluster(t, registrytest.ClusterOptions{Distro: &dc})
	cut := c.Node(2)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.New(metrics.Sources{Registry: cut, Distro: cut.Replicator()}))
	if v := value(t, scrape(t, reg), "muster_distro_members"); v != 3 {
		t.Fatalf("members before the partition = %v, want 3", v)
	}
	ctx := context.Background()
	c.Partition([]int{0, 1}, []int{2})
	c.Settle()
	sess, err := c.Node(0).OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.Register(ctx, model.NewInstance(model.ServiceKey{Name: "p"}, "10.0.0.1", 80)); err != nil {
		t.Fatal(err)
	}
	c.Settle()
	during := scrape(t, reg)
	if v := value(t, during, "muster_distro_members"); v != 1 {
		t.Errorf("members of the cut-off node = %v, want 1", v)
	}
	if v := value(t, during, "muster_registry_instances"); v != 0 {
		t.Errorf("the cut-off node holds %v instances, want 0", v)
	}
	applied := value(t, during, "muster_distro_records_applied_total")
	c.Heal()
	c.Advance(2 * dc.VerifyInterval) // verify repairs what the partition held back
	after := scrape(t, reg)
	if v := value(t, after, "muster_distro_members"); v != 3 {
		t.Errorf("members after the heal = %v, want 3", v)
	}
	if v := value(t, after, "muster_registry_instances"); v != 1 {
		t.Errorf("after the heal the node holds %v instances, want 1", v)
	}
	if v := value(t, after, "muster_distro_records_applied_total"); v <= applied {
		t.Errorf("records applied %v, want more than %v", v, applied)
	}
}

// fixedRaft is a RaftSource with fixed counters.
type fixedRaft raftstore.Stats

func (f fixedRaft) Stats() raftstore.Stats { return raftstore.Stats(f) }

// The batcher's waits are exported by outcome, each from its own counter.
func TestScrapeRaftBatchWaits(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.New(metrics.Sources{Raft: fixedRaft{Entries: 12, BatchWaitsFilled: 7, BatchWaitsExpired: 3, CommitWritesDeferred: 11,
		LogWrites: 40, EntryRetries: 5, EntryAttemptsTimedOut: 2, EntriesForwarded: 9, ForwardFallbacks: 4, EntriesForwardedIn: 13, MergedEntries: 6}}))
	mfs := scrape(t, reg)
	for _, c := range []struct {
		name   string
		labels []string // label and value, or none
		want   float64
	}{
		{"muster_raft_batch_waits_total", []string{"outcome", "filled"}, 7},
		{"muster_raft_batch_waits_total", []string{"outcome", "expired"}, 3},
		{"muster_raft_entries_total", nil, 12},
		{"muster_raft_commit_writes_deferred_total", nil, 11},
		{"muster_raft_log_writes_total", nil, 40},
		{"muster_raft_entry_retries_total", []string{"outcome", "timed_out"}, 2},
		{"muster_raft_entry_retries_total", []string{"outcome", "failed"}, 3},
		{"muster_raft_entries_forwarded_total", []string{"outcome", "taken"}, 5},
		{"muster_raft_entries_forwarded_total", []string{"outcome", "fell_back"}, 4},
		{"muster_raft_entries_forwarded_in_total", nil, 13},
		{"muster_raft_merged_entries_total", nil, 6},
		{"muster_raft_lazy_commit", nil, 0}, // Stats.LazyCommit false
	} {
		if v := value(t, mfs, c.name, c.labels...); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
	on := prometheus.NewPedanticRegistry()
	on.MustRegister(metrics.New(metrics.Sources{Raft: fixedRaft{LazyCommit: true}}))
	if v := value(t, scrape(t, on), "muster_raft_lazy_commit"); v != 1 {
		t.Errorf("lazy commit = %v with Stats.LazyCommit true, want 1", v)
	}
}
