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
	mirror(r, &model.Command{Op: model.OpCreateService, Service: model.Service{Key: rulesSvc("none"),
		Clusters: []model.Cluster{{Name: model.DefaultCluster, HealthCheck: model.HealthCheck{Type: model.CheckNone}}}}})
	mirror(r, &model.Command{Op: model.OpCreateService, Service: model.Service{Key: rulesSvc("empty")}})
	mirror(r, &model.Command{Op: model.OpPutInstance, Instance: rulesInst("none", 1, false)})
	mirror(r, &model.Command{Op: model.OpPutInstance, Instance: rulesInst("tcp", 2, false)})
	if _, err := r.registerOwnedLocked(rulesInst("eph", 3, true)); err != nil {
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

// TestRules: admitLocked, the state rules of persistent data against the
// index, one case per rule, on an index with no goroutine running.
func TestRules(t *testing.T) {
	r := rulesIndex(t)
	skip := model.ErrNoop
	for _, tc := range []struct {
		name string
		cmd  model.Command
		o    model.Origin
		want error // nil: accepted
	}{
		{"create a new service", model.Command{Op: model.OpCreateService, Service: model.Service{Key: rulesSvc("new")}}, model.Origin{}, nil},
		{"create a defined service", model.Command{Op: model.OpCreateService, Service: model.Service{Key: rulesSvc("none")}}, model.Origin{}, ErrServiceExists},
		{"create over an implicit service of the other kind", model.Command{Op: model.OpCreateService, Service: model.Service{Key: rulesSvc("eph")}}, model.Origin{}, ErrKindMismatch},
		{"create over an implicit service of its kind", model.Command{Op: model.OpCreateService, Service: model.Service{Key: rulesSvc("tcp")}}, model.Origin{}, nil},
		{"update an unknown service", model.Command{Op: model.OpUpdateService, Service: model.Service{Key: rulesSvc("new")}}, model.Origin{}, ErrNotFound},
		{"update to the other kind", model.Command{Op: model.OpUpdateService, Service: model.Service{Key: rulesSvc("none"), Ephemeral: true}}, model.Origin{}, ErrKindMismatch},
		{"update an implicit service", model.Command{Op: model.OpUpdateService, Service: model.Service{Key: rulesSvc("eph"), Ephemeral: true}}, model.Origin{}, nil},
		{"delete an unknown service", model.Command{Op: model.OpDeleteService, SvcKey: rulesSvc("new")}, model.Origin{}, ErrNotFound},
		{"delete a service with instances", model.Command{Op: model.OpDeleteService, SvcKey: rulesSvc("none")}, model.Origin{}, ErrServiceNotEmpty},
		{"delete an empty service", model.Command{Op: model.OpDeleteService, SvcKey: rulesSvc("empty")}, model.Origin{}, nil},
		{"put a persistent instance", model.Command{Op: model.OpPutInstance, Instance: rulesInst("none", 4, false)}, model.Origin{}, nil},
		{"put a persistent instance in an ephemeral service", model.Command{Op: model.OpPutInstance, Instance: rulesInst("eph", 4, false)}, model.Origin{}, ErrKindMismatch},
		{"delete an instance", model.Command{Op: model.OpDeleteInstance, Key: rulesKey("none", 1)}, model.Origin{}, nil},
		{"delete an absent instance", model.Command{Op: model.OpDeleteInstance, Key: rulesKey("none", 9)}, model.Origin{}, nil},
		{"patch a held instance", model.Command{Op: model.OpPatchInstance, Patch: model.InstancePatch{Key: rulesKey("eph", 3)}}, model.Origin{}, nil},
		{"patch an absent instance", model.Command{Op: model.OpPatchInstance, Patch: model.InstancePatch{Key: rulesKey("none", 9)}}, model.Origin{}, ErrNotFound},
		{"remove an absent patch", model.Command{Op: model.OpRemovePatch, Key: rulesKey("none", 1)}, model.Origin{}, skip},
		{"manual health of a NONE cluster", model.Command{Op: model.OpSetHealth, Key: rulesKey("none", 1), Healthy: false}, model.Origin{}, nil},
		{"manual health of a checked cluster", model.Command{Op: model.OpSetHealth, Key: rulesKey("tcp", 2)}, model.Origin{}, ErrHealthChecked},
		{"a check's result on a checked cluster", model.Command{Op: model.OpSetHealth, Key: rulesKey("tcp", 2)}, model.Origin{Checker: true}, nil},
		{"a check's result on a NONE cluster (turned manual since)", model.Command{Op: model.OpSetHealth, Key: rulesKey("none", 1)}, model.Origin{Checker: true}, skip},
		{"health of an ephemeral instance", model.Command{Op: model.OpSetHealth, Key: rulesKey("eph", 3)}, model.Origin{}, ErrKindMismatch},
		{"health of an absent instance", model.Command{Op: model.OpSetHealth, Key: rulesKey("none", 9)}, model.Origin{}, ErrNotFound},
		{"an unknown op", model.Command{Op: 99}, model.Origin{}, nil}, // checked below: an error, no sentinel
	} {
		t.Run(tc.name, func(t *testing.T) {
			r.mu.RLock()
			err := r.admitLocked(&tc.cmd, tc.o)
			r.mu.RUnlock()
			switch {
			case tc.cmd.Op == 99:
				if err == nil {
					t.Fatal("an unknown op was accepted")
				}
			case tc.want == nil:
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
			case tc.want == model.ErrNoop:
				if err != model.ErrNoop {
					t.Fatalf("err = %v, want ErrNoop (nothing to do)", err)
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
	mirror(r, &model.Command{Op: model.OpPatchInstance, Patch: model.InstancePatch{Key: key}})
	expiry, byExpiry := &model.Command{Op: model.OpRemovePatch, Key: key}, model.Origin{Expiry: true}
	if err := r.admitLocked(expiry, byExpiry); err != model.ErrNoop {
		t.Fatalf("expiry while the instance is held: %v, want ErrNoop", err)
	}
	if err := r.admitLocked(&model.Command{Op: model.OpRemovePatch, Key: key}, model.Origin{}); err != nil {
		t.Fatalf("an operator's removal: %v", err)
	}
	mirror(r, &model.Command{Op: model.OpDeleteInstance, Key: key}) // the patch's countdown starts
	if err := r.admitLocked(expiry, byExpiry); err != model.ErrNoop {
		t.Fatalf("expiry while a countdown runs: %v, want ErrNoop", err)
	}
	r.core.patchGone.Remove(key) // the countdown ran out
	if err := r.admitLocked(expiry, byExpiry); err != nil {
		t.Fatalf("expiry of an orphaned patch: %v", err)
	}
}

// mirror applies cmd, which the rules accepted, to r's index as the
// store's feed does (storeFeed.Applied). The caller holds r.mu.
func mirror(r *Registry, cmd *model.Command) {
	r.core.apply(cmd, model.Origin{}, r.leaseStart())
	r.carryOut()
}
