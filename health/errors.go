package health

import "errors"

// ErrInvalidTimeouts is returned, wrapped with the name of the offending field and the rule it
// breaks, by [Timeouts.Validate] and by [Leases.Put]. Match it with errors.Is.
var ErrInvalidTimeouts = errors.New("health: invalid timeouts")
