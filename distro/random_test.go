package distro

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/testutil"
)

// TestRandomized runs random writes, deletes, partitions, heals and restarts over a 4-node
// cluster, checking the invariants after every step and convergence after the faults stop.
// Seeds 1–8 by default; MUSTER_SEED and MUSTER_SEEDS choose others (see internal/testutil):
//
//	MUSTER_SEED=900000 MUSTER_SEEDS=1000 go test -run TestRandomized ./distro
//
// A failure names its seed; MUSTER_SEED=N MUSTER_SEEDS=1 replays it.
func TestRandomized(t *testing.T) {
	testutil.Seeds(t, 1, 8, runRandomized)
}

// regressionSeeds are seeds that once failed, run on every test run (whatever MUSTER_SEED says).
var regressionSeeds = []uint64{
	901007,  // a restarted node kept a record its previous run had deleted (issue 11.2)
	7300248, // a tombstone expired on its owner, which wrote its version again live (issue 27.1)
	7401411, // a copy its writer no longer held stayed live: the writer left it to the owner of a tombstone that owner had forgotten
	7700089, // a writer's live beat, deleted by another owner that forgot it, was refused by the HRW owner for a TombstoneTTL
}

func TestRandomizedRegressions(t *testing.T) {
	for _, seed := range regressionSeeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runRandomized(t, seed) })
	}
}

func runRandomized(t *testing.T, seed uint64) {
	ids := []string{"n1", "n2", "n3", "n4"}
	c := newCluster(t, func(cfg *Config) { cfg.LoadTimeout = 300 * time.Millisecond }, ids...)
	c.seed = seed
	rnd := rand.New(rand.NewPCG(seed, 99))
	isolated := ""
	for step := 0; step < 60; step++ {
		live := c.sortedIDs()
		n := c.nodes[live[rnd.IntN(len(live))]]
		switch op := rnd.IntN(20); {
		case op < 7: // a session write
			n.store.noteOwn(n.r.Put(KindSession, fmt.Sprintf("s-%s-%d", n.id, rnd.IntN(8)), []byte(fmt.Sprint(step))))
		case op < 9:
			n.store.noteOwn(n.r.Delete(fmt.Sprintf("s-%s-%d", n.id, rnd.IntN(8))))
		case op < 14: // a beat write on the key's owner (as the registry forwards it)
			k := fmt.Sprintf("10.9.0.%d:80", rnd.IntN(24))
			if o := c.nodes[n.r.Owner(k)]; o != nil {
				o.store.noteOwn(o.r.Put(KindBeat, k, []byte(fmt.Sprint(step))))
			}
		case op < 15:
			k := fmt.Sprintf("10.9.0.%d:80", rnd.IntN(24))
			if o := c.nodes[n.r.Owner(k)]; o != nil {
				o.store.noteOwn(o.r.Delete(k))
			}
		case op < 17: // partition one node off; half the time membership notices on both sides
			if isolated == "" {
				isolated = n.id
				c.net.Isolate(n.id)
				if rnd.IntN(2) == 0 {
					var rest []Member
					for _, id := range live {
						if id != n.id {
							rest = append(rest, Member{ID: id})
						}
					}
					for _, id := range live {
						if id != n.id {
							c.nodes[id].mem.Set(rest...)
						}
					}
					n.mem.Set()
				}
			}
		case op < 18:
			c.net.Heal()
			c.setMembers(c.sortedIDs()...)
			isolated = ""
		default: // restart: the node dies, the others notice, it comes back and loads
			if isolated != "" || len(live) < 3 {
				continue
			}
			id := n.id
			c.stop(id)
			c.setMembers(c.sortedIDs()...)
			c.step(time.Duration(rnd.IntN(8000)) * time.Millisecond)
			c.add(id)
			c.setMembers(ids...)
			c.startNode(id)
			c.waitReady(id)
		}
		c.step(time.Duration(rnd.IntN(400)) * time.Millisecond)
		c.checkInvariants()
		checkSingleOwnerView(t, c, seed)
	}
	c.net.Heal()
	c.setMembers(ids...)
	cfg := testConfig()
	c.eventuallyf(2*cfg.VerifyInterval+cfg.RetryMax+cfg.SyncDelay, func() string { return "convergence after faults stop\n" + c.describe() }, c.converged)
	c.checkInvariants()
}

// checkSingleOwnerView checks that no node holds a live beat record whose owner is not a member
// any node knows of (a record can only have been written by a real member).
func checkSingleOwnerView(t *testing.T, c *cluster, seed uint64) {
	t.Helper()
	all := []string{"n1", "n2", "n3", "n4"}
	for _, n := range c.nodes {
		n.r.Range(func(rec Record) bool {
			if !slices.Contains(all, rec.Owner) {
				t.Fatalf("seed %d: %s holds %v with an unknown owner", seed, n.id, rec)
			}
			return true
		})
	}
}
