package distro_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/muster-io/muster/distro"
	"github.com/muster-io/muster/distro/gossip"
	"github.com/muster-io/muster/transport"
)

// mapStore is the smallest Store: the publishers other nodes own, by key.
type mapStore struct {
	mu      sync.Mutex
	recs    map[string]distro.Record
	applied chan distro.Record
}

func (s *mapStore) Apply(rec distro.Record) {
	s.mu.Lock()
	if rec.Deleted {
		delete(s.recs, rec.Key)
	} else {
		s.recs[rec.Key] = rec
	}
	s.mu.Unlock()
	s.applied <- rec
}
func (s *mapStore) Adopt(distro.Record, time.Time) {}
func (s *mapStore) MembersChanged([]string)        {}

// Two nodes over an in-memory network: a session record put on one is applied on the other, then
// its deletion.
func Example() {
	var network transport.MemNetwork
	ids := []string{"node-a", "node-b"}
	members := []distro.Member{{ID: "node-a"}, {ID: "node-b"}}
	reps := map[string]*distro.Replicator{}
	stores := map[string]*mapStore{}
	for _, id := range ids {
		tr, _ := network.Node(id)
		defer tr.Close()
		mem := distro.NewStatic(distro.Member{ID: id})
		mem.Set(members...)
		stores[id] = &mapStore{recs: map[string]distro.Record{}, applied: make(chan distro.Record, 8)}
		cfg := distro.DefaultConfig()
		cfg.NodeID, cfg.Transport, cfg.Membership, cfg.Store = id, tr, mem, stores[id]
		cfg.SyncDelay = distro.NoSyncDelay       // send at once (the default merges changes for 1 s)
		cfg.LoadTimeout = 100 * time.Millisecond // a cluster starting cold waits this long for a loaded peer
		r, err := distro.New(cfg)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer r.Close()
		reps[id] = r
	}
	ctx := context.Background()
	for _, id := range ids {
		reps[id].Start(ctx)
	}
	for _, id := range ids {
		reps[id].WaitReady(ctx)
	}

	// A node's revisions start at its epoch, the clock at its start in microseconds, so that a
	// node that restarts never writes a version again (see Replicator.Put).
	rec, _ := reps["node-a"].Put(distro.KindSession, "session-42", []byte("instances…"))
	fmt.Println("put:", rec.Key, "by", rec.Owner)
	got := <-stores["node-b"].applied
	fmt.Println("node-b applied:", got.Key, "at the same version:", got.Revision == rec.Revision && got.Owner == rec.Owner)

	reps["node-a"].Delete("session-42")
	del := <-stores["node-b"].applied
	fmt.Printf("node-b applied: %s deleted %v at revision +%d\n", del.Key, del.Deleted, del.Revision-rec.Revision)

	_, err := reps["node-b"].Delete("session-42")
	fmt.Println("delete on node-b:", err)
	// Output:
	// put: session-42 by node-a
	// node-b applied: session-42 at the same version: true
	// node-b applied: session-42 deleted true at revision +1
	// delete on node-b: distro: record not found: "session-42"
}

// Beat records belong to the HRW owner of their key among the live members; a Put elsewhere is
// refused so that the caller forwards it.
func ExampleReplicator_Owner() {
	var network transport.MemNetwork
	tr, _ := network.Node("n1")
	defer tr.Close()
	mem := distro.NewStatic(distro.Member{ID: "n1"})
	mem.Set(distro.Member{ID: "n2"}, distro.Member{ID: "n3"})
	cfg := distro.DefaultConfig()
	cfg.NodeID, cfg.Transport, cfg.Membership, cfg.Store = "n1", tr, mem, &mapStore{recs: map[string]distro.Record{}, applied: make(chan distro.Record, 8)}
	r, _ := distro.New(cfg)
	defer r.Close()
	r.Start(context.Background())

	fmt.Println(r.Members())
	for _, key := range []string{"10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080"} {
		_, err := r.Put(distro.KindBeat, key, nil)
		fmt.Println(key, "owner", r.Owner(key), "put:", err)
	}
	// Output:
	// [n1 n2 n3]
	// 10.0.0.1:8080 owner n1 put: <nil>
	// 10.0.0.2:8080 owner n3 put: distro: not the owner: "10.0.0.2:8080" is owned by n3
	// 10.0.0.3:8080 owner n1 put: <nil>
}

// Wiring one node of a real cluster: a TCP transport whose Resolve asks memberlist for the
// peers' transport addresses, memberlist carrying this node's, and the replicator on both.
// (Not run: it binds real ports.)
func Example_memberlist() {
	ctx := context.Background()
	var ml *gossip.Memberlist
	tc := transport.DefaultTCPConfig()
	tc.NodeID, tc.ListenAddr = "node-1", "127.0.0.1:0"
	tc.Secret = []byte("the cluster's transport secret") // shared by every node (or TLS)
	tc.Resolve = func(id string) (string, error) { return ml.Addr(id) }
	tcp, err := transport.NewTCP(tc)
	if err != nil {
		panic(err)
	}
	if err := tcp.Start(ctx); err != nil {
		panic(err)
	}
	defer tcp.Close()

	mc := gossip.DefaultConfig()
	mc.NodeID, mc.BindAddr, mc.BindPort = "node-1", "127.0.0.1", 7946
	mc.SecretKey = []byte("the cluster's 32-byte gossip key") // required; rotate with ml.AddKey, UseKey, RemoveKey
	mc.TransportAddr = tcp.Addr()                             // published in the node meta
	mc.Seeds = []string{"127.0.0.1:7947", "127.0.0.1:7948"}   // other nodes' gossip addresses
	ml, err = gossip.New(mc)
	if err != nil {
		panic(err)
	}
	if err := ml.Start(ctx); err != nil { // joins the seeds it can reach
		panic(err)
	}
	defer ml.Close() // leave, then shut down

	cfg := distro.DefaultConfig()
	cfg.NodeID, cfg.Transport, cfg.Membership = "node-1", tcp, ml
	cfg.Store = &mapStore{recs: map[string]distro.Record{}, applied: make(chan distro.Record, 1024)}
	r, err := distro.New(cfg)
	if err != nil {
		panic(err)
	}
	defer r.Close()
	r.Start(ctx)
	r.WaitReady(ctx)
}
