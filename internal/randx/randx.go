// Package randx holds the one default of Muster's random sources: every Config.Rand is a
// math/rand/v2 Source, and nil means a source seeded from crypto/rand.
package randx

import (
	crand "crypto/rand"
	"encoding/binary"
	"math/rand/v2"
)

// Source returns src, or, when src is nil, a PCG source seeded from crypto/rand: the default
// of every Config.Rand. The caller owns the result and must serialise its use (a Source is not
// safe for concurrent use).
func Source(src rand.Source) rand.Source {
	if src != nil {
		return src
	}
	var seed [16]byte
	_, _ = crand.Read(seed[:]) // crypto/rand.Read never fails (Go 1.24+)
	return rand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:]))
}

// Run returns a random, nonzero 64-bit number from crypto/rand, which names one run of a
// component (the registry's watch cursors). It does not come from the component's Config.Rand
// on purpose: a test that restarts a node with the same seed must still get another run.
func Run() uint64 {
	for {
		var b [8]byte
		_, _ = crand.Read(b[:]) // never fails (Go 1.24+)
		if n := binary.LittleEndian.Uint64(b[:]); n != 0 {
			return n
		}
	}
}
