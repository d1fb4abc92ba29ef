//go:build !race

package testutil

// Race reports whether the race detector is on: randomized tests run fewer
// cases under it, where each costs several times as much.
const Race = false
