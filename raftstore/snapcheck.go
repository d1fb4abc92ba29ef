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

// Dragonboat's streamed snapshot file (version 2), whose bytes the chunks
// carry in order (chunk boundaries mean nothing): a header block of
// dragonboatHeaderSize bytes (its length as 8 bytes little endian, a
// pb.SnapshotHeader, a checksum, padding), then blocks of
// dragonboatBlockSize bytes of the state machine's stream each followed by
// a 4-byte CRC32 (the last block shorter), then a 16-byte tail (size and
// magic number). Dragonboat checks the checksums and the tail itself as
// the chunks arrive, and reads the blocks back the same way.
const (
	dragonboatHeaderSize = 1024
	dragonboatBlockSize  = 2 << 20
	dragonboatCRCSize    = 4
	dragonboatTailSize   = 16
)

// streamCheck follows one snapshot stream received over a Muster
// transport, chunk by chunk in order, and checks the state machine's
// records in it before Dragonboat writes the chunk: a stream that would
// make RecoverFromSnapshot fail (and Dragonboat panic, on every restart,
// since the received snapshot is kept) is refused on the chunk that shows
// it. It holds at most a block and a chunk, and one record.
type streamCheck struct {
	raw     []byte // file bytes after the header, from the current block's start
	fed     int    // bytes of raw's block checked already
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
		if c.raw != nil || c.session != nil {
			return fmt.Errorf("%w: a second first chunk", ErrCorrupt)
		}
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
	c.raw = append(c.raw, data...)
	// A byte of the current block is the state machine's once at least a
	// CRC and the tail follow it (the block may be the last, and short):
	// feed it then, not when the block is complete.
	const full = dragonboatBlockSize + dragonboatCRCSize
	for {
		if len(c.raw) >= full+dragonboatTailSize {
			if err := c.block(c.raw[c.fed:dragonboatBlockSize]); err != nil {
				return err
			}
			c.raw, c.fed = append(c.raw[:0:0], c.raw[full:]...), 0
			continue
		}
		if safe := min(dragonboatBlockSize, len(c.raw)-dragonboatCRCSize-dragonboatTailSize); safe > c.fed {
			if err := c.block(c.raw[c.fed:safe]); err != nil {
				return err
			}
			c.fed = safe
		}
		break
	}
	if !ch.IsLastChunk() {
		return nil
	}
	if len(c.raw) < dragonboatTailSize {
		return fmt.Errorf("%w: snapshot stream without its tail", ErrCorrupt)
	}
	if last := c.raw[:len(c.raw)-dragonboatTailSize]; len(last) > 0 {
		if len(last) <= dragonboatCRCSize {
			return fmt.Errorf("%w: snapshot block of %d bytes", ErrCorrupt, len(last))
		}
		if err := c.block(last[c.fed : len(last)-dragonboatCRCSize]); err != nil {
			return err
		}
	}
	c.raw, c.fed = nil, 0
	return c.scan.end()
}

// block checks one block of the state machine's stream.
func (c *streamCheck) block(data []byte) error {
	if n := min(sessionSize-len(c.session), len(data)); n > 0 {
		c.session = append(c.session, data[:n]...)
		data = data[n:]
		if len(c.session) == sessionSize && binary.LittleEndian.Uint64(c.session[8:]) != 0 {
			return fmt.Errorf("%w: snapshot stream with client sessions", ErrCorrupt)
		}
	}
	return c.scan.feed(data)
}
