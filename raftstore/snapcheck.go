package raftstore

import (
	"bytes"
	"encoding/binary"
	"fmt"

	pb "github.com/lni/dragonboat/v4/raftpb"
	"github.com/muster-io/muster/model"
)

// patchLimits are the limits a stored patch is checked with: a stored
// patch is the merge of every patch of its instance, each within
// Config.Limits, so its metadata may be larger than one patch's (it is
// still bounded by the snapshot record's size).
var patchLimits = model.Limits{MaxMetadataSize: maxSnapRecord}

// checkRecord checks one pair of a snapshot before any of it is stored: a
// known key kind, a value that decodes under committedDecode (the bound of
// committed entries) and passes the rules the commands that wrote it
// passed (l, the node's Limits), stored under the key its own fields give.
// Errors wrap ErrCorrupt and name the key.
func checkRecord(k, v []byte, l model.Limits) error {
	if err := checkPair(k, v, l); err != nil {
		return fmt.Errorf("%w: snapshot record %q: %w", ErrCorrupt, k, err)
	}
	return nil
}

func checkPair(k, v []byte, l model.Limits) error {
	if len(k) == 0 {
		return fmt.Errorf("empty key")
	}
	switch k[0] {
	case kindApplied:
		if len(k) != 1 {
			return fmt.Errorf("applied-index key of %d bytes", len(k))
		}
		_, err := decodeIndex(v)
		return err
	case kindService:
		var s model.Service
		if err := model.UnmarshalWith(v, &s, committedDecode); err != nil {
			return err
		}
		if err := s.Validate(l); err != nil {
			return err
		}
		if !bytes.Equal(serviceKey(s.Key), k) {
			return fmt.Errorf("service %s stored under another key", s.Key)
		}
	case kindInstance:
		var i model.Instance
		if err := model.UnmarshalWith(v, &i, committedDecode); err != nil {
			return err
		}
		if i.Ephemeral {
			return fmt.Errorf("ephemeral instance %s", i.Key())
		}
		if err := i.Validate(l); err != nil {
			return err
		}
		if !bytes.Equal(instKey(kindInstance, i.Key()), k) {
			return fmt.Errorf("instance %s stored under another key", i.Key())
		}
	case kindPatch:
		var p model.InstancePatch
		if err := model.UnmarshalWith(v, &p, committedDecode); err != nil {
			return err
		}
		if err := p.Validate(patchLimits); err != nil {
			return err
		}
		if !bytes.Equal(instKey(kindPatch, p.Key), k) {
			return fmt.Errorf("patch of %s stored under another key", p.Key)
		}
	case kindDedupe:
		if len(k) != 1+entryIDLen || len(v) < 8 || len(v) > 8+maxBatchCommands {
			return fmt.Errorf("dedupe record of %d bytes under a key of %d", len(v), len(k))
		}
	case kindDedupeAt:
		if len(k) != 9+entryIDLen || len(v) != 0 {
			return fmt.Errorf("dedupe index record of %d bytes under a key of %d", len(v), len(k))
		}
	default:
		return fmt.Errorf("unknown key kind %q", k[0])
	}
	return nil
}

// recordScanner checks a snapshot stream fed to it in pieces: the header
// record, every pair (checkRecord), the trailer's count. It holds at most
// one incomplete record. It is what RecoverFromSnapshot checks, so a
// stream that passes is one RecoverFromSnapshot accepts (Badger's own
// errors aside).
type recordScanner struct {
	limits  model.Limits
	pending []byte
	header  bool // the header record was read
	done    bool // the trailer was read
	count   uint64
}

// feed checks the records completed by b; nothing after the trailer is
// read.
func (s *recordScanner) feed(b []byte) error {
	if s.done {
		return nil
	}
	s.pending = append(s.pending, b...)
	off := 0
	for !s.done {
		n, w := binary.Uvarint(s.pending[off:])
		if w == 0 {
			break // the length is not complete yet
		}
		if w < 0 || n > maxSnapRecord {
			return fmt.Errorf("%w: snapshot record of %d bytes", ErrCorrupt, n)
		}
		if len(s.pending)-off-w < int(n) {
			break
		}
		body := s.pending[off+w : off+w+int(n)]
		off += w + int(n)
		if err := s.record(body); err != nil {
			return err
		}
	}
	s.pending = append(s.pending[:0], s.pending[off:]...)
	if s.done {
		s.pending = nil
	}
	return nil
}

func (s *recordScanner) record(body []byte) error {
	var rec snapRecord
	if err := model.UnmarshalWith(body, &rec, model.DecodeOptions{MaxAlloc: committedDecode.MaxAlloc}); err != nil {
		return fmt.Errorf("%w: snapshot record: %w", ErrCorrupt, err)
	}
	switch {
	case !s.header:
		if err := checkHeader(rec); err != nil {
			return err
		}
		s.header = true
	case len(rec.K) == 0:
		if n, err := decodeIndex(rec.V); err != nil || n != s.count {
			return fmt.Errorf("%w: snapshot trailer says %d records, read %d", ErrCorrupt, n, s.count)
		}
		s.done = true
	default:
		if err := checkRecord(rec.K, rec.V, s.limits); err != nil {
			return err
		}
		s.count++
	}
	return nil
}

// end reports whether the stream was complete.
func (s *recordScanner) end() error {
	if !s.done {
		return fmt.Errorf("%w: snapshot stream ended before its trailer", ErrCorrupt)
	}
	return nil
}

func checkHeader(hdr snapRecord) error {
	if string(hdr.K) != string(snapMagic) || len(hdr.V) != 1 || hdr.V[0] != snapVersion {
		return fmt.Errorf("%w: not a raftstore snapshot (version %v)", ErrCorrupt, hdr.V)
	}
	return nil
}

// Dragonboat's streamed snapshot file (version 2): the first chunk starts
// with a header block of dragonboatHeaderSize bytes (its length as 8 bytes
// little endian, a pb.SnapshotHeader, a checksum, padding); every chunk
// holding the state machine's bytes ends with a 4-byte CRC32 of them; a
// short tail block and an empty last chunk follow. Dragonboat checks the
// checksums itself as the chunks arrive.
const (
	dragonboatHeaderSize = 1024
	dragonboatCRCSize    = 4
)

// streamCheck follows one snapshot stream received over a Muster
// transport, chunk by chunk in order, and checks the state machine's
// records in it before Dragonboat writes the chunk: a stream that would
// make RecoverFromSnapshot fail (and Dragonboat panic, on every restart,
// since the received snapshot is kept) is refused on the chunk that shows
// it.
type streamCheck struct {
	session []byte // Dragonboat's session record, before the state machine's bytes
	scan    recordScanner
}

// sessionSize is the size of the (empty) client-session record Dragonboat
// writes before an on-disk state machine's stream: the LRU size and a
// session count, 8 bytes each, little endian.
const sessionSize = 16

func (c *streamCheck) chunk(ch *pb.Chunk) error {
	data := ch.Data
	if ch.ChunkId == 0 {
		if len(data) < dragonboatHeaderSize {
			return fmt.Errorf("%w: first snapshot chunk of %d bytes", ErrCorrupt, len(data))
		}
		n := binary.LittleEndian.Uint64(data)
		if n > dragonboatHeaderSize-8-dragonboatCRCSize {
			return fmt.Errorf("%w: snapshot header of %d bytes", ErrCorrupt, n)
		}
		var h pb.SnapshotHeader
		if err := unmarshal(&h, data[8:8+n]); err != nil {
			return fmt.Errorf("%w: snapshot header: %w", ErrCorrupt, err)
		}
		if h.Version != 2 || h.CompressionType != pb.NoCompression || h.ChecksumType != pb.CRC32IEEE {
			return fmt.Errorf("%w: snapshot header version %d, compression %s, checksum %s",
				ErrCorrupt, h.Version, h.CompressionType, h.ChecksumType)
		}
		data = data[dragonboatHeaderSize:]
	}
	if len(data) > 0 && !c.scan.done {
		if len(data) <= dragonboatCRCSize {
			return fmt.Errorf("%w: snapshot block of %d bytes", ErrCorrupt, len(data))
		}
		data = data[:len(data)-dragonboatCRCSize]
		if n := min(sessionSize-len(c.session), len(data)); n > 0 {
			c.session = append(c.session, data[:n]...)
			data = data[n:]
			if len(c.session) == sessionSize && binary.LittleEndian.Uint64(c.session[8:]) != 0 {
				return fmt.Errorf("%w: snapshot stream with client sessions", ErrCorrupt)
			}
		}
		if err := c.scan.feed(data); err != nil {
			return err
		}
	}
	if ch.IsLastChunk() {
		return c.scan.end()
	}
	return nil
}
