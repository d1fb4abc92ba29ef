package registry

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/muster-io/muster/health"
	"github.com/muster-io/muster/internal/testutil"
	"github.com/muster-io/muster/model"
)

// Table tests of the index core (core.go), with no registry around it: a
// change's result in the index and the effects it hands the driver.

var coreT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	coreEmptyTTL = time.Minute
	corePatchTTL = time.Hour
)

// coreIndex returns an index holding the persistent service "db" (a
// definition with a TCP-checked DEFAULT cluster) with the instance
// 10.0.0.1:80, healthy, and the implicit persistent service "implicit"
// with 10.0.0.2:80; no effects pending.
func coreIndex(t *testing.T) *index {
	t.Helper()
	ix := newIndex(DefaultLimits(), coreEmptyTTL, corePatchTTL)
	ix.apply(&model.Command{Op: model.OpCreateService, Service: model.Service{Key: rulesSvc("db")}.WithDefaults()}, model.Origin{}, coreT0)
	ix.apply(&model.Command{Op: model.OpPutInstance, Instance: rulesInst("db", 1, false)}, model.Origin{}, coreT0)
	ix.apply(&model.Command{Op: model.OpPutInstance, Instance: rulesInst("implicit", 2, false)}, model.Origin{}, coreT0)
	ix.fx.reset()
	return &ix
}

// fxSummary is what a test compares of effects.
type fxSummary struct {
	dirty     []string
	gone      []string
	catalogs  int
	services  bool
	targets   []string // "sync <key>", "all <svc>", "drop <key>"
	wake      time.Duration
	conflicts int
	notes     []string // "+<ip>" published, "-<ip>" removed
	replicate int
}

func summarize(fx *effects) fxSummary {
	var s fxSummary
	for _, k := range fx.dirty {
		s.dirty = append(s.dirty, k.Name)
	}
	for _, g := range fx.gone {
		s.gone = append(s.gone, g.key.Name)
	}
	s.catalogs, s.services, s.conflicts = len(fx.catalogs), fx.services, len(fx.conflicts)
	for _, t := range fx.targets {
		switch {
		case t.svc == nil:
			s.targets = append(s.targets, "drop "+t.instKey.IP)
		case t.sl == nil:
			s.targets = append(s.targets, "all "+t.svc.key.Name)
		default:
			s.targets = append(s.targets, "sync "+t.sl.key().IP)
		}
	}
	if !fx.wake.IsZero() {
		s.wake = fx.wake.Sub(coreT0)
	}
	for _, n := range fx.notes {
		sign := "-"
		if n.published {
			sign = "+"
		}
		s.notes = append(s.notes, sign+n.pi.inst.ip)
	}
	s.replicate = len(fx.replicate)
	return s
}

func (a fxSummary) equal(b fxSummary) bool {
	return slices.Equal(a.dirty, b.dirty) && slices.Equal(a.gone, b.gone) && a.catalogs == b.catalogs &&
		a.services == b.services && slices.Equal(a.targets, b.targets) && a.wake == b.wake && a.conflicts == b.conflicts &&
		slices.Equal(a.notes, b.notes) && a.replicate == b.replicate
}

// TestCoreApply: each command's change of the index and its effects.
func TestCoreApply(t *testing.T) {
	dbKey := rulesKey("db", 1)
	for _, tc := range []struct {
		name  string
		setup func(ix *index)
		cmd   model.Command
		want  fxSummary
		check func(t *testing.T, ix *index)
	}{
		{
			name: "a new definition adds a service and re-targets it",
			cmd:  model.Command{Op: model.OpCreateService, Service: model.Service{Key: rulesSvc("new")}.WithDefaults()},
			want: fxSummary{dirty: []string{"new"}, catalogs: 1, services: true, targets: []string{"all new"}},
		},
		{
			name: "a definition over an implicit service keeps it",
			cmd:  model.Command{Op: model.OpUpdateService, Service: model.Service{Key: rulesSvc("implicit")}.WithDefaults()},
			want: fxSummary{dirty: []string{"implicit"}, targets: []string{"all implicit"}},
			check: func(t *testing.T, ix *index) {
				if ix.services[rulesSvc("implicit")].def == nil {
					t.Fatal("no definition stored")
				}
			},
		},
		{
			name: "a definition of the other kind is a conflict, nothing changes",
			cmd:  model.Command{Op: model.OpUpdateService, Service: model.Service{Key: rulesSvc("db"), Ephemeral: true}.WithDefaults()},
			want: fxSummary{conflicts: 1},
		},
		{
			name: "deleting the definition of a service with instances keeps it implicit",
			cmd:  model.Command{Op: model.OpDeleteService, SvcKey: rulesSvc("db")},
			want: fxSummary{dirty: []string{"db"}},
			check: func(t *testing.T, ix *index) {
				if s := ix.services[rulesSvc("db")]; s == nil || s.def != nil {
					t.Fatalf("service after the delete: %+v", s)
				}
			},
		},
		{
			name: "deleting an empty service removes it and tells its watchers",
			setup: func(ix *index) {
				ix.apply(&model.Command{Op: model.OpCreateService, Service: model.Service{Key: rulesSvc("empty")}.WithDefaults()}, model.Origin{}, coreT0)
			},
			cmd:  model.Command{Op: model.OpDeleteService, SvcKey: rulesSvc("empty")},
			want: fxSummary{dirty: []string{"empty"}, gone: []string{"empty"}, catalogs: 1, services: true},
		},
		{
			name: "a re-put keeps the stored health",
			setup: func(ix *index) {
				ix.apply(&model.Command{Op: model.OpSetHealth, Key: dbKey, Healthy: false}, model.Origin{}, coreT0)
			},
			cmd:  model.Command{Op: model.OpPutInstance, Instance: func() model.Instance { in := rulesInst("db", 1, false); in.Weight = 2; return in }()},
			want: fxSummary{dirty: []string{"db"}, targets: []string{"sync 10.0.0.1"}},
			check: func(t *testing.T, ix *index) {
				_, sl := ix.lookup(dbKey)
				if pr := sl.pers(); pr.healthy || pr.weight != 2 {
					t.Fatalf("re-put: healthy %v weight %v, want false 2", pr.healthy, pr.weight)
				}
			},
		},
		{
			name: "an identical re-put changes nothing",
			cmd:  model.Command{Op: model.OpPutInstance, Instance: rulesInst("db", 1, false)},
			want: fxSummary{},
		},
		{
			name: "a persistent instance in an ephemeral service is a conflict",
			setup: func(ix *index) {
				if _, err := ix.ensureService(rulesSvc("eph"), true); err != nil {
					t.Fatal(err)
				}
			},
			cmd:  model.Command{Op: model.OpPutInstance, Instance: rulesInst("eph", 3, false)},
			want: fxSummary{conflicts: 1},
		},
		{
			name: "deleting the last instance of an implicit service starts its countdown",
			cmd:  model.Command{Op: model.OpDeleteInstance, Key: rulesKey("implicit", 2)},
			want: fxSummary{dirty: []string{"implicit"}, targets: []string{"drop 10.0.0.2"}, wake: coreEmptyTTL},
			check: func(t *testing.T, ix *index) {
				if _, ok := ix.emptySvcs.Get(rulesSvc("implicit")); !ok {
					t.Fatal("no countdown for the emptied service")
				}
			},
		},
		{
			name: "deleting an absent instance changes nothing",
			cmd:  model.Command{Op: model.OpDeleteInstance, Key: rulesKey("db", 9)},
			want: fxSummary{},
		},
		{
			name: "a patch of a held instance changes its view",
			cmd:  model.Command{Op: model.OpPatchInstance, Patch: model.InstancePatch{Key: dbKey}},
			want: fxSummary{dirty: []string{"db"}},
		},
		{
			name: "a patch of an absent instance waits PatchTTL for it",
			cmd:  model.Command{Op: model.OpPatchInstance, Patch: model.InstancePatch{Key: rulesKey("db", 9)}},
			want: fxSummary{wake: corePatchTTL},
		},
		{
			name: "removing a patch of a held instance changes its view",
			setup: func(ix *index) {
				ix.apply(&model.Command{Op: model.OpPatchInstance, Patch: model.InstancePatch{Key: dbKey}}, model.Origin{}, coreT0)
			},
			cmd:  model.Command{Op: model.OpRemovePatch, Key: dbKey},
			want: fxSummary{dirty: []string{"db"}},
		},
		{
			name: "removing no patch changes nothing",
			cmd:  model.Command{Op: model.OpRemovePatch, Key: dbKey},
			want: fxSummary{},
		},
		{
			name: "a health change re-targets the instance",
			cmd:  model.Command{Op: model.OpSetHealth, Key: dbKey, Healthy: false},
			want: fxSummary{dirty: []string{"db"}, targets: []string{"sync 10.0.0.1"}},
		},
		{
			name: "the same health changes nothing",
			cmd:  model.Command{Op: model.OpSetHealth, Key: dbKey, Healthy: true},
			want: fxSummary{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ix := coreIndex(t)
			if tc.setup != nil {
				tc.setup(ix)
				ix.fx.reset()
			}
			cmd := tc.cmd
			cmd.Normalize()
			ix.apply(&cmd, model.Origin{}, coreT0)
			if got := summarize(&ix.fx); !got.equal(tc.want) {
				t.Fatalf("effects = %+v, want %+v", got, tc.want)
			}
			if tc.check != nil {
				tc.check(t, ix)
			}
		})
	}
}

// TestCoreCountdowns: an emptied implicit service leaves the index
// EmptyServiceTTL after its last instance went, unless one came back; an
// orphaned patch is handed to the driver PatchTTL after its instance went;
// next reports the earliest deadline.
func TestCoreCountdowns(t *testing.T) {
	ix := coreIndex(t)
	patched := rulesKey("db", 1)
	ix.apply(&model.Command{Op: model.OpPatchInstance, Patch: model.InstancePatch{Key: patched}}, model.Origin{}, coreT0)
	ix.apply(&model.Command{Op: model.OpDeleteInstance, Key: rulesKey("implicit", 2)}, model.Origin{}, coreT0)
	ix.apply(&model.Command{Op: model.OpDeleteInstance, Key: patched}, model.Origin{}, coreT0.Add(time.Second))
	ix.fx.reset()
	if next, ok := ix.next(); !ok || !next.Equal(coreT0.Add(coreEmptyTTL)) {
		t.Fatalf("next = %v %v, want the empty service's deadline", next, ok)
	}
	if orphans := ix.expire(coreT0.Add(coreEmptyTTL - 1)); len(orphans) != 0 || ix.services[rulesSvc("implicit")] == nil {
		t.Fatalf("before the deadline: orphans %v, service %v", orphans, ix.services[rulesSvc("implicit")])
	}
	ix.expire(coreT0.Add(coreEmptyTTL))
	if ix.services[rulesSvc("implicit")] != nil {
		t.Fatal("the emptied implicit service is still held")
	}
	if got := summarize(&ix.fx); !got.equal(fxSummary{catalogs: 1, services: true}) {
		t.Fatalf("effects of the expiry = %+v", got)
	}
	if ix.services[rulesSvc("db")] == nil {
		t.Fatal("the defined service went with its last instance")
	}
	ix.fx.reset()
	if next, _ := ix.next(); !next.Equal(coreT0.Add(time.Second + corePatchTTL)) {
		t.Fatalf("next = %v, want the patch's deadline", next)
	}
	if orphans := ix.expire(coreT0.Add(time.Second + corePatchTTL)); !slices.Equal(orphans, []model.InstanceKey{patched}) {
		t.Fatalf("orphans = %v, want %v", orphans, patched)
	}
	if ix.patches[patched] == nil {
		t.Fatal("expire removed the patch itself: the store does")
	}
	if _, ok := ix.next(); ok {
		t.Fatal("a countdown is left")
	}
}

// TestCoreComeback: an instance that comes back stops its patch's
// countdown and takes the patch again, and its service's countdown stops.
func TestCoreComeback(t *testing.T) {
	ix := coreIndex(t)
	key := rulesKey("implicit", 2)
	ix.apply(&model.Command{Op: model.OpPatchInstance, Patch: model.InstancePatch{Key: key}}, model.Origin{}, coreT0)
	ix.apply(&model.Command{Op: model.OpDeleteInstance, Key: key}, model.Origin{}, coreT0)
	if _, ok := ix.patchGone.Get(key); !ok {
		t.Fatal("no patch countdown")
	}
	ix.apply(&model.Command{Op: model.OpPutInstance, Instance: rulesInst("implicit", 2, false)}, model.Origin{}, coreT0.Add(time.Second))
	if _, ok := ix.patchGone.Get(key); ok {
		t.Fatal("the patch's countdown runs on")
	}
	if _, ok := ix.emptySvcs.Get(rulesSvc("implicit")); ok {
		t.Fatal("the service's countdown runs on")
	}
	if _, sl := ix.lookup(key); sl == nil || sl.patch() == nil {
		t.Fatal("the instance came back without its patch")
	}
	if _, ok := ix.next(); ok {
		t.Fatal("a countdown is left")
	}
}

// TestCoreState: the index as the rules read it.
func TestCoreState(t *testing.T) {
	ix := coreIndex(t)
	st := (*indexState)(ix)
	if s := st.Service(rulesSvc("db")); !s.Exists || s.Ephemeral || s.Definition == nil || s.Instances != 1 || s.Persistent != 1 {
		t.Fatalf("db: %+v", s)
	}
	if s := st.Service(rulesSvc("implicit")); !s.Exists || s.Definition != nil || s.Persistent != 1 {
		t.Fatalf("implicit: %+v", s)
	}
	if s := st.Service(rulesSvc("none")); s != (model.ServiceState{}) {
		t.Fatalf("absent: %+v", s)
	}
	if in := st.Instance(rulesKey("db", 1)); !in.Exists || !in.Persistent || !in.Healthy {
		t.Fatalf("instance: %+v", in)
	}
	if _, ok := st.Patch(rulesKey("db", 1)); ok {
		t.Fatal("a patch where none is stored")
	}
}

// TestCorePublish: publications of ephemeral instances, their effects and
// the limits.
func TestCorePublish(t *testing.T) {
	inst := func(svc string, ip int, weight float64) model.Instance {
		in := rulesInst(svc, ip, true)
		in.Weight = weight
		return in
	}
	a, b := &publisher{id: "a", kind: pubSession}, &publisher{id: "b", kind: pubSession}
	for _, tc := range []struct {
		name    string
		setup   func(ix *index)
		pub     *publisher
		inst    model.Instance
		limited bool
		wantErr error
		want    fxSummary
	}{
		{name: "a new instance of a new service", pub: a, inst: inst("web", 5, 1),
			want: fxSummary{dirty: []string{"web"}, catalogs: 1, services: true, notes: []string{"+10.0.0.5"}}},
		{name: "the same instance again changes nothing", pub: a, inst: inst("web", 5, 1),
			setup: func(ix *index) { _, _ = ix.publish(a, inst("web", 5, 1), true) }},
		{name: "a changed instance changes the view", pub: a, inst: inst("web", 5, 2),
			setup: func(ix *index) { _, _ = ix.publish(a, inst("web", 5, 1), true) },
			want:  fxSummary{dirty: []string{"web"}, notes: []string{"+10.0.0.5"}}},
		{name: "another publisher of the same instance changes no view", pub: b, inst: inst("web", 5, 1),
			setup: func(ix *index) { _, _ = ix.publish(a, inst("web", 5, 1), true) },
			want:  fxSummary{notes: []string{"+10.0.0.5"}}},
		{name: "a later publisher's change is not served", pub: b, inst: inst("web", 5, 3),
			setup: func(ix *index) {
				_, _ = ix.publish(a, inst("web", 5, 1), true)
				_, _ = ix.publish(b, inst("web", 5, 1), true)
			},
			want: fxSummary{notes: []string{"+10.0.0.5"}}},
		{name: "an ephemeral instance in a persistent service", pub: a, inst: inst("db", 5, 1), wantErr: ErrKindMismatch},
		{name: "past MaxInstancesPerService", pub: a, inst: inst("web", 6, 1), limited: true, wantErr: ErrLimit,
			setup: func(ix *index) {
				ix.lim.MaxInstancesPerService = 1
				_, _ = ix.publish(b, inst("web", 5, 1), true)
			}},
		{name: "a peer's record is not limited", pub: a, inst: inst("web", 6, 1),
			setup: func(ix *index) {
				ix.lim.MaxInstancesPerService = 1
				_, _ = ix.publish(b, inst("web", 5, 1), true)
			},
			want: fxSummary{dirty: []string{"web"}, notes: []string{"+10.0.0.6"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ix := coreIndex(t)
			a.insts, b.insts = pubList{}, pubList{}
			if tc.setup != nil {
				tc.setup(ix)
				ix.fx.reset()
			}
			_, err := ix.publish(tc.pub, tc.inst, tc.limited)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if got := summarize(&ix.fx); !got.equal(tc.want) {
				t.Fatalf("effects = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestCoreUnpublish: the last publication of an implicit service leaves
// it empty, with its countdown from now; a health change of a publication
// is due to the replicator.
func TestCoreUnpublish(t *testing.T) {
	ix := coreIndex(t)
	p := &publisher{id: "a", kind: pubSession}
	pi, err := ix.publish(p, rulesInst("web", 5, true), true)
	if err != nil {
		t.Fatal(err)
	}
	ix.fx.reset()
	ix.replaceInst(pi, pi.inst.withHealth(false))
	if got := summarize(&ix.fx); !got.equal(fxSummary{dirty: []string{"web"}, replicate: 1}) {
		t.Fatalf("effects = %+v", got)
	}
	ix.fx.reset()
	ix.unpublish(pi, true, "deregistered", coreT0)
	if got := summarize(&ix.fx); !got.equal(fxSummary{notes: []string{"-10.0.0.5"}, wake: coreEmptyTTL}) {
		t.Fatalf("effects = %+v", got)
	}
	if s := ix.services[rulesSvc("web")]; s == nil || !s.empty() || p.insts.len() != 0 || ix.quota.instances != 2 {
		t.Fatalf("after the unpublish: service %+v, publisher's %d, %d instances counted", s, p.insts.len(), ix.quota.instances)
	}
}

// TestCoreExpireChains: one late run of expire ends where timely ones
// would: a beat publication turns unhealthy and goes at its own
// deadlines, and its emptied service's countdown starts at the second; a
// session whose keep-alive lapsed closes, and its Session ends.
func TestCoreExpireChains(t *testing.T) {
	ix := coreIndex(t)
	beat := &publisher{kind: pubBeat}
	pi, err := ix.publish(beat, rulesInst("web", 5, true), true)
	if err != nil {
		t.Fatal(err)
	}
	ix.addBeatPub(pi.inst.ip, beat)
	_ = ix.beatLeases.Put(pi, coreT0, health.Timeouts{Unhealthy: 15 * time.Second, Expire: 30 * time.Second})
	sess := &publisher{id: "s1", kind: pubSession, x: &pubExtra{session: &Session{done: make(chan struct{})}}}
	ix.sessions[sess.id] = sess
	if _, err := ix.publish(sess, rulesInst("api", 6, true), true); err != nil {
		t.Fatal(err)
	}
	_ = ix.sessionLeases.Put(sess, coreT0, health.Timeouts{Expire: 10 * time.Second})
	ix.fx.reset()
	if next, _ := ix.next(); !next.Equal(coreT0.Add(10 * time.Second)) {
		t.Fatalf("next = %v, want the session's deadline", next)
	}

	late := coreT0.Add(40 * time.Second)
	if orphans := ix.expire(late); len(orphans) != 0 {
		t.Fatalf("orphans %v", orphans)
	}
	fx := &ix.fx
	if len(fx.ended) != 1 || fx.ended[0] != sess.session() || !slices.Equal(fx.lapsed, []string{"s1"}) {
		t.Fatalf("ended %v, lapsed %v", fx.ended, fx.lapsed)
	}
	if !beat.closed || ix.beatPub(pi.inst.ip, int(pi.inst.port)) != nil || len(ix.sessions) != 0 {
		t.Fatal("the beat publisher or the session is still held")
	}
	if !slices.Contains(fx.replicate, beat) || !slices.Contains(fx.replicate, sess) {
		t.Fatalf("replications %v: want the beat publisher's and the session's", fx.replicate)
	}
	// Both services are empty; their countdowns run from the deadlines
	// that emptied them, not from the late run.
	for svc, from := range map[string]time.Duration{"web": 30 * time.Second, "api": 10 * time.Second} {
		st, ok := ix.emptySvcs.Get(rulesSvc(svc))
		if !ok || !st.LastTouch.Equal(coreT0.Add(from)) {
			t.Fatalf("%s: countdown %+v %v, want from t0+%v", svc, st, ok, from)
		}
	}
}

// TestCoreJournal: with the journal on, changes record their events, keyed
// as they were before the change; off, nothing is recorded.
func TestCoreJournal(t *testing.T) {
	for _, on := range []bool{true, false} {
		ix := coreIndex(t)
		ix.noting = on
		p := &publisher{id: "a", kind: pubSession}
		pi, err := ix.publish(p, rulesInst("web", 5, true), true)
		if err != nil {
			t.Fatal(err)
		}
		ix.unpublish(pi, true, "deregistered", coreT0)
		ix.apply(&model.Command{Op: model.OpSetHealth, Key: rulesKey("db", 1)}, model.Origin{}, coreT0)
		var got []string
		for _, e := range ix.fx.events {
			got = append(got, e.kind.String()+" "+e.instKey.IP+" "+e.why)
		}
		want := []string{"registered 10.0.0.5 ", "removed 10.0.0.5 deregistered", "unhealthy 10.0.0.1 check: TCP"}
		if !on {
			want = nil
		}
		if !slices.Equal(got, want) {
			t.Fatalf("journal on %v: events %q, want %q", on, got, want)
		}
	}
}

// TestCoreSolo: a standalone index records the same effects of a session's
// publish, update and removal as a replicated one, but no replication
// effects (notes, publishers due to the replicator): nothing reads them.
func TestCoreSolo(t *testing.T) {
	run := func(solo bool) fxSummary {
		ix := coreIndex(t)
		ix.solo = solo
		p := &publisher{id: "a", kind: pubSession}
		pi, err := ix.publish(p, rulesInst("web", 5, true), true)
		if err != nil {
			t.Fatal(err)
		}
		ix.pubChanged(p)
		changed := rulesInst("web", 5, true)
		changed.Weight = 2
		if _, err := ix.publish(p, changed, true); err != nil {
			t.Fatal(err)
		}
		ix.unpublish(pi, true, "deregistered", coreT0)
		ix.pubChanged(p)
		return summarize(&ix.fx)
	}
	replicated, solo := run(false), run(true)
	if want := []string{"+10.0.0.5", "+10.0.0.5", "-10.0.0.5"}; !slices.Equal(replicated.notes, want) || replicated.replicate != 2 {
		t.Fatalf("replicated: notes %q, replicate %d; want %q, 2", replicated.notes, replicated.replicate, want)
	}
	if solo.notes != nil || solo.replicate != 0 {
		t.Fatalf("solo: notes %q, replicate %d; want none", solo.notes, solo.replicate)
	}
	replicated.notes, replicated.replicate = nil, 0
	if !solo.equal(replicated) {
		t.Fatalf("solo effects %+v, want the replicated ones without replication %+v", solo, replicated)
	}
}

// TestSlotExtra: a slot makes its slotExtra for a patch or a persistent
// instance only, and drops it once it holds neither.
func TestSlotExtra(t *testing.T) {
	var sl slot
	p := &model.InstancePatch{}
	r := &rec{}
	sl.setPers(nil)
	sl.setPatch(nil)
	if sl.x != nil {
		t.Fatal("a slot with neither made a slotExtra")
	}
	sl.setPatch(p)
	if sl.patch() != p || sl.pers() != nil || sl.x == nil {
		t.Fatalf("with a patch: patch %p pers %p", sl.patch(), sl.pers())
	}
	sl.setPers(r)
	sl.setPatch(nil)
	if sl.pers() != r || sl.patch() != nil {
		t.Fatal("a patch removed took the persistent instance with it")
	}
	sl.setPers(nil)
	sl.setPatch(p)
	sl.setPatch(nil)
	if sl.x != nil {
		t.Fatal("a slot that holds neither kept its slotExtra")
	}
}

// A beat publisher made here has no pubExtra, and its block (publisher,
// slot, publication with its lease, rec: one per standalone beat instance)
// stays in the 208-byte size class: the next class up is 224. The blocks
// of a session's instance and of a persistent one stay in theirs (144 and
// 128 bytes): a slot is 24 bytes, its one publication inline and any
// longer list in its extra (see slot); at 32, a session instance's block
// was 152 bytes, in the 160 class.
func TestBeatBlockSizeClass(t *testing.T) {
	if s := unsafe.Sizeof(beatBlock{}); s > 208 {
		t.Fatalf("beatBlock is %d bytes: over the 208-byte size class", s)
	}
	if s := unsafe.Sizeof(slotBlock{}); s > 144 {
		t.Fatalf("slotBlock is %d bytes: over the 144-byte size class", s)
	}
	if s := unsafe.Sizeof(persBlock{}); s > 128 {
		t.Fatalf("persBlock is %d bytes: over the 128-byte size class", s)
	}
	if p, _ := newBeatPub(80); p.x != nil {
		t.Fatal("a new beat publisher has a pubExtra")
	}
}

// TestApplyResolvedAsApply: a store's feed hands the index commands it
// resolved already (StoreFeed.Applied), which applyResolved applies without
// resolving a put or a patch again. Random commands over a few keys leave an
// index fed that way as one that resolves every command itself (apply)
// leaves it: every instance (health kept over re-puts), every patch (merged).
func TestApplyResolvedAsApply(t *testing.T) {
	testutil.Seeds(t, 0, 1, func(t *testing.T, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 8))
		self := newIndex(DefaultLimits(), coreEmptyTTL, corePatchTTL)
		fed := newIndex(DefaultLimits(), coreEmptyTTL, corePatchTTL)
		patch := func(p *model.InstancePatch) string {
			s := p.Key.String() + " " + p.Metadata.String()
			if p.Weight != nil {
				s += fmt.Sprint(" weight ", *p.Weight)
			}
			if p.Enabled != nil {
				s += fmt.Sprint(" enabled ", *p.Enabled)
			}
			return s
		}
		state := func(ix *index) map[string]string {
			m := map[string]string{}
			for key, s := range ix.allServices() {
				for _, sl := range s.slots {
					if p := sl.pers(); p != nil {
						m["inst "+sl.key().String()] = fmt.Sprintf("%+v", p.instance(s))
					}
					if p := sl.patch(); p != nil {
						m["slot patch "+sl.key().String()] = patch(p)
					}
				}
				m["svc "+key.String()] = fmt.Sprint(s.def != nil)
			}
			for k := range ix.allPatches() {
				m["patch "+k.String()] = patch(ix.patches[k])
			}
			return m
		}
		applied := 0
		for step := range 3000 {
			svc, ip := []string{"a", "b"}[r.IntN(2)], 1+r.IntN(3)
			key := rulesKey(svc, ip)
			var cmd model.Command
			switch r.IntN(6) {
			case 0, 1:
				in := rulesInst(svc, ip, false)
				in.Healthy, in.Weight = r.IntN(2) == 0, float64(1+r.IntN(3))
				cmd = model.Command{Op: model.OpPutInstance, Instance: in}
			case 2:
				cmd = model.Command{Op: model.OpSetHealth, Key: key, Healthy: r.IntN(2) == 0}
			case 3:
				cmd = model.Command{Op: model.OpDeleteInstance, Key: key}
			case 4:
				p := model.InstancePatch{Key: key, Metadata: model.NewMetadata(map[string]string{"k" + strconv.Itoa(r.IntN(3)): strconv.Itoa(step)})}
				if r.IntN(2) == 0 {
					w := float64(r.IntN(5))
					p.Weight = &w
				}
				cmd = model.Command{Op: model.OpPatchInstance, Patch: p}
			default:
				cmd = model.Command{Op: model.OpRemovePatch, Key: key}
			}
			cmd.Normalize()
			if self.admit(&cmd, model.Origin{}) != nil {
				continue
			}
			applied++
			resolved := cmd
			model.ResolveCommand(&resolved, (*indexState)(&self)) // what the store hands over
			self.apply(&cmd, model.Origin{}, coreT0)
			fed.applyResolved(&resolved, coreT0)
			self.fx.reset()
			fed.fx.reset()
			if a, b := state(&self), state(&fed); !maps.Equal(a, b) {
				t.Fatalf("step %d, %v: resolving itself %v\nfed resolved %v", step, cmd.Op, a, b)
			}
		}
		if applied < 1000 {
			t.Fatalf("only %d of 3000 commands admitted", applied)
		}
	})
}
