package registry_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/muster-io/muster/health"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
)

// TestResultTypesHaveJSONTags: every exported field of the types a server
// encodes (the registry's results, and the types they hold) has a json tag
// in lower camel case, so that no type mixes tagged and untagged names.
func TestResultTypesHaveJSONTags(t *testing.T) {
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type, string)
	walk = func(ty reflect.Type, path string) {
		for ty.Kind() == reflect.Pointer || ty.Kind() == reflect.Slice || ty.Kind() == reflect.Array || ty.Kind() == reflect.Map {
			ty = ty.Elem()
		}
		if ty.Kind() != reflect.Struct || seen[ty] || ty.PkgPath() == "time" {
			return
		}
		if _, ok := reflect.New(ty).Interface().(json.Marshaler); ok {
			return // encodes itself (model.Metadata)
		}
		seen[ty] = true
		for i := range ty.NumField() {
			f := ty.Field(i)
			if !f.IsExported() {
				continue
			}
			if f.Anonymous && f.Tag.Get("json") == "" {
				walk(f.Type, path+"."+f.Name) // flattened, as encoding/json does
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name != "-" && !unicode.IsLower(rune(name[0])) {
				t.Errorf("%s.%s (%s): json tag %q, want a lower-camel name", path, f.Name, ty, f.Tag.Get("json"))
			}
			walk(f.Type, path+"."+f.Name)
		}
	}
	for _, v := range []any{
		registry.Update{}, registry.Cursor{}, registry.CatalogUpdate{}, registry.ServiceList{},
		registry.SessionInfo{}, registry.BeatResult{}, registry.Explanation{}, registry.Stats{},
		registry.Counts{}, model.ServiceView{}, health.Status{},
	} {
		walk(reflect.TypeOf(v), reflect.TypeOf(v).Name())
	}
}

// TestResultTypesEncode: the results encode to JSON and back, with the
// names their tags give (an Event's kind by its name).
func TestResultTypesEncode(t *testing.T) {
	list := registry.ServiceList{Total: 1, Services: []registry.ServiceSummary{{Key: svcKey("s"), Ephemeral: true, Instances: 2}}}
	b, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"services":[{"key":{"name":"s"},"ephemeral":true,"defined":false,"instances":2}],"total":1}`; string(b) != want {
		t.Fatalf("ServiceList encodes as\n%s\nwant\n%s", b, want)
	}
	var back registry.ServiceList
	if err := json.Unmarshal(b, &back); err != nil || back.Total != 1 || back.Services[0].Key.Name != "s" || back.Services[0].Instances != 2 {
		t.Fatalf("decoded %+v, %v", back, err)
	}
	ex := registry.Explanation{Present: true, Events: []registry.Event{{Seq: 1, At: time.Unix(0, 0).UTC(), Kind: registry.EventRegistered}}}
	b, err = json.Marshal(ex)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"kind":"registered"`) || !strings.Contains(string(b), `"present":true`) {
		t.Fatalf("Explanation encodes as %s", b)
	}
	r := newReg(t)
	mustRegister(t, r, inst("j", 0))
	w, err := r.Watch(ctx, model.Query{Service: svcKey("j")})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	u := next(t, w)
	for name, v := range map[string]any{"Update": u, "Stats": r.Stats(), "Counts": r.Counts()} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if strings.Contains(string(b), `"View"`) || strings.Contains(string(b), `"Services"`) {
			t.Fatalf("%s has an untagged field: %s", name, b)
		}
	}
	b, _ = json.Marshal(u)
	var ub registry.Update
	if err := json.Unmarshal(b, &ub); err != nil || ub.Cursor != u.Cursor || !ub.Reset || len(ub.Delta.Added) != 1 {
		t.Fatalf("Update round trip: %+v, %v (from %s)", ub, err, b)
	}
}
