package raftstore

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"github.com/muster-io/muster/model"
	"github.com/vmihailenco/msgpack/v5"
)

// Op is the kind of a Command.
type Op uint8

// Command kinds. The values are stored in the Raft log: never renumber.
const (
	OpCreateService  Op = 1
	OpUpdateService  Op = 2
	OpDeleteService  Op = 3
	OpPutInstance    Op = 4
	OpDeleteInstance Op = 5
	OpPatchInstance  Op = 6
	OpRemovePatch    Op = 7
	OpSetHealth      Op = 8
)

var opNames = [...]string{"", "CreateService", "UpdateService", "DeleteService", "PutInstance",
	"DeleteInstance", "PatchInstance", "RemovePatch", "SetHealth"}

func (o Op) String() string {
	if int(o) < len(opNames) && o != 0 {
		return opNames[o]
	}
	return "Op(" + strconv.Itoa(int(o)) + ")"
}

// MaxCommandSize caps the msgpack encoding of one command. It keeps every
// Raft entry (a batch of commands) well inside one Badger transaction.
const MaxCommandSize = 64 << 10

// Command is one change of CP data, encoded with msgpack in the Raft log.
// Fields are used according to Op; the msgpack tags are stable.
type Command struct {
	Op       Op                  `msgpack:"op"`
	Service  model.Service       `msgpack:"svc,omitempty"`  // create, update
	Upsert   bool                `msgpack:"up,omitempty"`   // update: create the definition if absent
	SvcKey   model.ServiceKey    `msgpack:"skey,omitempty"` // delete service
	Instance model.Instance      `msgpack:"inst,omitempty"` // put instance
	Key      model.InstanceKey   `msgpack:"key,omitempty"`  // delete instance, remove patch, set health
	Patch    model.InstancePatch `msgpack:"patch,omitempty"`
	Healthy  bool                `msgpack:"healthy,omitempty"` // set health
}

// Validate checks everything about c that does not depend on stored state:
// the op, the fields the op uses (model's rules with l) and the encoded
// size. Errors are *model.ValidationError (errors.Is(err, model.ErrInvalid)).
// Empty namespace, group and cluster names are allowed: they stand for the
// defaults, which are filled in when the command is applied.
func (c *Command) Validate(l model.Limits) error {
	if err := c.validateFields(l); err != nil {
		return err
	}
	b, err := c.Marshal()
	if err != nil {
		return err
	}
	return checkSize(len(b))
}

func checkSize(n int) error {
	if n > MaxCommandSize {
		return &model.ValidationError{Field: "command", Rule: "encoded size must be at most 64 KiB", Value: strconv.Itoa(n)}
	}
	return nil
}

func (c *Command) validateFields(l model.Limits) error {
	switch c.Op {
	case OpCreateService, OpUpdateService:
		return c.Service.Validate(l)
	case OpDeleteService:
		return c.SvcKey.Validate()
	case OpPutInstance:
		if c.Instance.Ephemeral {
			return &model.ValidationError{Field: "instance.ephemeral", Rule: "raftstore holds persistent instances only", Value: "true"}
		}
		return c.Instance.Validate(l)
	case OpDeleteInstance, OpRemovePatch, OpSetHealth:
		return c.Key.Validate()
	case OpPatchInstance:
		return c.Patch.Validate(l)
	}
	return &model.ValidationError{Field: "command.op", Rule: "must be a known operation", Value: strconv.Itoa(int(c.Op))}
}

// normalize fills in default names, so that every replica stores and
// compares the same keys.
func (c *Command) normalize() {
	switch c.Op {
	case OpCreateService, OpUpdateService:
		c.Service = c.Service.WithDefaults()
	case OpDeleteService:
		c.SvcKey = c.SvcKey.WithDefaults()
	case OpPutInstance:
		c.Instance = c.Instance.WithDefaults()
	case OpDeleteInstance, OpRemovePatch, OpSetHealth:
		c.Key = c.Key.WithDefaults()
	case OpPatchInstance:
		c.Patch.Key = c.Patch.Key.WithDefaults()
	}
}

// Marshal returns the msgpack encoding of c, the form stored in the log.
func (c *Command) Marshal() ([]byte, error) {
	return msgpack.Marshal(c)
}

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

// decodeEntry decodes a Raft entry written by encodeEntry. It is safe on
// untrusted input.
func decodeEntry(b []byte) (entryID, []Command, error) {
	var id entryID
	if len(b) < entryHdrLen || b[0] != entryVersion {
		return id, nil, fmt.Errorf("%w: entry: %w", ErrCorrupt, errBadEntry)
	}
	copy(id[:], b[1:entryHdrLen])
	var cmds []Command
	if err := model.UnmarshalWith(b[entryHdrLen:], &cmds, committedDecode); err != nil {
		return id, nil, fmt.Errorf("%w: entry: %w", ErrCorrupt, err)
	}
	return id, cmds, nil
}
