package model

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

var svc = ServiceKey{Name: "orders"}

func validKey() InstanceKey { i := validInstance(); return i.Key() }

func validInstance() Instance {
	inst := NewInstance(svc, "10.0.0.1", 8080)
	inst.Metadata = NewMetadata(map[string]string{"version": "1.2", "zone": "a"})
	return inst
}

func TestDefaults(t *testing.T) {
	k := ServiceKey{Name: "orders"}.WithDefaults()
	if k.Namespace != "public" || k.Group != "DEFAULT_GROUP" {
		t.Fatalf("defaults: %+v", k)
	}
	inst := Instance{Service: svc, IP: "10.0.0.1", Port: 80}.WithDefaults()
	if inst.Cluster != "DEFAULT" || inst.Service.Namespace != "public" {
		t.Fatalf("instance defaults: %+v", inst)
	}
	n := NewInstance(svc, "10.0.0.1", 80)
	if n.Weight != 1 || !n.Enabled || !n.Healthy || !n.Ephemeral || n.Cluster != "DEFAULT" {
		t.Fatalf("NewInstance: %+v", n)
	}
}

func TestInstanceID(t *testing.T) {
	inst := NewInstance(ServiceKey{Group: "g", Name: "orders"}, "10.0.0.1", 8080)
	if got, want := inst.InstanceID(), "10.0.0.1#8080#DEFAULT#g@@orders"; got != want {
		t.Fatalf("default ID = %q, want %q", got, want)
	}
	inst.ID = "custom-1"
	if got := inst.InstanceID(); got != "custom-1" {
		t.Fatalf("custom ID = %q", got)
	}
}

func TestGroupedNames(t *testing.T) {
	for _, tc := range []struct {
		in, group, name string
		err             bool
	}{
		{"g@@s", "g", "s", false},
		{"s", DefaultGroup, "s", false},
		{"@@s", "", "", true},
		{"g@@", "", "", true},
		{"", "", "", true},
	} {
		k, err := ParseGroupedName(tc.in)
		if (err != nil) != tc.err || k.Group != tc.group || k.Name != tc.name || k.Namespace != "" {
			t.Errorf("ParseGroupedName(%q) = %+v, %v", tc.in, k, err)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseGroupedName(%q) error %v is not ErrInvalid", tc.in, err)
		}
	}
	k := ServiceKey{Group: "my.group:1", Name: "providers:com.foo.Bar:1.0.0:"}
	back, err := ParseGroupedName(k.GroupedName())
	if err != nil || back != k {
		t.Fatalf("round trip of %q: %+v %v", k.GroupedName(), back, err)
	}
	if got := k.String(); got != "public@@my.group:1@@providers:com.foo.Bar:1.0.0:" {
		t.Fatalf("String = %q", got)
	}
}

func TestEndpoint(t *testing.T) {
	if got := Endpoint("10.0.0.1", 80); got != "10.0.0.1:80" {
		t.Fatal(got)
	}
	if got := Endpoint("::1", 80); got != "[::1]:80" {
		t.Fatal(got)
	}
}

// TestValidation covers every validation rule: each case breaks one rule and
// names the field the error must mention.
func TestValidation(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	md := func(kv ...string) Metadata {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return NewMetadata(m)
	}
	inst := func(f func(*Instance)) func() error {
		return func() error { i := validInstance(); f(&i); return i.Validate(Limits{}) }
	}
	service := func(f func(*Service)) func() error {
		return func() error {
			s := Service{Key: svc, Clusters: []Cluster{{Name: "c1"}}}
			f(&s)
			return s.Validate(Limits{})
		}
	}
	check := func(f func(*HealthCheck)) func() error {
		return service(func(s *Service) { f(&s.Clusters[0].HealthCheck) })
	}
	cases := []struct {
		name  string
		run   func() error
		field string // "" means valid
	}{
		{"valid instance", inst(func(*Instance) {}), ""},
		{"valid hostname", inst(func(i *Instance) { i.IP = "db-1.example.com" }), ""},
		{"valid ipv6", inst(func(i *Instance) { i.IP = "fe80::1" }), ""},
		{"namespace chars", inst(func(i *Instance) { i.Service.Namespace = "a b" }), "service.namespace"},
		{"namespace length", inst(func(i *Instance) { i.Service.Namespace = long(65) }), "service.namespace"},
		{"group chars", inst(func(i *Instance) { i.Service.Group = "g/h" }), "service.group"},
		{"group length", inst(func(i *Instance) { i.Service.Group = long(129) }), "service.group"},
		{"service empty", inst(func(i *Instance) { i.Service.Name = "" }), "service.name"},
		{"service length", inst(func(i *Instance) { i.Service.Name = long(513) }), "service.name"},
		{"service leading @", inst(func(i *Instance) { i.Service.Name = "@svc" }), "service.name"},
		{"service @@", inst(func(i *Instance) { i.Service.Name = "a@@b" }), "service.name"},
		{"service space", inst(func(i *Instance) { i.Service.Name = "a b" }), "service.name"},
		{"service CJK", inst(func(i *Instance) { i.Service.Name = "服务" }), "service.name"},
		{"cluster chars", inst(func(i *Instance) { i.Cluster = "c.1" }), "instance.cluster"},
		{"cluster length", inst(func(i *Instance) { i.Cluster = long(65) }), "instance.cluster"},
		{"ip empty", inst(func(i *Instance) { i.IP = "" }), "instance.ip"},
		{"ip garbage", inst(func(i *Instance) { i.IP = "not an ip" }), "instance.ip"},
		{"ip bad octet", inst(func(i *Instance) { i.IP = "10.0.0.256" }), "instance.ip"},
		{"ip unspecified", inst(func(i *Instance) { i.IP = "0.0.0.0" }), "instance.ip"},
		{"host label dash", inst(func(i *Instance) { i.IP = "-a.example.com" }), "instance.ip"},
		{"host too long", inst(func(i *Instance) { i.IP = long(254) }), "instance.ip"},
		{"port zero", inst(func(i *Instance) { i.Port = 0 }), "instance.port"},
		{"port high", inst(func(i *Instance) { i.Port = 65536 }), "instance.port"},
		{"weight negative", inst(func(i *Instance) { i.Weight = -1 }), "instance.weight"},
		{"weight high", inst(func(i *Instance) { i.Weight = 10000.5 }), "instance.weight"},
		{"weight NaN", inst(func(i *Instance) { i.Weight = math.NaN() }), "instance.weight"},
		{"weight Inf", inst(func(i *Instance) { i.Weight = math.Inf(1) }), "instance.weight"},
		{"id space", inst(func(i *Instance) { i.ID = "a b" }), "instance.id"},
		{"id length", inst(func(i *Instance) { i.ID = long(1025) }), "instance.id"},
		{"metadata size", inst(func(i *Instance) { i.Metadata = md("k", long(1024)) }), "instance.metadata"},
		{"metadata empty key", inst(func(i *Instance) { i.Metadata = md("", "v") }), "instance.metadata"},
		{"metadata utf8", inst(func(i *Instance) { i.Metadata = md("k", "\xff") }), "instance.metadata[k]"},
		{"beat interval not a number", inst(func(i *Instance) { i.Metadata = md(MetaHeartBeatInterval, "5s") }), "instance.metadata[" + MetaHeartBeatInterval + "]"},
		{"beat timeout zero", inst(func(i *Instance) { i.Metadata = md(MetaHeartBeatTimeout, "0") }), "instance.metadata[" + MetaHeartBeatTimeout + "]"},
		{"delete timeout huge", inst(func(i *Instance) { i.Metadata = md(MetaIPDeleteTimeout, "86400001") }), "instance.metadata[" + MetaIPDeleteTimeout + "]"},
		{"interval above timeout", inst(func(i *Instance) { i.Metadata = md(MetaHeartBeatInterval, "20000") }), "instance.metadata[" + MetaHeartBeatInterval + "]"},
		{"timeout above delete is Nacos-valid", inst(func(i *Instance) { i.Metadata = md(MetaHeartBeatTimeout, "40000") }), ""},
		{"delete below default timeout is Nacos-valid", inst(func(i *Instance) { i.Metadata = md(MetaIPDeleteTimeout, "10000") }), ""},
		{"host with underscore", inst(func(i *Instance) { i.IP = "my_host.internal" }), ""},
		{"host with final dot", inst(func(i *Instance) { i.IP = "db.example.com." }), ""},
		{"host only a dot", inst(func(i *Instance) { i.IP = "." }), "instance.ip"},
		{"host empty label", inst(func(i *Instance) { i.IP = "a..b" }), "instance.ip"},
		{"metadata counted in characters", inst(func(i *Instance) { i.Metadata = md("k", strings.Repeat("服", 400)) }), ""},
		{"namespace dot", inst(func(i *Instance) { i.Service.Namespace = "." }), "service.namespace"},
		{"namespace dotdot", inst(func(i *Instance) { i.Service.Namespace = ".." }), "service.namespace"},
		{"namespace path", inst(func(i *Instance) { i.Service.Namespace = "../etc" }), "service.namespace"},
		{"group dot", inst(func(i *Instance) { i.Service.Group = "." }), "service.group"},
		{"group dotdot", inst(func(i *Instance) { i.Service.Group = ".." }), "service.group"},
		{"group path", inst(func(i *Instance) { i.Service.Group = "../etc" }), "service.group"},
		{"group dots and colons", inst(func(i *Instance) { i.Service.Group = "a.b:c...d" }), ""},
		{"service dot", inst(func(i *Instance) { i.Service.Name = "." }), "service.name"},
		{"service dotdot", inst(func(i *Instance) { i.Service.Name = ".." }), "service.name"},
		{"service parent path", inst(func(i *Instance) { i.Service.Name = "../etc" }), "service.name"},
		{"service inner dotdot", inst(func(i *Instance) { i.Service.Name = "a/../b" }), "service.name"},
		{"service trailing dot segment", inst(func(i *Instance) { i.Service.Name = "a/." }), "service.name"},
		{"service absolute", inst(func(i *Instance) { i.Service.Name = "/etc/passwd" }), "service.name"},
		{"service empty segment", inst(func(i *Instance) { i.Service.Name = "a//b" }), "service.name"},
		{"service trailing slash", inst(func(i *Instance) { i.Service.Name = "a/" }), "service.name"},
		{"service backslash", inst(func(i *Instance) { i.Service.Name = `..\etc` }), "service.name"},
		{"service java name", inst(func(i *Instance) { i.Service.Name = "com.example.Svc" }), ""},
		{"service punctuation", inst(func(i *Instance) { i.Service.Name = "a-b_c:d" }), ""},
		{"service dubbo name", inst(func(i *Instance) { i.Service.Name = "providers:com.example.DemoService:1.0.0:" }), ""},
		{"service slash", inst(func(i *Instance) { i.Service.Name = "team/orders" }), ""},
		{"service three dots", inst(func(i *Instance) { i.Service.Name = "..." }), ""},
		{"service dot prefix", inst(func(i *Instance) { i.Service.Name = ".hidden" }), ""},
		{"metadata key NUL", inst(func(i *Instance) { i.Metadata = md("k\x00", "v") }), "instance.metadata"},
		{"metadata key newline", inst(func(i *Instance) { i.Metadata = md("k\n", "v") }), "instance.metadata"},
		{"metadata key tab", inst(func(i *Instance) { i.Metadata = md("k\t", "v") }), "instance.metadata"},
		{"metadata key DEL", inst(func(i *Instance) { i.Metadata = md("k\x7f", "v") }), "instance.metadata"},
		{"metadata key C1", inst(func(i *Instance) { i.Metadata = md("k\u0085", "v") }), "instance.metadata"},
		{"metadata value NUL", inst(func(i *Instance) { i.Metadata = md("k", "a\x00b") }), "instance.metadata[k]"},
		{"metadata value CR LF", inst(func(i *Instance) { i.Metadata = md("k", "a\r\nb") }), "instance.metadata[k]"},
		{"metadata value ESC", inst(func(i *Instance) { i.Metadata = md("k", "\x1b[31m") }), "instance.metadata[k]"},
		{"metadata value DEL", inst(func(i *Instance) { i.Metadata = md("k", "\x7f") }), "instance.metadata[k]"},
		{"metadata value tab", inst(func(i *Instance) { i.Metadata = md("k", "a\tb") }), ""},
		{"metadata value JSON and unicode", inst(func(i *Instance) { i.Metadata = md("labels", `{"a":"b c","é":"服"}`) }), ""},
		{"service metadata NUL", service(func(s *Service) { s.Metadata = md("k", "\x00") }), "service.metadata[k]"},
		{"cluster metadata NUL key", service(func(s *Service) { s.Clusters[0].Metadata = md("\x00", "x") }), "service.clusters[0].metadata"},
		{"patch metadata control", func() error {
			p := InstancePatch{Key: validKey(), Metadata: md("k", "\x01")}
			return p.Validate(Limits{})
		}, "patch.metadata[k]"},
		{"check header value control", check(func(h *HealthCheck) { h.Headers = md("X", "a\x01") }), "service.clusters[0].healthCheck.headers[X]"},
		{"patch beat timing", func() error {
			p := InstancePatch{Key: validKey(), Metadata: md(MetaHeartBeatTimeout, "5000")}
			return p.Validate(Limits{})
		}, "patch.metadata[" + MetaHeartBeatTimeout + "]"},
		{"valid service", service(func(*Service) {}), ""},
		{"threshold high", service(func(s *Service) { s.ProtectThreshold = 1.5 }), "service.protectThreshold"},
		{"threshold NaN", service(func(s *Service) { s.ProtectThreshold = math.NaN() }), "service.protectThreshold"},
		{"service metadata size", service(func(s *Service) { s.Metadata = md("k", long(2000)) }), "service.metadata"},
		{"cluster name", service(func(s *Service) { s.Clusters[0].Name = "c 1" }), "service.clusters[0].name"},
		{"cluster duplicate", service(func(s *Service) { s.Clusters = append(s.Clusters, Cluster{Name: "c1"}) }), "service.clusters[1].name"},
		{"cluster metadata", service(func(s *Service) { s.Clusters[0].Metadata = md("", "x") }), "service.clusters[0].metadata"},
		{"check type", check(func(h *HealthCheck) { h.Type = "PING" }), "service.clusters[0].healthCheck.type"},
		{"check port", check(func(h *HealthCheck) { h.Port = 70000 }), "service.clusters[0].healthCheck.port"},
		{"check path", check(func(h *HealthCheck) { h.Path = "health" }), "service.clusters[0].healthCheck.path"},
		{"check path space", check(func(h *HealthCheck) { h.Path = "/a b" }), "service.clusters[0].healthCheck.path"},
		{"check header name", check(func(h *HealthCheck) { h.Headers = md("X Y", "v") }), "service.clusters[0].healthCheck.headers"},
		{"check header value", check(func(h *HealthCheck) { h.Headers = md("X", "a\r\nb") }), "service.clusters[0].healthCheck.headers[X]"},
		{"check code", check(func(h *HealthCheck) { h.ExpectedCodes = []int{99} }), "service.clusters[0].healthCheck.expectedCodes"},
		{"check codes count", check(func(h *HealthCheck) { h.ExpectedCodes = make([]int, 17) }), "service.clusters[0].healthCheck.expectedCodes"},
		{"check user", check(func(h *HealthCheck) { h.User = long(257) }), "service.clusters[0].healthCheck.user"},
		{"check command", check(func(h *HealthCheck) { h.Command = long(4097) }), "service.clusters[0].healthCheck.command"},
		{"valid check", check(func(h *HealthCheck) {
			*h = HealthCheck{Type: CheckHTTP, Path: "/health", Headers: md("X-A", "1"), ExpectedCodes: []int{200, 204}}
		}), ""},
		{"patch empty", func() error { p := InstancePatch{Key: validKey()}; return p.Validate(Limits{}) }, "patch"},
		{"patch weight", func() error {
			w := 1e9
			p := InstancePatch{Key: validKey(), Weight: &w}
			return p.Validate(Limits{})
		}, "patch.weight"},
		{"patch key", func() error {
			w := 1.0
			p := InstancePatch{Key: InstanceKey{Service: svc, IP: "x y", Port: 1}, Weight: &w}
			return p.Validate(Limits{})
		}, "instance.ip"},
		{"query cluster", func() error { q := Query{Service: svc, Clusters: []string{"ok", "no!"}}; return q.Validate() }, "query.clusters[1]"},
		{"query service", func() error { q := Query{}; return q.Validate() }, "service.name"},
		{"metadata cap configurable", func() error {
			i := validInstance()
			return i.Validate(Limits{MaxMetadataSize: 8})
		}, "instance.metadata"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not match ErrInvalid", err)
			}
			var ve *ValidationError
			if !errors.As(err, &ve) || ve.Field != tc.field || ve.Rule == "" {
				t.Fatalf("error %v: want field %q with a rule", err, tc.field)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("message %q does not name %q", err, tc.field)
			}
		})
	}
}

func TestBeatTimings(t *testing.T) {
	i := validInstance()
	if got := i.BeatTimings(); got != (BeatTimings{DefaultHeartBeatInterval, DefaultHeartBeatTimeout, DefaultIPDeleteTimeout}) {
		t.Fatalf("defaults: %+v", got)
	}
	i.Metadata = i.Metadata.With(MetaHeartBeatInterval, "1000").With(MetaHeartBeatTimeout, "3000").With(MetaIPDeleteTimeout, "6000")
	got := i.BeatTimings()
	if got.Interval.Milliseconds() != 1000 || got.Unhealthy.Milliseconds() != 3000 || got.Delete.Milliseconds() != 6000 {
		t.Fatalf("overrides: %+v", got)
	}
}

func TestMetadata(t *testing.T) {
	m := NewMetadata(map[string]string{"b": "2", "a": "1", "c": "3"})
	if m.Len() != 3 || m.Value("a") != "1" || m.Value("zz") != "" || m.String() != "{a=1, b=2, c=3}" {
		t.Fatalf("m = %v", m)
	}
	m2 := m.With("b", "20").With("d", "4").Without("a")
	if m2.String() != "{b=20, c=3, d=4}" || m.String() != "{a=1, b=2, c=3}" {
		t.Fatalf("With/Without changed the original or went wrong: %v, %v", m, m2)
	}
	merged := m.Merge(NewMetadata(map[string]string{"a": "x", "e": "5"}))
	if merged.String() != "{a=x, b=2, c=3, e=5}" {
		t.Fatalf("Merge = %v", merged)
	}
	if !reflect.DeepEqual(merged.Map(), map[string]string{"a": "x", "b": "2", "c": "3", "e": "5"}) {
		t.Fatalf("Map = %v", merged.Map())
	}
	if m.Size() != 6 || (Metadata{}).Map() != nil || !(Metadata{}).Equal(NewMetadata(nil)) {
		t.Fatal("Size/Map/Equal of empty")
	}
	if m.ByteSize() != 6 || (Metadata{}).ByteSize() != 0 {
		t.Fatal("ByteSize")
	}
	if u := NewMetadata(map[string]string{"é": "ü"}); u.Size() != 2 || u.ByteSize() != 4 {
		t.Fatalf("Size %d, ByteSize %d of two 2-byte characters", u.Size(), u.ByteSize())
	}
	j, err := m.MarshalJSON()
	if err != nil || string(j) != `{"a":"1","b":"2","c":"3"}` {
		t.Fatalf("JSON = %s, %v", j, err)
	}
	var back Metadata
	if err := back.UnmarshalJSON(j); err != nil || !back.Equal(m) {
		t.Fatalf("JSON round trip: %v %v", back, err)
	}
}

func TestMetadataEncodingIsDeterministic(t *testing.T) {
	src := map[string]string{}
	for i := range 50 {
		src[strings.Repeat("k", i+1)] = "v"
	}
	first, err := msgpack.Marshal(NewMetadata(src))
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		b, _ := msgpack.Marshal(NewMetadata(src))
		if string(b) != string(first) {
			t.Fatal("two encodings of equal metadata differ")
		}
	}
}

func TestEncodingRoundTrip(t *testing.T) {
	w, e := 3.5, false
	values := []any{
		ptr(validInstance()),
		&Service{Key: svc.WithDefaults(), Ephemeral: true, ProtectThreshold: 0.5,
			Metadata: NewMetadata(map[string]string{"owner": "team-a"}),
			Clusters: []Cluster{{Name: "c1", HealthCheck: HealthCheck{Type: CheckMySQL, User: "u", Password: "p", Command: "select 1"}}}},
		&InstancePatch{Key: validKey(), Weight: &w, Enabled: &e, Metadata: NewMetadata(map[string]string{"x": "y"})},
		&Query{Service: svc, Clusters: []string{"a"}, HealthyOnly: true},
		&ServiceView{Service: Service{Key: svc}, Revision: 7, Instances: []Instance{validInstance()}, Protected: true, RealHealth: []bool{false}},
		&Delta{Added: []Instance{validInstance()}},
	}
	for _, v := range values {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatalf("%T: %v", v, err)
		}
		back := reflect.New(reflect.TypeOf(v).Elem())
		if err := msgpack.Unmarshal(b, back.Interface()); err != nil {
			t.Fatalf("%T: %v", v, err)
		}
		if !reflect.DeepEqual(v, back.Interface()) {
			t.Fatalf("%T round trip:\n got %+v\nwant %+v", v, back.Elem(), v)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func TestDiff(t *testing.T) {
	a := NewInstance(svc.WithDefaults(), "10.0.0.1", 80)
	b := NewInstance(svc.WithDefaults(), "10.0.0.2", 80)
	c := NewInstance(svc.WithDefaults(), "10.0.0.3", 80)
	b2 := b
	b2.Healthy = false
	from := &ServiceView{Instances: []Instance{a, b}}
	to := &ServiceView{Instances: []Instance{b2, c}}
	d := Diff(from, to)
	if len(d.Added) != 1 || d.Added[0].IP != "10.0.0.3" ||
		len(d.Removed) != 1 || d.Removed[0].IP != "10.0.0.1" ||
		len(d.Updated) != 1 || d.Updated[0].Healthy {
		t.Fatalf("Diff = %+v", d)
	}
	if d := Diff(to, to); !d.Empty() {
		t.Fatalf("Diff of equal views = %+v", d)
	}
	if d := Diff(nil, to); len(d.Added) != 2 {
		t.Fatalf("Diff from nil = %+v", d)
	}
	if d := Diff(to, nil); len(d.Removed) != 2 {
		t.Fatalf("Diff to nil = %+v", d)
	}
	if d := Diff(nil, nil); !reflect.DeepEqual(d, Delta{}) {
		t.Fatalf("Diff of two empty views = %+v, want the zero Delta", d)
	}
	if d := Diff(&ServiceView{Instances: []Instance{}}, from); len(d.Added) != 2 || d.Removed != nil || d.Updated != nil {
		t.Fatalf("Diff from an empty view = %+v", d)
	}
}

// TestDiffSharesOneSide: a delta against an empty view (a watcher's first,
// a service gone) is the other view's instances, not a copy of them, and
// an append to it leaves the view alone.
func TestDiffSharesOneSide(t *testing.T) {
	insts := make([]Instance, 2, 4) // room to grow: an append must not use it
	insts[0] = NewInstance(svc.WithDefaults(), "10.0.0.1", 80)
	insts[1] = NewInstance(svc.WithDefaults(), "10.0.0.2", 80)
	v := &ServiceView{Instances: insts}
	for name, list := range map[string][]Instance{"added": Diff(nil, v).Added, "removed": Diff(v, nil).Removed} {
		if len(list) != 2 || &list[0] != &insts[0] {
			t.Fatalf("%s: %d instances, shared %v; want the view's own", name, len(list), len(list) > 0 && &list[0] == &insts[0])
		}
		grown := append(list, NewInstance(svc.WithDefaults(), "10.0.0.3", 80))
		if &grown[0] == &insts[0] || insts[:3][2].IP != "" {
			t.Fatalf("%s: an append to the delta wrote into the view's array", name)
		}
	}
}

func TestPatch(t *testing.T) {
	w, off := 0.25, false
	p := InstancePatch{Weight: &w, Metadata: NewMetadata(map[string]string{"zone": "b", "x": "1"})}
	got := p.Apply(validInstance())
	if got.Weight != 0.25 || !got.Enabled || got.Metadata.Value("zone") != "b" || got.Metadata.Value("version") != "1.2" {
		t.Fatalf("Apply = %+v", got)
	}
	m := p.Merge(InstancePatch{Enabled: &off})
	if *m.Weight != 0.25 || *m.Enabled || m.Metadata.Value("x") != "1" {
		t.Fatalf("Merge = %+v", m)
	}
	w = 9 // the merged patch owns its values
	if *m.Weight != 0.25 {
		t.Fatal("Merge aliases the weight")
	}
}

func TestServiceCluster(t *testing.T) {
	s := Service{Key: svc, Clusters: []Cluster{{Name: "b", HealthCheck: HealthCheck{Type: CheckNone}}, {Name: "a"}}}.WithDefaults()
	if s.Clusters[0].Name != "a" {
		t.Fatal("WithDefaults does not sort clusters")
	}
	if c := s.Cluster("b"); c.HealthCheck.EffectiveType() != CheckNone {
		t.Fatalf("Cluster(b) = %+v", c)
	}
	if c := s.Cluster("zzz"); c.Name != "zzz" || c.HealthCheck.EffectiveType() != CheckTCP {
		t.Fatalf("default cluster = %+v", c)
	}
}

func TestServiceClone(t *testing.T) {
	s := Service{Key: svc, Clusters: []Cluster{{Name: "a", HealthCheck: HealthCheck{Password: "secret", ExpectedCodes: []int{200}}}}}
	c := s.Clone()
	c.Clusters[0].HealthCheck.ExpectedCodes[0] = 500
	c.Clusters[0].Name = "b"
	if s.Clusters[0].HealthCheck.ExpectedCodes[0] != 200 || s.Clusters[0].Name != "a" {
		t.Fatal("Clone shares slices")
	}
	if r := s.Redacted(); r.Clusters[0].HealthCheck.Password != "" || s.Clusters[0].HealthCheck.Password != "secret" {
		t.Fatal("Redacted kept the password or changed the original")
	}
	d := s.WithDefaults()
	d.Clusters[0].HealthCheck.ExpectedCodes[0] = 404
	if s.Clusters[0].HealthCheck.ExpectedCodes[0] != 200 {
		t.Fatal("WithDefaults shares slices")
	}
}

func TestQueryWithDefaults(t *testing.T) {
	clusters := []string{"", "c1"}
	q := Query{Service: svc, Clusters: clusters}.WithDefaults()
	if q.Clusters[0] != DefaultCluster || clusters[0] != "" || q.Service.Group != DefaultGroup {
		t.Fatalf("WithDefaults = %+v (caller's slice now %v)", q, clusters)
	}
}

func TestRealHealthyShortSlice(t *testing.T) {
	v := ServiceView{Instances: []Instance{validInstance(), validInstance()}, RealHealth: []bool{false}}
	if v.RealHealthy(0) || !v.RealHealthy(1) || v.HealthyCount() != 1 {
		t.Fatal("RealHealthy with a short RealHealth")
	}
}

// TestMetadataValidate: a metadata set on its own follows the rules that
// instances' metadata follows, and the error names the given field.
func TestMetadataValidate(t *testing.T) {
	for _, tc := range []struct {
		m  map[string]string
		ok bool
	}{
		{nil, true},
		{map[string]string{"app": "a\tb"}, true},
		{map[string]string{"": "x"}, false},
		{map[string]string{"a\x7f": "x"}, false},
		{map[string]string{"a": "\u0085"}, false},
		{map[string]string{"a": "\xff"}, false},
		{map[string]string{"a": strings.Repeat("x", 15)}, true},
		{map[string]string{"a": strings.Repeat("x", 16)}, false},
	} {
		err := NewMetadata(tc.m).Validate("session.labels", Limits{MaxMetadataSize: 16})
		if (err == nil) != tc.ok || err != nil && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "session.labels")) {
			t.Errorf("Validate(%q) = %v, want ok %v", tc.m, err, tc.ok)
		}
	}
}

// TestServiceEqual: a change of any field of a definition, of its clusters
// or of their checks makes it differ; a deep copy does not.
func TestServiceEqual(t *testing.T) {
	base := func() Service {
		return Service{
			Key: ServiceKey{Namespace: "n", Group: "g", Name: "s"}, Ephemeral: true, ProtectThreshold: 0.5,
			Metadata: NewMetadata(map[string]string{"a": "1"}),
			Clusters: []Cluster{{Name: "c", Metadata: NewMetadata(map[string]string{"b": "2"}), HealthCheck: HealthCheck{
				Type: CheckHTTP, Port: 1, Path: "/p", Headers: NewMetadata(map[string]string{"h": "v"}),
				ExpectedCodes: []int{200}, User: "u", Password: "p", Command: "c",
			}}},
		}
	}
	b := base()
	if c := b.Clone(); !b.Equal(&c) {
		t.Fatal("a clone differs")
	}
	for name, change := range map[string]func(*Service){
		"key":       func(s *Service) { s.Key.Name = "t" },
		"kind":      func(s *Service) { s.Ephemeral = false },
		"threshold": func(s *Service) { s.ProtectThreshold = 0.6 },
		"metadata":  func(s *Service) { s.Metadata = s.Metadata.With("a", "2") },
		"clusters":  func(s *Service) { s.Clusters = nil },
		"cluster":   func(s *Service) { s.Clusters[0].Name = "d" },
		"cl meta":   func(s *Service) { s.Clusters[0].Metadata = Metadata{} },
		"type":      func(s *Service) { s.Clusters[0].HealthCheck.Type = CheckTCP },
		"port":      func(s *Service) { s.Clusters[0].HealthCheck.Port = 2 },
		"path":      func(s *Service) { s.Clusters[0].HealthCheck.Path = "/q" },
		"headers":   func(s *Service) { s.Clusters[0].HealthCheck.Headers = Metadata{} },
		"codes":     func(s *Service) { s.Clusters[0].HealthCheck.ExpectedCodes = []int{201} },
		"user":      func(s *Service) { s.Clusters[0].HealthCheck.User = "v" },
		"password":  func(s *Service) { s.Clusters[0].HealthCheck.Password = "q" },
		"command":   func(s *Service) { s.Clusters[0].HealthCheck.Command = "d" },
	} {
		c := base()
		change(&c)
		if b.Equal(&c) {
			t.Errorf("%s changed, Equal holds", name)
		}
	}
}
