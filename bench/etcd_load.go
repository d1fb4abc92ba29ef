package main

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter"

	"github.com/muster-io/muster/model"
)

// leaseTTL is the TTL, in seconds, of every lease the workloads grant: long
// enough that none expires during a round.
const leaseTTL = 120

// etcdRegister: writers register new instances, Put with a lease, spread
// over the members (writer w on member w mod n). leasePerInstance grants a
// lease per instance (Grant + Put, the analogue of a beat publisher per
// ip:port); otherwise each writer grants one lease before the clock starts
// and attaches all its keys to it (the analogue of a session). With more
// than one member the round ends when every member has applied every Put.
func etcdRegister(ctx context.Context, dir string, members, writers, perWriter int, dur time.Duration, services int, leasePerInstance, withLease bool) (result, error) {
	c, err := startEtcd(ctx, members, dir)
	if err != nil {
		return result{}, err
	}
	defer c.Close()
	leases := make([]clientv3.LeaseID, writers)
	if withLease && !leasePerInstance {
		for w := range leases {
			g, err := c.clients[w%members].Grant(ctx, leaseTTL)
			if err != nil {
				return result{}, err
			}
			leases[w] = g.ID
		}
	}
	sys0, start := sampleSys(), time.Now() // real time
	ops, _, err := closedLoop(writers, perWriter, dur, func(w, i int) error {
		cl := c.clients[w%members]
		id := w<<18 + i
		k, v := etcdKV(instance(svcOf(id, services), id))
		if !withLease {
			_, err := cl.Put(ctx, k, v)
			return err
		}
		lease := leases[w]
		if leasePerInstance {
			g, err := cl.Grant(ctx, leaseTTL)
			if err != nil {
				return err
			}
			lease = g.ID
		}
		_, err := cl.Put(ctx, k, v, clientv3.WithLease(lease))
		return err
	})
	if err != nil {
		return result{}, err
	}
	if members > 1 {
		if err := c.waitCount(ctx, "/registry/", ops); err != nil {
			return result{}, err
		}
	}
	el, sys1 := time.Since(start), sampleSys() // real time
	return result{value: float64(ops) / el.Seconds(), note: fmt.Sprintf("%d ops in %v", ops, el.Round(time.Millisecond)),
		detail: sysNote(sys0, sys1, ops, el), cpuPerOp: cpuPerOp(sys0, sys1, ops)}, nil
}

// waitCount waits until every member holds want keys under prefix (a
// serializable count: the member's own applied state).
func (c *etcdCluster) waitCount(ctx context.Context, prefix string, want int) error {
	for i, cl := range c.clients {
		err := waitFor(ctx, 60*time.Second, fmt.Sprintf("etcd member %d holds %d keys", i+1, want), func() (bool, error) {
			r, err := cl.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithSerializable())
			if err != nil {
				return false, err
			}
			return r.Count >= int64(want), nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// etcdKeepAlive: keys leases, renewed by writers over LeaseKeepAlive
// streams (one per writer, request and response in lockstep, each writer
// cycling through its share of the leases) on the single member, which
// leads. The stream is the raw gRPC service, called in process.
func etcdKeepAlive(ctx context.Context, dir string, writers, keys int, dur time.Duration) (result, error) {
	c, err := startEtcd(ctx, 1, dir)
	if err != nil {
		return result{}, err
	}
	defer c.Close()
	ids := make([]clientv3.LeaseID, keys)
	if _, _, err := closedLoop(writers, (keys+writers-1)/writers, 0, func(w, i int) error {
		j := w*((keys+writers-1)/writers) + i
		if j >= keys {
			return nil
		}
		g, err := c.clients[0].Grant(ctx, leaseTTL)
		if err != nil {
			return err
		}
		ids[j] = g.ID
		return nil
	}); err != nil {
		return result{}, err
	}
	lc := adapter.LeaseServerToLeaseClient(v3rpc.NewQuotaLeaseServer(c.members[0].Server))
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	streams := make([]pb.Lease_LeaseKeepAliveClient, writers)
	for w := range streams {
		if streams[w], err = lc.LeaseKeepAlive(sctx); err != nil {
			return result{}, err
		}
	}
	ops, el, err := closedLoop(writers, 0, dur, func(w, i int) error {
		st := streams[w]
		if err := st.Send(&pb.LeaseKeepAliveRequest{ID: int64(ids[(w+i*writers)%keys])}); err != nil {
			return err
		}
		r, err := st.Recv()
		if err != nil {
			return err
		}
		if r.TTL <= 0 {
			return fmt.Errorf("lease %x not renewed", r.ID)
		}
		return nil
	})
	if err != nil {
		return result{}, err
	}
	return result{value: float64(ops) / el.Seconds(), note: fmt.Sprintf("%d renewals of %d leases", ops, keys)}, nil
}

// etcdQuery: writers read one service of n instances, a prefix Get, over
// and over. Serializable: the member answers from its own state, as Muster
// reads its local index (a linearizable Get adds a read index round).
func etcdQuery(ctx context.Context, dir string, writers, n int, dur time.Duration) (result, error) {
	c, err := startEtcd(ctx, 1, dir)
	if err != nil {
		return result{}, err
	}
	defer c.Close()
	svc := model.ServiceKey{Name: "orders"}
	for i := range n {
		k, v := etcdKV(instance(svc, i))
		if _, err := c.clients[0].Put(ctx, k, v); err != nil {
			return result{}, err
		}
	}
	prefix := etcdPrefix(svc)
	ops, el, err := closedLoop(writers, 0, dur, func(w, i int) error {
		r, err := c.clients[0].Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithSerializable())
		if err != nil {
			return err
		}
		if len(r.Kvs) != n {
			return fmt.Errorf("got %d keys, want %d", len(r.Kvs), n)
		}
		return nil
	})
	if err != nil {
		return result{}, err
	}
	return result{value: float64(ops) / el.Seconds(), note: fmt.Sprintf("%d queries", ops)}, nil
}

// etcdFanout: watchers prefix watches of a service of 100 instances on the
// single member's in-process client, each read by a goroutine of its own;
// a change is a Put of one instance with a new weight, timed until every
// watcher's goroutine has received it. Reports the median over changes.
func etcdFanout(ctx context.Context, dir string, watchers, changes int) (result, error) {
	c, err := startEtcd(ctx, 1, dir)
	if err != nil {
		return result{}, err
	}
	defer c.Close()
	cl := c.clients[0]
	svc := model.ServiceKey{Name: "orders"}
	insts := make([]model.Instance, 100)
	for i := range insts {
		insts[i] = instance(svc, i)
		k, v := etcdKV(insts[i])
		if _, err := cl.Put(ctx, k, v); err != nil {
			return result{}, err
		}
	}
	type target struct {
		gen int64
		val []byte
	}
	var (
		want    atomic.Pointer[target]
		pending atomic.Int64
		reached = make(chan struct{}, 1)
		created sync.WaitGroup
		wg      sync.WaitGroup
	)
	want.Store(&target{})
	// The watches get a client of their own: closing it ends them (a
	// cancelled context alone leaves in-process watch channels open).
	wcl := v3client.New(c.members[0].Server)
	wctx, cancel := context.WithCancel(ctx)
	defer func() { cancel(); _ = wcl.Close(); wg.Wait() }()
	prefix := etcdPrefix(svc)
	for range watchers {
		created.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			wch := wcl.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
			var counted int64
			first := true
			for resp := range wch {
				if first {
					first = false
					created.Done()
				}
				t := want.Load()
				for _, ev := range resp.Events {
					if counted < t.gen && bytes.Equal(ev.Kv.Value, t.val) {
						counted = t.gen
						if pending.Add(-1) == 0 {
							reached <- struct{}{}
						}
					}
				}
			}
			if first {
				created.Done()
			}
		}()
	}
	created.Wait()
	lat, err := timeFanout(changes, watchers, &pending, reached, func(ch int) func() error {
		in := insts[ch%len(insts)]
		in.Weight = float64(2 + ch)
		k, v := etcdKV(in)
		want.Store(&target{gen: int64(ch + 1), val: []byte(v)})
		return func() error { _, err := cl.Put(ctx, k, v); return err }
	})
	if err != nil {
		return result{}, err
	}
	return latencyResult(lat, 50), nil
}

// etcdHeap: the Go heap the single member holds per instance after n
// registrations in services of 100, with a lease per keysPerLease keys
// (1: Grant + Put per instance, the analogue of beats; 1,000: the analogue
// of sessions of 1,000). The baseline is taken after the member started;
// bbolt's memory-mapped file is not Go heap and is not counted.
func etcdHeap(ctx context.Context, dir string, writers, n, keysPerLease int) (result, error) {
	c, err := startEtcd(ctx, 1, dir)
	if err != nil {
		return result{}, err
	}
	defer c.Close()
	before := heapNow()
	leases := make([]clientv3.LeaseID, (n+keysPerLease-1)/keysPerLease)
	if keysPerLease > 1 {
		for i := range leases {
			g, err := c.clients[0].Grant(ctx, leaseTTL)
			if err != nil {
				return result{}, err
			}
			leases[i] = g.ID
		}
	}
	per := (n + writers - 1) / writers
	if _, _, err := closedLoop(writers, per, 0, func(w, i int) error {
		id := w*per + i
		if id >= n {
			return nil
		}
		k, v := etcdKV(instance(svcOf(id, max(n/100, 1)), id))
		lease := leases[id/keysPerLease]
		if keysPerLease == 1 {
			g, err := c.clients[0].Grant(ctx, leaseTTL)
			if err != nil {
				return err
			}
			lease = g.ID
		}
		_, err := c.clients[0].Put(ctx, k, v, clientv3.WithLease(lease))
		return err
	}); err != nil {
		return result{}, err
	}
	after := heapNow()
	runtime.KeepAlive(c)
	return result{value: float64(after-before) / float64(n), note: fmt.Sprintf("%d instances, %.1f MiB", n, float64(after-before)/(1<<20))}, nil
}

// etcdVisibility: a Put on member A (the leader: no forwarding hop) is
// timed until a prefix watch on member B's in-process client receives it.
// perKeyLease grants a lease per key (100 sessions of one instance each);
// otherwise one lease holds every key (one session of 100 instances).
// Leases are granted off the clock. Reports the 99th percentile.
func etcdVisibility(ctx context.Context, dir string, samples, reps int, perKeyLease bool) (result, error) {
	c, err := startEtcd(ctx, 3, dir)
	if err != nil {
		return result{}, err
	}
	defer c.Close()
	a := c.leader()
	b := (a + 1) % 3
	var lat []time.Duration
	for rep := range reps {
		svc := model.ServiceKey{Name: fmt.Sprintf("vis-%d", rep)}
		seen := make(chan string, 4096)
		wcl := v3client.New(c.members[b].Server) // closed to end the watch, as in etcdFanout
		wctx, cancel := context.WithCancel(ctx)
		stopWatch := func() { cancel(); _ = wcl.Close() }
		wch := wcl.Watch(wctx, etcdPrefix(svc), clientv3.WithPrefix(), clientv3.WithCreatedNotify())
		if r := <-wch; !r.Created {
			stopWatch()
			return result{}, fmt.Errorf("watch on member %d not created: %v", b+1, r.Err())
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for resp := range wch {
				for _, ev := range resp.Events {
					seen <- string(ev.Kv.Key)
				}
			}
		}()
		var lease clientv3.LeaseID
		for i := range samples {
			if perKeyLease || i == 0 {
				g, err := c.clients[a].Grant(ctx, leaseTTL)
				if err != nil {
					stopWatch()
					return result{}, err
				}
				lease = g.ID
			}
			k, v := etcdKV(instance(svc, rep*samples+i))
			start := time.Now() // real time
			if _, err := c.clients[a].Put(ctx, k, v, clientv3.WithLease(lease)); err != nil {
				stopWatch()
				return result{}, err
			}
			if err := waitSeen(seen, k); err != nil {
				stopWatch()
				return result{}, err
			}
			lat = append(lat, time.Since(start)) // real time
		}
		stopWatch()
		wg.Wait()
	}
	return latencyResult(lat, 99), nil
}

// waitSeen waits until want comes out of seen, for at most 10 s.
func waitSeen(seen <-chan string, want string) error {
	timeout := time.NewTimer(10 * time.Second) // real time
	defer timeout.Stop()
	for {
		select {
		case got := <-seen:
			if got == want {
				return nil
			}
		case <-timeout.C:
			return fmt.Errorf("%s not seen on the other node within 10 s", want)
		}
	}
}
