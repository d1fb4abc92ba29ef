package registry

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/muster-io/muster/model"
)

// Table tests of the index core's replica side (core_replica.go), with no
// registry around it: what a peer's record, a change of ownership, a
// handed lease or a session's swap does to the index, and the effects it
// hands the driver. Every case ends with the index's invariants
// (checkInvariants).

// beatInst returns the beat instance of service svc at 10.0.0.ip:80 with
// weight w.
func beatInst(svc string, ip int, w float64) model.Instance {
	in := rulesInst(svc, ip, true)
	in.Weight = w
	return in
}

// beatRec returns a beat record of 10.0.0.ip:80 from owner holding insts
// (a tombstone when insts is nil).
func beatRec(owner string, ip int, insts ...model.Instance) *peerRecord {
	in := rulesInst("x", ip, true)
	return &peerRecord{recordKey: beatRecordKey(in.IP, in.Port), owner: owner, kind: pubBeat, deleted: insts == nil, insts: insts}
}

// ownBeat publishes insts, which share an ip:port, through a beat publisher
// of this node with leases from last, as a beat registration does.
func ownBeat(t *testing.T, ix *index, last time.Time, insts ...model.Instance) *publisher {
	t.Helper()
	p := &publisher{kind: pubBeat, port: uint16(insts[0].Port), id: model.Endpoint(insts[0].IP, insts[0].Port)}
	for _, in := range insts {
		pi, err := ix.publish(p, in, true)
		if err != nil {
			t.Fatal(err)
		}
		ix.leaseFrom(pi, last)
	}
	ix.addBeatPub(insts[0].IP, p)
	ix.pubChanged(p)
	return p
}

// pubOf returns ix's publication of (svc, 10.0.0.ip:80) by p, or nil.
func pubOf(ix *index, p *publisher, svc string, ip int) *pubInst {
	if _, sl := ix.lookup(rulesKey(svc, ip)); sl != nil {
		return sl.publication(p)
	}
	return nil
}

// checkIndex fails t if the index breaks an invariant.
func checkIndex(t *testing.T, ix *index) {
	t.Helper()
	var errs []string
	ix.checkInvariants(func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) })
	if len(errs) > 0 {
		t.Fatalf("index invariants broken: %q", errs)
	}
}

// runCoreCase runs one case of a table of the core: setup on coreIndex
// (its effects dropped), then act, whose effects must be want; then check,
// and the index's invariants.
func runCoreCase(t *testing.T, setup func(*testing.T, *index), act func(*index), want fxSummary, check func(*testing.T, *index)) {
	t.Helper()
	ix := coreIndex(t)
	if setup != nil {
		setup(t, ix)
		ix.fx.reset()
	}
	act(ix)
	if got := summarize(&ix.fx); !got.equal(want) {
		t.Fatalf("effects = %+v, want %+v", got, want)
	}
	if check != nil {
		check(t, ix)
	}
	ix.fx.reset()
	checkIndex(t, ix)
}

// TestCoreApplyRecord: a whole publisher record of another node installs,
// changes or drops its replica; a beat record of a key this node owns never
// shadows this node's publisher of it (its instances merge in), and one
// this node did not hold is adopted; a peer's record of a key this node
// held makes its publisher a replica.
func TestCoreApplyRecord(t *testing.T) {
	web5 := beatInst("web", 5, 1)
	rkey5 := beatRec("", 5).recordKey
	for _, tc := range []struct {
		name      string
		setup     func(t *testing.T, ix *index)
		pr        *peerRecord
		ownedBeat bool
		now       time.Duration // after coreT0
		want      fxSummary
		check     func(t *testing.T, ix *index)
	}{
		{
			name: "a peer's new record installs a replica",
			pr:   beatRec("n2", 5, web5),
			want: fxSummary{dirty: []string{"web"}, catalogs: 1, services: true, notes: []string{"+10.0.0.5"}},
			check: func(t *testing.T, ix *index) {
				p := ix.remote[rkey5]
				if p == nil || !p.remote || p.owner() != "n2" || p.pubID() != "10.0.0.5:80" {
					t.Fatalf("replica %+v", p)
				}
				if ix.beatPub("10.0.0.5", 80) != nil || ix.beatLeases.Len() != 0 {
					t.Fatal("a replica is indexed as this node's, or leased here")
				}
			},
		},
		{
			name:  "a newer record changes the replica's instance",
			setup: func(t *testing.T, ix *index) { ix.applyRecord(beatRec("n2", 5, web5), false, coreT0) },
			pr:    beatRec("n2", 5, beatInst("web", 5, 2)),
			want:  fxSummary{dirty: []string{"web"}},
			check: func(t *testing.T, ix *index) {
				if p := ix.remote[rkey5]; p.insts.first().inst.weight != 2 {
					t.Fatalf("replica weight %v, want 2", p.insts.first().inst.weight)
				}
			},
		},
		{
			name:  "the same record again changes no view",
			setup: func(t *testing.T, ix *index) { ix.applyRecord(beatRec("n2", 5, web5), false, coreT0) },
			pr:    beatRec("n2", 5, web5),
			want:  fxSummary{},
		},
		{
			name: "an instance the record no longer holds leaves, its emptied service counts down",
			setup: func(t *testing.T, ix *index) {
				ix.applyRecord(beatRec("n2", 5, web5, beatInst("api", 5, 1)), false, coreT0)
			},
			pr:   beatRec("n2", 5, beatInst("api", 5, 1)),
			now:  time.Second,
			want: fxSummary{dirty: []string{"web"}, notes: []string{"-10.0.0.5"}, wake: time.Second + coreEmptyTTL},
			check: func(t *testing.T, ix *index) {
				if p := ix.remote[rkey5]; p.insts.len() != 1 || p.insts.first().slot.svc.key != rulesSvc("api") {
					t.Fatalf("replica holds %d instances", p.insts.len())
				}
			},
		},
		{
			name:  "a tombstone drops the replica",
			setup: func(t *testing.T, ix *index) { ix.applyRecord(beatRec("n2", 5, web5), false, coreT0) },
			pr:    beatRec("n2", 5),
			want:  fxSummary{dirty: []string{"web"}, notes: []string{"-10.0.0.5"}, wake: coreEmptyTTL},
			check: func(t *testing.T, ix *index) {
				if len(ix.remote) != 0 {
					t.Fatalf("replicas left: %v", ix.remote)
				}
			},
		},
		{
			name: "a tombstone of a record not held changes nothing",
			pr:   beatRec("n2", 5),
			want: fxSummary{},
		},
		{
			name: "an instance of a persistent service is refused, the others are installed",
			pr:   beatRec("n2", 5, beatInst("db", 5, 1), web5),
			want: fxSummary{dirty: []string{"web"}, catalogs: 1, services: true, notes: []string{"+10.0.0.5"}, conflicts: 1},
			check: func(t *testing.T, ix *index) {
				if c := ix.fx.conflicts[0]; c.what != conflictReplicated || !errors.Is(c.err, ErrKindMismatch) {
					t.Fatalf("conflict %+v", c)
				}
			},
		},
		{
			name:      "a beat record of a key this node owns merges into its publisher",
			setup:     func(t *testing.T, ix *index) { ownBeat(t, ix, coreT0, web5) },
			pr:        beatRec("n2", 5, beatInst("web", 5, 2), beatInst("api", 5, 1)),
			ownedBeat: true,
			now:       5 * time.Second,
			// The instance this node holds stays as it is; the new one is
			// leased from now; this node writes the next revision.
			want: fxSummary{dirty: []string{"api"}, catalogs: 1, services: true, notes: []string{"+10.0.0.5"}, wake: 20 * time.Second, replicate: 1},
			check: func(t *testing.T, ix *index) {
				p := ix.beatPub("10.0.0.5", 80)
				if p == nil || p.remote || len(ix.remote) != 0 || p.insts.len() != 2 {
					t.Fatalf("publisher %+v, replicas %v", p, ix.remote)
				}
				if w := pubOf(ix, p, "web", 5).inst.weight; w != 1 {
					t.Fatalf("this node's instance took the record's weight %v", w)
				}
				if st, _ := ix.beatLeases.Get(pubOf(ix, p, "api", 5)); !st.LastTouch.Equal(coreT0.Add(5 * time.Second)) {
					t.Fatalf("the merged instance's lease runs from %v", st.LastTouch)
				}
			},
		},
		{
			name:      "a tombstone of a key this node owns removes nothing",
			setup:     func(t *testing.T, ix *index) { ownBeat(t, ix, coreT0, web5) },
			pr:        beatRec("n2", 5),
			ownedBeat: true,
			want:      fxSummary{replicate: 1},
			check: func(t *testing.T, ix *index) {
				if p := ix.beatPub("10.0.0.5", 80); p == nil || pubOf(ix, p, "web", 5) == nil {
					t.Fatal("the tombstone removed this node's instance")
				}
			},
		},
		{
			name:      "a beat record of a key this node owns and does not hold is adopted",
			pr:        beatRec("n2", 5, web5),
			ownedBeat: true,
			now:       time.Second,
			want:      fxSummary{dirty: []string{"web"}, catalogs: 1, services: true, notes: []string{"+10.0.0.5"}, wake: 16 * time.Second, replicate: 1},
			check: func(t *testing.T, ix *index) {
				p := ix.beatPub("10.0.0.5", 80)
				if p == nil || p.remote || len(ix.remote) != 0 {
					t.Fatalf("publisher %+v, replicas %v", p, ix.remote)
				}
				if st, _ := ix.beatLeases.Get(p.insts.first()); !st.LastTouch.Equal(coreT0.Add(time.Second)) {
					t.Fatalf("the adopted lease runs from %v", st.LastTouch)
				}
			},
		},
		{
			name:  "a peer's record of a key this node held demotes its publisher",
			setup: func(t *testing.T, ix *index) { ownBeat(t, ix, coreT0, web5) },
			pr:    beatRec("n2", 5, beatInst("web", 5, 2)),
			want:  fxSummary{dirty: []string{"web"}},
			check: func(t *testing.T, ix *index) {
				p := ix.remote[rkey5]
				if p == nil || !p.remote || ix.beatPub("10.0.0.5", 80) != nil || ix.beatLeases.Len() != 0 {
					t.Fatalf("replica %+v, leases %d", p, ix.beatLeases.Len())
				}
				if p.insts.first().inst.weight != 2 {
					t.Fatal("the demoted publisher does not hold the record's instance")
				}
			},
		},
		{
			name: "a peer's record of a session held here ends the session",
			setup: func(t *testing.T, ix *index) {
				p := &publisher{id: "n2-0000000000000001", kind: pubSession, x: &pubExtra{session: &Session{done: make(chan struct{}), ttl: time.Minute}}}
				ix.sessions[p.id] = p
				if _, err := ix.publish(p, web5, true); err != nil {
					t.Fatal(err)
				}
				_ = ix.sessionLeases.Put(p, coreT0, beatTimeouts(model.BeatTimings{Unhealthy: time.Minute, Delete: time.Minute}))
			},
			pr:   &peerRecord{recordKey: sessionPrefix + "n2-0000000000000001", owner: "n2", kind: pubSession, insts: []model.Instance{beatInst("web", 5, 2)}},
			want: fxSummary{dirty: []string{"web"}},
			check: func(t *testing.T, ix *index) {
				if len(ix.fx.ended) != 1 || len(ix.sessions) != 0 || ix.sessionLeases.Len() != 0 {
					t.Fatalf("ended %v, sessions %v, leases %d", ix.fx.ended, ix.sessions, ix.sessionLeases.Len())
				}
				if p := ix.remote[sessionPrefix+"n2-0000000000000001"]; p == nil || p.session() != nil || p.insts.first().inst.weight != 2 {
					t.Fatalf("replica %+v", p)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runCoreCase(t, tc.setup, func(ix *index) { ix.applyRecord(tc.pr, tc.ownedBeat, coreT0.Add(tc.now)) }, tc.want, tc.check)
		})
	}
}

// TestCoreAdopt: a beat record whose owner left becomes this node's, its
// leases continuing from the owner's last renewal; merged into this node's
// publisher of the key if it has one.
func TestCoreAdopt(t *testing.T) {
	renewed := coreT0.Add(-5 * time.Second)
	for _, tc := range []struct {
		name    string
		local   bool             // this node has a publisher of the key (web)
		replica []model.Instance // this node has a replica of the key, holding these
		pr      *peerRecord
		want    adoption
		n       int // instances of this node's publisher after
	}{
		{name: "a copy", pr: beatRec("n2", 5, beatInst("web", 5, 1)), want: adoptedCopy, n: 1},
		{name: "merged", local: true, pr: beatRec("n2", 5, beatInst("api", 5, 1)), want: adoptedMerged, n: 2},
		{name: "a replica's instance the record lacks goes, its service counting down from now",
			replica: []model.Instance{beatInst("web", 5, 1), beatInst("api", 5, 1)},
			pr:      beatRec("n2", 5, beatInst("web", 5, 1)), want: adoptedCopy, n: 1},
		{name: "a record of no instance", pr: &peerRecord{recordKey: beatRec("", 5).recordKey, owner: "n2", kind: pubBeat}, want: adoptedNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ix := coreIndex(t)
			if tc.local {
				ownBeat(t, ix, coreT0, beatInst("web", 5, 1))
			}
			if tc.replica != nil {
				ix.applyRecord(beatRec("n2", 5, tc.replica...), false, coreT0)
			}
			ix.fx.reset()
			if got := ix.adopt(tc.pr, renewed, coreT0); got != tc.want {
				t.Fatalf("adopt = %d, want %d", got, tc.want)
			}
			p := ix.beatPub("10.0.0.5", 80)
			if tc.n == 0 {
				if p != nil || len(ix.fx.replicate) != 0 {
					t.Fatalf("publisher %+v, replications %d", p, len(ix.fx.replicate))
				}
			} else {
				if p == nil || p.remote || p.insts.len() != tc.n || len(ix.remote) != 0 || !slices.Equal(ix.fx.replicate, []*publisher{p}) {
					t.Fatalf("publisher %+v, replicas %v, replications %v", p, ix.remote, ix.fx.replicate)
				}
				adopted := pubOf(ix, p, tc.pr.insts[0].Service.Name, 5)
				if st, _ := ix.beatLeases.Get(adopted); !st.LastTouch.Equal(renewed) {
					t.Fatalf("the adopted lease runs from %v, want %v", st.LastTouch, renewed)
				}
				if tc.replica != nil {
					if st, ok := ix.emptySvcs.Get(rulesSvc("api")); !ok || !st.LastTouch.Equal(coreT0) {
						t.Fatalf("the emptied service counts down from %v (%v), want now", st.LastTouch, ok)
					}
				}
			}
			ix.fx.reset()
			checkIndex(t, ix)
		})
	}
}

// TestCoreOwnershipMoves: on a membership change, a beat publisher whose
// key moved is released (its leases handed over with their ages, its
// instances kept as a replica until the new owner writes, nothing
// replicated); when the key comes back it is promoted again, its leases
// from the given last beat, and replicated as this node's.
func TestCoreOwnershipMoves(t *testing.T) {
	ix := coreIndex(t)
	p := ownBeat(t, ix, coreT0, beatInst("web", 5, 1))
	api := beatInst("api", 5, 1)
	pi, err := ix.publish(p, api, true)
	if err != nil {
		t.Fatal(err)
	}
	ix.leaseFrom(pi, coreT0.Add(2*time.Second))
	ix.fx.reset()

	leases := ix.releaseBeat(p, "n2", coreT0.Add(10*time.Second))
	var got []string
	for _, l := range leases {
		got = append(got, l.Inst.Service.Name+" "+l.Age.String())
	}
	if !slices.Equal(got, []string{"web 10s", "api 8s"}) {
		t.Fatalf("handed leases %q", got)
	}
	if !p.remote || p.owner() != "n2" || ix.remote[p.recordKey()] != p || ix.beatPub("10.0.0.5", 80) != nil || ix.beatLeases.Len() != 0 {
		t.Fatalf("released publisher %+v, leases %d", p, ix.beatLeases.Len())
	}
	if got := summarize(&ix.fx); !got.equal(fxSummary{}) {
		t.Fatalf("release effects %+v: the new owner writes, not this node", got)
	}
	checkIndex(t, ix)

	ix.promote(p, coreT0.Add(20*time.Second))
	if got := summarize(&ix.fx); !got.equal(fxSummary{wake: 35 * time.Second, replicate: 1}) {
		t.Fatalf("promote effects %+v", got)
	}
	if p.remote || len(ix.remote) != 0 || ix.beatPub("10.0.0.5", 80) != p || ix.beatLeases.Len() != 2 {
		t.Fatalf("promoted publisher %+v, leases %d", p, ix.beatLeases.Len())
	}
	ix.fx.reset()
	checkIndex(t, ix)
}

// TestCoreTakeHandedLeases: a handed lease runs from the newer of this
// node's last beat and the handed one; it never brings back what lapsed or
// what was deregistered here; an instance this node does not hold is
// published (through its replica of the key, promoted, if it has one), as
// unhealthy if its last beat is that old; each changed publisher is
// replicated once.
func TestCoreTakeHandedLeases(t *testing.T) {
	now := coreT0.Add(10 * time.Second)
	at := func(d time.Duration) time.Time { return coreT0.Add(d) }
	for _, tc := range []struct {
		name   string
		setup  func(t *testing.T, ix *index)
		leases []takenLease
		want   fxSummary
		check  func(t *testing.T, ix *index)
	}{
		{
			name:   "an older handed beat changes nothing",
			setup:  func(t *testing.T, ix *index) { ownBeat(t, ix, coreT0, beatInst("web", 5, 1)) },
			leases: []takenLease{{beatInst("web", 5, 1), at(-5 * time.Second)}},
			check: func(t *testing.T, ix *index) {
				if st, _ := ix.beatLeases.Get(pubOf(ix, ix.beatPub("10.0.0.5", 80), "web", 5)); !st.LastTouch.Equal(coreT0) {
					t.Fatalf("lease from %v", st.LastTouch)
				}
			},
		},
		{
			name:   "a newer handed beat runs the lease from it",
			setup:  func(t *testing.T, ix *index) { ownBeat(t, ix, coreT0, beatInst("web", 5, 1)) },
			leases: []takenLease{{beatInst("web", 5, 1), at(8 * time.Second)}},
			want:   fxSummary{wake: 23 * time.Second, replicate: 1},
			check: func(t *testing.T, ix *index) {
				if st, _ := ix.beatLeases.Get(pubOf(ix, ix.beatPub("10.0.0.5", 80), "web", 5)); !st.LastTouch.Equal(at(8 * time.Second)) {
					t.Fatalf("lease from %v", st.LastTouch)
				}
			},
		},
		{
			name: "a newer handed beat makes an unhealthy instance healthy",
			setup: func(t *testing.T, ix *index) {
				p := ownBeat(t, ix, coreT0, beatInst("web", 5, 1))
				ix.replaceInst(p.insts.first(), p.insts.first().inst.withHealth(false))
			},
			leases: []takenLease{{beatInst("web", 5, 1), at(8 * time.Second)}},
			want:   fxSummary{dirty: []string{"web"}, wake: 23 * time.Second, replicate: 1},
			check: func(t *testing.T, ix *index) {
				if !ix.beatPub("10.0.0.5", 80).insts.first().inst.healthy {
					t.Fatal("still unhealthy")
				}
			},
		},
		{
			name:   "a lapsed handed lease brings nothing back",
			leases: []takenLease{{beatInst("web", 6, 1), now.Add(-30 * time.Second)}},
		},
		{
			name: "an instance deregistered here lately stays gone",
			setup: func(t *testing.T, ix *index) {
				ix.noteDeregistered(rulesKey("web", 6), 30*time.Second, coreT0)
			},
			leases: []takenLease{{beatInst("web", 6, 1), at(9 * time.Second)}},
		},
		{
			name:   "an instance not held is published, unhealthy past its threshold",
			leases: []takenLease{{beatInst("web", 6, 1), now.Add(-20 * time.Second)}},
			want:   fxSummary{dirty: []string{"web"}, catalogs: 1, services: true, notes: []string{"+10.0.0.6"}, wake: 5 * time.Second, replicate: 1},
			check: func(t *testing.T, ix *index) {
				p := ix.beatPub("10.0.0.6", 80)
				if p == nil || p.pubID() != "10.0.0.6:80" || p.insts.first().inst.healthy {
					t.Fatalf("publisher %+v", p)
				}
			},
		},
		{
			name:   "a replica of the key is promoted and gains the instance",
			setup:  func(t *testing.T, ix *index) { ix.applyRecord(beatRec("n2", 6, beatInst("web", 6, 1)), false, coreT0) },
			leases: []takenLease{{beatInst("api", 6, 1), at(9 * time.Second)}},
			// promote replicates, and so does the end of the handover.
			want: fxSummary{dirty: []string{"api"}, catalogs: 1, services: true, notes: []string{"+10.0.0.6"}, wake: 24 * time.Second, replicate: 2},
			check: func(t *testing.T, ix *index) {
				p := ix.beatPub("10.0.0.6", 80)
				if p == nil || p.remote || p.insts.len() != 2 || len(ix.remote) != 0 {
					t.Fatalf("publisher %+v, replicas %v", p, ix.remote)
				}
				if st, _ := ix.beatLeases.Get(pubOf(ix, p, "web", 6)); !st.LastTouch.Equal(now) {
					t.Fatalf("the replica's lease runs from %v, want now", st.LastTouch)
				}
			},
		},
		{
			name:   "an instance the index refuses is a conflict",
			leases: []takenLease{{beatInst("db", 6, 1), at(9 * time.Second)}},
			want:   fxSummary{conflicts: 1},
			check: func(t *testing.T, ix *index) {
				if c := ix.fx.conflicts[0]; c.what != conflictHanded || !errors.Is(c.err, ErrKindMismatch) || ix.beatPub("10.0.0.6", 80) != nil {
					t.Fatalf("conflict %+v", c)
				}
			},
		},
		{
			name:   "two leases of one publisher replicate it once",
			setup:  func(t *testing.T, ix *index) { ownBeat(t, ix, coreT0, beatInst("web", 5, 1)) },
			leases: []takenLease{{beatInst("web", 5, 1), at(8 * time.Second)}, {beatInst("api", 5, 1), at(8 * time.Second)}},
			want:   fxSummary{dirty: []string{"api"}, catalogs: 1, services: true, notes: []string{"+10.0.0.5"}, wake: 23 * time.Second, replicate: 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runCoreCase(t, tc.setup, func(ix *index) { ix.takeHandedLeases(tc.leases, now) }, tc.want, tc.check)
		})
	}
}

// TestCoreReplaceService: a session's instances of one service are
// swapped in one step; a persistent service refuses; past a limit every
// step is undone.
func TestCoreReplaceService(t *testing.T) {
	web := rulesSvc("web")
	// heldIPs returns the last octets of p's instances of svc, in order.
	heldIPs := func(ix *index, p *publisher, svc string) []int {
		var out []int
		for ip := 1; ip <= 9; ip++ {
			if pubOf(ix, p, svc, ip) != nil {
				out = append(out, ip)
			}
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		svc     model.ServiceKey
		next    []model.Instance
		maxPer  int // Limits.MaxInstancesPerSession; 0: the default
		wantErr error
		want    fxSummary // checked when wantErr is nil
		webIPs  []int     // the last octets of the session's instances of web after
		weights []float64 // their weights; nil: 1 each
	}{
		{
			name: "the leaving go, the changed change, the new come",
			svc:  web, next: []model.Instance{beatInst("web", 6, 2), beatInst("web", 8, 1)},
			want:    fxSummary{dirty: []string{"web", "web", "web"}, notes: []string{"-10.0.0.5", "+10.0.0.6", "+10.0.0.8"}},
			webIPs:  []int{6, 8},
			weights: []float64{2, 1},
		},
		{
			name: "an empty set removes the session's instances of the service",
			svc:  web,
			want: fxSummary{dirty: []string{"web", "web"}, notes: []string{"-10.0.0.5", "-10.0.0.6"}, wake: coreEmptyTTL},
		},
		{
			name: "a persistent service refuses and nothing changes",
			svc:  rulesSvc("db"), next: []model.Instance{beatInst("db", 5, 1)}, wantErr: ErrKindMismatch,
			webIPs: []int{5, 6},
		},
		{
			name: "past a limit every step is undone",
			svc:  web, next: []model.Instance{beatInst("web", 5, 1), beatInst("web", 7, 1), beatInst("web", 8, 1), beatInst("web", 9, 1)},
			maxPer: 4, wantErr: ErrLimit,
			webIPs: []int{5, 6},
		},
		{
			// The change of 5 retires its rec (emptied: it may be its
			// slot block's); the undo puts its content back.
			name: "past a limit a changed instance is restored",
			svc:  web, next: []model.Instance{beatInst("web", 5, 2), beatInst("web", 7, 1), beatInst("web", 8, 1), beatInst("web", 9, 1)},
			maxPer: 4, wantErr: ErrLimit,
			webIPs: []int{5, 6},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ix := coreIndex(t)
			p := &publisher{id: "n1-0000000000000001", kind: pubSession, x: &pubExtra{session: &Session{done: make(chan struct{})}}}
			ix.sessions[p.id] = p
			for _, in := range []model.Instance{beatInst("web", 5, 1), beatInst("web", 6, 1), beatInst("api", 7, 1)} {
				if _, err := ix.publish(p, in, true); err != nil {
					t.Fatal(err)
				}
			}
			if tc.maxPer > 0 {
				ix.lim.MaxInstancesPerSession = tc.maxPer
			}
			ix.fx.reset()
			err := ix.replaceService(p, tc.svc, tc.next, coreT0)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				if tc.wantErr == ErrKindMismatch && !summarize(&ix.fx).equal(fxSummary{}) {
					t.Fatalf("a refused swap has effects %+v", summarize(&ix.fx))
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if got := summarize(&ix.fx); !got.equal(tc.want) {
					t.Fatalf("effects = %+v, want %+v", got, tc.want)
				}
			}
			if got := heldIPs(ix, p, "web"); !slices.Equal(got, tc.webIPs) {
				t.Fatalf("the session publishes web at %v, want %v", got, tc.webIPs)
			}
			if pubOf(ix, p, "api", 7) == nil {
				t.Fatal("the session lost its instance of another service")
			}
			for i, ip := range tc.webIPs {
				want := 1.0
				if tc.weights != nil {
					want = tc.weights[i]
				}
				if w := pubOf(ix, p, "web", ip).inst.weight; w != want {
					t.Fatalf("web at 10.0.0.%d: weight %v, want %v", ip, w, want)
				}
			}
			if want := len(tc.webIPs) + 1; p.insts.len() != want {
				t.Fatalf("the session lists %d instances, want %d", p.insts.len(), want)
			}
			ix.fx.reset()
			checkIndex(t, ix)
		})
	}
}

// TestCoreApplyInstRecord: an instance record of a peer's session adds,
// changes and removes one publication of the session's grouped copy; a
// removal after the owner left is an orphan's; a record of this node's own
// live session changes nothing; a refused instance is a conflict.
func TestCoreApplyInstRecord(t *testing.T) {
	const sid = "n2-0123456789abcdef"
	gkey := sessionPrefix + sid + "/"
	web5, web6 := beatInst("web", 5, 1), beatInst("web", 6, 1)
	hash := func(in model.Instance) string { return instHash(in.Service, in.Cluster, in.IP, in.Port) }
	put := func(in model.Instance) func(*index) {
		return func(ix *index) { ix.applyInstRecord(gkey, sid, hash(in), "n2", &in, nil, false, coreT0) }
	}
	// del is a tombstone that names what it removes (the key read from
	// the removed version's payload); delByHash one that does not, whose
	// publication the copy finds by hashing its instances' keys.
	del := func(in model.Instance, gone bool) func(*index) {
		return func(ix *index) {
			k := in.Key()
			ix.applyInstRecord(gkey, sid, hash(in), "n2", nil, &k, gone, coreT0)
		}
	}
	delByHash := func(in model.Instance) func(*index) {
		return func(ix *index) { ix.applyInstRecord(gkey, sid, hash(in), "n2", nil, nil, false, coreT0) }
	}
	copyHolds := func(ips ...string) func(*testing.T, *index) {
		return func(t *testing.T, ix *index) {
			t.Helper()
			p := ix.remote[gkey]
			if len(ips) == 0 {
				if p != nil {
					t.Fatalf("the grouped copy is still held: %+v", p)
				}
				return
			}
			if p == nil || !p.remote || p.owner() != "n2" || p.id != sid {
				t.Fatalf("grouped copy %+v", p)
			}
			var got []string
			for _, pi := range p.insts.all() {
				got = append(got, pi.inst.ip)
			}
			slices.Sort(got)
			if !slices.Equal(got, ips) {
				t.Fatalf("the copy publishes %v, want %v", got, ips)
			}
		}
	}
	for _, tc := range []struct {
		name  string
		setup func(*testing.T, *index)
		act   func(*index)
		want  fxSummary
		check func(*testing.T, *index)
	}{
		{
			name:  "the first record makes the copy",
			act:   put(web5),
			want:  fxSummary{dirty: []string{"web"}, catalogs: 1, services: true, notes: []string{"+10.0.0.5"}},
			check: copyHolds("10.0.0.5"),
		},
		{
			name:  "a second instance joins it",
			setup: func(t *testing.T, ix *index) { put(web5)(ix) },
			act:   put(web6),
			want:  fxSummary{dirty: []string{"web"}, notes: []string{"+10.0.0.6"}},
			check: copyHolds("10.0.0.5", "10.0.0.6"),
		},
		{
			name:  "a tombstone removes one, the copy stays",
			setup: func(t *testing.T, ix *index) { put(web5)(ix); put(web6)(ix) },
			act:   del(web6, false),
			want:  fxSummary{dirty: []string{"web"}, notes: []string{"-10.0.0.6"}},
			check: copyHolds("10.0.0.5"),
		},
		{
			name:  "a tombstone that does not name its instance removes the one of its hash",
			setup: func(t *testing.T, ix *index) { put(web5)(ix); put(web6)(ix) },
			act:   delByHash(web6),
			want:  fxSummary{dirty: []string{"web"}, notes: []string{"-10.0.0.6"}},
			check: copyHolds("10.0.0.5"),
		},
		{
			name:  "a tombstone of an instance the copy does not publish changes nothing",
			setup: func(t *testing.T, ix *index) { put(web5)(ix) },
			act:   del(web6, false),
			check: copyHolds("10.0.0.5"),
		},
		{
			name:  "the owner gone, the last tombstone is an orphan's and drops the copy",
			setup: func(t *testing.T, ix *index) { put(web5)(ix); ix.noting = true },
			act:   del(web5, true),
			// The emptied slot's countdown, and the empty service's.
			want: fxSummary{dirty: []string{"web"}, notes: []string{"-10.0.0.5"}, wake: time.Minute},
			check: func(t *testing.T, ix *index) {
				copyHolds()(t, ix)
				// The journal names the copy's publisher as a replica's
				// (the event is the owner node's), as of the event.
				ev := ix.fx.events
				if len(ev) == 0 || ev[len(ev)-1].why != "orphaned: its owner node left" || !ev[len(ev)-1].remote {
					t.Fatalf("the removal's journal notes: %+v, want an orphan's, by a replica", ev)
				}
			},
		},
		{
			name:  "a tombstone of nothing held changes nothing",
			act:   del(web5, false),
			check: copyHolds(),
		},
		{
			name: "a record of this node's own live session changes nothing",
			setup: func(t *testing.T, ix *index) {
				ix.sessions[sid] = &publisher{kind: pubSession, id: sid, x: &pubExtra{session: &Session{}}}
			},
			act:   put(web5),
			check: copyHolds(),
		},
		{
			name:  "an instance the index refuses is a conflict",
			act:   put(rulesInst("db", 5, true)), // db is persistent
			want:  fxSummary{conflicts: 1},
			check: copyHolds(),
		},
	} {
		t.Run(tc.name, func(t *testing.T) { runCoreCase(t, tc.setup, tc.act, tc.want, tc.check) })
	}
}

// A replica knows its writer: a publisher this node owned names the node
// that owns it now, and a remote copy follows its key's owner as it moves
// (the journal's Event.Node says who wrote a replica's change).
func TestCoreReplicaOwner(t *testing.T) {
	ix := coreIndex(t)
	p := ownBeat(t, ix, coreT0, beatInst("web", 5, 1))
	ix.applyRecord(beatRec("n2", 5, beatInst("web", 5, 2)), false, coreT0)
	if !p.remote || p.owner() != "n2" {
		t.Fatalf("demoted publisher: remote %v, owner %q, want n2", p.remote, p.owner())
	}
	ix.applyRecord(beatRec("n3", 5, beatInst("web", 5, 3)), false, coreT0)
	if q := ix.remote[p.recordKey()]; q == nil || q.owner() != "n3" {
		t.Fatalf("remote copy after n3's record: %+v, want owner n3", q)
	}
	checkIndex(t, ix)
}
