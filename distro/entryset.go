package distro

// entrySet is one bucket of the table: an open-addressing set of *entry keyed by entry.key
// (issue 30.2). A Go map[string]*entry costs 24 bytes a slot (the key's string header and the
// pointer), and with the table's ~977 records a bucket at 1,000,000 records, just past a swiss
// table's 7/8 load of 1,024 slots, every map had grown to 2,048 slots: 56 bytes a record in the
// heap profile (36–38 at 100,000). The entry holds its key already; the set keeps only the
// pointer and a 32-bit fragment of the key's hash, in two parallel arrays (12 bytes a slot, no
// padding), so that:
//
//   - a probe compares fragments, contiguous in memory, and dereferences an entry only when its
//     fragment matches (a false match is ~2^-31 per slot probed);
//   - growing, shrinking and deleting place entries by their stored fragment, never reading a
//     key or hashing it again;
//   - a fragment of 0 marks an empty slot (fragments have their low bit set).
//
// Linear probing, kept in Robin Hood order, and deletion by backward shift: no tombstones, so a
// set that churns (sessions come and go, tombstones expire) never degrades nor needs
// rebuilding. The home slot of a fragment f in a set of c slots is f·c/2^32 (multiply-shift),
// so c need not be a power of two: a set grows by 1.25× when its load would pass 7/8, and as it
// grows its load stays between 0.7 and 0.875 (12/0.7 ≈ 17 and 12/0.875 ≈ 13.7 bytes a record),
// whatever the bucket size, where doubling would swing it between 0.44 and 0.875 (up to 27 bytes
// a record) and land every bucket of a table at the same point, as the maps did. Growing by
// 1.25× moves each entry 4 times on average (its fragment and pointer only). A set whose records
// leave is another matter: its load falls as they go, down to 1/4 (48 bytes a record), before
// it shrinks, to half load (see below), and a set the load reserved (reserve) starts empty.
//
// Measured: the slots cost 15.4 bytes a record at 100,000 records and 15.5 at 1,000,000
// (TestEntrySetBytesPerRecord); registry's BenchmarkClusterMemoryPerInstance, peer B/instance,
// went from 561.7 to 540.1 at 100,000 instances and from 583.0 to 544.2 at 1,000,000. The
// table's lookups of held keys (BenchmarkTableGet) cost what the maps' did; of absent keys,
// ~4 ns more (BenchmarkTableGetMiss, 62.7 against 58.4 ns at best of 5 rounds on a shared
// machine; a table hashes the key twice, as the map did). Fragments and pointers in groups of 4
// (48 bytes: a slot's two in one cache line) measured no faster for held keys and ~6 ns slower
// for absent ones.
//
// Robin Hood order: each run of slots holds its entries in the order of their home slots, so a
// lookup stops at the first entry whose home lies past the key's (it is farther from its home
// than that entry is from its own): at these loads a lookup of an absent key, which every new
// record's install makes, reads ~2–4.5 slots instead of plain linear probing's ~13–33
// (BenchmarkTableGetMiss, see the commit message). An insertion shifts the rest of its run
// forward by one slot, which plain linear probing's search for an empty slot reads anyway.
//
// A set shrinks to half load when its load falls below a quarter (a departed owner's records
// expire together); Go maps never shrink.
//
// The fragment comes from a hash seeded per table (table.frag), not from keyHash: keyHash is
// public and unseeded (it must agree across nodes for digests), and a peer choosing keys could
// otherwise fill one run of slots on purpose. Mixing keyHash with a seed would not do: keyHash
// is FNV-1a, whose collisions can be computed, and chained into as many keys of one keyHash as
// wanted; those would share every position whatever the seed.
type entrySet struct {
	frags []uint32 // per slot: the fragment of its entry's key hash, 0 if empty
	ents  []*entry // per slot: the entry, nil if empty
	n     int      // entries held
	// shape counts the changes that move entries between slots (insertions, deletions,
	// resizes): each checks that its callback made none (see each).
	shape uint32
}

const (
	setMinSlots = 8
	// A set grows when it would hold more than setLoadNum/setLoadDen of its slots.
	setLoadNum, setLoadDen = 7, 8
)

// home returns the first slot a fragment probes in a set of c slots.
func home(f uint32, c int) int { return int((uint64(f) * uint64(c)) >> 32) }

func (s *entrySet) len() int { return s.n }

// slots returns the number of slots.
func (s *entrySet) slots() int { return len(s.frags) }

// frag and ent return slot i's fragment and entry.
func (s *entrySet) frag(i int) uint32 { return s.frags[i] }
func (s *entrySet) ent(i int) *entry  { return s.ents[i] }

// dist returns how far slot i lies past the home slot of fragment g, in a set of c slots.
func dist(g uint32, i, c int) int {
	d := i - home(g, c)
	if d < 0 {
		d += c
	}
	return d
}

// get returns the entry of key, whose fragment is f, or nil.
func (s *entrySet) get(key string, f uint32) *entry {
	frags := s.frags
	c := len(frags)
	if c == 0 {
		return nil
	}
	ents := s.ents[:c]
	i := home(f, c)
	for k := 0; ; k++ {
		g := frags[i]
		if g == f {
			if e := ents[i]; e.key == key {
				return e
			}
		} else if g == 0 || dist(g, i, c) < k {
			return nil // the key would be here (Robin Hood order)
		}
		if i++; i == c {
			i = 0
		}
	}
}

// find returns the slot of key (whose fragment is f) and true, or the slot where it would go
// and false. The set has slots.
func (s *entrySet) find(key string, f uint32, old *entry) (int, bool) {
	c := len(s.frags)
	i := home(f, c)
	for k := 0; ; k++ {
		g := s.frags[i]
		if g == f {
			if o := s.ents[i]; o == old || o.key == key {
				return i, true
			}
		} else if g == 0 || dist(g, i, c) < k {
			return i, false
		}
		if i++; i == c {
			i = 0
		}
	}
}

// put stores e, whose key's fragment is f, replacing the entry of the same key if there is one,
// and returns that entry (nil if none). old, if not nil, is the entry the caller found for the
// key: a slot holding it is recognized without reading keys.
func (s *entrySet) put(e *entry, f uint32, old *entry) *entry {
	c := len(s.frags)
	if c > 0 {
		i, ok := s.find(e.key, f, old)
		if ok {
			o := s.ents[i]
			s.ents[i] = e
			return o
		}
		if (s.n+1)*setLoadDen <= c*setLoadNum {
			s.insertAt(i, f, e)
			s.n++
			s.shape++
			return nil
		}
	}
	s.resize(grownSlots(c, s.n+1))
	s.place(e, f)
	s.n++
	return nil
}

// insertAt puts e, whose fragment is f, in slot i, and moves the entries from i to the end of
// the run forward one slot (they keep their order).
func (s *entrySet) insertAt(i int, f uint32, e *entry) {
	c := len(s.frags)
	for {
		g, o := s.frags[i], s.ents[i]
		s.frags[i], s.ents[i] = f, e
		if g == 0 {
			return
		}
		f, e = g, o
		if i++; i == c {
			i = 0
		}
	}
}

// remove deletes the entry of key, whose fragment is f, and returns it (nil if none).
func (s *entrySet) remove(key string, f uint32) *entry {
	c := len(s.frags)
	if c == 0 {
		return nil
	}
	i, ok := s.find(key, f, nil)
	if !ok {
		return nil
	}
	e := s.ents[i]
	// Backward shift: the rest of the run moves back one slot, up to an empty slot or an entry
	// in its home slot, so that no empty slot lies between an entry and its home, and the run
	// keeps its order.
	for {
		j := i + 1
		if j == c {
			j = 0
		}
		g := s.frags[j]
		if g == 0 || home(g, c) == j {
			break
		}
		s.frags[i], s.ents[i] = g, s.ents[j]
		i = j
	}
	s.frags[i], s.ents[i] = 0, nil
	s.n--
	s.shape++
	if c > setMinSlots && s.n*4 < c {
		s.resize(max(setMinSlots, s.n*2))
	}
	return e
}

// reserve makes room for n entries if the set holds none (a load fills buckets from empty).
func (s *entrySet) reserve(n int) {
	if s.n == 0 && n*setLoadDen > len(s.frags)*setLoadNum {
		s.resize(fitSlots(n))
	}
}

// grownSlots returns the slots of a set of c slots grown to hold n entries: 1.25× (see
// entrySet), or more if that is not enough.
func grownSlots(c, n int) int { return max(setMinSlots, c+c/4, fitSlots(n)) }

// fitSlots returns the fewest slots that hold n entries within the load limit.
func fitSlots(n int) int { return max(setMinSlots, (n*setLoadDen+setLoadNum-1)/setLoadNum) }

// resize moves the entries into c slots, placing each by its fragment.
func (s *entrySet) resize(c int) {
	frags, ents := s.frags, s.ents
	s.frags, s.ents = make([]uint32, c), make([]*entry, c)
	s.shape++
	for k, f := range frags {
		if f != 0 {
			s.place(ents[k], f)
		}
	}
}

// place puts e, whose fragment is f and whose key the set does not hold, in its place (there
// is an empty slot: the load stays below 1).
func (s *entrySet) place(e *entry, f uint32) {
	c := len(s.frags)
	i := home(f, c)
	for k := 0; ; k++ {
		g := s.frags[i]
		if g == 0 || dist(g, i, c) < k {
			break
		}
		if i++; i == c {
			i = 0
		}
	}
	s.insertAt(i, f, e)
}

// each calls fn for every entry until fn returns false. fn may change the entry it is given
// and replace it (put of the same key), but not insert nor remove an entry of this set: that
// moves entries between slots, and the iteration would skip some and repeat others. No caller
// does (a Go map allowed deletion while ranging); each panics if one starts to, rather than
// silently miss a record.
func (s *entrySet) each(fn func(*entry) bool) bool {
	shape := s.shape
	for i := range s.ents {
		e := s.ents[i]
		if e == nil {
			continue
		}
		if !fn(e) {
			return false
		}
		if s.shape != shape {
			panic("distro: a table bucket changed while it was iterated")
		}
	}
	return true
}
