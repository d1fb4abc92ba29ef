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
