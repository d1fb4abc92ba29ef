package raftstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/muster-io/muster/model"
	"github.com/vmihailenco/msgpack/v5"
)

// The command model lives in model (one model and one set of rules for the
// registry's standalone store and this state machine); these aliases keep
// raftstore's names.

// Op is the kind of a Command.
type Op = model.Op

// Command kinds. The values are stored in the Raft log: never renumber.
const (
	OpCreateService  = model.OpCreateService
	OpUpdateService  = model.OpUpdateService
	OpDeleteService  = model.OpDeleteService
	OpPutInstance    = model.OpPutInstance
	OpDeleteInstance = model.OpDeleteInstance
	OpPatchInstance  = model.OpPatchInstance
	OpRemovePatch    = model.OpRemovePatch
	OpSetHealth      = model.OpSetHealth
)

// MaxCommandSize caps the msgpack encoding of one command. It keeps every
// Raft entry (a batch of commands) well inside one Badger transaction.
const MaxCommandSize = model.MaxCommandSize

// Command is one change of CP data, encoded with msgpack in the Raft log
// (model.Command: fields are used according to Op; the msgpack tags are
// stable).
type Command = model.Command

func checkSize(n int) error { return model.CheckCommandSize(n) }

// UnmarshalCommand decodes a command encoded by Marshal. It is safe on
// untrusted input (model.Unmarshal bounds every declared length). It does
// not validate the command.
func UnmarshalCommand(b []byte) (Command, error) {
	var c Command
	if err := model.Unmarshal(b, &c); err != nil {
		return Command{}, fmt.Errorf("%w: command: %w", ErrCorrupt, err)
	}
	return c, nil
}

// Raft entry layout: entryVersion, a 16-byte proposal ID (8 bytes of the
// proposing Node's random nonce, 8 bytes of its sequence number; all zero
// for none), then a msgpack array of encoded Commands (a batch). The ID
// lets the state machine apply a re-proposed entry once (see dedupe).
const (
	entryVersion = 1
	entryIDLen   = 16
	entryHdrLen  = 1 + entryIDLen
)

// entryID identifies one proposed entry; the zero ID is never deduplicated.
type entryID [entryIDLen]byte

// maxBatchCommands caps the commands packed into one Raft entry.
const maxBatchCommands = 256

// maxEntryBytes caps the size of one Raft entry (a batch).
const maxEntryBytes = 256 << 10

// committedDecode bounds the decoding of what Marshal wrote into a length
// capped already (a Raft entry, a snapshot record): such input must decode
// whenever it is well-formed, and model.Unmarshal's ratio bound holds for
// every realistic value but not for all of Marshal's output (a service of
// many clusters with one-letter names and no check expands about 23 times).
// An absolute bound keeps a hostile entry or record from costing more than
// this.
var committedDecode = model.DecodeOptions{MaxLen: maxBatchCommands, MaxAlloc: 64 << 20}

// encodeEntry packs already-encoded commands into one Raft entry.
func encodeEntry(id entryID, cmds [][]byte) []byte {
	n := entryHdrLen + 5
	for _, c := range cmds {
		n += len(c)
	}
	var buf bytes.Buffer
	buf.Grow(n)
	buf.WriteByte(entryVersion)
	buf.Write(id[:])
	enc := msgpack.GetEncoder()
	enc.Reset(&buf)
	_ = enc.EncodeArrayLen(len(cmds)) // a bytes.Buffer never fails
	msgpack.PutEncoder(enc)
	for _, c := range cmds {
		buf.Write(c)
	}
	return buf.Bytes()
}

var errBadEntry = errors.New("bad entry header")

// A merged entry (forward.go) holds the entries of several proposers, each
// whole (its version, ID and commands), so that each keeps its ID: its
// version mergedVersion, the count of parts (one byte), then each part's
// length (4 bytes, big-endian) and bytes. Its commands together stay within
// one entry's bounds (maxBatchCommands, maxEntryBytes), so it fits an
// Update chunk as one entry does.
const (
	mergedVersion  = 2
	maxMergedParts = 8
)

// encodeMerged packs whole entries into one merged entry.
func encodeMerged(parts [][]byte) []byte {
	n := 2
	for _, p := range parts {
		n += 4 + len(p)
	}
	b := make([]byte, 0, n)
	b = append(b, mergedVersion, byte(len(parts)))
	for _, p := range parts {
		b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
	}
	return b
}

// splitEntry returns the proposers' entries in a Raft entry: the entry
// itself, or a merged entry's parts (slices of b). A part is checked when
// it is decoded (decodeEntry).
func splitEntry(b []byte) ([][]byte, error) {
	if len(b) == 0 || b[0] != mergedVersion {
		return [][]byte{b}, nil
	}
	if len(b) < 2 || b[1] == 0 || b[1] > maxMergedParts {
		return nil, fmt.Errorf("%w: merged entry: %w", ErrCorrupt, errBadEntry)
	}
	parts := make([][]byte, 0, b[1])
	rest := b[2:]
	for range b[1] {
		if len(rest) < 4 {
			return nil, fmt.Errorf("%w: merged entry: %w", ErrCorrupt, errBadEntry)
		}
		l := binary.BigEndian.Uint32(rest)
		if uint64(l) > uint64(len(rest)-4) {
			return nil, fmt.Errorf("%w: merged entry: part of %d bytes, %d left", ErrCorrupt, l, len(rest)-4)
		}
		parts, rest = append(parts, rest[4:4+l]), rest[4+l:]
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: merged entry: %d bytes after its parts", ErrCorrupt, len(rest))
	}
	return parts, nil
}

// decodeEntry decodes a Raft entry written by encodeEntry, appending its
// commands to dst. It is safe on untrusted input: model.AppendCommands
// checks it under committedDecode's bound exactly as model.UnmarshalWith
// does (and decodes the commands as it would, by hand when they are in the
// form Marshal writes).
func decodeEntry(dst []Command, b []byte) (entryID, []Command, error) {
	var id entryID
	if len(b) < entryHdrLen || b[0] != entryVersion {
		return id, dst, fmt.Errorf("%w: entry: %w", ErrCorrupt, errBadEntry)
	}
	copy(id[:], b[1:entryHdrLen])
	cmds, err := model.AppendCommands(dst, b[entryHdrLen:], committedDecode)
	if err != nil {
		return id, dst, fmt.Errorf("%w: entry: %w", ErrCorrupt, err)
	}
	return id, cmds, nil
}
