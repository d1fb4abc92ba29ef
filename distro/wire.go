package distro

import (
	"encoding/binary"
	"fmt"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/transport"
)

// Message kinds distro registers on the transport (its reserved range is 1–63).
const (
	kindSync     transport.Kind = 1 // owner → peer: changed records (request, empty answer)
	kindVerify   transport.Kind = 2 // owner → peer: bucket digest; answer: differing buckets and the peer's versions in them
	kindRepair   transport.Kind = 3 // owner → peer: records to install and keys to drop (request, empty answer)
	kindSnapshot transport.Kind = 4 // loader → peer: one page of every held record (request)
)

// Wire format: msgpack arrays (compact and field-order stable). Add fields only at the end.

type wireRecord struct {
	_        struct{} `msgpack:",as_array"`
	Key      string
	Kind     uint8
	Owner    string
	Revision uint64
	Deleted  bool
	Payload  []byte
}

func toWire(r Record) wireRecord {
	return wireRecord{Key: r.Key, Kind: uint8(r.Kind), Owner: r.Owner, Revision: r.Revision, Deleted: r.Deleted, Payload: r.Payload}
}

func (w wireRecord) record() Record {
	return Record{Key: w.Key, Kind: Kind(w.Kind), Owner: w.Owner, Revision: w.Revision, Deleted: w.Deleted, Payload: w.Payload}
}

// version is a record's version without its payload, exchanged by verify.
type version struct {
	_       struct{} `msgpack:",as_array"`
	Key     string
	Rev     uint64
	Deleted bool
	Owner   string // in verify answers; empty in drops (the sender is the owner)
}

type syncMsg struct {
	_       struct{} `msgpack:",as_array"`
	Records []wireRecord
}

type verifyReq struct {
	_      struct{} `msgpack:",as_array"`
	Digest []byte   // 8 bytes per bucket, big endian
}

type verifyResp struct {
	_        struct{}  `msgpack:",as_array"`
	Buckets  []uint32  // buckets whose hashes differ (versions follow for each)
	Versions []version // the receiver's versions of the sender's records in those buckets
}

type repairMsg struct {
	_       struct{} `msgpack:",as_array"`
	Records []wireRecord
	Drop    []version // records of the sender it no longer holds: drop if still at that version
}

type snapReq struct {
	_    struct{} `msgpack:",as_array"`
	From uint32   // first bucket
	Max  uint32   // record budget for the page
}

type snapResp struct {
	_       struct{} `msgpack:",as_array"`
	Records []wireRecord
	Next    uint32 // first bucket of the next page
	Done    bool
}

func encodeDigest(sums []uint64, nb int) []byte {
	b := make([]byte, 8*nb)
	for i, s := range sums {
		binary.BigEndian.PutUint64(b[8*i:], s)
	}
	return b
}

func records(ws []wireRecord) ([]Record, error) {
	out := make([]Record, len(ws))
	for i, w := range ws {
		out[i] = w.record()
		if err := out[i].validate(); err != nil {
			return nil, fmt.Errorf("record %d: %w", i, err)
		}
	}
	return out, nil
}

func wires(rs []Record) []wireRecord {
	out := make([]wireRecord, len(rs))
	for i, r := range rs {
		out[i] = toWire(r)
	}
	return out
}

func decode(b []byte, v any) error {
	if err := model.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRecord, err)
	}
	return nil
}

func validVersions(vs []version) error {
	for i, v := range vs {
		if v.Key == "" || len(v.Key) > MaxKeyLen || v.Rev == 0 || len(v.Owner) > MaxOwnerLen {
			return fmt.Errorf("%w: version %d: key must be 1–%d bytes and revision > 0", ErrInvalidRecord, i, MaxKeyLen)
		}
	}
	return nil
}

// decodeSync decodes and validates a sync message.
func decodeSync(b []byte) ([]Record, error) {
	var m syncMsg
	if err := decode(b, &m); err != nil {
		return nil, err
	}
	return records(m.Records)
}

// decodeVerifyReq decodes a digest of nb buckets.
func decodeVerifyReq(b []byte, nb int) ([]uint64, error) {
	var m verifyReq
	if err := decode(b, &m); err != nil {
		return nil, err
	}
	if len(m.Digest) != 8*nb {
		return nil, fmt.Errorf("%w: digest of %d bytes, want %d (8 × Buckets; do the nodes' Buckets differ?)", ErrInvalidRecord, len(m.Digest), 8*nb)
	}
	sums := make([]uint64, nb)
	for i := range sums {
		sums[i] = binary.BigEndian.Uint64(m.Digest[8*i:])
	}
	return sums, nil
}

// decodeVerifyResp decodes a verify answer for nb buckets.
func decodeVerifyResp(b []byte, nb int) (verifyResp, error) {
	var m verifyResp
	if err := decode(b, &m); err != nil {
		return m, err
	}
	for _, bk := range m.Buckets {
		if int(bk) >= nb {
			return m, fmt.Errorf("%w: bucket %d out of range (Buckets %d)", ErrInvalidRecord, bk, nb)
		}
	}
	return m, validVersions(m.Versions)
}

// decodeRepair decodes and validates a repair message.
func decodeRepair(b []byte) ([]Record, []version, error) {
	var m repairMsg
	if err := decode(b, &m); err != nil {
		return nil, nil, err
	}
	recs, err := records(m.Records)
	if err != nil {
		return nil, nil, err
	}
	return recs, m.Drop, validVersions(m.Drop)
}

func decodeSnapReq(b []byte) (snapReq, error) {
	var m snapReq
	err := decode(b, &m)
	return m, err
}

func decodeSnapResp(b []byte) ([]Record, snapResp, error) {
	var m snapResp
	if err := decode(b, &m); err != nil {
		return nil, m, err
	}
	recs, err := records(m.Records)
	return recs, m, err
}
