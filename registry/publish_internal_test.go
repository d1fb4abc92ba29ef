package registry

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/muster-io/muster/internal/testutil"
)

// TestPubListAgainstSlice: a pubList holds what a slice would through
// adds, inserts, removes and in-place filters, across the change from one
// inline publication to a list out of line; all() of one is a window on
// the list.
func TestPubListAgainstSlice(t *testing.T) {
	testutil.Seeds(t, 0, 1, func(t *testing.T, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 11))
		pool := make([]*pubInst, 6)
		for i := range pool {
			pool[i] = new(pubInst)
		}
		for range 200 {
			var l pubList
			var ref []*pubInst
			for range 20 {
				pi := pool[r.IntN(len(pool))]
				switch r.IntN(4) {
				case 0:
					if !slices.Contains(ref, pi) {
						l.add(pi)
						ref = append(ref, pi)
					}
				case 3: // a slot's sorted insertion
					if !slices.Contains(ref, pi) {
						i := r.IntN(len(ref) + 1)
						l.insert(i, pi)
						ref = slices.Insert(ref, i, pi)
					}
				case 1:
					l.remove(pi)
					if i := slices.Index(ref, pi); i >= 0 {
						ref = slices.Delete(ref, i, i+1)
					}
				default: // setPublications' filter: keep those not equal to pi
					kept := l.all()[:0]
					for _, q := range l.all() {
						if q != pi {
							kept = append(kept, q)
						}
					}
					l.keep(kept)
					ref = slices.DeleteFunc(ref, func(q *pubInst) bool { return q == pi })
				}
				if got := l.all(); !slices.Equal(got, ref) || l.len() != len(ref) {
					t.Fatalf("list %p (len %d), want %p", got, l.len(), ref)
				}
				if first := l.first(); len(ref) == 0 && first != nil || len(ref) > 0 && first != ref[0] {
					t.Fatalf("first %p, want the first of %p", first, ref)
				}
				if l.one != nil && l.many != nil {
					t.Fatal("both one and many set")
				}
			}
		}
	})
	var l pubList
	pi := new(pubInst)
	l.add(pi)
	if w := l.all(); len(w) != 1 || &w[0] != &l.one {
		t.Fatal("all() of one publication is not a window on the list")
	}
	if l.many != nil {
		t.Fatal("one publication went out of line")
	}
}
