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
