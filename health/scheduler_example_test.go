package health_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/muster-io/muster/health"
	"github.com/muster-io/muster/model"
)

// switchable is a Checker whose answer the example sets.
type switchable struct{ down atomic.Bool }

func (c *switchable) Check(context.Context, health.Target) health.Result {
	if c.down.Load() {
		return health.Result{Reason: "status 503"}
	}
	return health.Result{Healthy: true, Latency: time.Millisecond, Reason: "status 200"}
}

// A scheduler on a fake clock: the first check runs at once; once the instance fails, the
// third failure in a row flips it, and OnTransition reports it. Settle waits until the checks
// due at the clock's time have run.
func ExampleScheduler() {
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(time.Unix(1_800_000_000, 0))
	checker := &switchable{}

	cfg := health.DefaultConfig()
	cfg.Clock = clock
	cfg.Rand = rand.NewPCG(1, 2)
	cfg.Checkers = map[model.CheckType]health.Checker{model.CheckHTTP: checker}
	cfg.OnTransition = func(key model.InstanceKey, healthy bool, st health.Status) {
		fmt.Printf("%s healthy=%v after check %d: %s\n", key.Endpoint(), healthy, st.Checks, st.Last.Reason)
	}
	s, err := health.NewScheduler(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	if err := s.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}

	key := model.InstanceKey{Service: model.ServiceKey{Name: "orders"}, IP: "10.0.0.7", Port: 8080}
	s.Set(key, health.Target{IP: "10.0.0.7", Port: 8080, Check: model.HealthCheck{Type: model.CheckHTTP, Path: "/health"}}, true)
	_ = s.Settle(ctx)
	st, _ := s.Status(key)
	fmt.Println("checks:", st.Checks, "healthy:", st.Healthy)

	checker.down.Store(true)
	for range 3 {
		st, _ := s.Status(key)
		clock.Advance(st.NextDue.Sub(clock.Now()))
		_ = s.Settle(ctx)
	}
	// Output:
	// checks: 1 healthy: true
	// 10.0.0.7:8080 healthy=false after check 4: status 503
}

// The HTTP checker judges the status against the configured codes and does not follow
// redirects.
func ExampleHTTPChecker() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/old" {
			http.Redirect(w, r, "/health", http.StatusFound)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	c, err := health.NewHTTPChecker(health.HTTPConfig{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	host, p, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(p)
	for _, check := range []model.HealthCheck{
		{Type: model.CheckHTTP, Path: "/health"},                                 // expects 200
		{Type: model.CheckHTTP, Path: "/health", ExpectedCodes: []int{200, 204}}, // 204 is fine
		{Type: model.CheckHTTP, Path: "/old", ExpectedCodes: []int{200, 204}},    // 302 is judged as is
	} {
		r := c.Check(context.Background(), health.Target{IP: host, Port: port, Check: check})
		fmt.Printf("%s %v: healthy=%v definite=%v (%s)\n", check.Path, check.ExpectedCodes, r.Healthy, r.Definite, r.Reason)
	}
	// Output:
	// /health []: healthy=false definite=true (status 204)
	// /health [200 204]: healthy=true definite=false (status 204)
	// /old [200 204]: healthy=false definite=false (status 302)
}
