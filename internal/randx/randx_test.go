package randx

import (
	"math/rand/v2"
	"testing"
)

func TestSourceKeepsGiven(t *testing.T) {
	given := rand.NewPCG(1, 2)
	if got := Source(given); got != rand.Source(given) {
		t.Fatalf("Source(given) = %v, want the given source", got)
	}
}

// TestSourceDefaultSeeded: two defaults are seeded independently (the chance that two
// crypto-seeded PCGs agree on their first two draws is 2^-128).
func TestSourceDefaultSeeded(t *testing.T) {
	a, b := Source(nil), Source(nil)
	if a == nil || b == nil {
		t.Fatal("Source(nil) = nil")
	}
	if a.Uint64() == b.Uint64() && a.Uint64() == b.Uint64() {
		t.Fatal("two default sources draw the same numbers")
	}
}
