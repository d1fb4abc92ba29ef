package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	pb "github.com/lni/dragonboat/v4/raftpb"
)

// A peer's Raft batch and snapshot chunk are decoded by Dragonboat's
// generated protobuf code, which allocates a Message or an Entry struct
// per occurrence of the field (3 bytes of input for an empty entry, 80
// bytes decoded) and a map entry per membership entry. Before it runs,
// the body's wire format is walked (no allocation) to count what the
// decode would make, and a body that would cost more than
// maxDecodeRatio × its size + decodeSlack, or exceeds a hard count, is
// refused. Legitimate traffic stays far below: a real entry carries at
// least its index, term and an encoded command.
const (
	maxDecodeRatio = 16
	decodeSlack    = 64 << 10

	maxBatchMessages   = 1 << 14 // messages in one batch
	maxBatchEntries    = 1 << 18 // entries in one batch, over all its messages
	maxSnapshotField   = 64      // bytes of a message's Snapshot (only InstallSnapshot fills it, and it never travels here)
	maxMembershipItems = 4096    // entries of a chunk's membership maps
)

// Decoded sizes, from Dragonboat's own types.
var (
	sizeofMessage = int64(unsafe.Sizeof(pb.Message{}))
	sizeofEntry   = int64(unsafe.Sizeof(pb.Entry{}))
)

// Protobuf field numbers of Dragonboat's raftpb encoding (raft_optimized.go,
// chunk.go).
const (
	fieldBatchRequests = 1  // MessageBatch.Requests, repeated Message
	fieldBatchSource   = 3  // MessageBatch.SourceAddress, string
	fieldMsgEntries    = 11 // Message.Entries, repeated Entry
	fieldMsgSnapshot   = 12 // Message.Snapshot
	fieldChunkMembers  = 10 // Chunk.Membership
)

var errWire = errors.New("malformed protobuf")

// wireField is one field of a protobuf message: its number, wire type and,
// for a length-delimited field, its bytes.
type wireField struct {
	num  uint64
	typ  int
	data []byte
}

// fields calls fn for every field of the protobuf message b, in order;
// it stops at fn's first error. Groups (wire types 3 and 4), which
// Dragonboat never writes, are malformed.
func fields(b []byte, fn func(wireField) error) error {
	for len(b) > 0 {
		tag, n := binary.Uvarint(b)
		if n <= 0 {
			return errWire
		}
		b = b[n:]
		f := wireField{num: tag >> 3, typ: int(tag & 7)}
		if f.num == 0 {
			return errWire
		}
		switch f.typ {
		case 0:
			if _, n = binary.Uvarint(b); n <= 0 {
				return errWire
			}
			b = b[n:]
		case 1, 5:
			size := 8
			if f.typ == 5 {
				size = 4
			}
			if len(b) < size {
				return errWire
			}
			b = b[size:]
		case 2:
			l, n := binary.Uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return errWire
			}
			f.data = b[n : n+int(l)]
			b = b[n+int(l):]
		default:
			return errWire
		}
		if err := fn(f); err != nil {
			return err
		}
	}
	return nil
}

// batchCost is what decoding a MessageBatch would make.
type batchCost struct {
	alloc    int64 // bytes
	messages int
	entries  int
}

// walkBatch counts what Dragonboat's MessageBatch.Unmarshal would allocate
// for body, and refuses (errBatchTooLarge) a body over the bounds.
func walkBatch(body []byte) (batchCost, error) {
	c := batchCost{alloc: int64(unsafe.Sizeof(pb.MessageBatch{}))}
	err := fields(body, func(f wireField) error {
		switch {
		case f.num == fieldBatchRequests && f.typ == 2:
			c.messages++
			if c.messages > maxBatchMessages {
				return fmt.Errorf("%w: more than %d messages", errBatchTooLarge, maxBatchMessages)
			}
			c.alloc += sizeofMessage
			return fields(f.data, func(m wireField) error {
				switch {
				case m.num == fieldMsgEntries && m.typ == 2:
					c.entries++
					if c.entries > maxBatchEntries {
						return fmt.Errorf("%w: more than %d entries", errBatchTooLarge, maxBatchEntries)
					}
					c.alloc += sizeofEntry + int64(len(m.data)) // the command is copied
				case m.num == fieldMsgSnapshot && m.typ == 2:
					if len(m.data) > maxSnapshotField {
						return fmt.Errorf("%w: a message carrying a %d-byte snapshot", errBatchTooLarge, len(m.data))
					}
					c.alloc += maxDecodeRatio * int64(len(m.data))
				}
				return nil
			})
		case f.num == fieldBatchSource && f.typ == 2:
			c.alloc += int64(len(f.data))
		}
		return nil
	})
	if err != nil {
		return c, err
	}
	if limit := maxDecodeRatio*int64(len(body)) + decodeSlack; c.alloc > limit {
		return c, fmt.Errorf("%w: %d messages and %d entries in %d bytes would allocate %d bytes, more than %d",
			errBatchTooLarge, c.messages, c.entries, len(body), c.alloc, limit)
	}
	return c, nil
}

// walkChunk refuses a Chunk body whose decoding would allocate more than
// its bytes and a bounded membership.
func walkChunk(body []byte) error {
	return fields(body, func(f wireField) error {
		if f.num != fieldChunkMembers || f.typ != 2 {
			return nil // scalars, and Data, Filepath, FileInfo: bytes copied once
		}
		items := 0
		return fields(f.data, func(m wireField) error {
			if m.typ == 2 { // a map entry
				if items++; items > maxMembershipItems {
					return fmt.Errorf("%w: a membership of more than %d entries", errBatchTooLarge, maxMembershipItems)
				}
			}
			return nil
		})
	})
}

var errBatchTooLarge = errors.New("decoding would allocate too much")
