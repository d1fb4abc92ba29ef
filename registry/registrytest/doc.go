// Package registrytest runs registries in tests: started, on a fake clock
// the test advances, logging to the test, and checked for leaked goroutines
// when the test ends.
//
//	reg := registrytest.New(t, registrytest.Options{})
//	reg.Register(ctx, inst)
//	reg.Advance(16 * time.Second) // the beat lease has lapsed: unhealthy
//
// Advance moves the clock and returns once the registry has handled every
// deadline that passed and every watcher has been handed the newest view
// (Settle: the registry's Internals().Settle, then Internals().FlushWatchers),
// so a test can assert
// on the result at once, and a Watcher's Next returns the change without
// waiting. Step advances by one Options.Step; Eventually advances in such
// steps until a condition holds; WaitFor polls in real time, for what does not run on the fake
// clock. A test needs no poll loop of its own.
//
// Active health checks are off in New, as in NewCluster (Options.Config nil
// means registry.DefaultConfig() with HealthChecks nil): a persistent
// instance in a test makes no real network probe, and keeps the health
// SetHealth gives it. Pass a Config with HealthChecks to probe for real.
//
// Queries apply the protection threshold as Nacos does: with the default
// ProtectThreshold of 0, a service whose only instance is unhealthy (0
// healthy of 1, at or below the threshold) is protected, and the instance
// is served as healthy. Assert on the real health with
// ServiceView.RealHealthy, or on ServiceView.Protected.
//
// When the test ends, the harness checks the registry's index
// (Internals().CheckConsistency), closes it, and fails the test if a goroutine
// started since New is still running (as goleak does). A test that calls
// t.Parallel sets Options.Parallel (ClusterOptions.Parallel): then only
// goroutines descended from the test's own goroutine count, so that tests
// running beside it are not taken for its leaks.
//
// NewCluster runs several registries as one cluster in the process: a
// transport.MemNetwork between them, static membership that follows the
// test's faults (Partition, Isolate, Heal, Stop, Restart: a failure
// detector that is never wrong), and one fake clock for all:
//
//	c := registrytest.NewCluster(t, registrytest.ClusterOptions{Nodes: 3})
//	sess, _ := c.Node(0).OpenSession(ctx, registry.SessionOptions{})
//	sess.Register(ctx, inst)
//	c.Settle()                     // replicated: c.Node(2) serves it
//	c.Partition([]int{0}, []int{1, 2})
//	c.Advance(60 * time.Second)    // in steps, so periodic work runs
//	c.Heal()
//
// Message handling runs in goroutines, so Settle polls until the network
// has been quiet for a few milliseconds. ClusterOptions.Raft adds a real
// Raft group (Dragonboat and Badger, in the test's temporary directory)
// whose traffic goes over the MemNetwork, so partitions cut it too;
// Dragonboat runs on real time: WaitFor polls for what depends on it. When
// the test ends, the harness heals the network, lets two verify
// periods pass, checks that every live node holds the same records and
// serves the same instances, checks each index, closes every node, and
// fails the test on a leaked goroutine.
package registrytest
