package health

import (
	"context"
	"testing"

	"github.com/muster-io/muster/model"
)

func TestTargetAddr(t *testing.T) {
	cases := []struct {
		t    Target
		want string
	}{
		{Target{IP: "10.0.0.7", Port: 8080}, "10.0.0.7:8080"},
		{Target{IP: "10.0.0.7", Port: 8080, Check: model.HealthCheck{Port: 9090}}, "10.0.0.7:9090"},
		{Target{IP: "fe80::1", Port: 80}, "[fe80::1]:80"},
		{Target{IP: "10.0.0.7", Port: 8080, Check: model.HealthCheck{Port: -1}}, "10.0.0.7:8080"},
	}
	for _, tc := range cases {
		if got := tc.t.Addr(); got != tc.want {
			t.Errorf("%+v: Addr() = %q, want %q", tc.t, got, tc.want)
		}
	}
}

func TestNoneCheckerNeverHealthy(t *testing.T) {
	r := NoneChecker{}.Check(context.Background(), Target{})
	if r.Healthy || r.Definite || r.Reason == "" {
		t.Fatalf("%+v", r)
	}
}

// The scheduler keeps its own copy of a target's ExpectedCodes.
func TestSchedulerCopiesTarget(t *testing.T) {
	h := newHarness(t, nil)
	k := key(1)
	tg := tcp(k)
	tg.Check = model.HealthCheck{Type: model.CheckHTTP, ExpectedCodes: []int{204}}
	h.stub.gate = make(chan struct{})
	h.s.Set(k, tg, true)
	tg.Check.ExpectedCodes[0] = 500
	<-h.stub.started
	h.stub.gate <- struct{}{}
	h.settle()
	h.stub.mu.Lock()
	got := h.stub.last[tg.Addr()].Check.ExpectedCodes
	h.stub.mu.Unlock()
	if len(got) != 1 || got[0] != 204 {
		t.Fatalf("the check saw codes %v, want [204]", got)
	}
}
