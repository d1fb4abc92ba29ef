package distro

import (
	"hash/crc32"
	"slices"
)

// Hashes must agree across nodes and builds: digests and HRW scores are compared between nodes.
// They use FNV-1a (64 bit) finished with a SplitMix64 mixer, written out so they never change
// with a library version and cost no allocation.

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// mix64 is SplitMix64's finalizer: it spreads FNV's weak low bits over the whole word.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// keyHash is the hash of a record key; it picks the key's bucket.
func keyHash(key string) uint64 { return mix64(fnvString(fnvOffset, key)) }

// bucketOf maps a key hash to one of n buckets.
func bucketOf(kh uint64, n int) int { return int((kh >> 1) % uint64(n)) }

// versionHash is a record's contribution to its owner's bucket hash: its key, version, whether
// it is a tombstone, and its payload's checksum (payloadSum). Bucket hashes are sums (mod 2^64)
// of these, so adding or removing one record is O(1) and the order never matters.
//
// The checksum makes two copies of one version with different payloads differ: that must never
// happen, but if it does (an owner that restarted without its state while its clock had gone
// back, see Replicator.nextRevLocked), verify finds the bucket, the payloads' checksums show
// the key, and the owner moves past the version (repairPlanLocked).
func versionHash(kh, rev uint64, deleted bool, sum uint32) uint64 {
	d := uint64(0)
	if deleted {
		d = 0x9e3779b97f4a7c15
	}
	return mix64(kh ^ mix64(rev+0x632be59bd9b4e019) ^ d ^ mix64(uint64(sum)+0x2545f4914f6cdd1d))
}

// payloadSum is the checksum of a record's payload that digests and verify answers carry:
// CRC-32C (Castagnoli, computed in hardware on amd64 and arm64), never 0, so that 0 on the wire
// means a peer that sends none (an earlier version).
func payloadSum(p []byte) uint32 {
	s := crc32.Checksum(p, crc32.MakeTable(crc32.Castagnoli)) // MakeTable returns the one table, made once
	if s == 0 {
		s = 1
	}
	return s
}

// hrwScore is the rendezvous weight of member for key.
func hrwScore(member, key string) uint64 {
	h := fnvString(fnvOffset, member)
	h ^= 0xff // separator, so ("ab","c") and ("a","bc") differ
	h *= fnvPrime
	return mix64(fnvString(h, key))
}

// hrwOwner returns the member with the highest score for key (ties to the smaller ID), or "" if
// members is empty. Members need not be sorted.
//
// Rendezvous hashing moves only the keys of a member that leaves (to the others, spread evenly)
// or that joins (about 1/N of all keys, from every other member): adding a member to N moves
// ~1/(N+1) of the keys, removing one moves ~1/N. A modulo hash moves nearly all.
func hrwOwner(members []string, key string) string {
	best, bestScore := "", uint64(0)
	for _, m := range members {
		s := hrwScore(m, key)
		if best == "" || s > bestScore || (s == bestScore && m < best) {
			best, bestScore = m, s
		}
	}
	return best
}

// sortedIDs returns the member IDs, sorted and deduplicated, with self added.
func sortedIDs(members []Member, self string) []string {
	ids := make([]string, 0, len(members)+1)
	ids = append(ids, self)
	for _, m := range members {
		if m.ID != "" {
			ids = append(ids, m.ID)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}
