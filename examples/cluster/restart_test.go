package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
)

// Every node crashes and restarts in turn while clients register, beat and
// query through random nodes. The checked rule: a node answers a query only
// once it holds everything: every answer about the persistent service holds
// all its instances, and every answer about the beaten service all of
// those; a node still loading answers ErrNotReady. After the last restart
// every node serves the same instances.
func TestCrashRestartUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("real stack")
	}
	c, _ := startCluster(t, 3, false)
	ctx := context.Background()
	tm := c.t
	persistent := model.ServiceKey{Group: "e2e", Name: "restart-persistent"}
	beaten := model.ServiceKey{Group: "e2e", Name: "restart-beaten"}
	churn := model.ServiceKey{Group: "e2e", Name: "restart-churn"}

	setUp(t, "create the persistent service", func() error {
		err := c.node(0).reg.CreateService(ctx, model.Service{Key: persistent, Clusters: []model.Cluster{{
			Name: model.DefaultCluster, HealthCheck: model.HealthCheck{Type: model.CheckNone},
		}}})
		if errors.Is(err, registry.ErrServiceExists) {
			return nil // an earlier attempt's outcome was lost, but it committed
		}
		return err
	})
	const nPersistent, nBeaten = 5, 6
	for i := range nPersistent {
		in := model.NewInstance(persistent, fmt.Sprintf("10.2.0.%d", i+1), 80)
		in.Ephemeral = false
		setUp(t, "register a persistent instance", func() error { return c.node(i%3).reg.Register(ctx, in) })
	}
	b := startBeater(c, tm.BeatTimeout/6)
	defer b.close()
	for i := range nBeaten {
		b.add(i%3, beatInstance(beaten, fmt.Sprintf("10.2.1.%d", i+1), tm.BeatTimeout))
	}
	waitFor(t, 10*time.Second, "every node serves the persistent and beaten instances", func() bool {
		for _, n := range c.live() {
			if len(servedIPs(n, persistent)) != nPersistent || len(servedIPs(n, beaten)) != nBeaten {
				return false
			}
		}
		return true
	})

	// The load: queriers check every answer; a writer registers and
	// deregisters churn instances by beats; the beater beats through the
	// nodes it was given, and through any other when that one is down.
	var (
		stop                  = make(chan struct{})
		wg                    sync.WaitGroup
		mu                    sync.Mutex
		breaches              []string
		answers, notReady     atomic.Int64
		writes, failedWrites  atomic.Int64
		restarting            atomic.Int32 // index+1 of the node restarting, 0 if none
		answersWhileRestarted atomic.Int64
	)
	breach := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(breaches) < 20 {
			breaches = append(breaches, fmt.Sprintf(format, args...))
		}
	}
	// pick returns a random running node; nil when none runs (the test is
	// ending).
	// stopLoad ends the load, at the end of the test or earlier if it fails
	// (cleanups run in reverse: before the nodes stop).
	stopLoad := sync.OnceFunc(func() {
		close(stop)
		wg.Wait()
	})
	t.Cleanup(stopLoad)
	pick := func(r *rand.Rand) (int, *node) {
		for range 100 {
			i := r.IntN(3)
			if n := c.node(i); n != nil {
				return i, n
			}
		}
		return -1, nil
	}
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				i, n := pick(r)
				if n == nil {
					continue
				}
				for _, q := range []struct {
					svc  model.ServiceKey
					want int
				}{{persistent, nPersistent}, {beaten, nBeaten}} {
					v, err := n.reg.Query(ctx, model.Query{Service: q.svc})
					switch {
					case errors.Is(err, registry.ErrNotReady):
						notReady.Add(1)
					case errors.Is(err, registry.ErrClosed):
					case err != nil:
						breach("%s: query %s: %v", n.id, q.svc.Name, err)
					case len(v.Instances) != q.want:
						breach("%s answered %d instances of %s, want %d (ready %v)", n.id, len(v.Instances), q.svc.Name, q.want, n.reg.Ready())
					case !n.reg.Ready() && c.node(i) == n:
						breach("%s answered while not ready", n.id)
					default:
						answers.Add(1)
						if int(restarting.Load()) == i+1 {
							answersWhileRestarted.Add(1)
						}
					}
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	wg.Add(1)
	go func() { // the writer
		defer wg.Done()
		r := rand.New(rand.NewPCG(7, 1))
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			_, n := pick(r)
			if n == nil {
				continue
			}
			in := beatInstance(churn, fmt.Sprintf("10.2.2.%d", k%50+1), tm.BeatTimeout)
			var err error
			if r.IntN(3) == 0 {
				err = n.reg.Deregister(ctx, in.Key())
			} else {
				_, err = n.reg.HeartbeatInstance(ctx, in)
			}
			writes.Add(1)
			if err != nil {
				failedWrites.Add(1)
			}
		}
	}()

	// Crash and restart every node in turn (-e2e.long: three rounds). The
	// beater moves the beats it sent through the crashed node to the next
	// one, as a client would.
	rounds := 1
	if *long {
		rounds = 3
	}
	for r := range 3 * rounds {
		i := r % 3
		b.mu.Lock()
		for ip, via := range b.via {
			if via == i {
				b.via[ip] = (i + 1) % 3
			}
		}
		b.mu.Unlock()
		c.crash(i)
		waitFor(t, 15*time.Second, fmt.Sprintf("the survivors of %s settle", c.specs[i].id), c.settled)
		restarting.Store(int32(i + 1))
		if _, err := c.start(ctx, i); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, fmt.Sprintf("%s restarted and the cluster settled", c.specs[i].id), c.settled)
		seen := answersWhileRestarted.Load()
		waitFor(t, 10*time.Second, fmt.Sprintf("the restarted %s answers queries", c.specs[i].id), func() bool {
			return answersWhileRestarted.Load() > seen+10
		})
		restarting.Store(0)
	}
	stopLoad()
	t.Logf("%d full answers, %d ErrNotReady, %d answers by a restarted node; %d writes, %d failed (during crashes)",
		answers.Load(), notReady.Load(), answersWhileRestarted.Load(), writes.Load(), failedWrites.Load())
	for _, s := range breaches {
		t.Error(s)
	}
	if notReady.Load() == 0 || answersWhileRestarted.Load() == 0 {
		t.Errorf("the load never met a loading node (%d ErrNotReady) or a restarted one (%d answers): the rule was not exercised",
			notReady.Load(), answersWhileRestarted.Load())
	}

	// After the last restart every node serves the same instances.
	agree := func() bool {
		live := c.live()
		for _, svc := range []model.ServiceKey{persistent, beaten, churn} {
			first := servedIPs(live[0], svc)
			for _, n := range live[1:] {
				if !slices.Equal(servedIPs(n, svc), first) {
					return false
				}
			}
		}
		return len(servedIPs(live[0], persistent)) == nPersistent && len(servedIPs(live[0], beaten)) == nBeaten
	}
	waitFor(t, 3*tm.Verify+10*time.Second, "every node serves the same instances", agree)
	for _, n := range c.live() {
		if err := n.reg.Internals().CheckConsistency(); err != nil {
			t.Errorf("%s: %v", n.id, err)
		}
	}
}

// setUp runs one write of the test's setup, again while it fails with
// ErrNoLeader: on a loaded machine (the race detector beside other
// packages' tests) a Raft election during setup says nothing about what
// the test checks. The writes are idempotent.
func setUp(t *testing.T, what string, write func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := write()
		if err == nil {
			return
		}
		if !errors.Is(err, registry.ErrNoLeader) || time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
	}
}
