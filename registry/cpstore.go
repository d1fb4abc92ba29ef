package registry

import (
	"context"

	"github.com/muster-io/muster/model"
)

// Store keeps the registry's persistent data (service definitions,
// persistent instances and their health, instance patches) replicated
// between nodes, and tells every node's registry what it applied through
// the StoreFeed handed to its constructor (StoreFunc). Package
// registry/raftcp implements it with a raftstore Raft group.
//
// Without a Store, persistent data lives in the registry's memory, is
// checked and applied at once, and is lost on Close.
//
// Every method may be called concurrently with every other, never with
// the registry's lock held, except IsLeader, which must not block.
type Store interface {
	// Start opens the store; called once, by Registry.Start.
	Start(ctx context.Context) error
	// WaitReady blocks until the store has applied, and fed, everything
	// committed when it started, or ctx ends. After Close it fails with
	// an error matching ErrClosed.
	WaitReady(ctx context.Context) error
	// Barrier blocks until every write committed before the call has been
	// applied on this node and fed, or ctx ends.
	Barrier(ctx context.Context) error
	// IsLeader reports whether this node leads the store's group. The
	// leader proposes the registry's clean-ups, and runs the active health
	// checks when nothing else tells the nodes apart (no Replicator). It
	// does not block.
	IsLeader() bool
	// Propose commits cmd, which the registry normalized and admitted
	// (model.AdmitCommand), and returns once it has been applied on this
	// node and fed. The store checks it again at apply time with
	// model.CheckCommand, the replicated rules, and applies it as
	// model.ResolveCommand rewrites it. rejected is those rules refusing
	// it: model's rule error (it matches ErrServiceExists, ErrNotFound,
	// ErrServiceNotEmpty or ErrKindMismatch, which are model's). err is
	// the command not being decided: an error matching ErrNoLeader (no
	// quorum within the store's bounded wait), ErrClosed,
	// model.ErrInvalid, or ctx's.
	Propose(ctx context.Context, cmd model.Command) (rejected, err error)
	// Close closes the store; called once, by Registry.Close, after the
	// registry's goroutines stopped.
	Close() error
}

// StoreFeed is how a Store tells the registry what it applied. Calls come
// one at a time, in the order of the store's log, and must not call the
// Store's methods other than IsLeader (they may wait for the call to
// return). The slice Applied gets is for the call only (a store may reuse
// it); the commands in it, and the strings and slices they hold, are the
// feed's to keep, and so is what Reset gets.
type StoreFeed interface {
	// Applied delivers the commands that took effect, in log order, with
	// default names filled in, as model.ResolveCommand rewrote them: for a
	// PutInstance the stored instance (a re-put keeps the stored health),
	// for a PatchInstance the stored patch (merged with the previous one).
	// The registry may modify them.
	Applied(cmds []model.Command)
	// Reset replaces all the persistent data the registry holds with st:
	// when the store opens, and after it installed a snapshot.
	Reset(st StoreState)
}

// StoreFunc builds the registry's Store; New calls it once. feed is the
// registry's side of the store's change feed.
type StoreFunc func(env Env, feed StoreFeed) (Store, error)

// StoreState is a complete copy of a Store's data.
type StoreState struct {
	Services  []model.Service       // sorted by key
	Instances []model.Instance      // persistent instances, sorted by key
	Patches   []model.InstancePatch // sorted by key
	Index     uint64                // the store's position in its log
}
