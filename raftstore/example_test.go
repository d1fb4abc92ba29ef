package raftstore_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/raftstore"
	"github.com/muster-io/muster/transport"
)

type printer struct{}

func (printer) Reset(st raftstore.State) {
	fmt.Printf("reset: %d instances\n", len(st.Instances))
}

func (printer) Applied(changes []raftstore.Change) {
	for _, ch := range changes {
		fmt.Printf("applied %s, rejected: %v\n", ch.Cmd.Op, ch.Rejected)
	}
}

// A single-replica shard: register a persistent instance, read
// it back linearizably, and see a rejection.
func Example() {
	dir, _ := os.MkdirTemp("", "raftstore-example")
	defer os.RemoveAll(dir)
	// Raft over a Muster transport (in production transport.NewTCP with
	// a Secret or mutual TLS): replicas are addressed by node ID, and
	// every inbound Raft message is checked before Dragonboat sees it.
	var network transport.MemNetwork
	tr, _ := network.Node("n1")
	defer tr.Close()

	cfg := raftstore.DefaultConfig()
	cfg.ReplicaID, cfg.DeploymentID, cfg.Transport, cfg.Dir = 1, 4711, tr, dir
	cfg.InitialMembers = map[uint64]string{1: "n1"}
	cfg.RTTMillisecond = 10
	cfg.Listener = printer{}
	n, err := raftstore.New(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer n.Close()
	if err := n.WaitReady(ctx); err != nil {
		fmt.Println(err)
		return
	}

	inst := model.NewInstance(model.ServiceKey{Name: "orders"}, "10.0.0.7", 8080)
	inst.Ephemeral = false
	if _, err := n.Propose(ctx, raftstore.Command{Op: raftstore.OpPutInstance, Instance: inst}); err != nil {
		fmt.Println(err)
		return
	}
	got, ok, _ := n.GetInstance(ctx, inst.Key(), raftstore.ReadOptions{Linearizable: true})
	fmt.Println(ok, got.Key())

	res, _ := n.Propose(ctx, raftstore.Command{Op: raftstore.OpDeleteService, SvcKey: inst.Service})
	fmt.Println(res.Rejected)
	// Output:
	// reset: 0 instances
	// applied PutInstance, rejected: <nil>
	// true public@@DEFAULT_GROUP@@orders/DEFAULT/10.0.0.7:8080
	// applied DeleteService, rejected: raftstore: service not empty: public@@DEFAULT_GROUP@@orders has persistent instances
	// raftstore: service not empty: public@@DEFAULT_GROUP@@orders has persistent instances
}
