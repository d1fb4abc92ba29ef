package node_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/node"
)

// Two nodes of one cluster on loopback, ports picked by the system: the
// second is seeded with the first's bound gossip address. Both hold a Raft
// replica of the persistent data.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "muster-node-example")
	defer os.RemoveAll(dir)

	start := func(id string, seeds []string) *node.Node {
		cfg := node.DefaultConfig()
		cfg.NodeID, cfg.Dir, cfg.Seeds = id, filepath.Join(dir, id), seeds
		cfg.Secret = []byte("a shared secret of 16+ bytes")        // the transport's
		cfg.GossipKey = []byte("a 32-byte memberlist gossip key!") // memberlist's
		cfg.RaftNodes, cfg.DeploymentID = []string{"n1", "n2"}, 42 // replicas 1 and 2
		cfg.Timings = node.Fast()                                  // loopback timings
		n, err := node.Start(ctx, cfg)
		if err != nil {
			panic(err)
		}
		return n
	}
	n1 := start("n1", nil)
	defer n1.Close()
	n2 := start("n2", []string{n1.GossipAddr()})
	defer n2.Close()
	_ = n1.WaitReady(ctx)
	_ = n2.WaitReady(ctx)

	orders := model.ServiceKey{Group: "shop", Name: "orders"}
	sess, _ := n1.Registry().OpenSession(ctx, registry.SessionOptions{})
	_ = sess.Register(ctx, model.NewInstance(orders, "10.0.0.1", 8080))

	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if v, err := n2.Registry().Query(ctx, model.Query{Service: orders}); err == nil && len(v.Instances) == 1 {
			fmt.Println("n2 serves", v.Instances[0].IP, v.Instances[0].Port)
			break
		}
	}
	// Output: n2 serves 10.0.0.1 8080
}
