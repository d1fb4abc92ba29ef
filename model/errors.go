package model

import (
	"errors"
	"strconv"
)

// ErrInvalid is matched (with errors.Is) by every validation error of this
// package. The concrete error is a *ValidationError naming the field and the
// rule it broke.
var ErrInvalid = errors.New("model: invalid input")

// ErrMalformed is returned by Unmarshal for input that is not well-formed
// msgpack, or that declares more elements than it holds.
var ErrMalformed = errors.New("model: malformed msgpack")

// ErrTooLarge is returned by Unmarshal for input whose decoding would
// allocate more than the bound (MaxDecodeRatio × its length + DecodeSlack),
// or that holds more elements than a maxlen tag or DecodeOptions.MaxLen
// allow.
var ErrTooLarge = errors.New("model: msgpack value too large")

// Rule errors: CheckCommand and AdmitCommand refuse a command with one of
// these, wrapped with the service or instance concerned. Every replica of
// a Raft state machine refuses a command in the same way.
var (
	// ErrNotFound is matched by ErrServiceNotFound and ErrInstanceNotFound.
	ErrNotFound = errors.New("model: not found")
	// ErrServiceNotFound: UpdateService (without Upsert) or DeleteService of
	// a service the state does not hold. It matches ErrNotFound.
	ErrServiceNotFound error = &ruleError{"model: service not found", ErrNotFound}
	// ErrInstanceNotFound: SetHealth of an instance without a persistent
	// record, or (admission) PatchInstance of an unknown instance. It
	// matches ErrNotFound.
	ErrInstanceNotFound error = &ruleError{"model: instance not found", ErrNotFound}
	// ErrServiceExists: CreateService of a service that has a definition.
	ErrServiceExists = errors.New("model: service exists")
	// ErrServiceNotEmpty: DeleteService of a service that still has
	// instances.
	ErrServiceNotEmpty = errors.New("model: service not empty")
	// ErrKindMismatch: the command mixes ephemeral and persistent (an
	// ephemeral definition over persistent instances, a persistent instance
	// in an ephemeral service, a definition changing the kind, or
	// (admission) SetHealth of an ephemeral instance).
	ErrKindMismatch = errors.New("model: service kind mismatch")
	// ErrHealthChecked (admission): SetHealth by hand on a cluster whose
	// health check type is not NONE; its health belongs to the checker.
	ErrHealthChecked = errors.New("model: cluster is health-checked")
	// ErrNoop: the command has nothing to do (a RemovePatch of no patch;
	// admission: an expiry whose instance came back, a checker's result for
	// a cluster that turned to manual health). Not a refusal: the caller
	// applies nothing and reports success.
	ErrNoop = errors.New("model: nothing to do")
)

// ruleError is a sentinel that also matches a more general one.
type ruleError struct {
	msg  string
	kind error
}

func (e *ruleError) Error() string { return e.msg }
func (e *ruleError) Unwrap() error { return e.kind }

// DecodeError reports input that Unmarshal rejected before decoding: where,
// and which rule. It matches ErrMalformed or ErrTooLarge.
type DecodeError struct {
	// Type is the destination type, such as "model.ServiceView".
	Type string
	// Path is where in the value, in msgpack field names and indexes, such
	// as ".insts[3].md"; empty for the top level.
	Path string
	// Rule says what the input broke.
	Rule string
	// Err is ErrMalformed or ErrTooLarge.
	Err error
}

func (e *DecodeError) Error() string {
	where := e.Type
	if e.Path != "" {
		where += " at " + e.Path
	}
	return e.Err.Error() + ": decoding " + where + ": " + e.Rule
}

// Unwrap makes errors.Is(err, ErrMalformed) or errors.Is(err, ErrTooLarge)
// true.
func (e *DecodeError) Unwrap() error { return e.Err }

// ValidationError reports one rejected input: which field, and which rule it
// broke.
type ValidationError struct {
	// Field is the path of the rejected field, such as "instance.port" or
	// "instance.metadata[preserved.heart.beat.timeout]".
	Field string
	// Rule says what the field must satisfy, such as "must be 1–65535".
	Rule string
	// Value is the rejected value, quoted and shortened, or empty.
	Value string
}

func (e *ValidationError) Error() string {
	msg := "model: invalid " + e.Field + ": " + e.Rule
	if e.Value != "" {
		msg += " (got " + e.Value + ")"
	}
	return msg
}

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *ValidationError) Unwrap() error { return ErrInvalid }

// invalid builds a *ValidationError; value is quoted and cut to 64 bytes so
// that a huge input never ends up in a log line whole.
func invalid(field, rule, value string) error {
	const max = 64
	if len(value) > max {
		value = value[:max] + "…"
	}
	q := ""
	if value != "" {
		q = strconv.Quote(value)
	}
	return &ValidationError{Field: field, Rule: rule, Value: q}
}

// invalidNumber builds a *ValidationError for a number, which is not quoted
// (a port's "got 0", not "got \"0\"").
func invalidNumber(field, rule, value string) error {
	return &ValidationError{Field: field, Rule: rule, Value: value}
}
