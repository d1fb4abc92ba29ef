package raftstore

import (
	"errors"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	_ "unsafe" // go:linkname, for Dragonboat's default LogDB constructor

	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// The commit index need not be durable.
//
// Dragonboat's Pebble LogDB commits (and fsyncs) every change of a
// replica's hard state {Term, Vote, Commit}, so a change of the commit
// index alone costs a synchronous write: on a follower, one for the
// entries of a Replicate and one more for the commit index that follows
// them, about half of the follower's fsyncs under load. Raft does not need
// the commit index on disk: a restarted replica learns it again from the
// leader (or, alone, commits its log again once elected), and an on-disk
// state machine tells Dragonboat what it has applied, so entries up to that
// index are not applied twice. Dragonboat itself applies committed entries
// before it writes the commit index (FastApply), so a crash could already
// leave the state machine ahead of the stored commit index. etcd's raft
// makes the same choice (raft.MustSync: only entries, Term and Vote force a
// sync).
//
// lazyCommitLogDB wraps the LogDB and holds back an update whose only
// change is the commit index (no entries, no snapshot, Term and Vote as
// last written). The held state goes to disk with the replica's next write,
// before any snapshot record (a snapshot index above the stored commit
// index makes Dragonboat panic on restart), and on Close. A crash loses at
// most the commit index since the last write, never an entry, a term or a
// vote.
type lazyCommitLogDB struct {
	raftio.ILogDB
	deferred *atomic.Uint64 // counts the updates held back (Stats.CommitWritesDeferred)
	writes   *atomic.Uint64 // counts the synchronous writes passed on (Stats.LogWrites)

	mu       sync.Mutex
	replicas map[replicaKey]*commitState
	// restored is the hard state ReadRaftState last returned (tests).
	restored pb.State
}

type replicaKey struct{ shard, replica uint64 }

type commitState struct {
	written pb.State // the last state handed to the LogDB
	held    pb.State // a newer state differing only in Commit, or empty
	worker  uint64   // the last worker (LogDB context) that saved for it
}

// newDefaultLogDB is the constructor of Dragonboat's default LogDB (Pebble,
// "sharded-pebble"), which lives in an internal package and is not
// otherwise reachable: without it, a wrapper would have to reimplement the
// LogDB and its on-disk format. go:linkname checks no types: if an upgrade
// removes the function the link fails, but a changed signature would be
// undefined behaviour. So the wrapper is used only with the Dragonboat
// version its signature was checked against (vettedDragonboat): the module
// pins it, TestDragonboatVersionVetted checks go.mod, and a binary whose
// build information does not name that version runs without the wrapper,
// as with Config.SyncCommitIndex (see vetted).
//
//go:linkname newDefaultLogDB github.com/lni/dragonboat/v4/internal/logdb.NewDefaultLogDB
func newDefaultLogDB(config.NodeHostConfig, config.LogDBCallback, []string, []string) (raftio.ILogDB, error)

// vettedDragonboat is the Dragonboat version whose internal
// logdb.NewDefaultLogDB has the signature newDefaultLogDB declares.
const vettedDragonboat = "v4.0.0-20250723143628-076c7f6497dc"

// linkedDragonboat returns the Dragonboat version this binary was built
// with, as its build information names it (a replacement's version for a
// replaced module: "(devel)" for a local directory), and whether the
// binary is the test binary of a package other than main.
func linkedDragonboat() (version string, libTest bool) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "", false
	}
	for _, m := range bi.Deps {
		if m.Path == "github.com/lni/dragonboat/v4" {
			if m.Replace != nil {
				return m.Replace.Version, false
			}
			return m.Version, false
		}
	}
	return "", strings.HasSuffix(bi.Path, ".test")
}

// vetted reports whether the wrapper may be used with Dragonboat version v.
// The test binary of a package other than main lists no dependencies: its
// module's go.mod decides (TestDragonboatVersionVetted checks this one's).
// Any other binary whose build information does not name the vetted
// version (another one, a replacement, no dependency list at all) runs
// without the wrapper.
func vetted(v string, libTest bool) bool { return v == vettedDragonboat || v == "" && libTest }

// errLogDBSelfCheck is Dragonboat's own start-up check of its LogDB,
// which it skips for a LogDB that is not its own type.
var errLogDBSelfCheck = errors.New("raftstore: the Raft log failed Dragonboat's self check (entries in both the plain and the batched format)")

// lazyCommitFactory creates Dragonboat's default LogDB, wrapped, and hands
// the wrapper to node. Its name is the default's: the on-disk format is the
// same, so a data directory opens with and without the wrapper.
type lazyCommitFactory struct{ node *Node }

func (f lazyCommitFactory) Create(cfg config.NodeHostConfig, cb config.LogDBCallback, dirs, walDirs []string) (raftio.ILogDB, error) {
	db, err := newDefaultLogDB(cfg, cb, dirs, walDirs)
	if err != nil {
		return nil, err
	}
	if c, ok := db.(interface{ SelfCheckFailed() (bool, error) }); ok {
		failed, err := c.SelfCheckFailed()
		if err == nil && failed {
			err = errLogDBSelfCheck
		}
		if err != nil {
			return nil, errors.Join(err, db.Close())
		}
	}
	l := newLazyCommitLogDB(db, &f.node.stats.commitDeferred, &f.node.stats.logWrites)
	f.node.logdb = l
	f.node.stats.lazyCommit.Store(true)
	return l, nil
}

func (lazyCommitFactory) Name() string { return "sharded-pebble" }

func newLazyCommitLogDB(db raftio.ILogDB, deferred, writes *atomic.Uint64) *lazyCommitLogDB {
	return &lazyCommitLogDB{ILogDB: db, deferred: deferred, writes: writes, replicas: make(map[replicaKey]*commitState)}
}

// SaveRaftState saves updates, holding back those that change only the
// commit index. worker selects the LogDB's per-worker buffers: calls for
// one worker never overlap, and the lock keeps a flush from another
// goroutine from overlapping them either.
func (l *lazyCommitLogDB) SaveRaftState(updates []pb.Update, worker uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []pb.Update // a copy, once an update is held back or changed
	write := false      // something goes to disk: the LogDB commits it with a sync
	fork := func(i int) {
		if out == nil {
			out = append(make([]pb.Update, 0, len(updates)), updates[:i]...)
		}
	}
	for i, ud := range updates {
		st := l.state(ud.ShardID, ud.ReplicaID)
		st.worker = worker
		switch {
		case pb.IsEmptyState(ud.State) && len(ud.EntriesToSave) == 0 && pb.IsEmptySnapshot(ud.Snapshot):
			// nothing to write
		case commitOnly(ud, st.written):
			st.held = ud.State
			l.deferred.Add(1)
			fork(i)
			continue
		default:
			write = true
			if pb.IsEmptyState(ud.State) && !pb.IsEmptyState(st.held) {
				fork(i)
				ud.State = st.held
			}
			if !pb.IsEmptyState(ud.State) {
				st.written = ud.State
			}
			st.held = pb.State{}
		}
		if out != nil {
			out = append(out, ud)
		}
	}
	if out == nil {
		out = updates
	}
	err := l.ILogDB.SaveRaftState(out, worker)
	if write && err == nil {
		l.writes.Add(1)
	}
	return err
}

// commitOnly reports whether ud changes nothing but the commit index of a
// replica whose last written state is written.
func commitOnly(ud pb.Update, written pb.State) bool {
	return !pb.IsEmptyState(ud.State) && !pb.IsEmptyState(written) &&
		len(ud.EntriesToSave) == 0 && pb.IsEmptySnapshot(ud.Snapshot) &&
		ud.State.Term == written.Term && ud.State.Vote == written.Vote
}

func (l *lazyCommitLogDB) state(shard, replica uint64) *commitState {
	k := replicaKey{shard, replica}
	st := l.replicas[k]
	if st == nil {
		st = &commitState{}
		l.replicas[k] = st
	}
	return st
}

// flush writes a replica's held state, with a commit index of at least
// atLeast. Callers hold l.mu.
func (l *lazyCommitLogDB) flush(shard, replica, atLeast uint64) error {
	st := l.replicas[replicaKey{shard, replica}]
	if st == nil || st.worker == 0 {
		return nil
	}
	s := st.written
	if !pb.IsEmptyState(st.held) {
		s = st.held
	}
	if pb.IsEmptyState(s) || (pb.IsEmptyState(st.held) && s.Commit >= atLeast) {
		return nil
	}
	s.Commit = max(s.Commit, atLeast)
	if err := l.ILogDB.SaveRaftState([]pb.Update{{ShardID: shard, ReplicaID: replica, State: s}}, st.worker); err != nil {
		return err
	}
	l.writes.Add(1)
	st.written, st.held = s, pb.State{}
	return nil
}

// SaveSnapshots writes the held state of each replica first: the stored
// commit index must not fall below a stored snapshot's index.
// The record itself is written without the lock: the stored commit index
// is already high enough, and later writes only raise it.
func (l *lazyCommitLogDB) SaveSnapshots(updates []pb.Update) error {
	l.mu.Lock()
	for _, ud := range updates {
		if pb.IsEmptySnapshot(ud.Snapshot) {
			continue
		}
		if err := l.flush(ud.ShardID, ud.ReplicaID, ud.Snapshot.Index); err != nil {
			l.mu.Unlock()
			return err
		}
	}
	l.mu.Unlock()
	err := l.ILogDB.SaveSnapshots(updates)
	if err == nil {
		l.writes.Add(1) // the snapshot records, one synchronous write
	}
	return err
}

// ReadRaftState is the LogDB's, remembered for the tests.
func (l *lazyCommitLogDB) ReadRaftState(shard, replica, lastIndex uint64) (raftio.RaftState, error) {
	rs, err := l.ILogDB.ReadRaftState(shard, replica, lastIndex)
	l.mu.Lock()
	l.restored = rs.State
	l.mu.Unlock()
	return rs, err
}

// restoredState is the hard state ReadRaftState last returned.
func (l *lazyCommitLogDB) restoredState() pb.State {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.restored
}

// ImportSnapshot and RemoveNodeData replace a replica's state: what was
// held for it is dropped.
func (l *lazyCommitLogDB) ImportSnapshot(ss pb.Snapshot, replica uint64) error {
	l.forget(ss.ShardID, replica)
	return l.ILogDB.ImportSnapshot(ss, replica)
}

func (l *lazyCommitLogDB) RemoveNodeData(shard, replica uint64) error {
	l.forget(shard, replica)
	return l.ILogDB.RemoveNodeData(shard, replica)
}

func (l *lazyCommitLogDB) forget(shard, replica uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.replicas, replicaKey{shard, replica})
}

// Close writes every held state, then closes the LogDB.
func (l *lazyCommitLogDB) Close() error {
	l.mu.Lock()
	var err error
	for k := range l.replicas {
		if e := l.flush(k.shard, k.replica, 0); e != nil && err == nil {
			err = e
		}
	}
	l.mu.Unlock()
	if e := l.ILogDB.Close(); err == nil {
		err = e
	}
	return err
}
