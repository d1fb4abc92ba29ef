package distro

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/transport"
)

// The consistency report: an operator's question "do these two nodes agree?", answered
// record by record. It reuses verify's machinery: bucket digests kept current on every change,
// so agreeing buckets cost 8 bytes each, and an exchange of exact versions for the buckets
// that differ. Unlike verify, it compares every record either node holds (all owners, not only
// the asking node's), changes nothing and repairs nothing.

// kindConsistency: any member → peer: the digest of every record held, from a bucket on;
// answer: the differing buckets with the peer's versions in them. Read-only on both sides.
// Far from the other kinds (1–4), so that new replication messages can take the next ones.
const kindConsistency transport.Kind = 16

type consistencyReq struct {
	_      struct{} `msgpack:",as_array"`
	Digest []byte   // 8 bytes per bucket from From on, big endian (Buckets − From of them)
	From   uint32   // first bucket compared
}

type consistencyResp struct {
	_        struct{}    `msgpack:",as_array"`
	Buckets  bucketList  // buckets whose hashes differ
	Versions versionList // the peer's versions of every record it holds in those buckets
	Cut      bool        // the last bucket holds more versions than an answer carries: only its first ones are here
	Next     uint32      // first bucket of the next page
	Done     bool
	Held     uint64 // records the peer holds in all
}

// Diff says how a record differs between this node and a peer.
type Diff uint8

// Ways a record differs.
const (
	// DiffMissingHere: the peer holds the record, this node does not.
	DiffMissingHere Diff = iota + 1
	// DiffMissingThere: this node holds the record, the peer does not.
	DiffMissingThere
	// DiffOlder: this node's version is older than the peer's (Revision, then Owner).
	DiffOlder
	// DiffNewer: this node's version is newer than the peer's.
	DiffNewer
	// DiffConflict: the same version (Revision and Owner), but one side holds it deleted and
	// the other not, or both live with different payloads (their checksums differ): two
	// writers produced one version (a broken invariant, or an owner that restarted without its
	// state and was not yet moved past its old version).
	DiffConflict
)

var diffNames = [...]string{"", "missing here", "missing there", "older", "newer", "conflict"}

func (d Diff) String() string {
	if int(d) < len(diffNames) && d != 0 {
		return diffNames[d]
	}
	return fmt.Sprintf("Diff(%d)", uint8(d))
}

// RecordVersion is the version of a record one node holds.
type RecordVersion struct {
	Owner    string
	Revision uint64
	Deleted  bool // a tombstone
}

// KeyDiff is one record that differs. Here or There is the zero RecordVersion where the
// record is missing.
type KeyDiff struct {
	Key         string
	Diff        Diff
	Here, There RecordVersion
}

// ConsistencyReport compares the records held (live ones and tombstones; orphan markers are
// not held) by this node and a peer. See [Replicator.Compare].
type ConsistencyReport struct {
	Peer string
	// Buckets is the number of buckets compared (Config.Buckets); DivergentBuckets of them
	// differed and were compared record by record.
	Buckets          int
	DivergentBuckets int
	// Here and There are the records held by this node and by the peer.
	Here, There int
	// Equal counts the records held at the same version by both: Here minus the records of
	// this node that differ.
	Equal int
	// Counts per kind of difference: the number of Diffs with that Diff.
	MissingHere, MissingThere, Older, Newer, Conflicts int
	// Diffs lists every differing record, sorted by key.
	Diffs []KeyDiff
	// SkippedBuckets counts the buckets not compared record by record: the peer held more
	// records in one than an answer carries (more than 16,384: raise Config.Buckets).
	SkippedBuckets int
}

// Consistent reports whether the report found no difference.
func (c *ConsistencyReport) Consistent() bool { return len(c.Diffs) == 0 && c.SkippedBuckets == 0 }

// Compare compares the records this node holds with those peer holds, and reports every
// record that differs: missing on either side, older or newer here. It reuses verify's bucket
// digests: buckets that agree cost 8 bytes each on the wire and no work; only the buckets that
// differ exchange exact versions, in pages of at most 16,384 versions.
//
// It changes nothing and repairs nothing: verify does that on its own schedule. Both nodes keep
// replicating while it runs, so a record that changed during the call may show as different:
// a difference that persists over two verify periods (see Config.VerifyInterval) is real; one
// that does not was replication in flight. It blocks on the network (one request per page,
// each bounded by Config.RequestTimeout and ctx). peer must be a member that has finished its
// load (it answers ErrNotReady otherwise) and must list this node as a member (ErrNotMember
// otherwise). Compare fails with ErrClosed after Close, ErrNotStarted before Start and
// ErrUnknownMember for this node's own ID; transport errors are wrapped.
func (r *Replicator) Compare(ctx context.Context, peer string) (ConsistencyReport, error) {
	nb := r.cfg.Buckets
	rep := ConsistencyReport{Peer: peer, Buckets: nb}
	r.mu.Lock()
	closed, started := r.closed, r.started
	r.mu.Unlock()
	switch {
	case closed:
		return rep, ErrClosed
	case !started:
		return rep, ErrNotStarted
	case peer == r.self || peer == "":
		return rep, fmt.Errorf("%w: compare with %q: not a peer", ErrUnknownMember, peer)
	}
	from := 0
	for {
		r.mu.Lock()
		digest := r.allDigestLocked(from)
		r.mu.Unlock()
		body, err := model.Marshal(consistencyReq{Digest: encodeDigest(digest, nb-from), From: uint32(from)})
		if err != nil {
			return rep, err
		}
		rctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout) // real-time network deadline
		out, err := r.cfg.Transport.Request(rctx, peer, kindConsistency, body)
		cancel()
		var re *transport.RemoteError
		switch {
		case errors.As(err, &re) && re.Msg == ErrNotReady.Error():
			return rep, fmt.Errorf("%w: %s is loading", ErrNotReady, peer)
		case errors.As(err, &re) && re.Msg == ErrNotMember.Error():
			return rep, fmt.Errorf("%w: %s does not list this node", ErrNotMember, peer)
		case err != nil:
			return rep, fmt.Errorf("distro: compare with %s: %w", peer, err)
		}
		resp, err := decodeConsistencyResp(out, nb, from)
		if err != nil {
			return rep, fmt.Errorf("distro: compare with %s: bad answer: %w", peer, err)
		}
		rep.There = int(min(resp.Held, uint64(1<<62)))
		r.mu.Lock()
		r.compareLocked(&rep, resp)
		r.mu.Unlock()
		if resp.Done {
			break
		}
		from = int(resp.Next)
	}
	r.mu.Lock()
	for _, o := range r.tab.owners {
		rep.Here += o.held
	}
	r.mu.Unlock()
	slices.SortFunc(rep.Diffs, func(a, b KeyDiff) int { return cmp.Compare(a.Key, b.Key) })
	mine := rep.MissingThere + rep.Older + rep.Newer + rep.Conflicts
	rep.Equal = max(rep.Here-mine, 0)
	return rep, nil
}

// allDigestLocked returns, for every bucket from `from` on, a hash of every record held in it
// (all owners): the sum over owners of a mix of the owner and its bucket hash, so that the
// same versions under different owners differ. O(owners × buckets).
func (r *Replicator) allDigestLocked(from int) []uint64 {
	out := make([]uint64, r.cfg.Buckets-from)
	for id, o := range r.tab.owners { // only owners with held records
		oh := keyHash(id)
		for b := from; b < len(o.sums); b++ {
			if s := o.sums[b]; s != 0 {
				out[b-from] += mix64(s ^ oh)
			}
		}
	}
	return out
}

// compareLocked adds one answer's buckets to rep.
func (r *Replicator) compareLocked(rep *ConsistencyReport, resp consistencyResp) {
	nb := r.cfg.Buckets
	theirs := make(map[int]map[string]version, len(resp.Buckets))
	for _, b := range resp.Buckets {
		theirs[int(b)] = map[string]version{}
	}
	for _, v := range resp.Versions {
		if m := theirs[bucketOf(keyHash(v.Key), nb)]; m != nil {
			m[v.Key] = v
		}
	}
	for i, bk := range resp.Buckets {
		if resp.Cut && i == len(resp.Buckets)-1 {
			rep.SkippedBuckets++
			continue
		}
		rep.DivergentBuckets++
		there := theirs[int(bk)]
		r.tab.each(int(bk), func(e *entry) bool {
			if !e.held() {
				return true
			}
			here := RecordVersion{Owner: e.owner.id, Revision: e.rev, Deleted: e.deleted}
			v, ok := there[e.key]
			delete(there, e.key)
			if !ok {
				rep.add(KeyDiff{Key: e.key, Diff: DiffMissingThere, Here: here})
				return true
			}
			tv := RecordVersion{Owner: v.Owner, Revision: v.Rev, Deleted: v.Deleted}
			peer := Record{Owner: v.Owner, Revision: v.Rev}
			switch {
			case e.version().Newer(peer):
				rep.add(KeyDiff{Key: e.key, Diff: DiffNewer, Here: here, There: tv})
			case peer.Newer(e.record()):
				rep.add(KeyDiff{Key: e.key, Diff: DiffOlder, Here: here, There: tv})
			case v.Deleted != e.deleted || !v.Deleted && v.Sum != 0 && v.Sum != e.sum:
				rep.add(KeyDiff{Key: e.key, Diff: DiffConflict, Here: here, There: tv})
			}
			return true
		})
		for key, v := range there {
			rep.add(KeyDiff{Key: key, Diff: DiffMissingHere, There: RecordVersion{Owner: v.Owner, Revision: v.Rev, Deleted: v.Deleted}})
		}
	}
}

func (rep *ConsistencyReport) add(d KeyDiff) {
	rep.Diffs = append(rep.Diffs, d)
	switch d.Diff {
	case DiffMissingHere:
		rep.MissingHere++
	case DiffMissingThere:
		rep.MissingThere++
	case DiffOlder:
		rep.Older++
	case DiffNewer:
		rep.Newer++
	case DiffConflict:
		rep.Conflicts++
	}
}

// handleConsistency answers a Compare: the buckets from req.From on whose hashes differ from
// this node's, with the versions of every record held there, whole buckets up to
// maxVerifyVersions versions a page. Members only, once loaded; read-only.
func (r *Replicator) handleConsistency(_ context.Context, from string, body []byte) ([]byte, error) {
	if err := r.admit("consistency", from); err != nil {
		return nil, err
	}
	nb := r.cfg.Buckets
	start, sums, err := decodeConsistencyReq(body, nb)
	if err != nil {
		r.log.Warn("distro: bad consistency request", "from", from, "err", err)
		r.stats.malformed.Add(1)
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.admitLocked("consistency", from); err != nil {
		return nil, err
	}
	if !r.ready {
		return nil, ErrNotReady
	}
	mine := r.allDigestLocked(start)
	var resp consistencyResp
	b := start
	for ; b < nb; b++ {
		if mine[b-start] == sums[b-start] {
			continue
		}
		first := len(resp.Versions)
		r.tab.each(b, func(e *entry) bool {
			if e.held() {
				resp.Versions = append(resp.Versions, version{Key: e.key, Rev: e.rev, Deleted: e.deleted, Owner: e.owner.id, Sum: e.sum})
			}
			return true
		})
		if len(resp.Versions) > maxVerifyVersions {
			if len(resp.Buckets) > 0 {
				resp.Versions = resp.Versions[:first] // whole buckets: this one opens the next page
				break
			}
			resp.Versions = resp.Versions[:maxVerifyVersions]
			resp.Cut = true
			resp.Buckets = append(resp.Buckets, uint32(b))
			b++
			break
		}
		resp.Buckets = append(resp.Buckets, uint32(b))
	}
	resp.Next = uint32(b)
	resp.Done = b >= nb
	for _, o := range r.tab.owners {
		resp.Held += uint64(o.held)
	}
	return model.Marshal(resp)
}

func decodeConsistencyReq(b []byte, nb int) (from int, sums []uint64, err error) {
	var m consistencyReq
	if err := decode(b, &m); err != nil {
		return 0, nil, err
	}
	if int(m.From) >= nb {
		return 0, nil, fmt.Errorf("%w: first bucket %d out of range (Buckets %d)", ErrInvalidRecord, m.From, nb)
	}
	n := nb - int(m.From)
	if len(m.Digest) != 8*n {
		return 0, nil, fmt.Errorf("%w: digest of %d bytes, want %d (8 × buckets compared; do the nodes' Buckets differ?)", ErrInvalidRecord, len(m.Digest), 8*n)
	}
	sums = make([]uint64, n)
	for i := range sums {
		sums[i] = binary.BigEndian.Uint64(m.Digest[8*i:])
	}
	return int(m.From), sums, nil
}

func decodeConsistencyResp(b []byte, nb, from int) (consistencyResp, error) {
	var m consistencyResp
	if err := decode(b, &m); err != nil {
		return m, err
	}
	if len(m.Buckets) > nb {
		return m, errTooMany("buckets", len(m.Buckets), nb)
	}
	for _, bk := range m.Buckets {
		if int(bk) < from || int(bk) >= nb {
			return m, fmt.Errorf("%w: bucket %d out of range [%d, %d)", ErrInvalidRecord, bk, from, nb)
		}
	}
	if !m.Done && (int(m.Next) <= from || int(m.Next) > nb) {
		return m, fmt.Errorf("%w: next bucket %d does not advance from %d", ErrInvalidRecord, m.Next, from)
	}
	return m, validVersions(m.Versions)
}
