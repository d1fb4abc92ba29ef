package health

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/testutil"
)

var t0 = time.Unix(1_700_000_000, 0)

// at returns t0+d.
func at(d time.Duration) time.Time { return t0.Add(d) }

// fired is one event as reported by Expire.
type fired struct {
	id string
	ev Event
}

// expire calls l.Expire and returns the events in the order reported, checking the count.
func expire(t *testing.T, l *Leases[string], now time.Time) []fired {
	t.Helper()
	var got []fired
	n := l.Expire(now, func(id string, ev Event) { got = append(got, fired{id, ev}) })
	if n != len(got) {
		t.Fatalf("Expire returned %d, but fn was called %d times", n, len(got))
	}
	return got
}

func mustPut(t *testing.T, l *Leases[string], id string, now time.Time, to Timeouts) {
	t.Helper()
	if err := l.Put(id, now, to); err != nil {
		t.Fatalf("Put(%q, %v): %v", id, to, err)
	}
}

// step is one call in a scripted test: a touch, a put, or an Expire with the events it must
// report.
type step struct {
	at     time.Duration // since t0
	touch  bool          // Touch "a" at at
	put    *Timeouts     // Put "a" at at with these timeouts
	revive bool          // for touch: the expected revived
	want   []Event       // for Expire: the events for "a", in order
}

// runScript puts "a" at t0 with to and runs the steps; a step that neither touches nor puts
// calls Expire.
func runScript(t *testing.T, to Timeouts, steps []step) {
	t.Helper()
	var l Leases[string]
	mustPut(t, &l, "a", t0, to)
	for i, s := range steps {
		switch {
		case s.touch:
			found, revived := l.Touch("a", at(s.at))
			if !found || revived != s.revive {
				t.Fatalf("step %d: Touch at %v = (%v, %v), want (true, %v)", i, s.at, found, revived, s.revive)
			}
		case s.put != nil:
			mustPut(t, &l, "a", at(s.at), *s.put)
		default:
			var got []Event
			for _, f := range expire(t, &l, at(s.at)) {
				got = append(got, f.ev)
			}
			if !slices.Equal(got, s.want) {
				t.Fatalf("step %d: Expire at %v = %v, want %v", i, s.at, got, s.want)
			}
		}
	}
}

const ns = time.Nanosecond

func TestLeasesScripts(t *testing.T) {
	std := Timeouts{Unhealthy: 15 * time.Second, Expire: 30 * time.Second}
	s := time.Second
	un, ex := []Event{EventUnhealthy}, []Event{EventExpired}
	tests := []struct {
		name  string
		to    Timeouts
		steps []step
	}{{
		name: "timeline",
		to:   std,
		steps: []step{
			{at: 15*s - ns}, {at: 15 * s, want: un}, {at: 30*s - ns}, {at: 30 * s, want: ex},
		},
	}, {
		name: "touch while healthy is not a revive and pushes both thresholds out",
		to:   std,
		steps: []step{
			{at: 10 * s, touch: true}, {at: 25*s - ns}, {at: 25 * s, want: un}, {at: 40*s - ns}, {at: 40 * s, want: ex},
		},
	}, {
		name: "touch between the thresholds revives",
		to:   std,
		steps: []step{
			{at: 15 * s, want: un}, {at: 20 * s, touch: true, revive: true},
			{at: 35*s - ns}, {at: 35 * s, want: un}, {at: 50*s - ns}, {at: 50 * s, want: ex},
		},
	}, {
		// The revive needs a deadline (11 s) earlier than the one scheduled (Expire, 30 s).
		name: "revive schedules an earlier deadline",
		to:   Timeouts{Unhealthy: 5 * s, Expire: 30 * s},
		steps: []step{
			{at: 6 * s, want: un}, {at: 6 * s, touch: true, revive: true},
			{at: 11*s - ns}, {at: 11 * s, want: un}, {at: 36*s - ns}, {at: 36 * s, want: ex},
		},
	}, {
		name: "put with shorter timeouts fires at the new time",
		to:   std,
		steps: []step{
			{at: 1 * s, put: &Timeouts{Unhealthy: 2 * s, Expire: 4 * s}},
			{at: 3*s - ns}, {at: 3 * s, want: un}, {at: 5*s - ns}, {at: 5 * s, want: ex},
		},
	}, {
		name: "put on an unhealthy lease makes it healthy and restarts the thresholds",
		to:   std,
		steps: []step{
			{at: 16 * s, want: un}, {at: 20 * s, put: &std}, {at: 35*s - ns}, {at: 35 * s, want: un}, {at: 50 * s, want: ex},
		},
	}, {
		name: "put with longer timeouts fires at the new time",
		to:   std,
		steps: []step{
			{at: 1 * s, put: &Timeouts{Unhealthy: 60 * s, Expire: 120 * s}},
			{at: 61*s - ns}, {at: 61 * s, want: un}, {at: 121*s - ns}, {at: 121 * s, want: ex},
		},
	}, {
		name:  "jump past both thresholds gives only expired",
		to:    std,
		steps: []step{{at: time.Hour, want: ex}},
	}, {
		name:  "jump to exactly Expire gives only expired",
		to:    std,
		steps: []step{{at: 30 * s, want: ex}},
	}, {
		name:  "Unhealthy 0 gives only expired",
		to:    Timeouts{Expire: 30 * s},
		steps: []step{{at: 15 * s}, {at: 30*s - ns}, {at: 30 * s, want: ex}},
	}, {
		name:  "Unhealthy equal to Expire gives only expired",
		to:    Timeouts{Unhealthy: 30 * s, Expire: 30 * s},
		steps: []step{{at: 30*s - ns}, {at: 30 * s, want: ex}},
	}, {
		name: "a touch older than the last touch does not move it back",
		to:   std,
		steps: []step{
			{at: 10 * s, touch: true}, {at: 5 * s, touch: true}, {at: 25*s - ns}, {at: 25 * s, want: un},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runScript(t, tt.to, tt.steps) })
	}
}

func TestExpiredIsRemovedBeforeCallback(t *testing.T) {
	var l Leases[string]
	mustPut(t, &l, "a", t0, Timeouts{Expire: time.Second})
	mustPut(t, &l, "b", t0, Timeouts{Expire: 2 * time.Second})
	var lens []int
	l.Expire(at(time.Hour), func(id string, ev Event) { lens = append(lens, l.Len()) })
	if !slices.Equal(lens, []int{1, 0}) {
		t.Fatalf("Len seen by fn = %v, want [1 0]", lens)
	}
	if _, ok := l.Get("a"); ok {
		t.Fatal("expired lease still there")
	}
}

func TestRemoveThenPutAgain(t *testing.T) {
	var l Leases[string]
	mustPut(t, &l, "a", t0, Timeouts{Unhealthy: time.Second, Expire: 2 * time.Second})
	if !l.Remove("a") {
		t.Fatal("Remove of a held lease = false")
	}
	if l.Remove("a") {
		t.Fatal("second Remove = true")
	}
	if found, _ := l.Touch("a", at(0)); found {
		t.Fatal("Touch of a removed lease found it")
	}
	mustPut(t, &l, "a", at(0), Timeouts{Unhealthy: 15 * time.Second, Expire: 30 * time.Second})
	// The old lease's elements (1 s, 2 s) must not fire for the new lease.
	if got := expire(t, &l, at(15*time.Second-ns)); len(got) != 0 {
		t.Fatalf("old heap elements fired: %v", got)
	}
	if got := expire(t, &l, at(15*time.Second)); !slices.Equal(got, []fired{{"a", EventUnhealthy}}) {
		t.Fatalf("got %v, want a unhealthy at 15 s", got)
	}
}

// TestRemoveReusedSlot removes a lease and gives its slot to another id, whose lease must not
// be touched by the old one's heap element.
func TestRemoveReusedSlot(t *testing.T) {
	var l Leases[string]
	mustPut(t, &l, "old", t0, Timeouts{Expire: time.Second})
	mustPut(t, &l, "keep", t0, Timeouts{Expire: time.Hour})
	l.Remove("old")
	mustPut(t, &l, "new", t0, Timeouts{Expire: time.Minute})
	if len(l.slots) != 2 {
		t.Fatalf("%d slots, want the freed slot reused (2)", len(l.slots))
	}
	if got := expire(t, &l, at(time.Minute-ns)); len(got) != 0 {
		t.Fatalf("got %v before a minute", got)
	}
	if got := expire(t, &l, at(time.Minute)); !slices.Equal(got, []fired{{"new", EventExpired}}) {
		t.Fatalf("got %v, want new expired", got)
	}
}

func TestEventsInDeadlineOrder(t *testing.T) {
	const n = 200
	rng := rand.New(rand.NewPCG(1, 2))
	var l Leases[string]
	type lease struct {
		id                   string
		unhealthyAt, expires time.Duration
	}
	var all []lease
	for i, d := range rng.Perm(n) {
		to := Timeouts{Unhealthy: time.Duration(d+1) * time.Second, Expire: time.Duration(2*d+n+1) * time.Second}
		id := fmt.Sprint("id", i)
		mustPut(t, &l, id, t0, to)
		all = append(all, lease{id, to.Unhealthy, to.Expire})
		if i%3 == 0 {
			l.Touch(id, t0) // an early touch must not change anything
		}
	}
	check := func(now time.Duration, ev Event, when func(lease) time.Duration) {
		t.Helper()
		var want []fired
		slices.SortFunc(all, func(a, b lease) int { return int(when(a) - when(b)) })
		for _, ls := range all {
			want = append(want, fired{ls.id, ev})
		}
		if got := expire(t, &l, at(now)); !slices.Equal(got, want) {
			t.Fatalf("Expire at %v:\n got %v\nwant %v", now, got, want)
		}
	}
	check(n*time.Second, EventUnhealthy, func(ls lease) time.Duration { return ls.unhealthyAt })
	check(time.Hour, EventExpired, func(ls lease) time.Duration { return ls.expires })
	if l.Len() != 0 {
		t.Fatalf("Len = %d after everything expired", l.Len())
	}
}

func TestNext(t *testing.T) {
	var l Leases[string]
	if _, ok := l.Next(); ok {
		t.Fatal("Next of an empty Leases reports ok")
	}
	mustPut(t, &l, "a", t0, Timeouts{Expire: time.Second})
	mustPut(t, &l, "b", t0, Timeouts{Expire: time.Minute})
	if got, ok := l.Next(); !ok || !got.Equal(at(time.Second)) {
		t.Fatalf("Next = %v, %v; want t0+1s", got, ok)
	}
	// Removing the earliest lease drops its element, so Next moves on.
	l.Remove("a")
	if got, ok := l.Next(); !ok || !got.Equal(at(time.Minute)) {
		t.Fatalf("Next after Remove = %v, %v; want t0+1m", got, ok)
	}
	l.Remove("b")
	if got, ok := l.Next(); ok {
		t.Fatalf("Next with no leases = %v, true", got)
	}
}

func TestGet(t *testing.T) {
	var l Leases[string]
	if _, ok := l.Get("a"); ok {
		t.Fatal("Get on an empty Leases reports ok")
	}
	to := Timeouts{Unhealthy: 15 * time.Second, Expire: 30 * time.Second}
	mustPut(t, &l, "a", t0, to)
	l.Touch("a", at(time.Second))
	l.Expire(at(16*time.Second), nil)
	s, ok := l.Get("a")
	if want := (State{LastTouch: at(time.Second), Healthy: false, Timeouts: to}); !ok || !s.LastTouch.Equal(want.LastTouch) ||
		s.Healthy != want.Healthy || s.Timeouts != want.Timeouts {
		t.Fatalf("Get = %+v, %v; want %+v", s, ok, want)
	}
}

func TestPutInvalidChangesNothing(t *testing.T) {
	var l Leases[string]
	to := Timeouts{Unhealthy: 15 * time.Second, Expire: 30 * time.Second}
	mustPut(t, &l, "a", t0, to)
	if err := l.Put("a", at(time.Second), Timeouts{}); !errors.Is(err, ErrInvalidTimeouts) {
		t.Fatalf("Put with zero Timeouts: err = %v, want ErrInvalidTimeouts", err)
	}
	if err := l.Put("b", at(time.Second), Timeouts{}); err == nil {
		t.Fatal("Put of a new id with zero Timeouts succeeded")
	}
	if s, _ := l.Get("a"); !s.LastTouch.Equal(t0) || s.Timeouts != to {
		t.Fatalf("a changed by an invalid Put: %+v", s)
	}
	if l.Len() != 1 {
		t.Fatalf("Len = %d, want 1", l.Len())
	}
}

func TestHugeTimeoutsDoNotWrap(t *testing.T) {
	var l Leases[string]
	mustPut(t, &l, "a", time.Unix(0, 1<<62), Timeouts{Unhealthy: math.MaxInt64, Expire: math.MaxInt64})
	if got := expire(t, &l, time.Unix(0, math.MaxInt64-1)); len(got) != 0 {
		t.Fatalf("a lease with a saturated deadline fired early: %v", got)
	}
}

func TestTimeoutsValidate(t *testing.T) {
	tests := []struct {
		to   Timeouts
		want string // substring of the error; "" for valid
	}{
		{Timeouts{Unhealthy: 15 * time.Second, Expire: 30 * time.Second}, ""},
		{Timeouts{Expire: time.Nanosecond}, ""},
		{Timeouts{Unhealthy: time.Second, Expire: time.Second}, ""},
		{Timeouts{}, "Expire must be > 0"},
		{Timeouts{Unhealthy: time.Second, Expire: -time.Second}, "Expire must be > 0"},
		{Timeouts{Unhealthy: -1, Expire: time.Second}, "Unhealthy must be >= 0"},
		{Timeouts{Unhealthy: 2 * time.Second, Expire: time.Second}, "Unhealthy (2s) must not exceed Expire (1s)"},
		{Timeouts{Expire: time.Second, Interval: 5 * time.Second}, ""}, // no threshold: it may exceed Expire
		{Timeouts{Expire: time.Second, Interval: -1}, "Interval must be >= 0"},
	}
	for _, tt := range tests {
		err := tt.to.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%+v: unexpected error %v", tt.to, err)
		case tt.want == "":
		case err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrInvalidTimeouts):
			t.Errorf("%+v: err = %v, want ErrInvalidTimeouts naming %q", tt.to, err, tt.want)
		case !strings.HasPrefix(err.Error(), "health: "):
			t.Errorf("%+v: err %q lacks the package prefix", tt.to, err)
		}
	}
}

func TestEventString(t *testing.T) {
	for ev, want := range map[Event]string{EventUnhealthy: "unhealthy", EventExpired: "expired", 0: "Event(0)", 9: "Event(9)"} {
		if got := ev.String(); got != want {
			t.Errorf("Event(%d).String() = %q, want %q", uint8(ev), got, want)
		}
	}
}

func TestTouchDoesNotAllocate(t *testing.T) {
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = fmt.Sprintf("10.0.%d.%d:8080", i/256, i%256)
	}
	checkTouchAllocs(t, ids)
}

// checkTouchAllocs fails t if touching leases of ids allocates.
func checkTouchAllocs[K comparable](t *testing.T, ids []K) {
	t.Helper()
	var l Leases[K]
	for _, id := range ids {
		if err := l.Put(id, t0, Timeouts{Unhealthy: time.Hour, Expire: 2 * time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	i := 0
	allocs := testing.AllocsPerRun(10_000, func() {
		l.Touch(ids[i%len(ids)], at(time.Duration(i)*time.Millisecond))
		i++
	})
	if allocs != 0 {
		t.Fatalf("Touch allocates %v times per call, want 0", allocs)
	}
}

// TestHeapStaysBounded drives the two workloads that leave stale heap elements behind, churn
// of short-lived leases and unhealthy/revive cycles, and checks that compaction keeps the heap
// proportional to the number of leases.
func TestHeapStaysBounded(t *testing.T) {
	long := Timeouts{Unhealthy: time.Hour, Expire: 24 * time.Hour}
	bound := func(l *Leases[string]) int { return 2*l.Len() + minCompact }
	t.Run("put and remove", func(t *testing.T) {
		var l Leases[string]
		mustPut(t, &l, "keep", t0, long)
		for i := range 10_000 {
			id := fmt.Sprint("tmp", i)
			mustPut(t, &l, id, at(time.Duration(i)*time.Second), long)
			l.Remove(id)
			if len(l.heap) > bound(&l) {
				t.Fatalf("after %d put/remove cycles the heap holds %d elements for %d leases", i+1, len(l.heap), l.Len())
			}
		}
	})
	t.Run("revive", func(t *testing.T) {
		var l Leases[string]
		mustPut(t, &l, "a", t0, Timeouts{Unhealthy: time.Second, Expire: 24 * time.Hour})
		now := t0
		for i := range 10_000 {
			now = now.Add(time.Second)
			if got := expire(t, &l, now); len(got) != 1 {
				t.Fatalf("cycle %d: events %v, want one unhealthy", i, got)
			}
			if _, revived := l.Touch("a", now); !revived {
				t.Fatalf("cycle %d: no revive", i)
			}
			if len(l.heap) > bound(&l) {
				t.Fatalf("after %d revives the heap holds %d elements", i+1, len(l.heap))
			}
		}
	})
}

// naiveModel is the naive reference for Leases: it scans every lease.
type naiveModel struct {
	leases map[string]*modelLease
}

type modelLease struct {
	last    int64
	healthy bool
	to      Timeouts
}

// threshold returns the lease's next threshold and the event it would cause.
func (m *modelLease) threshold() (int64, Event) {
	if m.healthy && m.to.Unhealthy > 0 {
		return addSat(m.last, int64(m.to.Unhealthy)), EventUnhealthy
	}
	return addSat(m.last, int64(m.to.Expire)), EventExpired
}

func (m *naiveModel) put(id string, now int64, to Timeouts) error {
	if err := to.Validate(); err != nil {
		return err
	}
	m.leases[id] = &modelLease{last: now, healthy: true, to: to}
	return nil
}

func (m *naiveModel) touch(id string, now int64) (found, revived bool) {
	ls := m.leases[id]
	if ls == nil {
		return false, false
	}
	ls.last = max(ls.last, now)
	revived = !ls.healthy
	ls.healthy = true
	return true, revived
}

// expire returns, for every id with a transition at or before now, the event and the time of
// its threshold.
func (m *naiveModel) expire(now int64) map[string]modelEvent {
	evs := map[string]modelEvent{}
	for id, ls := range m.leases {
		if exp := addSat(ls.last, int64(ls.to.Expire)); exp <= now {
			evs[id] = modelEvent{EventExpired, exp}
			delete(m.leases, id)
			continue
		}
		if at, ev := ls.threshold(); ev == EventUnhealthy && at <= now {
			evs[id] = modelEvent{EventUnhealthy, at}
			ls.healthy = false
		}
	}
	return evs
}

// next returns the earliest transition.
func (m *naiveModel) next() (int64, bool) {
	earliest, ok := int64(math.MaxInt64), false
	for _, ls := range m.leases {
		at, _ := ls.threshold()
		earliest, ok = min(earliest, at), true
	}
	return earliest, ok
}

type modelEvent struct {
	ev Event
	at int64
}

// byteReader hands out the fuzz input one byte at a time, then zeros.
type byteReader []byte

func (r *byteReader) next() byte {
	if len(*r) == 0 {
		return 0
	}
	b := (*r)[0]
	*r = (*r)[1:]
	return b
}

// half is the unit of time in checkOps: thresholds and clock steps are small multiples of it,
// so that they collide often.
const half = 500 * time.Millisecond

// opsConfig varies what checkOps drives.
type opsConfig struct {
	ids  int                 // distinct ids; up to 16 are picked by the op byte, more by a byte of their own
	hash func(string) uint64 // replaces maphash if not nil
	seen *opsSeen            // if not nil, records what the run did to the table
}

// opsSeen tells whether runs of checkOps exercised what they were meant to.
type opsSeen struct {
	maxCells, grows, shrinks int
}

// checkOps decodes a sequence of operations from data, applies it to a Leases and to the
// model, and fails on any disagreement. It uses 6 ids.
func checkOps(t *testing.T, data []byte) { checkOpsWith(t, data, opsConfig{ids: 6}) }

func checkOpsWith(t *testing.T, data []byte, cfg opsConfig) {
	l := Leases[string]{hash: cfg.hash}
	cells := 0
	driveModel(t, data, cfg.ids, leaseSet[string](&l), func(n int) string { return fmt.Sprint("id", n) }, func(id string) string { return id },
		func() error {
			if cfg.seen != nil {
				seen := cfg.seen
				seen.maxCells = max(seen.maxCells, len(l.cells))
				switch {
				case cells > 0 && len(l.cells) > cells:
					seen.grows++
				case len(l.cells) < cells:
					seen.shrinks++
				}
			}
			cells = len(l.cells)
			return l.check()
		})
}

// leaseSet is what driveModel drives: a Leases or an Intrusive set, whose
// ids are of type K.
type leaseSet[K any] interface {
	Put(id K, now time.Time, t Timeouts) error
	Touch(id K, now time.Time) (found, revived bool)
	Remove(id K) bool
	Get(id K) (State, bool)
	Len() int
	Next() (time.Time, bool)
	Expire(now time.Time, fn func(id K, ev Event)) int
}

// driveModel decodes a sequence of operations from data on ids distinct ids
// (id makes the n-th, name gives its name in the model), applies it to l and
// to the naive model, and fails on any disagreement; after each operation it
// compares Len and Next with the model and fails on what check returns.
func driveModel[K any](t *testing.T, data []byte, ids int, l leaseSet[K], id func(n int) K, name func(K) string, check func() error) {
	t.Helper()
	var (
		m   = naiveModel{leases: map[string]*modelLease{}}
		r   = byteReader(data)
		now = t0.UnixNano()
	)
	for op := 0; len(r) > 0; op++ {
		b := r.next()
		n := int(b >> 4)
		if ids > 16 {
			n = int(r.next())
		}
		k := id(n % ids)
		id := name(k)
		switch b % 5 {
		case 0:
			to := Timeouts{Unhealthy: time.Duration(r.next()%6) * half, Expire: time.Duration(r.next()%8) * half}
			back := int64(r.next()%3) * int64(half)
			err, want := l.Put(k, time.Unix(0, now-back), to), m.put(id, now-back, to)
			if (err == nil) != (want == nil) {
				t.Fatalf("op %d: Put(%s, %+v) = %v, model says %v", op, id, to, err, want)
			}
		case 1:
			back := int64(r.next()%3) * int64(half)
			found, revived := l.Touch(k, time.Unix(0, now-back))
			if wf, wr := m.touch(id, now-back); found != wf || revived != wr {
				t.Fatalf("op %d: Touch(%s) = %v, %v; model says %v, %v", op, id, found, revived, wf, wr)
			}
		case 2:
			_, want := m.leases[id]
			delete(m.leases, id)
			if got := l.Remove(k); got != want {
				t.Fatalf("op %d: Remove(%s) = %v, model says %v", op, id, got, want)
			}
		case 3:
			now += int64(r.next()%8) * int64(half)
			want := m.expire(now)
			var got []fired
			l.Expire(time.Unix(0, now), func(k K, ev Event) { got = append(got, fired{name(k), ev}) })
			if len(got) != len(want) {
				t.Fatalf("op %d: Expire(%d) = %v, model says %v", op, now, got, want)
			}
			last := int64(math.MinInt64)
			for _, f := range got {
				w, ok := want[f.id]
				if !ok || w.ev != f.ev || w.at < last {
					t.Fatalf("op %d: Expire(%d) = %v, model says %v (in threshold order)", op, now, got, want)
				}
				last = w.at
			}
		case 4:
			s, ok := l.Get(k)
			ls, want := m.leases[id]
			if ok != want || ok && (s.LastTouch.UnixNano() != ls.last || s.Healthy != ls.healthy || s.Timeouts != ls.to) {
				t.Fatalf("op %d: Get(%s) = %+v, %v; model says %+v", op, id, s, ok, ls)
			}
		}
		if l.Len() != len(m.leases) {
			t.Fatalf("op %d: Len = %d, model says %d", op, l.Len(), len(m.leases))
		}
		next, ok := l.Next()
		want, wantOK := m.next()
		if ok != wantOK || ok && next.UnixNano() > want {
			t.Fatalf("op %d: Next = %v, %v; the earliest transition is at %v, %v", op, next.UnixNano(), ok, want, wantOK)
		}
		if err := check(); err != nil {
			t.Fatalf("op %d: %v", op, err)
		}
	}
}

// check returns an error describing the first broken invariant of l's table, slots, interned
// timeouts and heap, or nil. It costs O(table + heap).
func (l *Leases[K]) check() error {
	size := len(l.cells)
	if size != 0 && (size < minCells || size&(size-1) != 0) {
		return fmt.Errorf("table of %d cells", size)
	}
	if l.n*maxLoadDen > size*maxLoadNum {
		return fmt.Errorf("%d leases in %d cells", l.n, size)
	}
	used, refs := 0, map[uint32]uint32{}
	for i := range l.cells {
		c := &l.cells[i]
		if c.ref == 0 {
			continue
		}
		used++
		// No empty cell between the key's home and its cell, or a probe would not reach it.
		for j := int(l.hashOf(c.key)) & (size - 1); j != i; j = (j + 1) & (size - 1) {
			if l.cells[j].ref == 0 {
				return fmt.Errorf("cell %d (%v) past the empty cell %d", i, c.key, j)
			}
		}
		if j, ok := l.find(c.key); !ok || j != i {
			return fmt.Errorf("find(%v) = %d, %v; its cell is %d", c.key, j, ok, i)
		}
		if int(c.ref-1) >= len(l.slots) || l.slots[c.ref-1].pos != uint32(i) {
			return fmt.Errorf("cell %d names slot %d, which does not point back", i, c.ref-1)
		}
		refs[c.meta>>1]++
	}
	if used != l.n {
		return fmt.Errorf("%d used cells, Len %d", used, l.n)
	}
	// The free slots and the used ones make up the slab.
	free := 0
	for s := l.free; s != 0; s = l.slots[s-1].pos {
		if free++; free > len(l.slots) {
			return fmt.Errorf("free list loops")
		}
	}
	if free+l.n != len(l.slots) {
		return fmt.Errorf("%d free and %d used slots in a slab of %d", free, l.n, len(l.slots))
	}
	// Interned timeouts: counted right, indexed, and the free entries listed.
	inUse := 0
	for i, e := range l.tt.entries {
		if e.refs != refs[uint32(i)] {
			return fmt.Errorf("timeouts %d counts %d leases, %d have it", i, e.refs, refs[uint32(i)])
		}
		if e.refs == 0 {
			continue
		}
		inUse++
		if j, ok := l.tt.index[e.t]; !ok || j != uint32(i) {
			return fmt.Errorf("timeouts %d (%+v) indexed as %d, %v", i, e.t, j, ok)
		}
	}
	if len(l.tt.index) != inUse || inUse+len(l.tt.free) != len(l.tt.entries) {
		return fmt.Errorf("%d timeouts in use, %d indexed, %d free, %d in all", inUse, len(l.tt.index), len(l.tt.free), len(l.tt.entries))
	}
	// The heap: ordered, bounded, a live top, and one live element per lease, never later
	// than the lease's true deadline.
	if len(l.heap) > 2*l.n+minCompact {
		return fmt.Errorf("heap holds %d elements for %d leases", len(l.heap), l.n)
	}
	if len(l.heap) > 0 && !l.live(l.heap[0]) {
		return fmt.Errorf("stale element on top of the heap")
	}
	live := map[int32]bool{}
	for k, d := range l.heap {
		if k > 0 && l.heap[(k-1)/arity].at > d.at {
			return fmt.Errorf("heap out of order at %d", k)
		}
		if !l.live(d) {
			continue
		}
		if live[d.slot] {
			return fmt.Errorf("two live elements for slot %d", d.slot)
		}
		live[d.slot] = true
		if c := &l.cells[l.slots[d.slot].pos]; d.at > l.next(c) {
			return fmt.Errorf("slot %d scheduled at %d, after its deadline %d", d.slot, d.at, l.next(c))
		}
	}
	if len(live) != l.n {
		return fmt.Errorf("%d live heap elements for %d leases", len(live), l.n)
	}
	return nil
}

// collide is a hash for tests that gives every id one of three home cells, the last three of
// any table, so that all ids share one run of cells and the run wraps around the table's end.
func collide(id string) uint64 {
	var h uint64
	for i := range len(id) {
		h = h*31 + uint64(id[i])
	}
	return math.MaxUint64 - h%3
}

// TestLeasesAgainstModel runs random operations against the model: on 6 ids, as the fuzz test
// does, and on 200 ids in a phase of mostly Puts and then one of mostly Removes, so that the
// table grows and shrinks; each with maphash and with colliding hashes, which make every
// Remove shift cells back across the end of the table.
// It runs a fresh seed, or MUSTER_SEEDS seeds from MUSTER_SEED (see internal/testutil).
func TestLeasesAgainstModel(t *testing.T) { testutil.Seeds(t, 0, 1, leasesAgainstModel) }

func leasesAgainstModel(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0))
	runs := 300
	if testing.Short() {
		runs = 30
	}
	for _, tc := range []struct {
		name      string
		hash      func(string) uint64
		ids, runs int
		phased    bool
	}{
		{"6 ids", nil, 6, runs, false},
		{"6 ids colliding", collide, 6, runs, false},
		{"200 ids", nil, 200, runs / 6, true},
		{"200 ids colliding", collide, 200, runs / 30, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var seen opsSeen
			for run := range tc.runs {
				var data []byte
				if tc.phased {
					data = phasedOps(rng, 1+rng.IntN(6000))
				} else {
					data = make([]byte, 1+rng.IntN(3000))
					for i := range data {
						data[i] = byte(rng.Uint32())
					}
				}
				t.Run(fmt.Sprint(run), func(t *testing.T) {
					defer func() {
						if t.Failed() {
							t.Logf("seed: %d, %s, run %d, input %x", seed, tc.name, run, data)
						}
					}()
					checkOpsWith(t, data, opsConfig{ids: tc.ids, hash: tc.hash, seen: &seen})
				})
			}
			t.Logf("largest table %d cells, %d grows, %d shrinks", seen.maxCells, seen.grows, seen.shrinks)
			if tc.phased && !testing.Short() && (seen.grows == 0 || seen.shrinks == 0) {
				t.Errorf("the runs did not both grow and shrink the table: %+v", seen)
			}
		})
	}
}

// phasedOps returns an input for checkOpsWith with more than 16 ids, of about n bytes: in
// the first 40% of the operations, mostly Puts and few Expires, so that the leases pile up,
// then mostly Removes and Expires, so that they drain.
func phasedOps(rng *rand.Rand, n int) []byte {
	//                     put touch remove expire get
	grow := [5]int{60, 15, 5, 3, 17}
	drain := [5]int{8, 15, 45, 17, 15}
	var data []byte
	for len(data) < n {
		w := drain
		if len(data) < n*2/5 {
			w = grow
		}
		k := rng.IntN(100)
		op := 0
		for k >= w[op] {
			k -= w[op]
			op++
		}
		data = append(data, byte(op+5*rng.IntN(51)), byte(rng.Uint32()))
		for range [5]int{3, 1, 0, 1, 0}[op] { // the bytes the op reads
			data = append(data, byte(rng.Uint32()))
		}
	}
	return data
}

func FuzzLeases(f *testing.F) {
	f.Add([]byte{0x00, 2, 4, 0, 0x03, 3, 0x01, 0, 0x03, 7, 0x03, 7})
	f.Add([]byte{0x10, 1, 6, 0, 0x00, 0, 5, 0, 0x03, 2, 0x11, 0, 0x03, 7, 0x02, 0x03, 7})
	f.Add([]byte{0x00, 5, 5, 1, 0x04, 0x03, 5, 0x04, 0x03, 5})
	f.Fuzz(checkOps)
}

// TestExpireAtReportsThresholds: ExpireAt names each event's threshold (last touch plus the
// timeout that passed), not the time of the call, however late the call is.
func TestExpireAtReportsThresholds(t *testing.T) {
	type ev struct {
		id string
		ev Event
		at time.Time
	}
	var l Leases[string]
	mustPut(t, &l, "a", t0, Timeouts{Unhealthy: 15 * time.Second, Expire: 30 * time.Second})
	mustPut(t, &l, "b", at(5*time.Second), Timeouts{Expire: 10 * time.Second})
	l.Touch("a", at(2*time.Second))
	var got []ev
	collect := func(id string, e Event, when time.Time) { got = append(got, ev{id, e, when}) }
	l.ExpireAt(at(20*time.Second), collect) // late for b (due at 15 s), on time past a's 17 s
	l.ExpireAt(at(90*time.Second), collect) // a expires at 32 s
	want := []ev{
		{"b", EventExpired, at(15 * time.Second)},
		{"a", EventUnhealthy, at(17 * time.Second)},
		{"a", EventExpired, at(32 * time.Second)},
	}
	if len(got) != len(want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	for i := range want {
		if got[i].id != want[i].id || got[i].ev != want[i].ev || !got[i].at.Equal(want[i].at) {
			t.Fatalf("event %d: %v, want %v", i, got[i], want[i])
		}
	}
}
