package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/dgraph-io/badger/v4"
	"github.com/muster-io/muster/model"
	"github.com/vmihailenco/msgpack/v5"
)

// Badger key layout. Every key starts with a one-byte kind; names are
// length-prefixed (uvarint) so that no name can run into the next.
//
//	'a'                                  applied Raft index (8 bytes, big endian)
//	's' svc                              service definition (msgpack model.Service)
//	'i' svc cluster ip port              persistent instance (msgpack model.Instance)
//	'p' svc cluster ip port              instance patch (msgpack model.InstancePatch)
//	'd' entryID                          applied entry: its index (8 bytes) and result codes
//	'e' index(8 bytes) entryID           the same record ordered by index, for clean-up
//
// where svc = ns group name.
const (
	kindApplied  = 'a'
	kindService  = 's'
	kindInstance = 'i'
	kindPatch    = 'p'
	kindDedupe   = 'd'
	kindDedupeAt = 'e'
)

func dedupeKey(id entryID) []byte { return append([]byte{kindDedupe}, id[:]...) }

func dedupeAtKey(index uint64, id entryID) []byte {
	b := binary.BigEndian.AppendUint64([]byte{kindDedupeAt}, index)
	return append(b, id[:]...)
}

var appliedKey = []byte{kindApplied}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendSvc(b []byte, k model.ServiceKey) []byte {
	b = appendStr(b, k.Namespace)
	b = appendStr(b, k.Group)
	return appendStr(b, k.Name)
}

func serviceKey(k model.ServiceKey) []byte {
	return appendSvc([]byte{kindService}, k)
}

// instancePrefix is the prefix of every instance key of service k.
func instancePrefix(k model.ServiceKey) []byte {
	return appendSvc([]byte{kindInstance}, k)
}

func instKey(kind byte, k model.InstanceKey) []byte {
	return appendInstKey(make([]byte, 0, 64), kind, k)
}

func encodeIndex(i uint64) []byte { return binary.BigEndian.AppendUint64(nil, i) }

func decodeIndex(b []byte) (uint64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("%w: applied index of %d bytes", ErrCorrupt, len(b))
	}
	return binary.BigEndian.Uint64(b), nil
}

// getValue decodes the value of key into v; ok is false if key is absent.
// It is the apply path's read, so it trusts what it reads: every stored
// value was written from a validated command, or from a snapshot record
// checked before it was stored (RecoverFromSnapshot), and whatever an older
// version left on disk was decoded under committedDecode's bound when Open
// loaded the state (loadState, through scan), which refuses to open on a
// value it cannot bound.
func getValue(txn *badger.Txn, key []byte, v any) (bool, error) {
	item, err := txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	err = item.Value(func(b []byte) error { return msgpack.Unmarshal(b, v) })
	if err != nil {
		return false, fmt.Errorf("%w: key %q: %w", ErrCorrupt, key, err)
	}
	return true, nil
}

func readApplied(txn *badger.Txn) (uint64, error) {
	item, err := txn.Get(appliedKey)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var idx uint64
	err = item.Value(func(b []byte) error {
		var e error
		idx, e = decodeIndex(b)
		return e
	})
	return idx, err
}

// scan decodes every value under prefix into a new T and calls fn.
func scan[T any](txn *badger.Txn, prefix []byte, fn func(T)) error {
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 64})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		item := it.Item()
		var v T
		err := item.Value(func(b []byte) error { return model.UnmarshalWith(b, &v, committedDecode) })
		if err != nil {
			return fmt.Errorf("%w: key %q: %w", ErrCorrupt, item.Key(), err)
		}
		fn(v)
	}
	return nil
}

// loadState reads the whole state in txn.
func loadState(txn *badger.Txn) (State, error) {
	var st State
	var err error
	if st.Index, err = readApplied(txn); err != nil {
		return State{}, err
	}
	if err = scan(txn, []byte{kindService}, func(s model.Service) { st.Services = append(st.Services, s) }); err != nil {
		return State{}, err
	}
	if err = scan(txn, []byte{kindInstance}, func(i model.Instance) { st.Instances = append(st.Instances, i) }); err != nil {
		return State{}, err
	}
	if err = scan(txn, []byte{kindPatch}, func(p model.InstancePatch) { st.Patches = append(st.Patches, p) }); err != nil {
		return State{}, err
	}
	sortState(&st)
	return st, nil
}

func sortState(st *State) {
	slices.SortFunc(st.Services, func(a, b model.Service) int { return a.Key.Compare(b.Key) })
	model.SortInstances(st.Instances)
	slices.SortFunc(st.Patches, func(a, b model.InstancePatch) int { return a.Key.Compare(b.Key) })
}

// Result codes of applied commands, stored one byte per command in
// sm.Result.Data. They are part of the replicated outcome: never renumber.
const (
	codeOK              byte = 0
	codeServiceExists   byte = 1
	codeServiceNotFound byte = 2
	codeServiceNotEmpty byte = 3
	codeKindMismatch    byte = 4
	codeInstNotFound    byte = 5
	codeInvalid         byte = 6 // undecodable entry or unknown op (never proposed by this package)
)

// rejection turns a result code into the error reported for cmd. It depends
// only on code and cmd, so every replica reports the same error.
func rejection(code byte, c *Command) error {
	switch code {
	case codeOK:
		return nil
	case codeServiceExists:
		return fmt.Errorf("%w: %s", ErrServiceExists, c.Service.Key)
	case codeServiceNotFound:
		k := c.SvcKey
		if c.Op != OpDeleteService {
			k = c.Service.Key
		}
		return fmt.Errorf("%w: %s", ErrServiceNotFound, k)
	case codeServiceNotEmpty:
		return fmt.Errorf("%w: %s has persistent instances", ErrServiceNotEmpty, c.SvcKey)
	case codeKindMismatch:
		switch c.Op {
		case OpPutInstance:
			return fmt.Errorf("%w: %s is ephemeral", ErrKindMismatch, c.Instance.Service)
		default:
			return fmt.Errorf("%w: %s: ephemeral=%t conflicts with the stored service or its persistent instances", ErrKindMismatch, c.Service.Key, c.Service.Ephemeral)
		}
	case codeInstNotFound:
		return fmt.Errorf("%w: %s", ErrInstanceNotFound, c.Key)
	}
	return fmt.Errorf("%w: command %s could not be applied", ErrCorrupt, c.Op)
}

// writer applies commands to one Badger read-write transaction and counts
// what it wrote, so that the caller can commit before Badger's transaction
// limits are reached. The rules read the state machine's memIndex, which
// the writer changes with every write.
type writer struct {
	txn   *badger.Txn
	ix    *memIndex
	bytes int
	count int
}

func (w *writer) set(k, v []byte) error {
	w.bytes += len(k) + len(v) + 64
	w.count++
	return w.txn.Set(k, v)
}

func (w *writer) del(k []byte) error {
	w.bytes += len(k) + 64
	w.count++
	return w.txn.Delete(k)
}

func (w *writer) put(k []byte, v any) error {
	b, err := msgpack.Marshal(v)
	if err != nil {
		return err
	}
	return w.set(k, b)
}

// ruleCode turns a rule error of model.CheckCommand into its result code.
func ruleCode(err error) byte {
	switch {
	case err == nil, errors.Is(err, model.ErrNoop):
		return codeOK
	case errors.Is(err, model.ErrServiceExists):
		return codeServiceExists
	case errors.Is(err, model.ErrServiceNotFound):
		return codeServiceNotFound
	case errors.Is(err, model.ErrServiceNotEmpty):
		return codeServiceNotEmpty
	case errors.Is(err, model.ErrKindMismatch):
		return codeKindMismatch
	case errors.Is(err, model.ErrInstanceNotFound):
		return codeInstNotFound
	}
	return codeInvalid
}

// apply applies one normalized command: model.CheckCommand's rules, then
// model.ResolveCommand's form of it, written to the transaction and the
// index. The returned code is the command's outcome; err is an I/O error of
// Badger (fatal for the state machine). apply rewrites c to what it
// stored: PutInstance's instance with the kept health, PatchInstance's
// merged patch.
func (w *writer) apply(c *Command) (byte, error) {
	if err := model.CheckCommand(c, w.ix); err != nil {
		return ruleCode(err), nil
	}
	if !model.ResolveCommand(c, w.ix) {
		return codeOK, nil
	}
	switch c.Op {
	case OpCreateService, OpUpdateService:
		def := c.Service
		sk := serviceKey(def.Key)
		if err := w.put(sk, &def); err != nil {
			return 0, err
		}
		w.ix.putService(sk, def.Clone())
	case OpDeleteService:
		sk := serviceKey(c.SvcKey)
		if err := w.del(sk); err != nil {
			return 0, err
		}
		w.ix.deleteService(sk)
	case OpPutInstance:
		ik := instKey(kindInstance, c.Instance.Key())
		if err := w.set(ik, c.Instance.AppendMsgpack(nil)); err != nil {
			return 0, err
		}
		w.ix.putInstance(ik, c.Instance.Service, c.Instance.Healthy)
	case OpDeleteInstance:
		ik := instKey(kindInstance, c.Key)
		if err := w.del(ik); err != nil {
			return 0, err
		}
		w.ix.deleteInstance(ik, c.Key.Service)
	case OpPatchInstance:
		pk := instKey(kindPatch, c.Patch.Key)
		if err := w.put(pk, &c.Patch); err != nil {
			return 0, err
		}
		stored := c.Patch.Merge(model.InstancePatch{}) // shares nothing with the Change
		w.ix.patches[string(pk)] = &stored
	case OpRemovePatch:
		pk := instKey(kindPatch, c.Key)
		if err := w.del(pk); err != nil {
			return 0, err
		}
		delete(w.ix.patches, string(pk))
	case OpSetHealth:
		// The rules know the instance exists; its record is read to be
		// written again with the new health.
		ik := instKey(kindInstance, c.Key)
		var inst model.Instance
		had, err := getValue(w.txn, ik, &inst)
		if err != nil {
			return 0, err
		}
		if !had {
			return 0, fmt.Errorf("%w: instance %s is indexed but not stored", ErrCorrupt, c.Key)
		}
		inst.Healthy = c.Healthy
		if err := w.set(ik, inst.AppendMsgpack(nil)); err != nil {
			return 0, err
		}
		w.ix.setHealth(ik, c.Healthy)
	default:
		return codeInvalid, nil
	}
	return codeOK, nil
}
