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
// The harness is shaped to grow: a test cluster of several registries on
// one fake clock will sit beside New, with the same Options and cleanup.
package registrytest
