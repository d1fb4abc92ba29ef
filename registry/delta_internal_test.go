package registry

import (
	"context"
	"testing"

	"github.com/muster-io/muster/distro"
	"github.com/muster-io/muster/model"
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
		sid, hash, ok := splitInstKey(key)
		if !ok {
			return
		}
		if key != sessionPrefix+sid+"/"+hash || sid == "" || len(hash) != instHashLen {
			t.Fatalf("splitInstKey(%q) = %q, %q", key, sid, hash)
		}
		rec := distro.Record{Key: key, Kind: distro.KindSession, Owner: "n2", Revision: 1, Deleted: deleted}
		if !deleted {
			rec.Payload = payload
		}
		ir, err := r.decodeInstRecord(rec, sid, hash)
		if err != nil {
			return
		}
		if ir.inst != nil && instHash(ir.inst.Service, ir.inst.Cluster, ir.inst.IP, ir.inst.Port) != hash {
			t.Fatalf("accepted %q carrying instance %s", key, ir.inst.Key())
		}
		r.mu.Lock()
		r.applyInstLocked(ir)
		r.mu.Unlock()
		if err := r.CheckConsistency(); err != nil {
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
		{"s/n1/" + h[:31] + "G", "", false},
		{"s/n1/" + h + "0", "", false},
	} {
		sid, hash, ok := splitInstKey(tc.key)
		if ok != tc.ok || ok && (sid != tc.sid || hash != h) {
			t.Errorf("splitInstKey(%q) = %q, %q, %v", tc.key, sid, hash, ok)
		}
	}
	if instHash(model.ServiceKey{Name: "a"}, "b", "c", 1) == instHash(model.ServiceKey{Name: "a", Group: ""}, "b", "c", 10) {
		t.Fatal("hash ignores the port")
	}
}
