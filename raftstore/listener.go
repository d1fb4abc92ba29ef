package raftstore

import "github.com/muster-io/muster/model"

// Listener receives the state machine's change feed on every replica.
//
// Concurrency contract: calls come from the state machine's apply goroutine
// (Dragonboat's), one at a time and in log order. They must return quickly:
// the shard applies nothing while a call runs. They must not call Node's
// write methods (Propose, Barrier, AddReplica, …), which would wait for the
// apply goroutine the call is blocking; reading Node's local state is fine.
// What Reset gets is the listener's to keep. The slice Applied gets is for
// the call only (the state machine reuses it); the Change values in it, and
// the strings and slices they hold, are the listener's to keep: copy them
// out of the slice.
type Listener interface {
	// Reset says that the state machine (re)loaded its state: on Open of
	// existing (or empty) data, and after recovering from a snapshot. st is
	// a complete copy; the listener replaces whatever it holds with it.
	Reset(st State)
	// Applied delivers committed commands in log order with their outcome
	// (Rejected is nil when the command took effect). One Raft entry may
	// carry several commands (a batch): they share an Index and follow one
	// another in the slice. Badger may still be writing the call's last
	// changes while it runs (a read of Node's local state from Applied
	// waits for that write and sees them), and if that write fails the
	// replica stops after Applied returns. Propose returns, and the
	// replica's applied index moves, only once Badger holds the changes and
	// Applied has returned. Every change delivered is committed in the log.
	Applied(changes []Change)
}

// State is a complete copy of the CP data.
type State struct {
	Services  []model.Service       // sorted by key
	Instances []model.Instance      // persistent instances, sorted by key
	Patches   []model.InstancePatch // sorted by key
	Index     uint64                // the last applied Raft index
}

// Change is one applied command.
type Change struct {
	Index uint64 // Raft index of the entry that carried the command
	// Cmd is the command as applied: default names filled in; for
	// PutInstance the stored instance (a re-put keeps the stored health),
	// for PatchInstance the stored patch (merged with the previous one).
	Cmd      Command
	Rejected error // nil if applied; else wraps one of the rejection errors
}

// Result is the outcome of Propose.
type Result struct {
	Index    uint64 // Raft index of the entry that carried the command
	Rejected error  // nil if applied; else wraps one of the rejection errors
}

// ReadOptions choose how a read is served.
type ReadOptions struct {
	// Linearizable makes the read wait for Barrier first: it then sees
	// every write committed before it began. Otherwise it reads the local
	// replica, which may lag the leader.
	Linearizable bool
}

// NopListener ignores the change feed.
type NopListener struct{}

// Reset does nothing.
func (NopListener) Reset(State) {}

// Applied does nothing.
func (NopListener) Applied([]Change) {}
