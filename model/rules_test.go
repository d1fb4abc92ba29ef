package model

import (
	"errors"
	"testing"
)

// ruleState is a CommandState written out by hand for the table tests.
type ruleState struct {
	services  map[ServiceKey]ServiceState
	instances map[InstanceKey]InstanceState
	patches   map[InstanceKey]InstancePatch
}

func (s ruleState) Service(k ServiceKey) ServiceState    { return s.services[k] }
func (s ruleState) Instance(k InstanceKey) InstanceState { return s.instances[k] }
func (s ruleState) Patch(k InstanceKey) (InstancePatch, bool) {
	p, ok := s.patches[k]
	return p, ok
}

func rkey(name string) ServiceKey { return ServiceKey{Name: name}.WithDefaults() }

func rinst(svc, ip string) InstanceKey {
	return InstanceKey{Service: rkey(svc), Cluster: DefaultCluster, IP: ip, Port: 80}
}

// ruleFixture: "pers" is a defined persistent service with one persistent
// instance (healthy) and one patch; "bare" has persistent instances and no
// definition; "eph" is ephemeral with one ephemeral instance; "empty" a
// defined persistent service without instances; "kept" an emptied
// ephemeral service a registry still holds; "none" has a NONE cluster
// "manual" with an instance in it.
func ruleFixture() ruleState {
	persDef := &Service{Key: rkey("pers")}
	noneDef := &Service{Key: rkey("none"), Clusters: []Cluster{{Name: "manual", HealthCheck: HealthCheck{Type: CheckNone}}}}
	return ruleState{
		services: map[ServiceKey]ServiceState{
			rkey("pers"):  {Exists: true, Definition: persDef, Instances: 1, Persistent: 1},
			rkey("bare"):  {Exists: true, Instances: 2, Persistent: 2},
			rkey("eph"):   {Exists: true, Ephemeral: true, Instances: 1},
			rkey("empty"): {Exists: true, Definition: &Service{Key: rkey("empty")}},
			rkey("kept"):  {Exists: true, Ephemeral: true},
			rkey("none"):  {Exists: true, Definition: noneDef, Instances: 1, Persistent: 1},
		},
		instances: map[InstanceKey]InstanceState{
			rinst("pers", "10.0.0.1"): {Exists: true, Persistent: true, Healthy: true},
			rinst("bare", "10.0.0.1"): {Exists: true, Persistent: true},
			rinst("eph", "10.0.0.1"):  {Exists: true},
			{Service: rkey("none"), Cluster: "manual", IP: "10.0.0.1", Port: 80}: {Exists: true, Persistent: true},
		},
		patches: map[InstanceKey]InstancePatch{
			rinst("pers", "10.0.0.1"): {Key: rinst("pers", "10.0.0.1"), Metadata: NewMetadata(map[string]string{"a": "1"})},
			rinst("gone", "10.0.0.9"): {Key: rinst("gone", "10.0.0.9")},
			rinst("eph", "10.0.0.1"):  {Key: rinst("eph", "10.0.0.1")},
		},
	}
}

func TestCommandRules(t *testing.T) {
	st := ruleFixture()
	def := func(name string, eph bool) Service { return Service{Key: rkey(name), Ephemeral: eph} }
	put := func(svc, ip string) Instance {
		in := NewInstance(rkey(svc), ip, 80)
		in.Ephemeral = false
		return in
	}
	manual := InstanceKey{Service: rkey("none"), Cluster: "manual", IP: "10.0.0.1", Port: 80}
	for _, tc := range []struct {
		name         string
		cmd          Command
		origin       Origin
		check, admit error // nil: passes
	}{
		{"create new", Command{Op: OpCreateService, Service: def("new", false)}, Origin{}, nil, nil},
		{"create defined", Command{Op: OpCreateService, Service: def("pers", false)}, Origin{}, ErrServiceExists, ErrServiceExists},
		{"create defined, other kind", Command{Op: OpCreateService, Service: def("empty", true)}, Origin{}, ErrServiceExists, ErrServiceExists},
		{"create over persistent instances", Command{Op: OpCreateService, Service: def("bare", false)}, Origin{}, nil, nil},
		{"create ephemeral over persistent instances", Command{Op: OpCreateService, Service: def("bare", true)}, Origin{}, ErrKindMismatch, ErrKindMismatch},
		{"create persistent over ephemeral instances", Command{Op: OpCreateService, Service: def("eph", false)}, Origin{}, ErrKindMismatch, ErrKindMismatch},
		{"create ephemeral over ephemeral instances", Command{Op: OpCreateService, Service: def("eph", true)}, Origin{}, nil, nil},
		{"create persistent over a kept ephemeral service", Command{Op: OpCreateService, Service: def("kept", false)}, Origin{}, ErrKindMismatch, ErrKindMismatch},
		{"update unknown", Command{Op: OpUpdateService, Service: def("new", false)}, Origin{}, ErrServiceNotFound, ErrServiceNotFound},
		{"update unknown, upsert", Command{Op: OpUpdateService, Service: def("new", false), Upsert: true}, Origin{}, nil, nil},
		{"update defined", Command{Op: OpUpdateService, Service: def("pers", false)}, Origin{}, nil, nil},
		{"update changes kind", Command{Op: OpUpdateService, Service: def("empty", true)}, Origin{}, ErrKindMismatch, ErrKindMismatch},
		{"update ephemeral over persistent instances", Command{Op: OpUpdateService, Service: def("bare", true), Upsert: true}, Origin{}, ErrKindMismatch, ErrKindMismatch},
		{"update of instances only", Command{Op: OpUpdateService, Service: def("bare", false)}, Origin{}, nil, nil},
		{"update ephemeral service", Command{Op: OpUpdateService, Service: def("eph", true)}, Origin{}, nil, nil},
		{"delete unknown", Command{Op: OpDeleteService, SvcKey: rkey("new")}, Origin{}, ErrServiceNotFound, ErrServiceNotFound},
		{"delete with instances", Command{Op: OpDeleteService, SvcKey: rkey("pers")}, Origin{}, ErrServiceNotEmpty, ErrServiceNotEmpty},
		{"delete with ephemeral instances", Command{Op: OpDeleteService, SvcKey: rkey("eph")}, Origin{}, ErrServiceNotEmpty, ErrServiceNotEmpty},
		{"delete empty", Command{Op: OpDeleteService, SvcKey: rkey("empty")}, Origin{}, nil, nil},
		{"put new service", Command{Op: OpPutInstance, Instance: put("new", "10.0.0.1")}, Origin{}, nil, nil},
		{"put into persistent service", Command{Op: OpPutInstance, Instance: put("pers", "10.0.0.2")}, Origin{}, nil, nil},
		{"put into ephemeral service", Command{Op: OpPutInstance, Instance: put("eph", "10.0.0.2")}, Origin{}, ErrKindMismatch, ErrKindMismatch},
		{"put ephemeral instance", Command{Op: OpPutInstance, Instance: NewInstance(rkey("new"), "10.0.0.1", 80)}, Origin{}, ErrKindMismatch, ErrKindMismatch},
		{"delete instance, absent", Command{Op: OpDeleteInstance, Key: rinst("new", "10.0.0.1")}, Origin{}, nil, nil},
		{"patch known", Command{Op: OpPatchInstance, Patch: InstancePatch{Key: rinst("pers", "10.0.0.1")}}, Origin{}, nil, nil},
		{"patch ephemeral", Command{Op: OpPatchInstance, Patch: InstancePatch{Key: rinst("eph", "10.0.0.1")}}, Origin{}, nil, nil},
		{"patch unknown", Command{Op: OpPatchInstance, Patch: InstancePatch{Key: rinst("new", "10.0.0.1")}}, Origin{}, nil, ErrInstanceNotFound},
		{"remove no patch", Command{Op: OpRemovePatch, Key: rinst("new", "10.0.0.1")}, Origin{}, ErrNoop, ErrNoop},
		{"remove patch", Command{Op: OpRemovePatch, Key: rinst("pers", "10.0.0.1")}, Origin{}, nil, nil},
		{"expire patch, instance gone", Command{Op: OpRemovePatch, Key: rinst("gone", "10.0.0.9")}, Origin{Expiry: true}, nil, nil},
		{"expire patch, instance back", Command{Op: OpRemovePatch, Key: rinst("pers", "10.0.0.1")}, Origin{Expiry: true}, nil, ErrNoop},
		{"health of unknown", Command{Op: OpSetHealth, Key: rinst("new", "10.0.0.1")}, Origin{}, ErrInstanceNotFound, ErrInstanceNotFound},
		{"health of ephemeral", Command{Op: OpSetHealth, Key: rinst("eph", "10.0.0.1")}, Origin{}, ErrInstanceNotFound, ErrKindMismatch},
		{"health by hand, checked cluster", Command{Op: OpSetHealth, Key: rinst("pers", "10.0.0.1")}, Origin{}, nil, ErrHealthChecked},
		{"health by checker, checked cluster", Command{Op: OpSetHealth, Key: rinst("pers", "10.0.0.1")}, Origin{Checker: true}, nil, nil},
		{"health without definition, by checker", Command{Op: OpSetHealth, Key: rinst("bare", "10.0.0.1")}, Origin{Checker: true}, nil, nil},
		{"health by hand, NONE cluster", Command{Op: OpSetHealth, Key: manual}, Origin{}, nil, nil},
		{"health by checker, NONE cluster", Command{Op: OpSetHealth, Key: manual}, Origin{Checker: true}, nil, ErrNoop},
		{"unknown op", Command{Op: 99}, Origin{}, ErrInvalid, ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, scope := range []struct {
				name string
				err  error
				want error
			}{
				{"check", CheckCommand(&tc.cmd, st), tc.check},
				{"admit", AdmitCommand(&tc.cmd, st, tc.origin), tc.admit},
			} {
				if scope.want == nil && scope.err != nil || scope.want != nil && !errors.Is(scope.err, scope.want) {
					t.Errorf("%s: %v, want %v", scope.name, scope.err, scope.want)
				}
			}
		})
	}
}

func TestRuleErrors(t *testing.T) {
	for _, err := range []error{ErrServiceNotFound, ErrInstanceNotFound} {
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("%v does not match ErrNotFound", err)
		}
	}
	if errors.Is(ErrServiceNotFound, ErrInstanceNotFound) || errors.Is(ErrServiceExists, ErrNotFound) {
		t.Error("distinct rule errors match each other")
	}
}

func TestResolveCommand(t *testing.T) {
	st := ruleFixture()
	w := 3.0
	pk := rinst("pers", "10.0.0.1")

	put := NewInstance(rkey("pers"), "10.0.0.1", 80)
	put.Ephemeral, put.Healthy = false, false
	c := Command{Op: OpPutInstance, Instance: put}
	if !ResolveCommand(&c, st) || !c.Instance.Healthy {
		t.Errorf("re-put: health %t, want the stored true", c.Instance.Healthy)
	}
	fresh := NewInstance(rkey("pers"), "10.0.0.7", 80)
	fresh.Ephemeral, fresh.Healthy = false, false
	c = Command{Op: OpPutInstance, Instance: fresh}
	if ResolveCommand(&c, st); c.Instance.Healthy {
		t.Error("a new instance took a health it did not carry")
	}

	c = Command{Op: OpPatchInstance, Patch: InstancePatch{Key: pk, Weight: &w, Metadata: NewMetadata(map[string]string{"b": "2"})}}
	ResolveCommand(&c, st)
	if c.Patch.Key != pk || c.Patch.Weight == nil || *c.Patch.Weight != 3 || c.Patch.Metadata.Value("a") != "1" || c.Patch.Metadata.Value("b") != "2" {
		t.Errorf("merged patch %+v", c.Patch)
	}
	if c.Patch.Weight == &w {
		t.Error("the merged patch shares the command's pointer")
	}

	for _, tc := range []struct {
		cmd  Command
		want bool
	}{
		{Command{Op: OpSetHealth, Key: pk, Healthy: true}, false},
		{Command{Op: OpSetHealth, Key: pk, Healthy: false}, true},
		{Command{Op: OpDeleteInstance, Key: pk}, true},
		{Command{Op: OpDeleteInstance, Key: rinst("eph", "10.0.0.1")}, false},
		{Command{Op: OpDeleteService, SvcKey: rkey("empty")}, true},
		{Command{Op: OpDeleteService, SvcKey: rkey("kept")}, false},
		{Command{Op: OpRemovePatch, Key: pk}, true},
		{Command{Op: OpRemovePatch, Key: rinst("new", "10.0.0.1")}, false},
		{Command{Op: OpCreateService, Service: Service{Key: rkey("new")}}, true},
	} {
		if got := ResolveCommand(&tc.cmd, st); got != tc.want {
			t.Errorf("%s %v: changes %t, want %t", tc.cmd.Op, tc.cmd.Key, got, tc.want)
		}
	}
}
