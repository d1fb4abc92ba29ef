package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/muster-io/muster/model"
	sdkmodel "github.com/nacos-group/nacos-sdk-go/v2/model"
	"github.com/nacos-group/nacos-sdk-go/v2/vo"
)

// TestGroupedNameSDK: through nacos-sdk-go v2, serviceName "x@@bad" of
// DEFAULT_GROUP is refused with Nacos's message, ephemeral (gRPC) and
// persistent (HTTP), registration, subscription and read; and the SDK's
// redo of it after a reconnection (service "x", clusters "bad", the same
// instance) is refused too, so that nothing is ever registered under "x";
// another client's service "x" is served.
func TestGroupedNameSDK(t *testing.T) {
	s := startServer(t, nil)
	c := newClient(t, s.HTTPAddr())
	for _, eph := range []bool{true, false} {
		ok, err := c.RegisterInstance(vo.RegisterInstanceParam{ServiceName: "x@@bad", Ip: "10.1.1.1", Port: 80, Weight: 1, Enable: true, Healthy: true, Ephemeral: eph})
		if ok || err == nil {
			t.Fatalf("register x@@bad (ephemeral %v) accepted", eph)
		}
		if eph && !strings.Contains(err.Error(), "Param 'serviceName' is illegal") {
			t.Fatalf("ephemeral refusal: %v", err)
		}
	}
	// The 2.x SDK over HTTP (persistent) sends DEFAULT_GROUP@@x@@bad; its
	// error hides the body ("request return error code 400"), so ask raw.
	if st, body := call(t, s, "POST", "/nacos/v1/ns/instance", map[string][]string{
		"serviceName": {"DEFAULT_GROUP@@x@@bad"}, "groupName": {"DEFAULT_GROUP"}, "ip": {"10.1.1.1"}, "port": {"80"}, "ephemeral": {"false"}}); st != 400 || !strings.Contains(body, "more than once") {
		t.Fatalf("HTTP DEFAULT_GROUP@@x@@bad: %d %s", st, body)
	}
	err := c.Subscribe(&vo.SubscribeParam{ServiceName: "x@@bad", SubscribeCallback: func([]sdkmodel.Instance, error) {}})
	if err == nil || !strings.Contains(err.Error(), "illegal") {
		t.Fatalf("subscribe x@@bad: %v", err)
	}
	if hs, err := c.SelectAllInstances(vo.SelectAllInstancesParam{ServiceName: "x@@bad"}); err == nil {
		t.Fatalf("select x@@bad: %v", hs)
	}
	// The SDK sends its redo on every connection: end this one.
	before := s.limits.refusedCount("ambiguous_name")
	for _, cn := range s.api.snapshot() {
		cn.kill()
	}
	eventually(t, 20*time.Second, "the SDK's redo (subscription and registration) is refused", func() bool {
		return s.limits.refusedCount("ambiguous_name") >= before+2
	})
	// A legitimate client of service "x" (another instance) is served.
	other := newClient(t, s.HTTPAddr())
	register(t, other, "x", "", "10.1.1.2", 80, 1)
	hs, err := other.SelectAllInstances(vo.SelectAllInstancesParam{ServiceName: "x"})
	if err != nil || len(hs) != 1 || hs[0].Ip != "10.1.1.2" {
		t.Fatalf("service x holds %v %v, want only the other client's instance", hs, err)
	}
	v, err := s.Registry().Query(context.Background(), model.Query{Service: model.ServiceKey{Name: "x"}, IncludeDisabled: true})
	if err != nil || len(v.Instances) != 1 || v.Instances[0].IP != "10.1.1.2" {
		t.Fatalf("the registry holds %v %v under DEFAULT_GROUP@@x", v.Instances, err)
	}
}
