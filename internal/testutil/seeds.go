// Package testutil holds helpers shared by Muster's own tests. It is a test
// harness: library code never imports it.
package testutil

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// The environment variables that choose the seeds of every randomized test.
const (
	// SeedEnv is the first seed.
	SeedEnv = "MUSTER_SEED"
	// SeedsEnv is the number of consecutive seeds from the first.
	SeedsEnv = "MUSTER_SEEDS"
)

// Seeds runs fn once per seed, each in a subtest named "seed=N". The seeds
// are MUSTER_SEED, MUSTER_SEED+1, … (MUSTER_SEEDS of them) when those are
// set, else first, first+1, … (count of them). A first of 0 means a fresh
// seed from the wall clock, for tests that explore a new seed on every run.
// Every randomized test of the project runs through Seeds, so
//
//	MUSTER_SEED=900408 MUSTER_SEEDS=1000 go test -run TestClusterRandomized ./registry
//
// runs a thousand seeds of any of them, and a failure names the seed that
// replays it with MUSTER_SEEDS=1.
func Seeds(t *testing.T, first uint64, count int, fn func(t *testing.T, seed uint64)) {
	t.Helper()
	first, count = SeedRange(t, first, count)
	for seed := first; seed < first+uint64(count); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			defer func() {
				if t.Failed() {
					t.Logf("replay with %s=%d %s=1", SeedEnv, seed, SeedsEnv)
				}
			}()
			fn(t, seed)
		})
	}
}

// SeedRange returns the first seed and the count that Seeds would run, for a
// test (or benchmark) that cannot use subtests. It fails the test on a
// malformed variable.
func SeedRange(t testing.TB, first uint64, count int) (uint64, int) {
	t.Helper()
	if v := os.Getenv(SeedEnv); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want an unsigned integer", SeedEnv, v)
		}
		first = s
	} else if first == 0 {
		first = uint64(time.Now().UnixNano()) // real time: a fresh seed per run
	}
	if v := os.Getenv(SeedsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a count of at least 1", SeedsEnv, v)
		}
		count = n
	}
	if count < 1 {
		count = 1
	}
	return first, count
}
