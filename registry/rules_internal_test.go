package registry

import (
	"errors"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/muster-io/muster/model"
)

// rulesIndex returns a registry that is not started (no goroutine runs),
// holding:
//   - "none": a persistent service whose DEFAULT cluster has manual health
//     (NONE), with the persistent instance 10.0.0.1:80;
//   - "tcp": a persistent service with the default TCP check and the
//     persistent instance 10.0.0.2:80;
//   - "eph": an ephemeral service with the beat instance 10.0.0.3:80;
//   - "empty": a persistent service with a definition and no instance.
func rulesIndex(t *testing.T) *Registry {
	t.Helper()
	cfg := DefaultConfig()
	cfg.HealthChecks = nil
	cfg.Clock = clockwork.NewFakeClock()
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mirrorLocked(&command{op: opCreateService, service: model.Service{Key: rulesSvc("none"),
		Clusters: []model.Cluster{{Name: model.DefaultCluster, HealthCheck: model.HealthCheck{Type: model.CheckNone}}}}})
	r.mirrorLocked(&command{op: opCreateService, service: model.Service{Key: rulesSvc("empty")}})
	r.mirrorLocked(&command{op: opPutInstance, inst: rulesInst("none", 1, false)})
	r.mirrorLocked(&command{op: opPutInstance, inst: rulesInst("tcp", 2, false)})
	if _, err := r.registerBeatLocked(rulesInst("eph", 3, true)); err != nil {
		t.Fatal(err)
	}
	return r
}

func rulesSvc(name string) model.ServiceKey { return model.ServiceKey{Name: name}.WithDefaults() }

func rulesInst(svc string, ip int, ephemeral bool) model.Instance {
	in := model.NewInstance(rulesSvc(svc), "10.0.0."+string(rune('0'+ip)), 80)
	in.Ephemeral = ephemeral
	return in.WithDefaults()
}

func rulesKey(svc string, ip int) model.InstanceKey { return rulesInst(svc, ip, false).Key() }

// TestRules: checkLocked, the state rules of persistent data against the
// index, one case per rule, on an index with no goroutine running.
func TestRules(t *testing.T) {
	r := rulesIndex(t)
	skip := errSkip
	for _, tc := range []struct {
		name string
		cmd  command
		want error // nil: accepted
	}{
		{"create a new service", command{op: opCreateService, service: model.Service{Key: rulesSvc("new")}}, nil},
		{"create a defined service", command{op: opCreateService, service: model.Service{Key: rulesSvc("none")}}, ErrServiceExists},
		{"create over an implicit service of the other kind", command{op: opCreateService, service: model.Service{Key: rulesSvc("eph")}}, ErrKindMismatch},
		{"create over an implicit service of its kind", command{op: opCreateService, service: model.Service{Key: rulesSvc("tcp")}}, nil},
		{"update an unknown service", command{op: opUpdateService, service: model.Service{Key: rulesSvc("new")}}, ErrNotFound},
		{"update to the other kind", command{op: opUpdateService, service: model.Service{Key: rulesSvc("none"), Ephemeral: true}}, ErrKindMismatch},
		{"update an implicit service", command{op: opUpdateService, service: model.Service{Key: rulesSvc("eph"), Ephemeral: true}}, nil},
		{"delete an unknown service", command{op: opDeleteService, skey: rulesSvc("new")}, ErrNotFound},
		{"delete a service with instances", command{op: opDeleteService, skey: rulesSvc("none")}, ErrServiceNotEmpty},
		{"delete an empty service", command{op: opDeleteService, skey: rulesSvc("empty")}, nil},
		{"put a persistent instance", command{op: opPutInstance, inst: rulesInst("none", 4, false)}, nil},
		{"put a persistent instance in an ephemeral service", command{op: opPutInstance, inst: rulesInst("eph", 4, false)}, ErrKindMismatch},
		{"delete an instance", command{op: opDeleteInstance, key: rulesKey("none", 1)}, nil},
		{"delete an absent instance", command{op: opDeleteInstance, key: rulesKey("none", 9)}, nil},
		{"patch a held instance", command{op: opPatchInstance, patch: model.InstancePatch{Key: rulesKey("eph", 3)}}, nil},
		{"patch an absent instance", command{op: opPatchInstance, patch: model.InstancePatch{Key: rulesKey("none", 9)}}, ErrNotFound},
		{"remove an absent patch", command{op: opRemovePatch, key: rulesKey("none", 1)}, skip},
		{"manual health of a NONE cluster", command{op: opSetHealth, key: rulesKey("none", 1), healthy: false}, nil},
		{"manual health of a checked cluster", command{op: opSetHealth, key: rulesKey("tcp", 2)}, ErrHealthChecked},
		{"a check's result on a checked cluster", command{op: opSetHealth, key: rulesKey("tcp", 2), checked: true}, nil},
		{"a check's result on a NONE cluster (turned manual since)", command{op: opSetHealth, key: rulesKey("none", 1), checked: true}, skip},
		{"health of an ephemeral instance", command{op: opSetHealth, key: rulesKey("eph", 3)}, ErrKindMismatch},
		{"health of an absent instance", command{op: opSetHealth, key: rulesKey("none", 9)}, ErrNotFound},
		{"an unknown op", command{op: 99}, nil}, // checked below: an error, no sentinel
	} {
		t.Run(tc.name, func(t *testing.T) {
			r.mu.RLock()
			err := r.checkLocked(&tc.cmd)
			r.mu.RUnlock()
			switch {
			case tc.cmd.op == 99:
				if err == nil {
					t.Fatal("an unknown op was accepted")
				}
			case tc.want == nil:
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
			case tc.want == errSkip:
				if err != errSkip {
					t.Fatalf("err = %v, want errSkip (nothing to do)", err)
				}
			default:
				if !errors.Is(err, tc.want) {
					t.Fatalf("err = %v, want one matching %v", err, tc.want)
				}
			}
		})
	}
}

// TestRulesPatchExpiry: the clean-up of an orphaned patch applies only while
// its instance is gone and no newer countdown runs.
func TestRulesPatchExpiry(t *testing.T) {
	r := rulesIndex(t)
	key := rulesKey("none", 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mirrorLocked(&command{op: opPatchInstance, patch: model.InstancePatch{Key: key}})
	expiry := &command{op: opRemovePatch, key: key, expiry: true}
	if err := r.checkLocked(expiry); err != errSkip {
		t.Fatalf("expiry while the instance is held: %v, want errSkip", err)
	}
	if err := r.checkLocked(&command{op: opRemovePatch, key: key}); err != nil {
		t.Fatalf("an operator's removal: %v", err)
	}
	r.mirrorLocked(&command{op: opDeleteInstance, key: key}) // the patch's countdown starts
	if err := r.checkLocked(expiry); err != errSkip {
		t.Fatalf("expiry while a countdown runs: %v, want errSkip", err)
	}
	r.patchGone.Remove(key) // the countdown ran out
	if err := r.checkLocked(expiry); err != nil {
		t.Fatalf("expiry of an orphaned patch: %v", err)
	}
}
