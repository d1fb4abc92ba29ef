package main

import (
	"testing"
	"time"

	v1clients "github.com/nacos-group/nacos-sdk-go/clients"
	v1naming "github.com/nacos-group/nacos-sdk-go/clients/naming_client"
	v1constant "github.com/nacos-group/nacos-sdk-go/common/constant"
	v1model "github.com/nacos-group/nacos-sdk-go/model"
	v1vo "github.com/nacos-group/nacos-sdk-go/vo"
)

// newV1ClientOf is newV1Client with several servers (the client picks one
// at random for each call, and tries the next when one fails).
func newV1ClientOf(t *testing.T, nodes ...*Server) v1naming.INamingClient {
	t.Helper()
	skipUnderRace(t)
	var sc []v1constant.ServerConfig
	for _, s := range nodes {
		sc = append(sc, *v1constant.NewServerConfig("127.0.0.1", httpPort(t, s.HTTPAddr())))
	}
	dir := clientDir(t)
	c, err := v1clients.NewNamingClient(v1vo.NacosClientParam{
		ClientConfig:  &v1constant.ClientConfig{TimeoutMs: 3000, NotLoadCacheAtStart: true, LogDir: dir, CacheDir: dir, LogLevel: "error"},
		ServerConfigs: sc,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestV1ClusterFailover: nacos-sdk-go v1 on a 3-node cluster. A provider
// and a consumer that know n1 and n2; the node owning the provider's beats
// is killed. The provider's beats move to the other node and its instance
// stays served and healthy on n3 throughout; the consumer's calls move to
// the other node too, and it is called back with a change made through n3
// after the kill.
func TestV1ClusterFailover(t *testing.T) {
	nodes := startCluster(t, 3)
	ip, victim := ownedIP(nodes, "10.6.3.", 8080)
	survivor, n3 := nodes[1-victim], nodes[2]
	provider := newV1ClientOf(t, nodes[0], nodes[1])
	v1Register(t, provider, "v1-ha", "", ip, 8080, 1, nil)
	eventually(t, 10*time.Second, "the instance on n3", func() bool { return len(served(t, n3, "v1-ha")) == 1 })

	consumer := newV1ClientOf(t, nodes[0], nodes[1])
	seen := make(chan int, 64)
	if err := consumer.Subscribe(&v1vo.SubscribeParam{ServiceName: "v1-ha", SubscribeCallback: func(ss []v1model.SubscribeService, err error) {
		select {
		case seen <- len(ss):
		default:
		}
	}}); err != nil {
		t.Fatal(err)
	}
	waitCount(t, seen, 1, "the consumer's first callback")

	stop := watchHealthy(t, n3, "v1-ha")
	nodes[victim].Kill()
	beats := survivor.beats.Load()
	waitRecordsDropped(t, n3, nodes[victim].cfg.NodeID)
	eventually(t, 60*time.Second, "two beats of the provider through the survivor", func() bool {
		return survivor.beats.Load() >= beats+2
	})
	if stop() {
		t.Fatal("the v1 provider's instance was missing or unhealthy on n3 after its beat owner was killed")
	}

	// A change through n3 reaches the consumer, which now reads through
	// the survivor only.
	other := newClient(t, n3.HTTPAddr())
	register(t, other, "v1-ha", "", "10.6.3.200", 8080, 1)
	waitCount(t, seen, 2, "the consumer's callback with the instance registered through n3 after the kill")
	l, err := consumer.SelectAllInstances(v1vo.SelectAllInstancesParam{ServiceName: "v1-ha"})
	if err != nil || len(l) != 2 {
		t.Fatalf("the v1 consumer lists %d instances after the failover: %v", len(l), err)
	}
}

// waitCount waits for a callback that saw want instances.
func waitCount(t *testing.T, seen <-chan int, want int, what string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case n := <-seen:
			if n == want {
				return
			}
		case <-deadline:
			t.Fatalf("no %s (%d instances)", what, want)
		}
	}
}
