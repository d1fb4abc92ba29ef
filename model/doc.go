// Package model holds Muster's plain data types: the keys that name services
// and instances, instances and service definitions, queries and the views
// that answer them, and the deltas between views. It imports nothing else of
// Muster, and every other package may import it.
//
// # Names and defaults
//
// Services live in Namespace → Group → Service → Cluster → Instance, as in
// Nacos. Empty names stand for Nacos's defaults: namespace "public", group
// "DEFAULT_GROUP", cluster "DEFAULT" (see the WithDefaults methods). A
// grouped name is "group@@service" (GroupedName, ParseGroupedName). An
// instance without an ID gets Nacos's default "ip#port#cluster#group@@service"
// (Instance.InstanceID).
//
// Go's zero values are not Nacos's defaults for an instance's flags and
// weight: NewInstance returns an instance with weight 1, enabled, healthy and
// ephemeral, which is what a struct literal usually means to say.
//
// # Validation
//
// Every Validate method returns nil or a *ValidationError that names the
// field and the rule, and matches errors.Is(err, ErrInvalid). Nacos's limits
// are the floor (service names ≤ 512 bytes, groups ≤ 128, clusters ≤ 64,
// metadata ≤ 1024 characters); Muster goes further: IPs must parse or be
// DNS names, ports are 1–65535, weights are finite numbers in [0, 10000],
// clusters follow one pattern everywhere ([A-Za-z0-9_-]), service names are
// printable ASCII without spaces (Nacos only bans spaces and CJK), and the
// preserved beat timings are whole milliseconds of at most a day with the
// interval below both timeouts. The metadata cap is configurable through
// Limits. Beat timings are the publisher's: a patch may not set them.
//
// # Immutability and encoding
//
// Metadata is an immutable sorted list of pairs, so instances and views can
// be shared by every reader without copies. ServiceView values are built once
// per revision and must not be modified.
//
// Every type that crosses the wire or the disk has msgpack tags
// (github.com/vmihailenco/msgpack/v5) whose names are part of the format:
// fields may be added, never renamed. Metadata encodes as a map in key order,
// so equal values encode to equal bytes.
//
// Values of this package are safe for concurrent reads; nothing here
// synchronises writes.
package model
