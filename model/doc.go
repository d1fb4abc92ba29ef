// Package model holds Muster's plain data types: the keys that name services
// and instances, instances and service definitions, queries and the views
// that answer them, and the deltas between views. It imports nothing else of
// Muster, and every other package may import it.
//
// # Usage
//
//	svc := model.ServiceKey{Name: "orders"}.WithDefaults() // public, DEFAULT_GROUP
//	in := model.NewInstance(svc, "10.0.0.7", 8080)       // weight 1, enabled, healthy
//	err := in.Validate(model.Limits{})                   // zero Limits: the defaults
//	key := in.Key()                                      // the InstanceKey that names it
//	b, err := model.Marshal(in)                          // msgpack, stable field names
//	err = model.Unmarshal(b, &in)                        // bounded: for untrusted bytes
//
// Errors from Validate match errors.Is(err, ErrInvalid) and name the field.
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
// No name can walk a path: namespaces ([A-Za-z0-9_-]) cannot hold '.' or
// '/'; a group may not be "." or ".."; a service name may hold '/' (Nacos
// allows it: "team/orders") but no backslash, no leading '/', and no empty,
// "." or ".." segment between slashes ("..", "../etc", "a/./b", "a//b" are
// refused; "com.example.Svc", "a-b_c:d", "..." are fine).
//
// Metadata keys may not hold control characters (C0 U+0000–U+001F, DEL,
// C1 U+0080–U+009F); values may hold a tab but no other control character,
// so that no NUL truncates a value and no CR or LF forges a log line or a
// header. This applies to every metadata set: instance, service, cluster,
// patch and health-check headers.
//
// # Immutability and encoding
//
// Metadata is an immutable set of pairs sorted by key (held as their msgpack
// encoding, one string), so instances and views can be shared by every
// reader without copies. ServiceView values are built once
// per revision and must not be modified.
//
// Unmarshal is the decoder for bytes from anywhere untrusted. It checks the
// input against the destination type before msgpack decodes it, and bounds
// what the decode allocates to MaxDecodeRatio (16) × the input length plus
// DecodeSlack (4 KiB): a msgpack nil or empty map is one byte, but a slice
// element of a large struct is hundreds, so without the bound 1 MiB of input
// could allocate more than 1 GiB. A nil is accepted only where the Go type
// has one. Struct fields cap their length with a maxlen tag, and
// UnmarshalWith caps the top-level value (DecodeOptions.MaxLen).
// UnmarshalInstanceList decodes a replicated publisher record's instances
// (InstanceList) with the same guarantees and a cap on their number, in one
// pass that counts its own allocations instead of a walk before msgpack.
//
// Every type that crosses the wire or the disk has msgpack tags
// (github.com/vmihailenco/msgpack/v5) whose names are part of the format:
// fields may be added, never renamed. Metadata encodes as a map in key order,
// so equal values encode to equal bytes.
//
// # Commands and their rules
//
// Command is one change of CP data (service definitions, persistent
// instances, patches, health): what the registry's standalone store applies
// and what raftstore writes into the Raft log, whose encoding is frozen
// (TestCommandGolden). Its state rules are written once, in rules.go, over
// a small read interface (CommandState): CheckCommand holds the replicated
// rules that a Raft state machine applies on every replica, AdmitCommand
// adds the rules that need a node's whole index (ephemeral instances, who
// asks), and ResolveCommand gives the form the state stores (a re-put keeps
// the stored health; a patch merges with the stored one).
// UnmarshalCommands decodes a batch of commands with Unmarshal's checks
// (in one pass that charges what Unmarshal's walk would, for the form
// Marshal writes), and AppendCommands decodes one into a reused buffer.
//
// Values of this package are safe for concurrent reads; nothing here
// synchronises writes.
package model
