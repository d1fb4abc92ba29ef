// Package registrytest runs registries in tests: started, on a fake clock
// the test advances, logging to the test, and checked for leaked goroutines
// when the test ends.
//
//	reg := registrytest.New(t, registrytest.Options{})
//	reg.Register(ctx, inst)
//	reg.Advance(16 * time.Second) // the beat lease has lapsed: unhealthy
//
// Advance moves the clock and returns once the registry has handled every
// deadline that passed, so a test can assert on the result at once, without
// sleeping.
//
// When the test ends, the harness checks the registry's index
// (Registry.CheckConsistency), closes it, and compares the goroutines with
// those at New: a goroutine left over fails the test. Because of that
// comparison, tests that use this package should not run in parallel with
// others (t.Parallel) in the same package.
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
// Dragonboat runs on real time: WaitFor polls for what depends on it. When the test ends, the harness heals the network, lets two verify
// periods pass, checks that every live node holds the same records and
// serves the same instances, checks each index, closes every node, and
// fails the test on a leaked goroutine.
package registrytest
