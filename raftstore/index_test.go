package raftstore

import (
	"encoding/binary"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"github.com/dgraph-io/badger/v4"
	sm "github.com/lni/dragonboat/v4/statemachine"
	"github.com/muster-io/muster/internal/testutil"
	"github.com/muster-io/muster/model"
)

// oldRules applies commands as the state machine did at 50c83dd, before
// the rules moved to model and the reads to memory (writer.apply read
// Badger for every rule): the oracle that the replicated outcome did not
// change, so replicas of both versions decide every entry alike.
type oldRules struct {
	defs    map[model.ServiceKey]model.Service
	insts   map[model.InstanceKey]model.Instance
	patches map[model.InstanceKey]model.InstancePatch
}

func (o *oldRules) hasInstances(k model.ServiceKey) bool {
	for ik := range o.insts {
		if ik.Service == k {
			return true
		}
	}
	return false
}

func (o *oldRules) apply(c Command) byte {
	c.Normalize()
	switch c.Op {
	case OpCreateService, OpUpdateService:
		def := c.Service
		old, exists := o.defs[def.Key]
		insts := o.hasInstances(def.Key)
		if c.Op == OpCreateService {
			if exists {
				return codeServiceExists
			}
			if def.Ephemeral && insts {
				return codeKindMismatch
			}
		} else {
			if !exists && !insts && !c.Upsert {
				return codeServiceNotFound
			}
			if (def.Ephemeral && insts) || (exists && old.Ephemeral != def.Ephemeral) {
				return codeKindMismatch
			}
		}
		o.defs[def.Key] = def
	case OpDeleteService:
		_, exists := o.defs[c.SvcKey]
		insts := o.hasInstances(c.SvcKey)
		if !exists && !insts {
			return codeServiceNotFound
		}
		if insts {
			return codeServiceNotEmpty
		}
		delete(o.defs, c.SvcKey)
	case OpPutInstance:
		in := c.Instance
		if in.Ephemeral {
			return codeKindMismatch
		}
		if def, ok := o.defs[in.Service]; ok && def.Ephemeral {
			return codeKindMismatch
		}
		if old, ok := o.insts[in.Key()]; ok {
			in.Healthy = old.Healthy
		}
		o.insts[in.Key()] = in
	case OpDeleteInstance:
		delete(o.insts, c.Key)
	case OpPatchInstance:
		merged := o.patches[c.Patch.Key].Merge(c.Patch)
		merged.Key = c.Patch.Key
		o.patches[c.Patch.Key] = merged
	case OpRemovePatch:
		delete(o.patches, c.Key)
	case OpSetHealth:
		in, ok := o.insts[c.Key]
		if !ok {
			return codeInstNotFound
		}
		in.Healthy = c.Healthy
		o.insts[c.Key] = in
	default:
		return codeInvalid
	}
	return codeOK
}

func (o *oldRules) state() State {
	st := State{
		Services:  slices.Collect(maps.Values(o.defs)),
		Instances: slices.Collect(maps.Values(o.insts)),
		Patches:   slices.Collect(maps.Values(o.patches)),
	}
	sortState(&st)
	return st
}

// TestIndexAgainstOldRules: random batches of commands over a few services
// (of both kinds, with and without definitions), in entries that are
// sometimes re-proposed, give the result codes and the state of the old
// rules, and after every Update the in-memory index equals the one built
// from Badger (as Open and RecoverFromSnapshot build it).
func TestIndexAgainstOldRules(t *testing.T) {
	testutil.Seeds(t, 0, 1, testIndexAgainstOldRules)
}

func testIndexAgainstOldRules(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	s := openTestSM(t, "")
	o := &oldRules{defs: map[model.ServiceKey]model.Service{}, insts: map[model.InstanceKey]model.Instance{},
		patches: map[model.InstanceKey]model.InstancePatch{}}
	var index uint64
	var sent []sm.Entry // entries applied, for re-proposals
	want := map[entryID][]byte{}
	for i := range 400 {
		var ents []sm.Entry
		for range 1 + rng.IntN(3) {
			index += 1 + uint64(rng.IntN(2))
			if len(sent) > 0 && rng.IntN(8) == 0 {
				e := sent[rng.IntN(len(sent))] // a re-proposal: applied once
				ents = append(ents, sm.Entry{Index: index, Cmd: e.Cmd})
				continue
			}
			var encs [][]byte
			var cmds []Command
			for range 1 + rng.IntN(4) {
				c := randomSMCommand(rng)
				b, _ := c.Marshal()
				encs, cmds = append(encs, b), append(cmds, c)
			}
			var id entryID
			if rng.IntN(4) != 0 {
				binary.BigEndian.PutUint64(id[8:], uint64(i*8+len(ents)+1))
			}
			e := sm.Entry{Index: index, Cmd: encodeEntry(id, encs)}
			codes := make([]byte, len(cmds))
			for j := range cmds {
				codes[j] = o.apply(cmds[j])
			}
			if id != (entryID{}) {
				want[id] = codes
				sent = append(sent, e)
			}
			ents = append(ents, e)
			ents[len(ents)-1].Result.Data = codes // compared below, then reset
		}
		expect := make([][]byte, len(ents))
		for j := range ents {
			expect[j] = ents[j].Result.Data
			if expect[j] == nil {
				id, _, _ := decodeEntry(nil, ents[j].Cmd)
				expect[j] = want[id]
			}
			ents[j].Result = sm.Result{}
		}
		out, err := s.Update(ents)
		if err != nil {
			t.Fatal(err)
		}
		for j := range out {
			if string(out[j].Result.Data) != string(expect[j]) {
				t.Fatalf("step %d entry %d: codes %v, old rules %v", i, j, out[j].Result.Data, expect[j])
			}
		}
		got := s.state(t)
		got.Index = 0
		if !sameData(got, o.state()) {
			t.Fatalf("step %d: state %+v, old rules %+v", i, got, o.state())
		}
		fresh := newMemIndex()
		err = s.db.View(func(txn *badger.Txn) error {
			st, err := loadState(txn)
			if err != nil {
				return err
			}
			return fresh.load(&st, txn)
		})
		if err != nil {
			t.Fatal(err)
		}
		fresh.scratch, s.ix.scratch = nil, nil
		fresh.last, s.ix.last = instMemo{}, instMemo{}
		if !reflect.DeepEqual(fresh, s.ix) {
			t.Fatalf("step %d: the index drifted from Badger:\n kept %+v\nbuilt %+v", i, s.ix, fresh)
		}
	}
}

// randomSMCommand picks a command over three services, two addresses and
// two ports, so that the rules meet every state.
func randomSMCommand(rng *rand.Rand) Command {
	svc := "svc" + strconv.Itoa(rng.IntN(3))
	in := inst(svc, "10.8.0."+strconv.Itoa(1+rng.IntN(2)), 1+rng.IntN(2))
	in.Healthy = rng.IntN(2) == 0
	w := float64(rng.IntN(100))
	switch rng.IntN(10) {
	case 0:
		return Command{Op: OpCreateService, Service: model.Service{Key: in.Service, Ephemeral: rng.IntN(3) == 0}}
	case 1:
		return Command{Op: OpUpdateService, Upsert: rng.IntN(2) == 0, Service: model.Service{Key: in.Service, Ephemeral: rng.IntN(3) == 0, ProtectThreshold: w / 100}}
	case 2:
		return Command{Op: OpDeleteService, SvcKey: in.Service}
	case 3, 4:
		in.Weight = w
		in.Ephemeral = rng.IntN(10) == 0
		return Command{Op: OpPutInstance, Instance: in}
	case 5:
		return Command{Op: OpDeleteInstance, Key: in.Key()}
	case 6:
		return Command{Op: OpPatchInstance, Patch: model.InstancePatch{Key: in.Key(), Weight: &w, Metadata: model.NewMetadata(map[string]string{"k" + strconv.Itoa(rng.IntN(3)): "v"})}}
	case 7:
		return Command{Op: OpRemovePatch, Key: in.Key()}
	case 8:
		return Command{Op: OpSetHealth, Key: in.Key(), Healthy: rng.IntN(2) == 0}
	}
	return Command{Op: model.Op(20 + rng.IntN(3))}
}

// TestMemIndexInstanceMemo: the index answers a put's and a delete's look
// at an instance from the rules' look just before (Instance) only while
// nothing changed the instances: random looks, puts, health changes and
// deletes over a few keys always see what the map holds.
func TestMemIndexInstanceMemo(t *testing.T) {
	testutil.Seeds(t, 0, 1, func(t *testing.T, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 6))
		ix := newMemIndex()
		keys := make([]model.InstanceKey, 3)
		for i := range keys {
			keys[i] = persistent("memo", "10.0.0."+strconv.Itoa(i+1), 80).Key()
		}
		for step := range 5000 {
			k := keys[r.IntN(len(keys))]
			ik := instKey(kindInstance, k)
			healthy, ok := ix.instances[string(ik)]
			if got, gotOK := ix.instance(ik); got != healthy || gotOK != ok {
				t.Fatalf("step %d: instance says %v %v, the map %v %v", step, got, gotOK, healthy, ok)
			}
			switch r.IntN(4) {
			case 0:
				st := ix.Instance(k)
				if st.Exists != ok || st.Healthy != healthy {
					t.Fatalf("step %d: Instance %+v, the map %v %v", step, st, healthy, ok)
				}
			case 1:
				ix.putInstance(ik, k.Service, r.IntN(2) == 0)
			case 2:
				if ok {
					ix.setHealth(ik, r.IntN(2) == 0)
				}
			default:
				ix.deleteInstance(ik, k.Service)
			}
			if want := len(ix.instances); want > 0 && ix.services[string(serviceKey(k.Service))].persistent != want {
				t.Fatalf("step %d: %d persistent counted, %d held", step, ix.services[string(serviceKey(k.Service))].persistent, want)
			}
		}
	})
}
