package registry_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/muster-io/muster/distro"
	"github.com/muster-io/muster/internal/testutil"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
)

// TestClusterRandomized runs random writes, beats, partitions, heals,
// crashes and restarts on a 3-node cluster, checking after every step that
// no node's record moves backwards (no rollback) and every index is
// consistent, and after every heal that all nodes converge on exactly the
// instances the clients keep alive (nothing live lost, nothing deleted
// back). It runs seeds 1–6, or MUSTER_SEEDS seeds from MUSTER_SEED (see
// internal/testutil); a failure names the seed that replays it.
func TestClusterRandomized(t *testing.T) {
	testutil.Seeds(t, 1, 6, runRandomCluster)
}

type beatClient struct {
	inst model.Instance
	via  int  // the node it beats through
	live bool // registered and beating
}

type sessClient struct {
	node  int
	sess  *registry.Session
	insts map[string]model.Instance // by IP
}

func runRandomCluster(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed*7919))
	opts := clusterOpts()
	opts.Seed = seed
	c := registrytest.NewCluster(t, opts)
	const nodes = 3
	var beats []*beatClient
	var sessions []*sessClient
	partitioned := false
	stopped := -1
	// highest version seen per node and record, to catch rollbacks
	seen := make([]map[string]distro.Record, nodes)
	resetSeen := func(i int) { seen[i] = make(map[string]distro.Record) }
	for i := range nodes {
		resetSeen(i)
	}
	checkNoRollback := func(step int) {
		t.Helper()
		for i, n := range c.Nodes() {
			if n.Registry == nil {
				continue
			}
			held := make(map[string]bool)
			n.Replicator().Range(func(r distro.Record) bool {
				held[r.Key] = true
				if old, ok := seen[i][r.Key]; ok && old.Newer(r) {
					t.Fatalf("seed %d step %d: %s moved %s back from %s@%d to %s@%d", seed, step, n.ID, r.Key, old.Owner, old.Revision, r.Owner, r.Revision)
				}
				seen[i][r.Key] = r
				return true
			})
			// A tombstone forgotten after its TTL (distro.Config.TombstoneTTL)
			// ends the key's history: a later write may start it again.
			for key := range seen[i] {
				if !held[key] {
					delete(seen[i], key)
				}
			}
			if err := n.Internals().CheckConsistency(); err != nil {
				t.Fatalf("seed %d step %d: %s: %v", seed, step, n.ID, err)
			}
		}
	}
	liveNode := func() int {
		for {
			if i := rng.IntN(nodes); i != stopped {
				return i
			}
		}
	}
	// A client whose node is down fails over to another.
	via := func(b *beatClient) *registrytest.Node {
		if b.via == stopped {
			b.via = liveNode()
		}
		return c.Node(b.via)
	}
	beatAll := func() {
		for _, b := range beats {
			if b.live {
				// Errors are expected while ownership moves; the client retries next time.
				_, _ = via(b).HeartbeatInstance(ctx, b.inst)
			}
		}
	}
	next := 0
	for step := 0; step < 40; step++ {
		op := rng.IntN(10)
		t.Logf("step %d at %v: op %d (partitioned %v, stopped %d)", step, c.Clock.Since(registrytest.Epoch), op, partitioned, stopped)
		switch {
		case op < 3: // a new beat client
			b := &beatClient{inst: inst("rb", next), via: liveNode(), live: true}
			next++
			beats = append(beats, b)
			t.Logf("new beat client %s via n%d", b.inst.IP, b.via+1)
			_, _ = c.Node(b.via).HeartbeatInstance(ctx, b.inst)
		case op < 4 && len(beats) > 0: // a client leaves
			b := beats[rng.IntN(len(beats))]
			if b.live {
				err := via(b).Deregister(ctx, b.inst.Key())
				t.Logf("deregister %s via n%d: %v", b.inst.IP, b.via+1, err)
				if err == nil {
					b.live = false
				}
			}
		case op < 6: // a session registers
			i := liveNode()
			var s *sessClient
			for _, cand := range sessions {
				if cand.node == i && cand.sess != nil {
					s = cand
				}
			}
			if s == nil {
				sess, err := c.Node(i).OpenSession(ctx, registry.SessionOptions{})
				if err != nil {
					t.Fatal(err)
				}
				s = &sessClient{node: i, sess: sess, insts: map[string]model.Instance{}}
				sessions = append(sessions, s)
			}
			in := inst("rs", next)
			next++
			if err := s.sess.Register(ctx, in); err != nil {
				t.Fatalf("seed %d: session register: %v", seed, err)
			}
			s.insts[in.IP] = in
		case op < 7 && len(sessions) > 0: // a session ends, or drops an instance
			s := sessions[rng.IntN(len(sessions))]
			if s.sess == nil {
				break
			}
			if rng.IntN(2) == 0 {
				_ = s.sess.Close()
				s.sess, s.insts = nil, nil
				break
			}
			for ip, in := range s.insts {
				_ = s.sess.Deregister(ctx, in.Key())
				delete(s.insts, ip)
				break
			}
		case op < 8 && !partitioned && stopped < 0: // a partition
			partitioned = true
			i := rng.IntN(nodes)
			t.Logf("isolate n%d", i+1)
			c.Isolate(i)
		case op < 9 && partitioned: // heal
			partitioned = false
			c.Heal()
		default: // crash and restart
			if stopped >= 0 {
				t.Logf("restart n%d", stopped+1)
				c.Restart(stopped)
				resetSeen(stopped)
				stopped = -1
				c.AwaitReady()
			} else if !partitioned {
				stopped = rng.IntN(nodes)
				t.Logf("stop n%d", stopped+1)
				c.Stop(stopped)
				for _, s := range sessions {
					if s.node == stopped {
						s.sess, s.insts = nil, nil // they died with their node
					}
				}
			}
		}
		beatAll()
		c.Advance(time.Duration(1+rng.IntN(5)) * time.Second)
		checkNoRollback(step)
	}

	// Heal everything, let the clients beat through two verify periods and
	// an orphan timeout, and check what every node serves.
	if partitioned {
		c.Heal()
	}
	if stopped >= 0 {
		c.Restart(stopped)
		resetSeen(stopped)
		c.AwaitReady()
	}
	dc := distro.DefaultConfig()
	for waited := time.Duration(0); waited < dc.OrphanTimeout+2*dc.VerifyInterval; waited += 5 * time.Second {
		beatAll()
		c.Advance(5 * time.Second)
		checkNoRollback(-1)
	}
	var wantB, wantS []string
	for _, b := range beats {
		if b.live {
			wantB = append(wantB, b.inst.IP)
		}
	}
	for _, s := range sessions {
		for ip := range s.insts {
			wantS = append(wantS, ip)
		}
	}
	slices.Sort(wantB)
	slices.Sort(wantS)
	for _, n := range c.Live() {
		if got := ipsOn(t, n, "rb"); !slices.Equal(got, wantB) {
			t.Errorf("seed %d: %s serves beat instances %v, want %v", seed, n.ID, got, wantB)
			for _, ip := range got {
				key := "b/" + model.Endpoint(ip, 8080)
				for _, m := range c.Live() {
					rec, ok := m.Replicator().Get(key)
					t.Logf("%s on %s: %v %s@%d deleted=%v (hash owner %s)", key, m.ID, ok, rec.Owner, rec.Revision, rec.Deleted, m.Replicator().Owner(key))
				}
			}
		}
		if got := ipsOn(t, n, "rs"); !slices.Equal(got, wantS) {
			t.Errorf("seed %d: %s serves session instances %v, want %v", seed, n.ID, got, wantS)
		}
	}
	if err := c.CheckConverged(); err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
}
