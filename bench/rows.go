package main

import (
	"context"
	"time"
)

// sizes are a run's workload sizes: full for measurements, smoke for CI.
type sizes struct {
	writers int // concurrent writers (clients) of the throughput rows

	standalonePerWriter int           // register, standalone: at most this many per writer…
	standaloneDur       time.Duration // …and at most this long
	clusterPerWriter    int           // register, 3-node cluster: exactly this many per writer
	persistentPerWriter int           // persistent register: exactly this many per writer

	keepAliveKeys int           // leases / beat instances / sessions renewed
	keepAliveDur  time.Duration // renewing for this long
	queryDur      time.Duration // querying for this long

	watchers      int // fan-out watchers
	fanoutChanges int // changes timed per round

	heapInstances int // instances held for the heap rows

	visSamples int // cross-node visibility: registrations per repetition…
	visReps    int // …and repetitions per round
}

func fullSizes() sizes {
	return sizes{
		writers:             64,
		standalonePerWriter: 1_000, standaloneDur: 2 * time.Second,
		clusterPerWriter:    100,
		persistentPerWriter: 200,
		keepAliveKeys:       10_000, keepAliveDur: time.Second,
		queryDur: time.Second,
		watchers: 10_000, fanoutChanges: 20,
		heapInstances: 100_000,
		visSamples:    100, visReps: 3,
	}
}

func smokeSizes() sizes {
	return sizes{
		writers:             64,
		standalonePerWriter: 100, standaloneDur: 200 * time.Millisecond,
		clusterPerWriter:    5,
		persistentPerWriter: 5,
		keepAliveKeys:       1_000, keepAliveDur: 100 * time.Millisecond,
		queryDur: 100 * time.Millisecond,
		watchers: 500, fanoutChanges: 3,
		heapInstances: 5_000,
		visSamples:    20, visReps: 1,
	}
}

// side runs one system's half of a row once, in dir (a fresh temporary
// directory), and returns its measurement.
type side func(ctx context.Context, s sizes, dir string) (result, error)

// variant is one Muster way of doing a row's work (sessions or beats).
type variant struct {
	name string
	run  side
}

// row is one workload of the table: etcd's side, Muster's variants, and
// how to read the numbers. Every ratio is Muster / etcd.
type row struct {
	id, title string
	unit      string // "/s", "ms" or "B"
	higher    bool   // higher values are better (throughput)
	etcd      side
	muster    []variant
	// disk: the row is bound by fsync latency; each round probes the disk (probeDisk) and
	// reads the Muster throughput against it (fsyncBound).
	disk bool
	// paired, if set, runs a round instead of etcd and muster (which then only name the
	// sides): both systems at once, driven in alternating segments (runPaired). Only
	// rows with one Muster variant.
	paired func(ctx context.Context, s sizes, etcdFirst bool) (etcd, muster result, err error)
}

func rows() []row {
	return []row{
		{
			id: "register-standalone-session", title: "register, standalone, 64 writers (sessions)", unit: "/s", higher: true,
			etcd: func(ctx context.Context, s sizes, dir string) (result, error) {
				return etcdRegister(ctx, dir, 1, s.writers, s.standalonePerWriter, s.standaloneDur, 1000, false, true)
			},
			muster: []variant{{"session", func(ctx context.Context, s sizes, dir string) (result, error) {
				return musterRegister(ctx, dir, 1, s.writers, s.standalonePerWriter, s.standaloneDur, 1000, true)
			}}},
		},
		{
			id: "register-standalone-beat", title: "register, standalone, 64 writers (beat)", unit: "/s", higher: true,
			etcd: func(ctx context.Context, s sizes, dir string) (result, error) {
				return etcdRegister(ctx, dir, 1, s.writers, s.standalonePerWriter, s.standaloneDur, 1000, true, true)
			},
			muster: []variant{{"beat", func(ctx context.Context, s sizes, dir string) (result, error) {
				return musterRegister(ctx, dir, 1, s.writers, s.standalonePerWriter, s.standaloneDur, 1000, false)
			}}},
		},
		{
			id: "register-cluster-session", title: "register, 3-node cluster, 64 writers (sessions)", unit: "/s", higher: true,
			etcd: func(ctx context.Context, s sizes, dir string) (result, error) {
				return etcdRegister(ctx, dir, 3, s.writers, s.clusterPerWriter, 0, 100, false, true)
			},
			muster: []variant{{"session", func(ctx context.Context, s sizes, dir string) (result, error) {
				return musterRegister(ctx, dir, 3, s.writers, s.clusterPerWriter, 0, 100, true)
			}}},
		},
		{
			id: "register-cluster-beat", title: "register, 3-node cluster, 64 writers (beat)", unit: "/s", higher: true,
			etcd: func(ctx context.Context, s sizes, dir string) (result, error) {
				return etcdRegister(ctx, dir, 3, s.writers, s.clusterPerWriter, 0, 100, true, true)
			},
			muster: []variant{{"beat", func(ctx context.Context, s sizes, dir string) (result, error) {
				return musterRegister(ctx, dir, 3, s.writers, s.clusterPerWriter, 0, 100, false)
			}}},
		},
		{
			id: "keepalive", title: "keep-alive, 10k leases, 64 writers (vs LeaseKeepAlive stream)", unit: "/s", higher: true,
			etcd: func(ctx context.Context, s sizes, dir string) (result, error) {
				return etcdKeepAlive(ctx, dir, s.writers, s.keepAliveKeys, s.keepAliveDur)
			},
			muster: []variant{
				{"beat", func(ctx context.Context, s sizes, dir string) (result, error) {
					return musterKeepAlive(ctx, s.writers, s.keepAliveKeys, s.keepAliveDur, false)
				}},
				{"session", func(ctx context.Context, s sizes, dir string) (result, error) {
					return musterKeepAlive(ctx, s.writers, s.keepAliveKeys, s.keepAliveDur, true)
				}},
			},
		},
		{
			id: "query", title: "query, service of 100, 64 goroutines (etcd: serializable prefix Get)", unit: "/s", higher: true,
			etcd: func(ctx context.Context, s sizes, dir string) (result, error) {
				return etcdQuery(ctx, dir, s.writers, 100, s.queryDur)
			},
			muster: []variant{{"query", func(ctx context.Context, s sizes, dir string) (result, error) {
				return musterQuery(ctx, s.writers, 100, s.queryDur)
			}}},
		},
		{
			id: "watch-fanout", title: "watch fan-out, 10k watchers, p50", unit: "ms",
			etcd: func(ctx context.Context, s sizes, dir string) (result, error) {
				return etcdFanout(ctx, dir, s.watchers, s.fanoutChanges)
			},
			muster: []variant{{"watch", func(ctx context.Context, s sizes, dir string) (result, error) {
				return musterFanout(ctx, s.watchers, s.fanoutChanges)
			}}},
		},
		{
			id: "heap-session", title: "heap per instance, 100k (sessions of 1,000; etcd: a lease per 1,000 keys)", unit: "B",
			etcd: func(ctx context.Context, s sizes, dir string) (result, error) {
				return etcdHeap(ctx, dir, s.writers, s.heapInstances, 1000)
			},
			muster: []variant{{"session", func(ctx context.Context, s sizes, dir string) (result, error) {
				return musterHeap(ctx, s.heapInstances, true)
			}}},
		},
		{
			id: "heap-beat", title: "heap per instance, 100k (beat; etcd: a lease per key)", unit: "B",
			etcd: func(ctx context.Context, s sizes, dir string) (result, error) {
				return etcdHeap(ctx, dir, s.writers, s.heapInstances, 1)
			},
			muster: []variant{{"beat", func(ctx context.Context, s sizes, dir string) (result, error) {
				return musterHeap(ctx, s.heapInstances, false)
			}}},
		},
		{
			id: "persistent-register", title: "persistent register, 3 replicas, fsync, 64 writers", unit: "/s", higher: true,
			etcd: func(ctx context.Context, s sizes, dir string) (result, error) {
				return etcdRegister(ctx, dir, 3, s.writers, s.persistentPerWriter, 0, 100, false, false)
			},
			muster: []variant{{"raft", func(ctx context.Context, s sizes, dir string) (result, error) {
				return musterPersistent(ctx, dir, s.writers, s.persistentPerWriter)
			}}},
			disk: true,
		},
		{
			id: "persistent-register-paired", title: "persistent register, 3 replicas, fsync, 64 writers, sides in alternating segments", unit: "/s", higher: true,
			muster: []variant{{name: "raft"}},
			paired: func(ctx context.Context, s sizes, etcdFirst bool) (result, result, error) {
				return runPaired(ctx, s, etcdFirst, startPairedPersistent)
			},
			disk: true,
		},
		{
			id: "visibility-sessions", title: "cross-node visibility p99, 100 sessions × 1 instance", unit: "ms",
			etcd: func(ctx context.Context, s sizes, dir string) (result, error) {
				return etcdVisibility(ctx, dir, s.visSamples, s.visReps, true)
			},
			muster: []variant{{"session", func(ctx context.Context, s sizes, dir string) (result, error) {
				return musterVisibility(ctx, dir, s.visSamples, s.visReps, true)
			}}},
		},
		{
			id: "visibility-batch", title: "cross-node visibility p99, 1 session × 100 instances", unit: "ms",
			etcd: func(ctx context.Context, s sizes, dir string) (result, error) {
				return etcdVisibility(ctx, dir, s.visSamples, s.visReps, false)
			},
			muster: []variant{{"session", func(ctx context.Context, s sizes, dir string) (result, error) {
				return musterVisibility(ctx, dir, s.visSamples, s.visReps, false)
			}}},
		},
	}
}
