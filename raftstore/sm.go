package raftstore

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/dgraph-io/badger/v4"
	sm "github.com/lni/dragonboat/v4/statemachine"
	"github.com/muster-io/muster/model"
	"github.com/vmihailenco/msgpack/v5"
)

// Transaction budget of one Update chunk. Badger refuses a transaction
// above 15 % of the memtable size (ErrTxnTooBig); Update commits a chunk
// before it gets near that. One entry (at most maxEntryBytes of commands,
// each writing one key) always fits in an empty chunk.
const (
	txnBudgetBytes = 640 << 10
	txnBudgetCount = 4000
)

// stateMachine is the Dragonboat IOnDiskStateMachine. Its state lives in
// Badger; the applied index is written in the same transaction as the data.
// The Node owns the Badger handle: the state machine never closes it.
type stateMachine struct {
	db       *badger.DB
	listener Listener
	log      *slog.Logger
	applied  atomic.Uint64
	closed   atomic.Bool
	// published is the index whose changes the listener has (Update's last
	// chunk committed, Reset); pubMu guards pubCh, closed (and cleared)
	// when it moves while someone waits for it (waitPublished).
	published atomic.Uint64
	pubMu     sync.Mutex
	pubCh     chan struct{}
	cleaned   uint64 // index of the last dedupe clean-up; Update's goroutine only
	// sinceClean counts the dedupe records written since (Update's goroutine).
	sinceClean int
	cleanMore  bool // the last clean-up hit its bound: more may be past the window

	// Snapshots (see snapshot.go): once snapEvery entries were applied
	// past the last snapshot (snapAt), a non-blocking send on snapDue
	// after each batch until the snapshot loop took one (0: never);
	// retention tracks streams.
	snapEvery uint64
	snapAt    atomic.Uint64 // index of the last snapshot known; the snapshot loop writes it
	snapDue   chan struct{}
	retention *retention

	limits model.Limits // a recovered snapshot's values are checked with these (checkRecord)

	// ix is what the rules and the dedupe check read (see memIndex): built
	// by Open and RecoverFromSnapshot, then Update's goroutine only.
	ix *memIndex

	// cmds and changes are Update's buffers, reused from call to call (the
	// listener gets changes for the call only): a batch's commands as
	// decoded, and the changes of the call.
	cmds    []Command
	changes []Change
}

// keptChanges caps the changes buffer Update keeps for the next call: four
// full entries' worth (about 0.5 MiB).
const keptChanges = 4 * maxBatchCommands

var _ sm.IOnDiskStateMachine = (*stateMachine)(nil)

func newStateMachine(db *badger.DB, l Listener, log *slog.Logger) *stateMachine {
	if l == nil {
		l = NopListener{}
	}
	return &stateMachine{db: db, listener: l, log: log, snapDue: make(chan struct{}, 1), retention: &retention{}, ix: newMemIndex()}
}

// appliedTo records index as applied and says when a snapshot is due:
// again after every batch until the snapshot loop took it, so that a
// snapshot that failed is tried again.
func (s *stateMachine) appliedTo(index uint64) {
	s.applied.Store(index)
	if s.snapEvery > 0 && index >= s.snapAt.Load()+s.snapEvery {
		select {
		case s.snapDue <- struct{}{}:
		default: // one is pending already
		}
	}
}

// Open returns the applied index persisted with the data and hands the
// loaded state to the listener.
func (s *stateMachine) Open(stopc <-chan struct{}) (uint64, error) {
	st, err := s.load()
	if err != nil {
		return 0, err
	}
	s.applied.Store(st.Index)
	s.listener.Reset(st)
	s.publish(st.Index)
	return st.Index, nil
}

// load reads the whole state from Badger and builds the index from it.
func (s *stateMachine) load() (State, error) {
	var st State
	ix := newMemIndex()
	err := s.db.View(func(txn *badger.Txn) error {
		var e error
		if st, e = loadState(txn); e != nil {
			return e
		}
		return ix.load(&st, txn)
	})
	if err != nil {
		return State{}, err
	}
	s.ix = ix
	return st, nil
}

// dedupeWindow: an entry whose ID was applied at most this many indices
// earlier is a re-proposal (a retry after a timed-out attempt that did
// commit) and is not applied again; its first outcome is returned. Older
// records are ignored whether or not they were cleaned up yet, so the
// outcome is the same on every replica.
const dedupeWindow = 50000

// Update applies a batch of entries: one Badger transaction (split into
// chunks only when it gets large), the applied index written with the data.
// The in-memory index changes as each command applies, before its
// transaction commits, and the listener gets the batch while the last chunk
// is written. An error is fatal (Dragonboat's apply worker
// panics with it: the process stops), and on restart Open rebuilds the
// index from what Badger holds, so an index ahead of a failed commit is
// never read.
func (s *stateMachine) Update(ents []sm.Entry) ([]sm.Entry, error) {
	w := &writer{txn: s.db.NewTransaction(true), ix: s.ix}
	defer func() { w.txn.Discard() }()
	var last uint64
	changes, decoded := s.changes[:0], 0
	defer func() {
		// Nothing of the call stays reachable from the buffers, and a
		// long call's (a replica catching up) changes are not kept.
		clear(s.cmds[:decoded])
		clear(changes)
		s.changes = nil
		if cap(changes) <= keptChanges {
			s.changes = changes[:0]
		}
	}()
	var index uint64 // the entry applyPart applies a part of
	// applyPart applies one proposer's entry, or one part of a merged
	// entry, at index and returns the index its commands were applied at
	// (an earlier one for a part applied before: the dedupe record's) and
	// their result codes. An undecodable part is skipped: no commands.
	applyPart := func(b []byte) (uint64, []byte, error) {
		id, cmds, err := decodeEntry(s.cmds[:0], b)
		s.cmds, decoded = cmds[:0], max(decoded, len(cmds))
		if err != nil {
			s.log.Error("raftstore: skipping undecodable entry", "index", index, "err", err)
			return index, nil, nil
		}
		if id != (entryID{}) {
			if rec := s.ix.dedupe[id]; len(rec) >= 8 {
				if at := binary.BigEndian.Uint64(rec); at+dedupeWindow >= index {
					return at, rec[8:], nil
				}
			}
		}
		// The dedupe record: the index, then one result code per command.
		rec := make([]byte, 8+len(cmds))
		binary.BigEndian.PutUint64(rec, index)
		codes := rec[8:]
		changes = slices.Grow(changes, len(cmds))
		for j := range cmds {
			c := &cmds[j]
			c.Normalize()
			code, err := w.apply(c)
			if err != nil {
				return 0, nil, fmt.Errorf("raftstore: apply index %d: %w", index, err)
			}
			codes[j] = code
			changes = append(changes, Change{Index: index, Cmd: *c, Rejected: rejection(code, c)})
		}
		if id != (entryID{}) {
			if err := w.set(dedupeKey(id), rec); err != nil {
				return 0, nil, err
			}
			s.ix.dedupe[id] = rec
			s.sinceClean++
			if err := w.set(dedupeAtKey(index, id), nil); err != nil {
				return 0, nil, err
			}
		}
		return index, codes, nil
	}
	for i := range ents {
		e := &ents[i]
		index = e.Index
		if last != 0 && (w.bytes+2*len(e.Cmd) > txnBudgetBytes || w.count+maxBatchCommands+2*maxMergedParts > txnBudgetCount) {
			if err := s.commit(w, last, nil); err != nil {
				return nil, err
			}
			w = &writer{txn: s.db.NewTransaction(true), ix: s.ix}
		}
		last = e.Index
		if len(e.Cmd) == 0 || e.Cmd[0] != mergedVersion {
			at, codes, err := applyPart(e.Cmd)
			if err != nil {
				return nil, err
			}
			e.Result = sm.Result{Value: at, Data: codes}
			continue
		}
		parts, err := splitEntry(e.Cmd)
		if err != nil {
			// Never proposed by this package; every replica skips it alike.
			s.log.Error("raftstore: skipping undecodable entry", "index", e.Index, "err", err)
			e.Result = sm.Result{Value: e.Index}
			continue
		}
		// A merged entry (forward.go): each part's codes after their count
		// (2 bytes), so that a part that is skipped or refused costs the
		// others nothing.
		var all []byte
		for _, p := range parts {
			_, codes, err := applyPart(p)
			if err != nil {
				return nil, err
			}
			all = binary.BigEndian.AppendUint16(all, uint16(len(codes)))
			all = append(all, codes...)
		}
		e.Result = sm.Result{Value: e.Index, Data: all}
	}
	if last != 0 {
		// Every 1,024 indices, or sooner once 1,000 records were written
		// (a merged entry writes one per part), and after every clean-up
		// that hit its bound (a backlog: a replica catching up writes many
		// in one call), until one deletes fewer.
		if last-s.cleaned >= 1024 || s.sinceClean >= 1000 || s.cleanMore {
			n, err := s.cleanDedupe(w, last)
			if err != nil {
				return nil, err
			}
			s.cleaned, s.sinceClean, s.cleanMore = last, 0, n == maxDedupeClean
		}
		// The listener gets the batch while Badger writes its last chunk:
		// every change is committed in the Raft log, and if the write fails
		// the replica stops (see above).
		if err := s.commit(w, last, func() {
			if len(changes) > 0 {
				s.listener.Applied(changes)
			}
		}); err != nil {
			return nil, err
		}
		s.publish(last)
	}
	return ents, nil
}

// maxDedupeClean bounds the dedupe records one clean-up deletes (two
// writes each, within an Update chunk's budget).
const maxDedupeClean = 1000

// cleanDedupe deletes up to maxDedupeClean dedupe records older than the
// window and returns how many it deleted.
func (s *stateMachine) cleanDedupe(w *writer, last uint64) (int, error) {
	if last <= dedupeWindow {
		return 0, nil
	}
	limit := last - dedupeWindow
	var old [][]byte
	it := w.txn.NewIterator(badger.IteratorOptions{Prefix: []byte{kindDedupeAt}})
	for it.Rewind(); it.Valid() && len(old) < maxDedupeClean; it.Next() {
		k := it.Item().KeyCopy(nil)
		if len(k) != 9+entryIDLen || binary.BigEndian.Uint64(k[1:9]) >= limit {
			break
		}
		old = append(old, k)
	}
	it.Close()
	for _, k := range old {
		var id entryID
		copy(id[:], k[9:])
		if err := w.del(k); err != nil {
			return 0, err
		}
		if err := w.del(dedupeKey(id)); err != nil {
			return 0, err
		}
		delete(s.ix.dedupe, id)
	}
	return len(old), nil
}

// commit commits w's transaction with the applied index, running during
// (when not nil) while Badger writes it, and then records index as applied.
func (s *stateMachine) commit(w *writer, index uint64, during func()) error {
	if err := w.txn.Set(appliedKey, encodeIndex(index)); err != nil {
		return err
	}
	done := make(chan error, 1)
	w.txn.CommitWith(func(err error) { done <- err })
	if during != nil {
		during()
	}
	if err := <-done; err != nil {
		return fmt.Errorf("raftstore: commit index %d: %w", index, err)
	}
	s.appliedTo(index)
	return nil
}

// lookupApplied is the only query Lookup answers: the applied index.
type lookupApplied struct{}

// Lookup answers lookupApplied; Node reads Badger directly for everything
// else. It may run concurrently with Update and after Close.
func (s *stateMachine) Lookup(q any) (any, error) {
	if _, ok := q.(lookupApplied); ok {
		return s.applied.Load(), nil
	}
	return nil, fmt.Errorf("raftstore: unknown lookup %T", q)
}

// Sync makes everything applied so far durable.
func (s *stateMachine) Sync() error {
	if s.closed.Load() {
		return nil
	}
	return s.db.Sync()
}

// PrepareSnapshot returns a read-only transaction: a point-in-time view.
// Dragonboat calls it (and then SaveSnapshot) only to stream the state to
// a replica, at the applied index: the log after it is kept until the
// receiver can have caught up (retention; the end of the stream is
// Dragonboat's SendSnapshotCompleted or SendSnapshotAborted event, since
// SaveSnapshot returns once the chunks are queued).
func (s *stateMachine) PrepareSnapshot() (any, error) {
	index := s.applied.Load()
	s.retention.streamStarted(index)
	return &snapshotCtx{txn: s.db.NewTransaction(false), index: index}, nil
}

// snapshotCtx is PrepareSnapshot's result.
type snapshotCtx struct {
	txn   *badger.Txn
	index uint64
}

// Snapshot stream: records framed as uvarint(length) + msgpack(snapRecord).
// The first record is the header (K = snapMagic, V = version); then every
// Badger pair in key order; then the trailer (empty K, V = record count).
type snapRecord struct {
	K []byte `msgpack:"k"`
	V []byte `msgpack:"v"`
}

var snapMagic = []byte("muster-raftstore-snapshot")

const (
	snapVersion   = 1
	maxSnapRecord = 1 << 20
)

func writeRecord(w *bufio.Writer, r snapRecord) error {
	b, err := msgpack.Marshal(&r)
	if err != nil {
		return err
	}
	var hdr [binary.MaxVarintLen64]byte
	if _, err := w.Write(hdr[:binary.PutUvarint(hdr[:], uint64(len(b)))]); err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

func readRecord(r *bufio.Reader, buf []byte) (snapRecord, []byte, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return snapRecord{}, buf, fmt.Errorf("%w: snapshot: %w", ErrCorrupt, err)
	}
	if n > maxSnapRecord {
		return snapRecord{}, buf, fmt.Errorf("%w: snapshot record of %d bytes", ErrCorrupt, n)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return snapRecord{}, buf, fmt.Errorf("%w: snapshot: %w", ErrCorrupt, err)
	}
	var rec snapRecord
	if err := model.UnmarshalWith(buf, &rec, model.DecodeOptions{MaxAlloc: committedDecode.MaxAlloc}); err != nil {
		return snapRecord{}, buf, fmt.Errorf("%w: snapshot record: %w", ErrCorrupt, err)
	}
	return rec, buf, nil
}

// SaveSnapshot streams the state of the transaction PrepareSnapshot
// returned. The output is deterministic for a given state.
func (s *stateMachine) SaveSnapshot(ctx any, w io.Writer, done <-chan struct{}) error {
	sc, ok := ctx.(*snapshotCtx)
	if !ok {
		return fmt.Errorf("raftstore: snapshot context %T", ctx)
	}
	defer sc.txn.Discard()
	return writeSnapshot(sc.txn, w, done)
}

func writeSnapshot(txn *badger.Txn, w io.Writer, done <-chan struct{}) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	if err := writeRecord(bw, snapRecord{K: snapMagic, V: []byte{snapVersion}}); err != nil {
		return err
	}
	it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: true, PrefetchSize: 64})
	defer it.Close()
	var count uint64
	for it.Rewind(); it.Valid(); it.Next() {
		if count%256 == 0 {
			select {
			case <-done:
				return sm.ErrSnapshotStopped
			default:
			}
		}
		item := it.Item()
		v, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		if err := writeRecord(bw, snapRecord{K: item.Key(), V: v}); err != nil {
			return err
		}
		count++
	}
	if err := writeRecord(bw, snapRecord{V: encodeIndex(count)}); err != nil {
		return err
	}
	return bw.Flush()
}

// RecoverFromSnapshot replaces the whole state with the snapshot's. The
// snapshot comes from a peer: every record is checked first (checkRecord:
// decoded under committedDecode's bound and validated with the commands'
// rules) while it is copied to a spool file next to Badger's directory,
// and a snapshot with one bad record is refused whole, the state
// untouched. Then: drop everything, load the pairs from the spool with a
// write batch, write the applied index last, sync. A crash in the middle
// leaves index 0 (or no index), and Dragonboat recovers from the snapshot
// again on restart.
func (s *stateMachine) RecoverFromSnapshot(r io.Reader, done <-chan struct{}) error {
	spool, err := os.CreateTemp(filepath.Dir(s.db.Opts().Dir), "recover-*.spool")
	if err != nil {
		return fmt.Errorf("raftstore: snapshot spool: %w", err)
	}
	defer func() {
		_ = spool.Close()
		_ = os.Remove(spool.Name())
	}()
	if err := s.checkSnapshot(r, spool, done); err != nil {
		return err
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("raftstore: snapshot spool: %w", err)
	}
	return s.loadSnapshot(bufio.NewReaderSize(spool, 64<<10), done)
}

// checkSnapshot reads a snapshot stream, checks every record and copies
// the stream to w.
func (s *stateMachine) checkSnapshot(r io.Reader, w io.Writer, done <-chan struct{}) error {
	br := bufio.NewReaderSize(r, 64<<10)
	bw := bufio.NewWriterSize(w, 64<<10)
	var buf []byte
	var rec snapRecord
	var err error
	var hdr [binary.MaxVarintLen64]byte
	for n := 0; ; n++ {
		if n%256 == 0 {
			select {
			case <-done:
				return sm.ErrSnapshotStopped
			default:
			}
		}
		rec, buf, err = readRecord(br, buf)
		if err != nil {
			return err
		}
		switch {
		case n == 0:
			if err := checkHeader(rec); err != nil {
				return err
			}
		case len(rec.K) == 0:
			if c, err := decodeIndex(rec.V); err != nil || c != uint64(n-1) {
				return fmt.Errorf("%w: snapshot trailer says %d records, read %d", ErrCorrupt, c, n-1)
			}
		default:
			if err := checkRecord(rec.K, rec.V, s.limits); err != nil {
				return err
			}
		}
		if _, err := bw.Write(hdr[:binary.PutUvarint(hdr[:], uint64(len(buf)))]); err != nil {
			return fmt.Errorf("raftstore: snapshot spool: %w", err)
		}
		if _, err := bw.Write(buf); err != nil {
			return fmt.Errorf("raftstore: snapshot spool: %w", err)
		}
		if n > 0 && len(rec.K) == 0 {
			if err := bw.Flush(); err != nil {
				return fmt.Errorf("raftstore: snapshot spool: %w", err)
			}
			return nil
		}
	}
}

// loadSnapshot replaces the state with the checked snapshot in br.
func (s *stateMachine) loadSnapshot(br *bufio.Reader, done <-chan struct{}) error {
	_, buf, err := readRecord(br, nil) // the header, checked
	if err != nil {
		return err
	}
	if err := s.db.DropAll(); err != nil {
		return err
	}
	wb := s.db.NewWriteBatch()
	defer wb.Cancel()
	var applied []byte
	for count := 0; ; count++ {
		if count%256 == 0 {
			select {
			case <-done:
				return sm.ErrSnapshotStopped
			default:
			}
		}
		var rec snapRecord
		rec, buf, err = readRecord(br, buf)
		if err != nil {
			return err
		}
		if len(rec.K) == 0 {
			break
		}
		if rec.K[0] == kindApplied {
			applied = rec.V
			continue
		}
		if err := wb.Set(rec.K, rec.V); err != nil {
			return err
		}
	}
	if err := wb.Flush(); err != nil {
		return err
	}
	if applied != nil {
		err := s.db.Update(func(txn *badger.Txn) error { return txn.Set(appliedKey, applied) })
		if err != nil {
			return err
		}
	}
	if err := s.db.Sync(); err != nil {
		return err
	}
	st, err := s.load()
	if err != nil {
		return err
	}
	s.applied.Store(st.Index)
	s.listener.Reset(st)
	s.publish(st.Index)
	return nil
}

// publish records that the listener has every change up to index (Applied
// returned, or Reset with the state at index), and wakes those waiting for
// it (waitPublished).
func (s *stateMachine) publish(index uint64) {
	s.published.Store(index)
	s.pubMu.Lock()
	if s.pubCh != nil {
		close(s.pubCh)
		s.pubCh = nil
	}
	s.pubMu.Unlock()
}

// waitPublished waits until the listener has index's changes, or ctx
// ends: what a local Propose waits for (Dragonboat answers it once Update
// has returned).
func (s *stateMachine) waitPublished(ctx context.Context, index uint64) error {
	for s.published.Load() < index {
		s.pubMu.Lock()
		if s.pubCh == nil {
			s.pubCh = make(chan struct{})
		}
		ch := s.pubCh
		s.pubMu.Unlock()
		if s.published.Load() >= index { // published before the channel was there
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Close marks the state machine closed; the Node closes Badger after the
// NodeHost has stopped.
func (s *stateMachine) Close() error {
	s.closed.Store(true)
	return nil
}
