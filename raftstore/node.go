package raftstore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"github.com/jonboulle/clockwork"
	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/config"
	sm "github.com/lni/dragonboat/v4/statemachine"
	"github.com/muster-io/muster/model"
)

// Node is one replica of the CP store: a Dragonboat NodeHost running one
// shard whose state machine lives in Badger. All methods are safe for
// concurrent use.
type Node struct {
	cfg   Config
	log   *slog.Logger
	clock clockwork.Clock
	// pace times the waits that follow Dragonboat, which runs on real time
	// whatever Config.Clock is: the pause between attempts and the batcher's
	// window. A fake Config.Clock that nobody moves (registrytest's) must not
	// hold them up.
	pace clockwork.Clock

	mu      sync.Mutex // serializes Start and Close; guards started, closed
	started bool
	closed  bool
	state   atomic.Int32 // stateNew, stateStarted, stateClosed: the lock-free view of the above

	// Set by Start, read-only afterwards.
	nh       *dragonboat.NodeHost
	sm       *stateMachine
	guard    *guard // checks inbound Raft traffic over Config.Transport; nil without
	queue    chan *proposal
	fwd      chan *forward // entries followers sent to this replica as the leader (forward.go)
	fwdSlots fwdSlots      // those of each follower, queued or in flight
	ctx      context.Context
	cancel   context.CancelFunc
	done     chan struct{} // closed by Close when it begins

	closeDone chan struct{} // closed when Close has finished; closeErr is its result
	closeErr  error
	wg        sync.WaitGroup
	nonce     [8]byte       // random per Start: entry IDs never repeat across restarts
	seq       atomic.Uint64 // entry sequence number
	stats     *stats        // see Stats (stats.go)

	dbMu sync.RWMutex // guards db against Close
	db   *badger.DB

	// logdb is the Raft log's wrapper, set while Start creates the
	// NodeHost (nil with Config.SyncCommitIndex); see logdb.go.
	logdb *lazyCommitLogDB
}

// Info describes the node as it knows the shard.
type Info struct {
	ReplicaID uint64
	ShardID   uint64
	LeaderID  uint64 // 0 when no leader is known
	Term      uint64
	HasLeader bool
	IsLeader  bool
	Applied   uint64            // last index applied to the local state machine
	Members   map[uint64]string // voting members: replica ID → RaftAddress
}

// New validates and copies cfg. It starts nothing.
func New(cfg Config) (*Node, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.clone()
	cfg.RaftAddress = cfg.raftAddress()
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("replica", cfg.ReplicaID, "shard", cfg.ShardID)
	clock := cfg.Clock
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	pace := cfg.pace
	if pace == nil {
		pace = clockwork.NewRealClock()
	}
	return &Node{cfg: cfg, log: log, clock: clock, pace: pace, done: make(chan struct{}), closeDone: make(chan struct{}), stats: newStats(cfg.ShardID)}, nil
}

// badgerOptions is the small-machine profile: small memtables, no block
// cache, small value-log files.
func badgerOptions(dir string, log *slog.Logger) badger.Options {
	return badger.DefaultOptions(dir).
		WithLogger(badgerLogger{log}).
		WithMemTableSize(8 << 20).
		WithNumMemtables(2).
		WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(4).
		WithValueLogFileSize(16 << 20).
		WithBlockCacheSize(0).
		WithCompression(options.None).
		WithIndexCacheSize(0).
		WithNumCompactors(2).
		WithNumGoroutines(2).
		WithMetricsEnabled(false).
		WithDetectConflicts(false).
		WithSyncWrites(false) // Sync() calls db.Sync(); the Raft log is fsynced by Dragonboat
}

// openBadger opens the state machine's Badger directory, first removing
// the empty memtable and value-log files a crash can leave behind.
//
// Badger creates such a file and sizes it in two steps (open with
// O_CREATE, then truncate to its full size and write its header); a
// process killed between the two leaves a 0-byte .mem or .vlog file, and
// every later badger.Open fails on it ("while opening memtables ...:
// Create a new file": it takes the file for a new one and treats that as
// an error; dgraph-io/badger#2207, open as of v4.9.6). A 0-byte file holds
// no entry, not even the header every write comes after, so removing it
// loses nothing. The removal holds Badger's own directory lock, so it
// never touches a file that a live DB (another Node on the same Dir) is
// creating. TestKilledReplicaCatchesUp met the state after a SIGKILL;
// TestOpenBadgerAfterCrashLeftEmptyFiles makes it directly.
func openBadger(dir string, log *slog.Logger) (*badger.DB, error) {
	if err := removeCrashLeftovers(dir, log); err != nil {
		return nil, fmt.Errorf("raftstore: badger directory %s: %w", dir, err)
	}
	return badger.Open(badgerOptions(dir, log))
}

// removeCrashLeftovers removes dir's 0-byte .mem and .vlog files under
// Badger's directory lock; it does nothing when the lock is held elsewhere
// (badger.Open then refuses the directory) or dir does not exist.
func removeCrashLeftovers(dir string, log *slog.Logger) error {
	unlock, ok, err := lockBadgerDir(dir)
	if err != nil || !ok {
		return err
	}
	defer unlock()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || !(strings.HasSuffix(name, ".mem") || strings.HasSuffix(name, ".vlog")) {
			continue
		}
		if info, err := e.Info(); err == nil && info.Size() == 0 {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return err
			}
			log.Warn("raftstore: removed an empty Badger file a crash left", "file", name)
		}
	}
	return nil
}

// nodeHostConfig sizes Dragonboat for a small machine. Engine and LogDB
// shard counts are hard settings frozen into the data directory: never
// change them.
func (n *Node) nodeHostConfig() config.NodeHostConfig {
	logdb := config.GetTinyMemLogDBConfig()
	logdb.Shards = 1
	nhc := config.NodeHostConfig{
		DeploymentID:   n.cfg.DeploymentID,
		NodeHostDir:    filepath.Join(n.cfg.Dir, "raft"),
		RTTMillisecond: n.cfg.RTTMillisecond,
		RaftAddress:    n.cfg.RaftAddress,
		Expert: config.ExpertConfig{
			LogDB:            logdb,
			Engine:           config.EngineConfig{ExecShards: 2, CommitShards: 2, ApplyShards: 2, SnapshotShards: 2, CloseShards: 2},
			TransportFactory: n.transportFactory(),
			FS:               n.cfg.FS, // nil: Dragonboat's default, the OS's
		},
	}
	if !n.cfg.SyncCommitIndex {
		v, libTest := linkedDragonboat()
		if n.cfg.dragonboat != "" {
			v, libTest = n.cfg.dragonboat, false
		}
		if !vetted(v, libTest) {
			n.log.Warn("raftstore: this Dragonboat is not the version the commit-index wrapper was checked against: every change of the commit index is fsynced, as with SyncCommitIndex (Stats.LazyCommit false)", "dragonboat", v, "vetted", vettedDragonboat)
		} else {
			nhc.Expert.LogDBFactory = lazyCommitFactory{node: n}
		}
	}
	nhc.SystemEventListener, nhc.RaftEventListener = n.stats.events(nodeEvents{guard: n.guard, sm: n.sm}), n.stats
	if t := n.cfg.TLS; t != nil && n.cfg.Transport == nil {
		nhc.MutualTLS, nhc.CAFile, nhc.CertFile, nhc.KeyFile = true, t.CAFile, t.CertFile, t.KeyFile
	}
	return nhc
}

// transportFactory returns the factory of Dragonboat's transport: nil for
// its own TCP transport.
func (n *Node) transportFactory() config.TransportFactory {
	if n.cfg.Transport != nil {
		return muxFactory{t: n.cfg.Transport, guard: n.guard, limits: n.cfg.Limits, propose: n.forwarded}
	}
	return n.cfg.transport
}

func (n *Node) replicaConfig() config.Config {
	return config.Config{
		ReplicaID:          n.cfg.ReplicaID,
		ShardID:            n.cfg.ShardID,
		CheckQuorum:        true,
		PreVote:            true,
		ElectionRTT:        n.cfg.ElectionRTT,
		HeartbeatRTT:       n.cfg.HeartbeatRTT,
		SnapshotEntries:    0, // the Node takes them: see snapshot.go
		CompactionOverhead: n.cfg.CompactionOverhead,
	}
}

// errNodeHostFailed: Dragonboat's NewNodeHost returned no NodeHost and no
// error.
var errNodeHostFailed = errors.New("raftstore: start nodehost: Dragonboat returned neither a NodeHost nor an error (it recovered a panic)")

// Start opens Badger, starts the NodeHost and the replica (new shard,
// restart from Dir, or join) and the proposal batcher. It does not wait for
// a leader: see WaitReady. A failed Start undoes what it started.
func (n *Node) Start(ctx context.Context) (err error) {
	if err := ctx.Err(); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return ErrClosed
	}
	if n.started {
		return ErrStarted
	}
	setDragonboatLogger()
	if err := os.MkdirAll(n.cfg.Dir, 0o755); err != nil {
		return fmt.Errorf("raftstore: %w", err)
	}
	db, err := openBadger(filepath.Join(n.cfg.Dir, "badger"), n.log)
	if err != nil {
		return fmt.Errorf("raftstore: open badger: %w", err)
	}
	defer func() {
		if err != nil {
			_ = db.Close()
		}
	}()
	n.sm = newStateMachine(db, n.cfg.Listener, n.log)
	n.sm.snapEvery, n.sm.retention.overhead = n.cfg.snapshotEvery(), n.cfg.CompactionOverhead
	n.sm.limits = n.cfg.Limits
	if n.cfg.Transport != nil {
		n.guard = newGuard(n.cfg.DeploymentID, n.cfg.ShardID, n.cfg.ReplicaID)
		sm := n.sm
		n.guard.heard = func(replica, acked uint64) { sm.retention.heard(replica, acked, sm.applied.Load()) }
		n.sm.retention.acks = true
	}
	nh, err := dragonboat.NewNodeHost(n.nodeHostConfig())
	if err != nil {
		return fmt.Errorf("raftstore: start nodehost: %w", err)
	}
	if nh == nil {
		// NewNodeHost recovers a panic whose value is not an error (its
		// LogDB's "invalid fs", say) and returns neither a NodeHost nor an
		// error.
		return errNodeHostFailed
	}
	if n.guard != nil {
		n.guard.setNodeHost(nh)
	}
	defer func() {
		if err != nil {
			nh.Close()
		}
	}()
	members := map[uint64]dragonboat.Target{}
	join := n.cfg.Join
	if nh.HasNodeInfo(n.cfg.ShardID, n.cfg.ReplicaID) {
		members, join = nil, false // restart: Dir holds the membership
	} else {
		for id, addr := range n.cfg.InitialMembers {
			members[id] = addr
		}
		if !join && len(members) == 0 {
			return invalidConfig("InitialMembers", "must be set to bootstrap a new shard (or set Join)")
		}
	}
	if n.guard != nil {
		// The replicas Dragonboat registers at the start, pinned to their
		// nodes before any traffic is passed on (see guard).
		// The configured members (InitialMembers, or JoinMembers) come
		// first, on a restart too: a joiner restarted before it learnt the
		// membership has an empty bootstrap record, and the record cannot be
		// read without the LogDB wrapper (SyncCommitIndex, another
		// Dragonboat). What the record names overrides them.
		known := map[uint64]string{}
		for _, m := range []map[uint64]string{n.cfg.InitialMembers, n.cfg.JoinMembers, members} {
			for id, addr := range m {
				known[id] = addr
			}
		}
		if members == nil && n.logdb != nil {
			if bi, err := n.logdb.GetBootstrapInfo(n.cfg.ShardID, n.cfg.ReplicaID); err == nil {
				for id, addr := range bi.Addresses {
					known[id] = addr
				}
			}
		}
		n.guard.expect(known)
	}
	create := func(shardID, replicaID uint64) sm.IOnDiskStateMachine { return n.sm }
	if err := nh.StartOnDiskReplica(members, join, create, n.replicaConfig()); err != nil {
		return fmt.Errorf("raftstore: start replica: %w", err)
	}
	// The nonce only has to be unique, not reproducible: crypto/rand, not
	// a seeded source.
	if _, err := rand.Read(n.nonce[:]); err != nil {
		return fmt.Errorf("raftstore: nonce: %w", err)
	}
	n.nh, n.db = nh, db
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.queue = make(chan *proposal, 4*maxBatchCommands)
	n.fwd = make(chan *forward, forwardQueue)
	n.goFunc(n.batchLoop)
	if n.cfg.snapshotEvery() > 0 {
		n.goFunc(n.snapshotLoop)
	}
	n.started = true
	n.state.Store(stateStarted)
	n.log.Info("raftstore: started", "addr", n.cfg.RaftAddress, "join", join, "restart", members == nil)
	return nil
}

func (n *Node) goFunc(f func()) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		f()
	}()
}

// Close stops the node: refuses new work (ErrClosed), stops the batcher,
// closes the NodeHost, then Badger. It is idempotent: every call returns
// once the node is closed, with the first call's result.
func (n *Node) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		<-n.closeDone
		return n.closeErr
	}
	n.closed = true
	n.state.Store(stateClosed)
	started := n.started
	n.mu.Unlock()
	defer close(n.closeDone)
	close(n.done)
	if !started {
		return nil
	}
	n.cancel()
	n.wg.Wait()
	n.nh.Close()
	n.dbMu.Lock()
	defer n.dbMu.Unlock()
	n.closeErr = n.db.Close()
	n.db = nil
	return n.closeErr
}

const (
	stateNew int32 = iota
	stateStarted
	stateClosed
)

func (n *Node) running() error {
	switch n.state.Load() {
	case stateClosed:
		return ErrClosed
	case stateNew:
		return ErrNotStarted
	}
	return nil
}

// retryable reports whether a Dragonboat error may go away by itself
// (no leader yet, busy, timed out, dropped), or says only that the bounded
// wait ran out (a deadline already past or shorter than a tick).
func retryable(err error) bool {
	return dragonboat.IsTempError(err) || errors.Is(err, dragonboat.ErrShardNotReady) ||
		errors.Is(err, dragonboat.ErrTimeout) || errors.Is(err, dragonboat.ErrSystemBusy) ||
		errors.Is(err, dragonboat.ErrTimeoutTooSmall) || errors.Is(err, dragonboat.ErrInvalidDeadline)
}

// attemptTimeout is the timeout of one Dragonboat attempt: two election
// timeouts, so that a proposal sent to a leader that just died is retried
// once a new one is elected.
func (n *Node) attemptTimeout() time.Duration {
	return 2 * time.Duration(n.cfg.ElectionRTT) * n.cfg.rtt()
}

// backoff waits one tick before a retry; false if ctx ended. The tick is
// on n.pace, as Dragonboat's are and the bound of the wait is: paced by a
// fake Config.Clock, a retry waited for the test to move the clock and the
// bounded wait ran out instead (a proposal made while the leader was down).
func (n *Node) backoff(ctx context.Context) bool {
	t := n.pace.NewTimer(n.cfg.rtt())
	defer t.Stop()
	select {
	case <-t.Chan():
		return true
	case <-ctx.Done():
		return false
	}
}

// Barrier returns once this replica has applied every write committed
// before the call (a linearizable read point: ReadIndex, then the local
// apply reaches it; the Listener has then seen those writes too). Without a
// leader it fails with ErrNoLeader after ReadTimeout.
func (n *Node) Barrier(ctx context.Context) error {
	if err := n.running(); err != nil {
		return err
	}
	// Dragonboat is a real-time engine: the bounded wait uses real time.
	bctx, cancel := context.WithTimeout(ctx, n.cfg.ReadTimeout)
	defer cancel()
	var last error
	for {
		err := n.readIndex(bctx)
		if err == nil {
			return nil
		}
		if !retryable(err) {
			return err
		}
		last = err
		if !n.backoff(bctx) {
			return n.boundedErr(ctx, last)
		}
	}
}

func (n *Node) readIndex(ctx context.Context) error {
	timeout := n.attemptTimeout()
	if dl, ok := ctx.Deadline(); ok {
		if rem := time.Until(dl); rem < timeout { // real time: Dragonboat's own
			timeout = rem
		}
	}
	if timeout < n.cfg.rtt() {
		return dragonboat.ErrTimeout
	}
	rs, err := n.nh.ReadIndex(n.cfg.ShardID, timeout)
	if err != nil {
		return err
	}
	defer rs.Release()
	select {
	case r := <-rs.ResultC():
		switch {
		case r.Completed():
			return nil
		case r.Terminated():
			return ErrClosed
		default: // timeout, dropped
			return dragonboat.ErrTimeout
		}
	case <-n.done:
		return ErrClosed
	case <-ctx.Done():
		return dragonboat.ErrTimeout
	}
}

// boundedErr is the error after a bounded wait ended: the caller's own
// context error if it ended, ErrClosed if the node closed, else ErrNoLeader.
// last is the last attempt's error, if there was an attempt (Propose's own
// bound ends a wait in the queue too).
func (n *Node) boundedErr(ctx context.Context, last error) error {
	select {
	case <-n.done:
		return ErrClosed
	default:
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// Dragonboat's own words for the last attempt ("specified timeout value
	// is too small", "shard not ready") describe its internals, not what
	// happened: they are logged, not returned.
	if last != nil {
		n.log.Debug("raftstore: bounded wait ended without a leader", "last", last)
	}
	return fmt.Errorf("%w: no quorum of replicas answered in time", ErrNoLeader)
}

// WaitReady returns once this node has applied what was committed when it
// was called (a Barrier that is retried until ctx ends).
func (n *Node) WaitReady(ctx context.Context) error {
	for {
		err := n.Barrier(ctx)
		if err == nil || !errors.Is(err, ErrNoLeader) {
			return err
		}
	}
}

// Leader returns the leader's replica ID, if one is known.
func (n *Node) Leader() (replicaID uint64, ok bool) {
	if n.running() != nil {
		return 0, false
	}
	id, _, valid, err := n.nh.GetLeaderID(n.cfg.ShardID)
	if err != nil || !valid || id == 0 {
		return 0, false
	}
	return id, true
}

// IsLeader reports whether this replica is the shard's leader, as far as
// it knows (a cheap check for work that only the leader should start).
func (n *Node) IsLeader() bool {
	id, ok := n.Leader()
	return ok && id == n.cfg.ReplicaID
}

// InboundStats reports the Raft traffic received over Config.Transport:
// what was handed to Dragonboat and what the inbound checks dropped (see
// InboundStats). Zero without Config.Transport.
func (n *Node) InboundStats() InboundStats {
	n.mu.Lock()
	g := n.guard
	n.mu.Unlock()
	if g == nil {
		return InboundStats{}
	}
	return g.stats()
}

// ReplicaID returns this node's replica ID.
func (n *Node) ReplicaID() uint64 { return n.cfg.ReplicaID }

// Info reports the node's view of the shard.
func (n *Node) Info() Info {
	info := Info{ReplicaID: n.cfg.ReplicaID, ShardID: n.cfg.ShardID}
	if n.running() != nil {
		return info
	}
	info.Applied = n.sm.applied.Load()
	nhi := n.nh.GetNodeHostInfo(dragonboat.NodeHostInfoOption{SkipLogInfo: true})
	for _, si := range nhi.ShardInfoList {
		if si.ShardID != n.cfg.ShardID {
			continue
		}
		info.LeaderID, info.Term = si.LeaderID, si.Term
		info.HasLeader = si.LeaderID != 0
		info.IsLeader = si.LeaderID == n.cfg.ReplicaID
		info.Members = make(map[uint64]string, len(si.Replicas))
		for id, addr := range si.Replicas {
			info.Members[id] = addr
		}
	}
	return info
}

// AddReplica adds replica id at addr as a voting member. Start the new
// node with Join afterwards.
func (n *Node) AddReplica(ctx context.Context, id uint64, addr string) error {
	return n.configChange(ctx, func(cctx context.Context) error {
		return n.nh.SyncRequestAddReplica(cctx, n.cfg.ShardID, id, addr, 0)
	})
}

// RemoveReplica removes replica id from the shard. Its ID can never be
// reused.
func (n *Node) RemoveReplica(ctx context.Context, id uint64) error {
	return n.configChange(ctx, func(cctx context.Context) error {
		return n.nh.SyncRequestDeleteReplica(cctx, n.cfg.ShardID, id, 0)
	})
}

func (n *Node) configChange(ctx context.Context, f func(context.Context) error) error {
	if err := n.running(); err != nil {
		return err
	}
	bctx, cancel := context.WithTimeout(ctx, n.cfg.ProposeTimeout)
	defer cancel()
	var last error
	for {
		actx, acancel := context.WithTimeout(bctx, n.attemptTimeout())
		err := f(actx)
		acancel()
		if err == nil {
			return nil
		}
		if !retryable(err) && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("raftstore: membership change: %w", err)
		}
		last = err
		if !n.backoff(bctx) {
			return n.boundedErr(ctx, last)
		}
	}
}

// view runs f in a read-only Badger transaction, after a Barrier when opts
// ask for a linearizable read.
func (n *Node) view(ctx context.Context, opts ReadOptions, f func(*badger.Txn) error) error {
	if err := n.running(); err != nil {
		return err
	}
	if opts.Linearizable {
		if err := n.Barrier(ctx); err != nil {
			return err
		}
	}
	n.dbMu.RLock()
	defer n.dbMu.RUnlock()
	if n.db == nil {
		return ErrClosed
	}
	return n.db.View(f)
}

// GetService returns the stored definition of service key.
func (n *Node) GetService(ctx context.Context, key model.ServiceKey, opts ReadOptions) (model.Service, bool, error) {
	var s model.Service
	var ok bool
	err := n.view(ctx, opts, func(txn *badger.Txn) error {
		var e error
		ok, e = getValue(txn, serviceKey(key.WithDefaults()), &s)
		return e
	})
	if err != nil || !ok {
		return model.Service{}, false, err
	}
	return s, true, nil
}

// GetInstance returns the persistent instance with key.
func (n *Node) GetInstance(ctx context.Context, key model.InstanceKey, opts ReadOptions) (model.Instance, bool, error) {
	var inst model.Instance
	var ok bool
	err := n.view(ctx, opts, func(txn *badger.Txn) error {
		var e error
		ok, e = getValue(txn, instKey(kindInstance, key.WithDefaults()), &inst)
		return e
	})
	if err != nil || !ok {
		return model.Instance{}, false, err
	}
	return inst, true, nil
}

// GetPatch returns the instance patch stored for key.
func (n *Node) GetPatch(ctx context.Context, key model.InstanceKey, opts ReadOptions) (model.InstancePatch, bool, error) {
	var p model.InstancePatch
	var ok bool
	err := n.view(ctx, opts, func(txn *badger.Txn) error {
		var e error
		ok, e = getValue(txn, instKey(kindPatch, key.WithDefaults()), &p)
		return e
	})
	if err != nil || !ok {
		return model.InstancePatch{}, false, err
	}
	return p, true, nil
}

// Instances returns the persistent instances of service svc, sorted by key.
func (n *Node) Instances(ctx context.Context, svc model.ServiceKey, opts ReadOptions) ([]model.Instance, error) {
	var out []model.Instance
	err := n.view(ctx, opts, func(txn *badger.Txn) error {
		return scan(txn, instancePrefix(svc.WithDefaults()), func(i model.Instance) { out = append(out, i) })
	})
	if err != nil {
		return nil, err
	}
	model.SortInstances(out)
	return out, nil
}

// State returns a complete copy of the local state.
func (n *Node) State(ctx context.Context, opts ReadOptions) (State, error) {
	var st State
	err := n.view(ctx, opts, func(txn *badger.Txn) error {
		var e error
		st, e = loadState(txn)
		return e
	})
	return st, err
}
