package model

import "strconv"

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

// Command is one change of CP data: service definitions, persistent
// instances, instance patches and the health of persistent instances. It is
// what the registry's standalone store applies and what raftstore writes
// into the Raft log, encoded with msgpack. Fields are used according to Op;
// the msgpack tags, the field order and the Op values are the log's format
// and must never change (TestCommandGolden holds them to bytes written by
// earlier versions); fields may be added at the end.
type Command struct {
	Op       Op            `msgpack:"op"`
	Service  Service       `msgpack:"svc,omitempty"`  // create, update
	Upsert   bool          `msgpack:"up,omitempty"`   // update: create the definition if absent
	SvcKey   ServiceKey    `msgpack:"skey,omitempty"` // delete service
	Instance Instance      `msgpack:"inst,omitempty"` // put instance
	Key      InstanceKey   `msgpack:"key,omitempty"`  // delete instance, remove patch, set health
	Patch    InstancePatch `msgpack:"patch,omitempty"`
	Healthy  bool          `msgpack:"healthy,omitempty"` // set health
}

// Validate checks everything about c that does not depend on stored state:
// the op, the fields the op uses (this package's rules with l) and the
// encoded size. Errors are *ValidationError (errors.Is(err, ErrInvalid)).
// Empty namespace, group and cluster names are allowed: they stand for the
// defaults, which Normalize fills in.
func (c *Command) Validate(l Limits) error {
	if err := c.ValidateFields(l); err != nil {
		return err
	}
	b, err := c.Marshal()
	if err != nil {
		return err
	}
	return CheckCommandSize(len(b))
}

// CheckCommandSize checks the length of a command's encoding against
// MaxCommandSize (for a caller that encodes the command anyway).
func CheckCommandSize(n int) error {
	if n > MaxCommandSize {
		return &ValidationError{Field: "command", Rule: "encoded size must be at most 64 KiB", Value: strconv.Itoa(n)}
	}
	return nil
}

// ValidateFields is Validate without the size check.
func (c *Command) ValidateFields(l Limits) error {
	switch c.Op {
	case OpCreateService, OpUpdateService:
		return c.Service.Validate(l)
	case OpDeleteService:
		return c.SvcKey.Validate()
	case OpPutInstance:
		if c.Instance.Ephemeral {
			return &ValidationError{Field: "instance.ephemeral", Rule: "commands hold persistent instances only", Value: "true"}
		}
		return c.Instance.Validate(l)
	case OpDeleteInstance, OpRemovePatch, OpSetHealth:
		return c.Key.Validate()
	case OpPatchInstance:
		return c.Patch.Validate(l)
	}
	return &ValidationError{Field: "command.op", Rule: "must be a known operation", Value: strconv.Itoa(int(c.Op))}
}

// Normalize fills in default names (namespace, group, cluster) in the
// fields c.Op uses, so that every replica stores and compares the same
// keys. The rules (CheckCommand, AdmitCommand) expect normalized commands.
func (c *Command) Normalize() {
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

// ServiceKey returns the key of the service c concerns.
func (c *Command) ServiceKey() ServiceKey {
	switch c.Op {
	case OpCreateService, OpUpdateService:
		return c.Service.Key
	case OpDeleteService:
		return c.SvcKey
	case OpPutInstance:
		return c.Instance.Service
	case OpPatchInstance:
		return c.Patch.Key.Service
	}
	return c.Key.Service
}

// Marshal returns the msgpack encoding of c, the form stored in the log
// (msgpack's encoding of the struct, written by AppendMsgpack). The error
// is always nil.
func (c *Command) Marshal() ([]byte, error) {
	return c.AppendMsgpack(make([]byte, 0, 320)), nil
}
