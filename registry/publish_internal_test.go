package registry

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/muster-io/muster/internal/testutil"
	"github.com/muster-io/muster/model"
)

// TestPubListAgainstSlice: a pubList holds what a slice would through
// adds, removes and in-place filters, across the change from one
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
				case 0, 3:
					if !slices.Contains(ref, pi) {
						l.add(pi)
						ref = append(ref, pi)
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

// TestSlotPubsAgainstSlice: a slot's publications hold what a slice would
// through its sorted inserts and removes, across the change from one
// publication inline to a list in the slot's extra and back: the head is
// always the first, the list is out of line only while it has two or
// more, and the extra goes with it unless it holds a patch.
func TestSlotPubsAgainstSlice(t *testing.T) {
	pool := make([]*pubInst, 6)
	for i := range pool {
		pool[i] = &pubInst{inst: &rec{port: uint16(i)}}
	}
	for _, patched := range []bool{false, true} {
		t.Run(fmt.Sprintf("patched=%v", patched), func(t *testing.T) {
			// 1 → 2 → 3 → 1 → 0 and back, the head replaced at each turn.
			m := newSlotModel(t, patched)
			m.insert(0, pool[0])
			m.insert(0, pool[1]) // before the head
			m.insert(2, pool[2])
			m.remove(pool[1]) // the head
			m.remove(pool[2])
			m.remove(pool[5]) // not there
			m.remove(pool[0])
			m.remove(pool[0]) // not there
			m.insert(0, pool[3])
			m.insert(1, pool[4])
			m.insert(1, pool[0])
			m.remove(pool[4])
			m.remove(pool[3])
			m.insert(0, pool[1])
			m.unpatch()
			testutil.Seeds(t, 0, 1, func(t *testing.T, seed uint64) {
				r := rand.New(rand.NewPCG(seed, 12))
				m := newSlotModel(t, patched)
				for range 2000 {
					pi := pool[r.IntN(len(pool))]
					if r.IntN(2) == 0 && !slices.Contains(m.ref, pi) {
						m.insert(r.IntN(len(m.ref)+1), pi)
					} else {
						m.remove(pi)
					}
				}
				m.unpatch()
			})
		})
	}
}

// slotModel is a slot checked, after each change, against a slice of its
// publications.
type slotModel struct {
	t       *testing.T
	sl      slot
	ref     []*pubInst
	patched bool
}

func newSlotModel(t *testing.T, patched bool) *slotModel {
	m := &slotModel{t: t, patched: patched}
	if patched {
		m.sl.setPatch(&model.InstancePatch{})
	}
	m.check()
	return m
}

func (m *slotModel) insert(i int, pi *pubInst) {
	m.t.Helper()
	m.sl.insertPub(i, pi)
	m.ref = slices.Insert(m.ref, i, pi)
	m.check()
}

func (m *slotModel) remove(pi *pubInst) {
	m.t.Helper()
	m.sl.removePub(pi)
	if i := slices.Index(m.ref, pi); i >= 0 {
		m.ref = slices.Delete(m.ref, i, i+1)
	}
	m.check()
}

// unpatch removes the slot's patch, if any: the extra goes unless the list
// is in it.
func (m *slotModel) unpatch() {
	m.t.Helper()
	m.sl.setPatch(nil)
	m.patched = false
	m.check()
}

func (m *slotModel) check() {
	t, sl, ref := m.t, &m.sl, m.ref
	t.Helper()
	if got := sl.pubs(); !slices.Equal(got, ref) {
		t.Fatalf("list %p, want %p", got, ref)
	}
	if head := sl.head; len(ref) == 0 && head != nil || len(ref) > 0 && head != ref[0] {
		t.Fatalf("head %p, want the first of %p", head, ref)
	}
	if out := sl.x != nil && sl.x.many != nil; out != (len(ref) > 1) {
		t.Fatalf("%d publications, out of line: %v", len(ref), out)
	}
	if (sl.x != nil) != (m.patched || len(ref) > 1) {
		t.Fatalf("%d publications, patched %v: extra %v", len(ref), m.patched, sl.x)
	}
	if (sl.patch() != nil) != m.patched {
		t.Fatalf("patch %p, want one: %v", sl.patch(), m.patched)
	}
	if len(ref) > 0 && sl.current() != ref[0].inst || len(ref) == 0 && sl.current() != nil {
		t.Fatal("current() is not the first publication's instance")
	}
	if sl.live() != (len(ref) > 0) {
		t.Fatalf("live() %v with %d publications", sl.live(), len(ref))
	}
	var bad []string
	checkSlotPubs(sl, func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) })
	if bad != nil {
		t.Fatalf("invariants: %v", bad)
	}
}
