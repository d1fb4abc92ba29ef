//go:build !race

package testutil

// Race reports whether the race detector is on: randomized tests run fewer
// cases under it, where each costs several times as much, and tests of
// code that races by itself (the Nacos SDKs, in examples/nacosd) skip.
const Race = false
