package registry

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"reflect"
	"runtime"
	"testing"
	"time"
	"unsafe"
	"weak"

	"github.com/muster-io/muster/distro"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/transport"
)

// FuzzInstRecord feeds instance records from a peer (issue 15: a session
// replicates as one record per instance) to the key parser, the decoder
// and the index: nothing panics, a record accepted carries the instance
// its key names, and the index stays consistent.
func FuzzInstRecord(f *testing.F) {
	in := model.NewInstance(model.ServiceKey{Name: "svc"}, "10.0.0.1", 8080).WithDefaults()
	in.Metadata = model.NewMetadata(map[string]string{"k": "v"})
	good, err := model.Marshal(&pubPayload{Instances: []model.Instance{in}})
	if err != nil {
		f.Fatal(err)
	}
	key := sessionPrefix + "n2-0123456789abcdef/" + instHash(in.Service, in.Cluster, in.IP, in.Port)
	f.Add(key, good, false)
	f.Add(key, []byte(nil), true)
	f.Add(key, good, true)
	f.Add(key, good[:len(good)/2], false)
	f.Add(sessionPrefix+"n2-0123456789abcdef", good, false)
	f.Add(sessionPrefix+"/"+instHash(in.Service, in.Cluster, in.IP, in.Port), good, false)
	two, _ := model.Marshal(&pubPayload{Instances: []model.Instance{in, in}})
	f.Add(key, two, false)

	r, err := New(DefaultConfig())
	if err != nil {
		f.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { r.Close() })
	f.Fuzz(func(t *testing.T, key string, payload []byte, deleted bool) {
		sid, hash, ok := splitInstRecordKey(key)
		if !ok {
			return
		}
		if key != sessionPrefix+sid+"/"+hash || sid == "" || len(hash) != instHashLen {
			t.Fatalf("splitInstRecordKey(%q) = %q, %q", key, sid, hash)
		}
		// Distro hands each payload over in an allocation of its own, never
		// modified (the index keeps strings that share it); the fuzzer reuses
		// its input's. A tombstone's is the version it removes.
		dr := distro.Record{Key: key, Kind: distro.KindSession, Owner: "n2", Revision: 1, Deleted: deleted, Payload: bytes.Clone(payload)}
		ir, err := r.decodeInstRecord(dr, sid, hash)
		if err != nil {
			return
		}
		if ir.inst != nil && instHash(ir.inst.Service, ir.inst.Cluster, ir.inst.IP, ir.inst.Port) != hash {
			t.Fatalf("accepted %q carrying instance %s", key, ir.inst.Key())
		}
		if g := ir.goneKey(); g != nil && instHash(g.Service, g.Cluster, g.IP, g.Port) != hash {
			t.Fatalf("tombstone %q names instance %s", key, *g)
		}
		r.mu.Lock()
		r.core.applyInstRecord(dr.Key[:len(dr.Key)-len(hash)], sid, hash, dr.Owner, ir.inst, ir.goneKey(), false, r.leaseStart())
		r.carryOut()
		r.mu.Unlock()
		if err := r.Internals().CheckConsistency(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestInstKeys: the key of an instance record parses back to its session
// and hash; a whole session record's key, and keys of other shapes, do
// not parse.
func TestInstKeys(t *testing.T) {
	h := instHash(model.ServiceKey{Namespace: "public", Group: "DEFAULT_GROUP", Name: "svc"}, "DEFAULT", "10.0.0.1", 80)
	if len(h) != instHashLen {
		t.Fatalf("hash %q", h)
	}
	for _, tc := range []struct {
		key string
		sid string
		ok  bool
	}{
		{"s/n1-0123456789abcdef/" + h, "n1-0123456789abcdef", true},
		{"s/a/b-0123456789abcdef/" + h, "a/b-0123456789abcdef", true}, // a node ID with a slash
		{"s/n1-0123456789abcdef", "", false},                          // a whole session record
		{"s/n1-0123456789abcdef-2", "", false},
		{"s//" + h, "", false},
		{"b/10.0.0.1:80", "", false},
		{"s/n1/" + h[:instHashLen-1] + "-", "", false},
		{"s/n1/" + h + "0", "", false},
		// The first (unreleased) key format, 32 hex digits, reads as a
		// whole session record.
		{"s/n1-0123456789abcdef/0123456789abcdef0123456789abcdef", "", false},
		// A whole session record of a node ID with a slash whose tail is
		// as long as a hash: its session ID's '-' is no hash digit.
		{"s/x/ab-0123456789abc", "", false},
	} {
		sid, hash, ok := splitInstRecordKey(tc.key)
		if ok != tc.ok || ok && (sid != tc.sid || hash != h) {
			t.Errorf("splitInstRecordKey(%q) = %q, %q, %v", tc.key, sid, hash, ok)
		}
	}
	if instHash(model.ServiceKey{Name: "a"}, "b", "c", 1) == instHash(model.ServiceKey{Name: "a", Group: ""}, "b", "c", 10) {
		t.Fatal("hash ignores the port")
	}
}

// TestInstRecordKeyCheck: a peer refuses an instance record whose payload
// carries another key's instance than the one its key hashes (issue 15:
// a record never carries another key's instance).
func TestInstRecordKeyCheck(t *testing.T) {
	r, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	in := model.NewInstance(model.ServiceKey{Name: "svc"}, "10.0.0.1", 8080).WithDefaults()
	other := model.NewInstance(model.ServiceKey{Name: "svc"}, "10.0.0.2", 8080).WithDefaults()
	payload, err := model.Marshal(&pubPayload{Instances: []model.Instance{in}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		of model.Instance
		ok bool
	}{{in, true}, {other, false}} {
		key := sessionPrefix + "n2-0123456789abcdef/" + instHash(tc.of.Service, tc.of.Cluster, tc.of.IP, tc.of.Port)
		sid, hash, ok := splitInstRecordKey(key)
		if !ok {
			t.Fatalf("splitInstRecordKey(%q) failed", key)
		}
		dr := distro.Record{Key: key, Kind: distro.KindSession, Owner: "n2", Revision: 1, Payload: payload}
		ir, err := r.decodeInstRecord(dr, sid, hash)
		if tc.ok != (err == nil) || tc.ok && ir.inst.IP != in.IP {
			t.Errorf("record %q carrying %s: %v", key, in.Key(), err)
		}
	}
}

// TestRelocate: a location found by locate and checked again by relocate
// after the index changed (Session.Register's one lookup) is where a fresh
// lookup puts the key, whatever moved in between.
func TestRelocate(t *testing.T) {
	ctx := context.Background()
	r := newFakeClockRegistry(t)
	sess, err := r.OpenSession(ctx, SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc := model.ServiceKey{Name: "reloc"}
	inst := func(ip string) model.Instance { return model.NewInstance(svc, ip, 80).WithDefaults() }
	key := inst("10.0.0.5")
	for _, tc := range []struct {
		name   string
		before []string // registered before locate
		add    []string // registered between locate and relocate
		remove []string // deregistered between
	}{
		{"no service", nil, nil, nil},
		{"service created", nil, []string{"10.0.0.1"}, nil},
		{"empty neighbours unchanged", []string{"10.0.0.1", "10.0.0.9"}, nil, nil},
		{"one before", []string{"10.0.0.1", "10.0.0.9"}, []string{"10.0.0.2"}, nil},
		{"one after", []string{"10.0.0.1", "10.0.0.9"}, []string{"10.0.0.7"}, nil},
		{"neighbour gone", []string{"10.0.0.1", "10.0.0.9"}, nil, []string{"10.0.0.1"}},
		{"found, one before", []string{"10.0.0.1", "10.0.0.5"}, []string{"10.0.0.0"}, nil},
		{"found, gone", []string{"10.0.0.5"}, nil, []string{"10.0.0.5"}},
		{"found, gone and back", []string{"10.0.0.1", "10.0.0.5"}, []string{"10.0.0.5"}, []string{"10.0.0.5", "10.0.0.1"}},
		{"service gone", []string{"10.0.0.1"}, nil, []string{"10.0.0.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, pi := range sess.Instances() {
				if err := sess.Deregister(ctx, pi.Key()); err != nil {
					t.Fatal(err)
				}
			}
			r.mu.Lock()
			if s := r.core.services[key.Service]; s != nil && s.empty() {
				r.core.removeService(s)
			}
			r.mu.Unlock()
			for _, ip := range tc.before {
				if err := sess.Register(ctx, inst(ip)); err != nil {
					t.Fatal(err)
				}
			}
			var loc instLoc
			r.mu.RLock()
			r.locate(sess.pub, &key, &loc)
			r.mu.RUnlock()
			for _, ip := range tc.remove {
				if err := sess.Deregister(ctx, inst(ip).Key()); err != nil {
					t.Fatal(err)
				}
			}
			if len(tc.remove) > 0 && tc.name == "service gone" {
				r.mu.Lock()
				if s := r.core.services[key.Service]; s != nil {
					r.core.removeService(s)
				}
				r.mu.Unlock()
			}
			for _, ip := range tc.add {
				if err := sess.Register(ctx, inst(ip)); err != nil {
					t.Fatal(err)
				}
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			s, i, found := r.relocate(&loc, &key)
			want := r.core.services[key.Service]
			wi, wfound := 0, false
			if want != nil {
				wi, wfound = want.findSlot(key.Cluster, key.IP, key.Port)
			}
			if s != want || i != wi || found != wfound {
				t.Fatalf("relocate = %p, %d, %v; a lookup = %p, %d, %v", s, i, found, want, wi, wfound)
			}
		})
	}
}

func TestSessionOf(t *testing.T) {
	for _, c := range []struct {
		sid, node string
		want      bool
	}{
		{"n1-0123456789abcdef", "n1", true},
		{"n1-0123456789abcdef-2", "n1", true},
		{"n1-x-0123456789abcdef", "n1", false}, // node "n1-x"'s session
		{"n1-x-0123456789abcdef", "n1-x", true},
		{"n1-0123456789abcdeF", "n1", false},
		{"n1-0123456789abcdef-", "n1", false},
		{"n1-0123456789abcdef-2a", "n1", false},
		{"n2-0123456789abcdef", "n1", false},
		{"n1-0123", "n1", false},
	} {
		if got := sessionOf(c.sid, c.node); got != c.want {
			t.Errorf("sessionOf(%q, %q) = %v, want %v", c.sid, c.node, got, c.want)
		}
	}
}

// TestHashMap: the map of instance hashes, whose first entry is inline,
// answers as a Go map does through puts, updates and deletes of the inline
// entry and of the others, and deletes during its walk.
func TestHashMap(t *testing.T) {
	var m hashMap
	want := map[string]*pubInst{}
	pis := []*pubInst{{}, {}, {}}
	check := func(step string) {
		t.Helper()
		if m.len() != len(want) {
			t.Fatalf("%s: len %d, want %d", step, m.len(), len(want))
		}
		got := map[string]*pubInst{}
		for h, v := range m.all() {
			got[h] = v
		}
		if !maps.Equal(got, want) {
			t.Fatalf("%s: entries %v, want %v", step, got, want)
		}
		for h, v := range want {
			if g, ok := m.get(h); !ok || g != v {
				t.Fatalf("%s: get(%q) = %v, %v; want %v", step, h, g, ok, v)
			}
		}
		if _, ok := m.get("absent"); ok {
			t.Fatalf("%s: get of an absent hash found it", step)
		}
	}
	for _, op := range []struct {
		put  bool
		h    string
		v    *pubInst
		step string
	}{
		{true, "a", pis[0], "the first, inline"},
		{true, "b", pis[1], "a second, in the map"},
		{true, "a", nil, "the inline one set to nil (a deletion to write)"},
		{false, "a", nil, "the inline one deleted"},
		{true, "b", pis[2], "the map's one updated, not put inline"},
		{true, "c", pis[0], "a new one takes the free inline place"},
		{false, "b", nil, "the map's one deleted"},
		{false, "zz", nil, "an absent one deleted"},
	} {
		if op.put {
			m.put(op.h, op.v)
			want[op.h] = op.v
		} else {
			m.del(op.h)
			delete(want, op.h)
		}
		check(op.step)
	}
	m.put("d", pis[1])
	want["d"] = pis[1]
	for h := range m.all() {
		m.del(h)
		delete(want, h)
	}
	check("deleted while walked")
	m.put("e", pis[2])
	m.put("f", pis[0])
	m.reset()
	clear(want)
	check("reset")
}

// TestBeatLocStale: a standalone beat registration whose pre-check lookups
// (the beat publishers of its ip, the slot of its key) went stale before it
// took the lock again still links its new publisher into its ip's list
// beside the ones added in between, and lands its slot in order.
func TestBeatLocStale(t *testing.T) {
	ctx := context.Background()
	r := newFakeClockRegistry(t)
	var svc model.ServiceKey
	mk := func(ip string, port int) model.Instance { return model.NewInstance(svc, ip, port).WithDefaults() }
	type ep struct {
		ip   string
		port int
	}
	for i, tc := range []struct {
		name string
		add  []ep // registered between the pre-check and the registration
	}{
		{"nothing moved", nil},
		{"same ip, other port", []ep{{"10.0.0.5", 81}}},
		{"same ip, other ports, slots before", []ep{{"10.0.0.5", 79}, {"10.0.0.1", 80}, {"10.0.0.5", 78}}},
		{"service created by another ip", []ep{{"10.0.0.9", 80}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A service of its own for each case, absent until it registers.
			svc = model.ServiceKey{Name: fmt.Sprint("stale-", i)}
			inst := mk("10.0.0.5", 80)
			var loc beatLoc
			if r.renewUnchangedBeat(&inst, &loc) {
				t.Fatal("a new instance was renewed")
			}
			var added []model.Instance
			for _, e := range tc.add {
				in := mk(e.ip, e.port)
				if err := r.Register(ctx, in); err != nil {
					t.Fatal(err)
				}
				added = append(added, in)
			}
			if err := r.registerOwned(ctx, inst, &loc); err != nil {
				t.Fatal(err)
			}
			want := append([]model.Instance{inst}, added...)
			r.mu.Lock()
			for _, in := range want {
				if pi := r.core.beatPubInst(in.IP, in.Port, in.Cluster, in.Service); pi == nil {
					t.Errorf("%s: its beat publisher is not indexed", in.Key())
				}
			}
			r.mu.Unlock()
			if got := len(mustQuery(t, r, svc)); got != len(want) {
				t.Errorf("the service has %d instances, want %d", got, len(want))
			}
			if err := r.Internals().CheckConsistency(); err != nil {
				t.Fatal(err)
			}
			for _, in := range want { // the next case starts with no beat publisher of these
				if err := r.Deregister(ctx, in.Key()); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// mustQuery returns the instances of svc.
func mustQuery(t *testing.T, r *Registry, svc model.ServiceKey) []model.Instance {
	t.Helper()
	v, err := r.Query(context.Background(), model.Query{Service: svc})
	if err != nil {
		t.Fatal(err)
	}
	return v.Instances
}

// TestPeerInstanceSharesPayload (issue 30.2): a peer's copy of a session
// instance keeps no second copy of its strings: they are windows on the
// payload of the record distro holds. The service's key is not (a service
// outlives its first record), and a new version of the same instance moves
// the strings to its own payload, so that the previous one, which distro
// no longer holds, is not kept.
func TestPeerInstanceSharesPayload(t *testing.T) {
	r := standaloneNode(t)
	in := model.NewInstance(model.ServiceKey{Namespace: "ns", Group: "grp", Name: "shared"}, "10.1.2.3", 8080).WithDefaults()
	in.Cluster = "c1"
	in.Metadata = model.NewMetadata(map[string]string{"zone": "zone-a", "version": "1.4.2"})
	hash := instHash(in.Service, in.Cluster, in.IP, in.Port)
	gkey := sessionPrefix + "n2-0123456789abcdef/"
	apply := func(rev uint64, in model.Instance) []byte {
		t.Helper()
		pl := &pubPayload{Instances: []model.Instance{in}}
		key, payload := asReceived(gkey+hash, pl.AppendMsgpack(nil))
		dr := distro.Record{Key: key, Kind: distro.KindSession, Owner: "n2", Revision: rev, Payload: payload}
		ir, err := r.decodeInstRecord(dr, "n2-0123456789abcdef", hash)
		if err != nil {
			t.Fatal(err)
		}
		r.mu.Lock()
		// The group key and the session ID are windows on the record's
		// key, as applyBatch passes them.
		sid, _, _ := splitInstRecordKey(dr.Key)
		r.core.applyInstRecord(dr.Key[:len(dr.Key)-len(hash)], sid, ir.hash, dr.Owner, ir.inst, ir.goneKey(), false, r.leaseStart())
		r.carryOut()
		r.mu.Unlock()
		if err := r.Internals().CheckConsistency(); err != nil {
			t.Fatal(err)
		}
		return dr.Payload
	}
	check := func(payload []byte, want model.Instance) {
		t.Helper()
		r.mu.RLock()
		defer r.mu.RUnlock()
		p := r.core.remote[gkey]
		if p == nil {
			t.Fatal("no grouped copy")
		}
		pi := r.core.instPublication(p, nil, hash)
		if pi == nil {
			t.Fatal("no publication")
		}
		checkSharesPayload(t, pi, want, payload)
		k := pi.slot.svc.key
		for _, s := range []string{k.Namespace, k.Group, k.Name} {
			if within(s, payload) {
				t.Errorf("the service key's %q shares a record's payload", s)
			}
		}
	}
	// Once a newer version is in, an older one's payload is free: neither
	// the publication's rec nor the slot's block (whose rec the first
	// version's publication used) keeps a window on it.
	released := func(w weak.Pointer[byte], which string) {
		t.Helper()
		runtime.GC()
		runtime.GC()
		if w.Value() != nil {
			t.Errorf("the %s version's payload is still held", which)
		}
	}
	first := apply(1, in)
	check(first, in)
	w1 := weak.Make(unsafe.SliceData(first))
	first = nil
	second := apply(2, in) // the same instance, a new version
	check(second, in)
	released(w1, "first")
	w2 := weak.Make(unsafe.SliceData(second))
	second = nil
	changed := in
	changed.Weight = 3
	third := apply(3, changed)
	check(third, changed)
	released(w2, "second")
	runtime.KeepAlive(third)
}

// TestOwnerInstanceSharesPayload: on the node that owns a session, an
// instance's record is one allocation (its key, then its payload), and the
// publication's rec shares its strings with that payload, so that the owner
// keeps an instance's bytes once (issue 30.2). Once the instance changes,
// the older version's record is free: neither the new rec nor the slot's
// block (whose rec the first version used) keeps a window on it.
func TestOwnerInstanceSharesPayload(t *testing.T) {
	r := ownerNode(t, 0)
	ctx := context.Background()
	sess, err := r.OpenSession(ctx, SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	in := model.NewInstance(model.ServiceKey{Namespace: "ns", Group: "grp", Name: "owned"}, "10.1.2.3", 8080).WithDefaults()
	in.Cluster = "c1"
	in.Metadata = model.NewMetadata(map[string]string{"zone": "zone-a", "version": "1.4.2"})
	key := sess.pub.recordKey() + "/" + instHash(in.Service, in.Cluster, in.IP, in.Port)
	register := func(in model.Instance) distro.Record {
		t.Helper()
		if err := sess.Register(ctx, in); err != nil {
			t.Fatal(err)
		}
		dr, ok := r.replicator.(*distro.Replicator).Get(key)
		if !ok {
			t.Fatalf("no record %s", key)
		}
		if uintptr(unsafe.Pointer(unsafe.StringData(dr.Key)))+uintptr(len(dr.Key)) != uintptr(unsafe.Pointer(unsafe.SliceData(dr.Payload))) {
			t.Errorf("the record's key and payload are not one allocation, the key first")
		}
		r.mu.RLock()
		defer r.mu.RUnlock()
		checkSharesPayload(t, sess.pub.insts.first(), in, dr.Payload)
		return dr
	}
	first := register(in)
	w := weak.Make(unsafe.SliceData(first.Payload))
	first = distro.Record{}
	changed := in
	changed.Weight = 3
	changed.Metadata = changed.Metadata.With("zone", "zone-b")
	second := register(changed)
	runtime.GC()
	runtime.GC()
	if w.Value() != nil {
		t.Error("the first version's record is still held")
	}
	runtime.KeepAlive(second)
}

// TestRemovedKey: a tombstone names the instance it removes only when the
// removed version's payload is one instance whose key hashes to the
// record's.
func TestRemovedKey(t *testing.T) {
	in := model.NewInstance(model.ServiceKey{Name: "svc"}, "10.0.0.1", 8080).WithDefaults()
	other := model.NewInstance(model.ServiceKey{Name: "svc"}, "10.0.0.2", 8080).WithDefaults()
	enc := func(insts ...model.Instance) []byte {
		pl := &pubPayload{Instances: insts}
		return pl.AppendMsgpack(nil)
	}
	hash := instHash(in.Service, in.Cluster, in.IP, in.Port)
	if k, ok := removedKey(enc(in), hash); !ok || k != in.Key() {
		t.Fatalf("removedKey of its own version = %v, %v, want %s", k, ok, in.Key())
	}
	for name, payload := range map[string][]byte{
		"none":                 nil,
		"another instance":     enc(other),
		"two instances":        enc(in, in),
		"no instance":          enc(),
		"cut short":            enc(in)[:20],
		"not msgpack":          []byte("nope"),
		"the empty allocation": {},
	} {
		if k, ok := removedKey(payload, hash); ok {
			t.Errorf("%s: removedKey = %s, want none", name, k)
		}
	}
}

// asReceived returns key and payload in one allocation, the key first, as
// distro hands over a record received from a peer (so that what keeps a
// window on a record's key keeps its payload too).
func asReceived(key string, payload []byte) (string, []byte) {
	b := append([]byte(key), payload...)
	return unsafe.String(unsafe.SliceData(b), len(key)), b[len(key):]
}

// TestRemoteCopyKeepsNoRecord: a remote copy of a whole publisher record
// (here a whole session record, as a node of an earlier version writes)
// keeps its key and ID as copies of its own, not windows on the record's
// key, which distro hands over in one allocation with the payload: once a
// newer version replaces it, the first version's allocation is free.
func TestRemoteCopyKeepsNoRecord(t *testing.T) {
	r := standaloneNode(t)
	const rkey = sessionPrefix + "n2-0123456789abcdef"
	in := model.NewInstance(model.ServiceKey{Name: "whole"}, "10.1.2.3", 8080).WithDefaults()
	apply := func(rev uint64, in model.Instance) []byte {
		t.Helper()
		pl := &pubPayload{Instances: []model.Instance{in}}
		key, payload := asReceived(rkey, pl.AppendMsgpack(nil))
		distroStore{r}.Apply(distro.Record{Key: key, Kind: distro.KindSession, Owner: "n2", Revision: rev, Payload: payload})
		if err := r.Internals().CheckConsistency(); err != nil {
			t.Fatal(err)
		}
		return payload
	}
	first := apply(1, in)
	w := weak.Make(unsafe.SliceData(first))
	first = nil
	changed := in
	changed.Weight = 2
	second := apply(2, changed)
	r.mu.RLock()
	p := r.core.remote[rkey]
	ok := p != nil && p.insts.len() == 1 && p.insts.first().inst.weight == 2
	r.mu.RUnlock()
	if !ok {
		t.Fatalf("remote copy %+v, want one instance of weight 2", p)
	}
	runtime.GC()
	runtime.GC()
	if w.Value() != nil {
		t.Error("the first version's record is still held")
	}
	runtime.KeepAlive(second)
}

// ownerNode returns a started registry, node n1 of a cluster of one (a real
// distro on a MemNetwork: it owns every record), with history events of
// the journal (0: none).
func ownerNode(t *testing.T, history int) *Registry {
	t.Helper()
	net := &transport.MemNetwork{}
	tr, err := net.Node("n1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	dc := distro.DefaultConfig()
	dc.Transport, dc.Membership, dc.SyncDelay = tr, distro.NewStatic(distro.Member{ID: "n1"}), distro.NoSyncDelay
	dc.LoadTimeout = 100 * time.Millisecond // no peer to load from
	cfg := DefaultConfig()
	cfg.NodeID, cfg.Replicator, cfg.Transport, cfg.HealthChecks, cfg.HistoryEvents = "n1", Distro(dc), tr, nil, history
	r := startedNode(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestSharedSlotReleasesGoneSession: sessions 1 and 2 publish the same
// instance (a client reconnecting on a new connection registers again
// before the old one ends), and session 1 closes. The slot stays (session
// 2 publishes it), and it lives in session 1's block (slotBlock), whose
// publication is session 1's: once the close is carried out, that
// publication lets go of session 1's deleted record (its rec's strings
// were windows on it) and of session 1's publisher. With the journal on,
// its events keep copies of the key, not windows on the record.
func TestSharedSlotReleasesGoneSession(t *testing.T) {
	for _, history := range []int{0, DefaultHistoryEvents} {
		t.Run(fmt.Sprintf("history=%d", history), func(t *testing.T) {
			r := ownerNode(t, history)
			ctx := context.Background()
			s1, err := r.OpenSession(ctx, SessionOptions{})
			if err != nil {
				t.Fatal(err)
			}
			s2, err := r.OpenSession(ctx, SessionOptions{})
			if err != nil {
				t.Fatal(err)
			}
			in := model.NewInstance(model.ServiceKey{Namespace: "ns", Group: "grp", Name: "shared"}, "10.1.2.3", 8080).WithDefaults()
			in.Metadata = model.NewMetadata(map[string]string{"zone": "zone-a", "version": "1.4.2"})
			key := s1.pub.recordKey() + "/" + instHash(in.Service, in.Cluster, in.IP, in.Port)
			if err := s1.Register(ctx, in); err != nil {
				t.Fatal(err)
			}
			dr, ok := r.replicator.(*distro.Replicator).Get(key)
			if !ok {
				t.Fatal("no record")
			}
			record, pub := weak.Make(unsafe.SliceData(dr.Payload)), weak.Make(s1.pub)
			dr = distro.Record{}
			if err := s2.Register(ctx, in); err != nil {
				t.Fatal(err)
			}
			s1.Close()
			if got, ok := r.replicator.(*distro.Replicator).Get(key); ok && !got.Deleted {
				t.Fatalf("session 1's record is still live: %v", got)
			}
			if err := r.Internals().CheckConsistency(); err != nil {
				t.Fatal(err)
			}
			if got := s2.Instances(); len(got) != 1 || !reflect.DeepEqual(got[0], in) {
				t.Fatalf("session 2 publishes %+v, want %+v", got, in)
			}
			if v, err := r.Query(ctx, model.Query{Service: in.Service}); err != nil || len(v.Instances) != 1 || v.Instances[0].IP != in.IP {
				t.Fatalf("query: %+v, %v; want the instance", v, err)
			}
			s1 = nil
			runtime.GC()
			runtime.GC()
			if record.Value() != nil {
				t.Error("session 1's deleted record is still held")
			}
			if pub.Value() != nil {
				t.Error("session 1's publisher is still held")
			}
			runtime.KeepAlive(s2)
		})
	}
}

// standaloneNode returns a started standalone registry.
func standaloneNode(t *testing.T) *Registry { return startedNode(t, DefaultConfig()) }

// startedNode returns a started registry of cfg, closed when t ends.
func startedNode(t *testing.T, cfg Config) *Registry {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// checkSharesPayload checks that publication pi holds want, and that its
// rec's strings (cluster, IP, metadata) are windows on payload, the
// record distro holds.
func checkSharesPayload(t *testing.T, pi *pubInst, want model.Instance, payload []byte) {
	t.Helper()
	if got := pi.inst.instance(pi.slot.svc); !reflect.DeepEqual(got, want) {
		t.Fatalf("holds %+v, want %+v", got, want)
	}
	strs := []string{pi.inst.cluster, pi.inst.ip}
	for k, v := range pi.inst.md.All() {
		strs = append(strs, k, v)
	}
	for _, s := range strs {
		if !within(s, payload) {
			t.Errorf("%q is not a window on the record's payload", s)
		}
	}
}

// within reports whether s is a non-empty window on b's bytes.
func within(s string, b []byte) bool {
	p, base := uintptr(unsafe.Pointer(unsafe.StringData(s))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return len(s) > 0 && p >= base && p+uintptr(len(s)) <= base+uintptr(len(b))
}
