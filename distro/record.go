package distro

import (
	"fmt"
	"strconv"

	"github.com/muster-io/muster/distro/membership"
)

// Kind says what a record's publisher is. It decides ownership: a session record belongs to the
// node it was opened on, a beat record to the HRW owner of its key among the live members.
type Kind uint8

const (
	// KindSession is a publisher bound to a connection on its owning node. Its records are never
	// adopted: when the owner dies they are removed after Config.OrphanTimeout.
	KindSession Kind = 1
	// KindBeat is a publisher kept alive by heartbeats and owned by the HRW owner of its key.
	// When that owner changes (a member leaves or joins) the new owner adopts it.
	KindBeat Kind = 2
)

// String returns "session", "beat" or Kind(n).
func (k Kind) String() string {
	switch k {
	case KindSession:
		return "session"
	case KindBeat:
		return "beat"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

func (k Kind) valid() bool { return k == KindSession || k == KindBeat }

// Limits on records accepted from peers.
const (
	// MaxKeyLen is the longest record key (bytes).
	MaxKeyLen = 1024
	// MaxOwnerLen is the longest node ID (bytes).
	MaxOwnerLen = membership.MaxIDLen
	// MaxPayloadLen is the largest payload (bytes).
	MaxPayloadLen = 1 << 20
	// MaxMessageRecords is the most records a sync or repair message may carry (Config.MaxBatch
	// is at most this); a message declaring more is refused before anything is allocated.
	MaxMessageRecords = 4096
)

// Record is the unit of replication: the whole state of what its key names (a beat publisher,
// or one instance of a session), as encoded by the registry (Payload), with the version that
// orders its changes (Revision, then Owner).
//
// Records are values; the Payload slice is shared and must never be modified after it was
// handed to Put or received from the Replicator. A payload received from a peer is an
// allocation of its own (not a window on a message), which the table keeps as long as it holds
// that version: a Store may keep windows on it (the registry's strings do), and then keeps it
// alive for as long as it holds them, which can be longer (a view, a watcher's event). That
// allocation holds the record's Key too, its bytes just before the payload's (one allocation
// per received record, not two: see joinKeyPayload), and no other record's: the Key, or a
// window on it, kept after its record was replaced keeps the replaced payload alive too. What
// outlives the version is better kept as a copy (strings.Clone).
//
// The one-byte fields come last, so that they share one word: a Record is
// 72 bytes, not 80. (The table packs its entry apart: 64 bytes.)
type Record struct {
	Key      string // the record key: opaque to distro, unique per record (not a publisher ID)
	Owner    string // node ID of the only node that may change it
	Revision uint64
	// Payload is the registry's encoding of the record's content; nil for tombstones, except
	// in one handed to Store.Apply, which carries the payload of the version it removes there.
	Payload []byte
	Kind    Kind
	Deleted bool // tombstone
}

// Newer reports whether a's version (Revision, then Owner as tie-break) is greater than b's.
// The Owner tie-break only matters when two nodes wrote the same revision, which happens when
// membership views disagree and both adopt a beat record; every node then picks the same winner.
func (a Record) Newer(b Record) bool {
	if a.Revision != b.Revision {
		return a.Revision > b.Revision
	}
	return a.Owner > b.Owner
}

// sameVersion reports whether a and b carry the same version.
func (a Record) sameVersion(b Record) bool { return a.Revision == b.Revision && a.Owner == b.Owner }

// validate checks a record received from a peer.
func (a Record) validate() error {
	switch {
	case a.Key == "" || len(a.Key) > MaxKeyLen:
		return fmt.Errorf("%w: key must be 1–%d bytes, got %d", ErrInvalidRecord, MaxKeyLen, len(a.Key))
	case a.Owner == "" || len(a.Owner) > MaxOwnerLen:
		return fmt.Errorf("%w: owner must be 1–%d bytes, got %d", ErrInvalidRecord, MaxOwnerLen, len(a.Owner))
	case !a.Kind.valid():
		return fmt.Errorf("%w: kind must be session or beat, got %v", ErrInvalidRecord, a.Kind)
	case a.Revision == 0:
		return fmt.Errorf("%w: revision must be > 0", ErrInvalidRecord)
	case a.Deleted && len(a.Payload) != 0:
		return fmt.Errorf("%w: a tombstone carries no payload", ErrInvalidRecord)
	case len(a.Payload) > MaxPayloadLen:
		return fmt.Errorf("%w: payload must be at most %d bytes, got %d", ErrInvalidRecord, MaxPayloadLen, len(a.Payload))
	}
	return nil
}

// String is for logs: key, kind, owner, revision and deleted, never the payload.
func (a Record) String() string {
	s := a.Key + "/" + a.Kind.String() + "@" + a.Owner + "#" + strconv.FormatUint(a.Revision, 10)
	if a.Deleted {
		s += "(deleted)"
	}
	return s
}
