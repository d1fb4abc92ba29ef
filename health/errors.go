package health

import "errors"

// ErrInvalidTimeouts is returned, wrapped with the name of the offending field and the rule it
// breaks, by [Timeouts.Validate] and by [Leases.Put]. Match it with errors.Is.
var ErrInvalidTimeouts = errors.New("health: invalid timeouts")

// ErrInvalidConfig is returned, wrapped with the name of the offending field and the rule it
// breaks, by [Config.Validate] and [NewScheduler].
var ErrInvalidConfig = errors.New("health: invalid config")

// ErrClosed is returned by [Scheduler.Start] and [Scheduler.Settle] after [Scheduler.Close].
var ErrClosed = errors.New("health: scheduler closed")

// ErrNotStarted is returned by [Scheduler.Settle] before [Scheduler.Start].
var ErrNotStarted = errors.New("health: scheduler not started")

// ErrStarted is returned by a second call of [Scheduler.Start].
var ErrStarted = errors.New("health: already started")
