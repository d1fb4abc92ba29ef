// Package cfgerr joins the rule errors of a Config's Validate into one error whose message has
// one complete line per rule, each starting with the package's sentinel ("registry: invalid
// config: NodeID must not be empty"), so that every line of a log says where it comes from.
package cfgerr

import (
	"strings"
)

// Join returns nil when errs holds no error, and otherwise one error that matches sentinel
// and each of errs (errors.Is, errors.As), whose message is a line per rule: sentinel's
// message, ": ", the rule. An error of errs that spans several lines (a nested config's
// joined errors) gives a line for each, each prefixed alike.
func Join(sentinel error, errs ...error) error {
	var kept []error
	for _, err := range errs {
		if err != nil {
			kept = append(kept, err)
		}
	}
	if len(kept) == 0 {
		return nil
	}
	return &joined{sentinel: sentinel, errs: kept}
}

type joined struct {
	sentinel error
	errs     []error
}

func (e *joined) Error() string {
	prefix := e.sentinel.Error() + ": "
	var b strings.Builder
	for i, err := range e.errs {
		for j, line := range strings.Split(err.Error(), "\n") {
			if i > 0 || j > 0 {
				b.WriteByte('\n')
			}
			if !strings.HasPrefix(line, prefix) {
				b.WriteString(prefix)
			}
			b.WriteString(line)
		}
	}
	return b.String()
}

func (e *joined) Unwrap() []error { return append([]error{e.sentinel}, e.errs...) }
