package raftstore

import (
	"encoding/binary"

	"github.com/dgraph-io/badger/v4"
	"github.com/muster-io/muster/model"
)

// memIndex is what the state rules and the dedupe check read, kept in
// memory so that applying a command reads nothing from Badger: every
// service (its definition and persistent-instance count), every persistent
// instance (its health), every patch, and the dedupe records. It is built
// from Badger whenever the state machine loads its state (Open,
// RecoverFromSnapshot) and changed with every write Update makes, in the
// same order, so that it always equals what the Badger transaction holds.
// Update's goroutine alone uses it (Open and RecoverFromSnapshot never run
// concurrently with Update).
//
// Keys are the Badger keys of the records (serviceKey, instKey), as
// strings.
type memIndex struct {
	services  map[string]*svcEntry
	instances map[string]bool // persistent instance → its health
	patches   map[string]*model.InstancePatch
	dedupe    map[entryID][]byte // entry ID → its dedupe record (index, result codes)
	scratch   []byte

	// last is what the last Instance call found, so that the put which
	// follows the rules' look at its instance does not look it up again.
	last instMemo
}

// instMemo is what an Instance call found for the record key, valid until
// the instances change.
type instMemo struct {
	key   []byte
	state model.InstanceState
	valid bool
}

type svcEntry struct {
	def        *model.Service // nil when only instances hold the service
	persistent int
}

var _ model.CommandState = (*memIndex)(nil)

func newMemIndex() *memIndex {
	return &memIndex{
		services:  map[string]*svcEntry{},
		instances: map[string]bool{},
		patches:   map[string]*model.InstancePatch{},
		dedupe:    map[entryID][]byte{},
	}
}

// load builds the index of st and of the dedupe records in txn.
func (ix *memIndex) load(st *State, txn *badger.Txn) error {
	*ix = *newMemIndex()
	for i := range st.Services {
		def := st.Services[i].Clone()
		ix.entry(serviceKey(def.Key)).def = &def
	}
	for i := range st.Instances {
		in := &st.Instances[i]
		ix.instances[string(instKey(kindInstance, in.Key()))] = in.Healthy
		ix.entry(serviceKey(in.Service)).persistent++
	}
	for i := range st.Patches {
		p := st.Patches[i].Merge(model.InstancePatch{})
		ix.patches[string(instKey(kindPatch, p.Key))] = &p
	}
	it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{kindDedupe}, PrefetchValues: true, PrefetchSize: 64})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		item := it.Item()
		k := item.Key()
		if len(k) != 1+entryIDLen {
			continue // never written so; the lookup would not find it either
		}
		rec, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		var id entryID
		copy(id[:], k[1:])
		ix.dedupe[id] = rec
	}
	return nil
}

func (ix *memIndex) entry(sk []byte) *svcEntry {
	e := ix.services[string(sk)]
	if e == nil {
		e = &svcEntry{}
		ix.services[string(sk)] = e
	}
	return e
}

// Service implements model.CommandState.
func (ix *memIndex) Service(k model.ServiceKey) model.ServiceState {
	ix.scratch = appendSvc(append(ix.scratch[:0], kindService), k)
	e := ix.services[string(ix.scratch)]
	if e == nil {
		return model.ServiceState{}
	}
	return model.ServiceState{
		Exists:     true,
		Ephemeral:  e.def != nil && e.def.Ephemeral,
		Definition: e.def,
		Instances:  e.persistent,
		Persistent: e.persistent,
	}
}

// Instance implements model.CommandState.
func (ix *memIndex) Instance(k model.InstanceKey) model.InstanceState {
	m := &ix.last
	m.key = appendInstKey(m.key[:0], kindInstance, k)
	healthy, ok := ix.instances[string(m.key)]
	m.state, m.valid = model.InstanceState{Exists: ok, Persistent: ok, Healthy: healthy}, true
	return m.state
}

// instance looks up the instance record ik: the answer of the last
// Instance call when that was for ik and nothing changed since.
func (ix *memIndex) instance(ik []byte) (healthy, ok bool) {
	if m := &ix.last; m.valid && string(ik) == string(m.key) {
		return m.state.Healthy, m.state.Exists
	}
	healthy, ok = ix.instances[string(ik)]
	return healthy, ok
}

// Patch implements model.CommandState.
func (ix *memIndex) Patch(k model.InstanceKey) (model.InstancePatch, bool) {
	ix.scratch = appendInstKey(ix.scratch[:0], kindPatch, k)
	p := ix.patches[string(ix.scratch)]
	if p == nil {
		return model.InstancePatch{}, false
	}
	return *p, true
}

func (ix *memIndex) putService(sk []byte, def model.Service) {
	ix.entry(sk).def = &def
}

func (ix *memIndex) deleteService(sk []byte) {
	e := ix.services[string(sk)]
	if e == nil {
		return
	}
	e.def = nil
	if e.persistent == 0 {
		delete(ix.services, string(sk))
	}
}

func (ix *memIndex) putInstance(ik []byte, svc model.ServiceKey, healthy bool) {
	old, ok := ix.instance(ik)
	if ok && old == healthy {
		return // a re-put: nothing to store (and no key to allocate)
	}
	ix.last.valid = false
	if !ok {
		ix.scratch = appendSvc(append(ix.scratch[:0], kindService), svc)
		ix.entry(ix.scratch).persistent++
	}
	ix.instances[string(ik)] = healthy
}

// setHealth sets the health of the instance record ik, which exists.
func (ix *memIndex) setHealth(ik []byte, healthy bool) {
	ix.last.valid = false
	ix.instances[string(ik)] = healthy
}

func (ix *memIndex) deleteInstance(ik []byte, svc model.ServiceKey) {
	if _, ok := ix.instance(ik); !ok {
		return
	}
	ix.last.valid = false
	delete(ix.instances, string(ik))
	ix.scratch = appendSvc(append(ix.scratch[:0], kindService), svc)
	if e := ix.services[string(ix.scratch)]; e != nil {
		e.persistent--
		if e.persistent == 0 && e.def == nil {
			delete(ix.services, string(ix.scratch))
		}
	}
}

// appendInstKey appends the Badger key of instance k's record of kind to b
// (instKey without its allocations).
func appendInstKey(b []byte, kind byte, k model.InstanceKey) []byte {
	b = appendSvc(append(b, kind), k.Service)
	b = appendStr(b, k.Cluster)
	b = appendStr(b, k.IP)
	return binary.AppendUvarint(b, uint64(k.Port))
}
