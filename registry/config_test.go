package registry_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/muster-io/muster/distro"
	"github.com/muster-io/muster/health"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/transport"
)

// TestConfigMeansWhatItSays: the fields of nested configs that the
// registry owns are refused when set, and the engines get what the
// registry owns through Env; nothing of the caller's is overwritten.
func TestConfigMeansWhatItSays(t *testing.T) {
	tr, err := (&transport.MemNetwork{}).Node("n1")
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	members := distro.NewStatic(distro.Member{ID: "n1"})
	base := func() registry.Config {
		cfg := registry.DefaultConfig()
		cfg.NodeID = "n1"
		cfg.HealthChecks = nil
		return cfg
	}
	dc := func() distro.Config {
		c := distro.DefaultConfig()
		c.Transport, c.Membership = tr, members
		return c
	}
	for _, tc := range []struct {
		name string
		mod  func(*registry.Config)
		want string // "" accepted
	}{
		{"Distro with its owned fields unset", func(c *registry.Config) { c.Replicator, c.Transport = registry.Distro(dc()), tr }, ""},
		{"Distro.NodeID set", func(c *registry.Config) {
			d := dc()
			d.NodeID = "n1"
			c.Replicator, c.Transport = registry.Distro(d), tr
		}, "NodeID must be empty"},
		{"Distro.Store set", func(c *registry.Config) {
			d := dc()
			d.Store = nopStore{}
			c.Replicator, c.Transport = registry.Distro(d), tr
		}, "Store must be nil"},
		{"Distro without a membership", func(c *registry.Config) {
			d := dc()
			d.Membership = nil
			c.Replicator, c.Transport = registry.Distro(d), tr
		}, "Membership must be set"},
		{"Replicator without Transport", func(c *registry.Config) { c.Replicator = registry.Distro(dc()) }, "Transport must be set"},
		{"Transport without Replicator", func(c *registry.Config) { c.Transport = tr }, "only used with Replicator"},
		{"HealthChecks.OnTransition set", func(c *registry.Config) {
			hc := health.DefaultConfig()
			hc.OnTransition = func(model.InstanceKey, bool, health.Status) {}
			c.HealthChecks = &hc
		}, "OnTransition must be nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base()
			tc.mod(&cfg)
			r, err := registry.New(cfg)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				_ = r.Close()
				return
			}
			if !errors.Is(err, registry.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want ErrInvalidConfig saying %q", err, tc.want)
			}
		})
	}
}

// TestEnv: a ReplicatorFunc is handed the registry's node ID, clock,
// logger (tagged), limits and a random source of its own; a StoreFunc the
// same without the random source.
func TestEnv(t *testing.T) {
	clock := clockwork.NewFakeClock()
	cfg := registry.DefaultConfig()
	cfg.NodeID, cfg.Clock, cfg.HealthChecks = "n7", clock, nil
	cfg.Logger = slog.New(slog.DiscardHandler)
	var renv, senv registry.Env
	boom := errors.New("stop here")
	cfg.Replicator = func(env registry.Env, _ distro.Store) (registry.Replicator, error) {
		renv = env
		return nil, boom
	}
	tr, _ := (&transport.MemNetwork{}).Node("n7")
	defer tr.Close()
	cfg.Transport = tr
	if _, err := registry.New(cfg); !errors.Is(err, boom) {
		t.Fatalf("New: %v, want the replicator's error", err)
	}
	if renv.NodeID != "n7" || renv.Clock != clock || renv.Logger == nil || renv.Rand == nil {
		t.Fatalf("replicator env %+v", renv)
	}
	cfg.Replicator, cfg.Transport = nil, nil
	cfg.Store = func(env registry.Env, _ registry.StoreFeed) (registry.Store, error) {
		senv = env
		return nil, boom
	}
	if _, err := registry.New(cfg); !errors.Is(err, boom) {
		t.Fatalf("New: %v, want the store's error", err)
	}
	if senv.NodeID != "n7" || senv.Clock != clock || senv.Logger == nil || senv.Rand != nil {
		t.Fatalf("store env %+v", senv)
	}
}

type nopStore struct{}

func (nopStore) Apply(distro.Record)            {}
func (nopStore) Adopt(distro.Record, time.Time) {}
func (nopStore) MembersChanged([]string)        {}

// A second Start fails with ErrStarted, a Start after Close with ErrClosed.
func TestStartTwice(t *testing.T) {
	cfg := registry.DefaultConfig()
	cfg.HealthChecks = nil
	r, err := registry.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(t.Context()); !errors.Is(err, registry.ErrStarted) {
		t.Fatalf("second Start: %v, want ErrStarted", err)
	}
	_ = r.Close()
	if err := r.Start(t.Context()); !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("Start after Close: %v, want ErrClosed", err)
	}
}

// TestConfigErrorLines: Validate's error has one complete line per broken
// rule, each with the package prefix, the limits' among them, and numbers
// are not quoted.
func TestConfigErrorLines(t *testing.T) {
	cfg := registry.DefaultConfig()
	cfg.EmptyServiceTTL, cfg.PatchTTL, cfg.HistoryEvents = -time.Second, -time.Second, registry.MaxHistoryEvents+1
	cfg.Limits.MaxSessions = -1
	err := cfg.Validate()
	if !errors.Is(err, registry.ErrInvalidConfig) {
		t.Fatalf("Validate = %v", err)
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines for 4 rules:\n%s", len(lines), err)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "registry: invalid config: ") {
			t.Errorf("line without the prefix: %q", l)
		}
	}
	if !strings.Contains(err.Error(), "MaxSessions") {
		t.Errorf("the limit's rule is missing:\n%s", err)
	}
	bad := model.NewInstance(model.ServiceKey{Name: "s"}, "10.0.0.1", 0)
	if verr := bad.Validate(model.Limits{}); verr == nil || !strings.Contains(verr.Error(), "(got 0)") {
		t.Fatalf("port error: %v, want it to end in (got 0)", verr)
	}
}

// TestNewSaysNoMySQLChecker: with health checks on and no MySQL checker,
// New says so in its log at once, rather than at the first MYSQL check;
// with one, it says nothing.
func TestNewSaysNoMySQLChecker(t *testing.T) {
	for _, withChecker := range []bool{false, true} {
		var buf strings.Builder
		cfg := registry.DefaultConfig()
		cfg.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
		if withChecker {
			hc := *cfg.HealthChecks
			hc.Checkers = map[model.CheckType]health.Checker{model.CheckMySQL: health.NoneChecker{}}
			cfg.HealthChecks = &hc
		}
		r, err := registry.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		_ = r.Close()
		if said := strings.Contains(buf.String(), "without a MySQL checker"); said == withChecker {
			t.Fatalf("with a checker %v: log %q", withChecker, buf.String())
		}
	}
}

// TestConfigZeroIsDefault: Config{} is a valid standalone registry whose
// zero fields took their defaults, and the "off" of each field that has
// one is a negative value: HistoryEvents keeps no journal (Explain has no
// events), WatchHistory keeps no revisions (every resume is a reset).
// NoHandover: TestClusterNoHandover.
func TestConfigZeroIsDefault(t *testing.T) {
	var zero registry.Config
	if err := zero.Validate(); err != nil {
		t.Fatalf("Validate(Config{}) = %v", err)
	}
	r, err := registry.New(registry.Config{})
	if err != nil {
		t.Fatalf("New(Config{}) = %v", err)
	}
	defer r.Close()
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if r.NodeID() != registry.DefaultConfig().NodeID {
		t.Fatalf("NodeID %q, want the default %q", r.NodeID(), registry.DefaultConfig().NodeID)
	}
	in := model.NewInstance(model.ServiceKey{Name: "zero"}, "10.0.0.1", 80)
	if err := r.Register(t.Context(), in); err != nil {
		t.Fatal(err)
	}
	v, err := r.Query(t.Context(), model.Query{Service: in.Service})
	if err != nil || len(v.Instances) != 1 {
		t.Fatalf("Query: %v, %v", v, err)
	}

	cfg := registry.Config{HistoryEvents: -1, WatchHistory: -1}
	off, err := registry.New(cfg)
	if err != nil {
		t.Fatalf("negative HistoryEvents and WatchHistory: %v", err)
	}
	defer off.Close()
	if err := off.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := off.Register(t.Context(), in); err != nil {
		t.Fatal(err)
	}
	if ex := off.Explain(in.Key()); len(ex.Events) != 0 {
		t.Fatalf("HistoryEvents -1 kept %d events", len(ex.Events))
	}
	w, err := off.Watch(t.Context(), model.Query{Service: in.Service})
	if err != nil {
		t.Fatal(err)
	}
	u, err := w.Next(t.Context())
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	in2 := model.NewInstance(in.Service, "10.0.0.2", 80)
	if err := off.Register(t.Context(), in2); err != nil {
		t.Fatal(err)
	}
	w, err = off.WatchFrom(t.Context(), model.Query{Service: in.Service}, u.Cursor)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if u, err := w.Next(t.Context()); err != nil || !u.Reset {
		t.Fatalf("WatchHistory -1: resume = reset %v (%v), want a reset", u.Reset, err)
	}
}
