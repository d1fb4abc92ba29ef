package distro

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/muster-io/muster/transport"
)

// testStore is a map-based Store. It records what it was told and checks the Store contract:
// calls never overlap, and per key they never go back in version.
type testStore struct {
	node string
	r    atomic.Pointer[Replicator]

	inCall atomic.Bool

	mu         sync.Mutex
	recs       map[string]Record    // foreign live records applied
	last       map[string]Record    // last record applied or adopted per key (version order check)
	applied    map[string][]Record  // every Apply, per key
	adopted    map[string]time.Time // lastRenewed of each Adopt
	adoptCount int
	members    []string
	violations []string
	autoAdopt  bool // on Adopt, Put a new revision at once (the registry resuming the lease)
	clk        clockwork.Clock
	ttl        time.Duration
	deletedAt  map[string]time.Time // when the last tombstone of a key was applied
	onApply    func(Record)         // optional hook, called after each Apply (benchmarks)
}

func newTestStore(node string) *testStore {
	return &testStore{node: node, recs: map[string]Record{}, last: map[string]Record{}, applied: map[string][]Record{}, adopted: map[string]time.Time{}, deletedAt: map[string]time.Time{}, autoAdopt: true}
}

func (s *testStore) enter() {
	if !s.inCall.CompareAndSwap(false, true) {
		s.violate("concurrent Store calls")
	}
}
func (s *testStore) leave() { s.inCall.Store(false) }

func (s *testStore) violate(msg string) {
	s.mu.Lock()
	s.violations = append(s.violations, s.node+": "+msg)
	s.mu.Unlock()
}

func (s *testStore) Apply(rec Record) {
	s.enter()
	defer s.leave()
	s.mu.Lock()
	forgotten := false
	if at, ok := s.deletedAt[rec.Key]; ok && s.clk != nil && s.clk.Since(at) >= s.ttl {
		forgotten = true // the tombstone expired: the key may start a new life at revision 1
	}
	if rec.Deleted {
		s.deletedAt[rec.Key] = s.installedAt(rec)
	} else {
		delete(s.deletedAt, rec.Key)
	}
	if last, ok := s.last[rec.Key]; ok && last.Newer(rec) && !forgotten {
		s.violations = append(s.violations, fmt.Sprintf("%s: Apply(%v) after %v: rollback", s.node, rec, last))
	}
	if rec.Owner == s.node {
		s.violations = append(s.violations, fmt.Sprintf("%s: Apply of its own record %v", s.node, rec))
	}
	s.last[rec.Key] = rec
	if s.onApply == nil { // benchmarks skip the history
		s.applied[rec.Key] = append(s.applied[rec.Key], rec)
	}
	if rec.Deleted {
		delete(s.recs, rec.Key)
	} else {
		s.recs[rec.Key] = rec
	}
	hook := s.onApply
	s.mu.Unlock()
	if hook != nil {
		hook(rec)
	}
}

// noteOwn records a write this node made (the store never sees its own writes through Apply),
// so that the version-order check knows the key's latest version.
func (s *testStore) noteOwn(rec Record, err error) {
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last[rec.Key] = rec
	if rec.Deleted {
		s.deletedAt[rec.Key] = s.now()
	} else {
		delete(s.deletedAt, rec.Key)
	}
	delete(s.recs, rec.Key)
}

// installedAt is when the replicator installed rec (its TTL runs from then, and the fake clock may
// have jumped before the delivery), or now.
func (s *testStore) installedAt(rec Record) time.Time {
	if r := s.r.Load(); r != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		if e := r.tab.get(rec.Key); e != nil && e.version().sameVersion(rec) {
			return r.tab.recvAt(e)
		}
	}
	return s.now()
}

func (s *testStore) now() time.Time {
	if s.clk == nil {
		return time.Time{}
	}
	return s.clk.Now()
}

func (s *testStore) Adopt(rec Record, lastRenewed time.Time) {
	s.enter()
	defer s.leave()
	s.mu.Lock()
	s.adopted[rec.Key] = lastRenewed
	s.adoptCount++
	auto := s.autoAdopt
	s.mu.Unlock()
	if !auto {
		return
	}
	if r := s.r.Load(); r != nil {
		if nr, err := r.Put(KindBeat, rec.Key, rec.Payload); err == nil {
			s.mu.Lock()
			delete(s.recs, rec.Key)
			s.last[rec.Key] = nr
			s.mu.Unlock()
		}
	}
}

func (s *testStore) MembersChanged(members []string) {
	s.enter()
	defer s.leave()
	if !slices.IsSorted(members) || !slices.Contains(members, s.node) {
		s.violate(fmt.Sprintf("MembersChanged(%v): not sorted or without self", members))
	}
	s.mu.Lock()
	s.members = slices.Clone(members)
	s.mu.Unlock()
}

func (s *testStore) get(key string) (Record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[key]
	return r, ok
}

// node is one cluster member in a test.
type node struct {
	id    string
	tr    *transport.MemTransport
	mem   *Static
	store *testStore
	r     *Replicator
}

// cluster runs replicators over a MemNetwork on a fake clock.
type cluster struct {
	t     testing.TB
	clk   *clockwork.FakeClock
	net   *transport.MemNetwork
	nodes map[string]*node
	mod   func(*Config)
	seed  uint64
}

func testConfig() Config {
	cfg := DefaultConfig()
	cfg.SyncDelay = 100 * time.Millisecond
	cfg.RetryMin = 50 * time.Millisecond
	cfg.RetryMax = 400 * time.Millisecond
	cfg.VerifyInterval = time.Second
	cfg.OrphanTimeout = 5 * time.Second
	cfg.TombstoneTTL = 10 * time.Second
	cfg.LoadTimeout = time.Second
	cfg.Buckets = 64
	cfg.MaxBatch = 50
	return cfg
}

func newCluster(t testing.TB, mod func(*Config), ids ...string) *cluster {
	t.Helper()
	clk := clockwork.NewFakeClockAt(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := &cluster{t: t, clk: clk, net: &transport.MemNetwork{Clock: clk, Seed: 1}, nodes: map[string]*node{}, mod: mod}
	for _, id := range ids {
		c.add(id)
	}
	t.Cleanup(func() {
		c.closeAll()
		if tt, ok := t.(*testing.T); ok {
			goleak.VerifyNone(tt)
		}
	})
	c.setMembers(ids...)
	for _, id := range ids {
		c.startNode(id)
	}
	c.waitReady(ids...)
	return c
}

// add creates a node (transport, membership, replicator) without starting it.
func (c *cluster) add(id string) *node {
	c.t.Helper()
	tr, err := c.net.Node(id)
	if err != nil {
		c.t.Fatal(err)
	}
	cfg := testConfig()
	if c.mod != nil {
		c.mod(&cfg)
	}
	n := &node{id: id, tr: tr, mem: NewStatic(Member{ID: id}), store: newTestStore(id)}
	n.store.clk, n.store.ttl = c.clk, cfg.TombstoneTTL
	cfg.NodeID, cfg.Transport, cfg.Membership, cfg.Store, cfg.Clock = id, tr, n.mem, n.store, c.clk
	cfg.Rand = rand.NewPCG(c.seed, uint64(len(id))+uint64(id[0]))
	if testing.Verbose() || os.Getenv("DISTRO_TEST_LOG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(c.t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	r, err := New(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	n.r = r
	n.store.r.Store(r)
	c.nodes[id] = n
	return n
}

func (c *cluster) startNode(id string) {
	c.t.Helper()
	if err := c.nodes[id].r.Start(context.Background()); err != nil {
		c.t.Fatal(err)
	}
}

// setMembers tells every running node's membership that ids are the live members.
func (c *cluster) setMembers(ids ...string) {
	ms := make([]Member, len(ids))
	for i, id := range ids {
		ms[i] = Member{ID: id}
	}
	for _, id := range c.sortedIDs() {
		c.nodes[id].mem.Set(ms...)
	}
}

func (c *cluster) sortedIDs() []string {
	ids := make([]string, 0, len(c.nodes))
	for id := range c.nodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// stop closes a node and its transport (a crash, as far as peers can tell) and forgets it.
func (c *cluster) stop(id string) {
	n := c.nodes[id]
	n.r.Close()
	n.tr.Close()
	delete(c.nodes, id)
}

func (c *cluster) closeAll() {
	for _, id := range c.sortedIDs() {
		c.stop(id)
	}
}

// step advances the fake clock by d and lets goroutines run.
func (c *cluster) step(d time.Duration) {
	c.clk.Advance(d)
	time.Sleep(200 * time.Microsecond) // let woken goroutines run; state is polled, never assumed
}

// eventually advances the fake clock by step until cond holds, at most fakeBudget of fake time,
// then keeps polling (without advancing) until a real-time deadline.
func (c *cluster) eventually(fakeBudget time.Duration, what string, cond func() bool) {
	c.t.Helper()
	c.eventuallyf(fakeBudget, func() string { return what }, cond)
}

// eventuallyf is eventually with a description built at failure time.
func (c *cluster) eventuallyf(fakeBudget time.Duration, what func() string, cond func() bool) {
	c.t.Helper()
	const stepD = 20 * time.Millisecond
	for spent := time.Duration(0); spent < fakeBudget; spent += stepD {
		if cond() {
			return
		}
		c.step(stepD)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	c.t.Fatalf("seed %d: not within %v of fake time: %s", c.seed, fakeBudget, what())
}

// settle lets in-flight work finish without advancing the clock.
func (c *cluster) settle() {
	for i := 0; i < 20; i++ {
		time.Sleep(time.Millisecond)
	}
}

func (c *cluster) waitReady(ids ...string) {
	c.t.Helper()
	c.eventually(10*time.Second, "nodes ready", func() bool {
		for _, id := range ids {
			if !c.nodes[id].r.Ready() {
				return false
			}
		}
		return true
	})
}

// rev is the k-th revision n's incarnation writes of a key it never held: its epoch on.
func rev(n *node, k uint64) uint64 { return n.r.epoch + k - 1 }

// held returns a node's live records as key → "owner#rev".
func held(r *Replicator) map[string]string {
	out := map[string]string{}
	r.Range(func(rec Record) bool {
		if !rec.Deleted {
			out[rec.Key] = fmt.Sprintf("%s#%d", rec.Owner, rec.Revision)
		}
		return true
	})
	return out
}

// converged reports whether every node holds the same live records, and every store matches its
// node's foreign records.
func (c *cluster) converged() bool {
	var ref map[string]string
	for _, id := range c.sortedIDs() {
		n := c.nodes[id]
		h := held(n.r)
		if ref == nil {
			ref = h
		} else if !mapsEqual(ref, h) {
			return false
		}
		if c.storeMismatch(n) != "" {
			return false
		}
	}
	return true
}

// storeMismatch compares a node's store with its held foreign records.
func (c *cluster) storeMismatch(n *node) string {
	want := map[string]Record{}
	n.r.Range(func(rec Record) bool {
		if !rec.Deleted && rec.Owner != n.id {
			want[rec.Key] = rec
		}
		return true
	})
	n.store.mu.Lock()
	defer n.store.mu.Unlock()
	for k, w := range want {
		if g, ok := n.store.recs[k]; !ok || !g.sameVersion(w) {
			return fmt.Sprintf("%s: store has %v, replicator %v", n.id, g, w)
		}
	}
	for k, g := range n.store.recs {
		if _, ok := want[k]; !ok {
			return fmt.Sprintf("%s: store has %v, replicator nothing", n.id, g)
		}
	}
	return ""
}

func (c *cluster) describe() string {
	var b strings.Builder
	for _, id := range c.sortedIDs() {
		r := c.nodes[id].r
		r.mu.Lock()
		fmt.Fprintf(&b, "%s (ready %v, members %v, verifying %v, next verify in %v, sync pending %d):\n  %v\n", id, r.ready, r.members, r.verifying, r.nextVerify.Sub(r.clk.Now()), r.sched.pending(), nil)
		r.mu.Unlock()
		fmt.Fprintf(&b, "  %v\n", held(r))
		if m := c.storeMismatch(c.nodes[id]); m != "" {
			fmt.Fprintf(&b, "  %s\n", m)
		}
	}
	return b.String()
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// checkInvariants fails the test on any Store contract violation or refused (echoed or forged)
// record.
func (c *cluster) checkInvariants() {
	c.t.Helper()
	for _, id := range c.sortedIDs() {
		n := c.nodes[id]
		n.store.mu.Lock()
		v := slices.Clone(n.store.violations)
		n.store.mu.Unlock()
		if len(v) > 0 {
			c.t.Fatalf("seed %d: store contract violated: %v", c.seed, v)
		}
		n.r.mu.Lock()
		refused := n.r.refused
		n.r.mu.Unlock()
		if refused != 0 {
			c.t.Fatalf("seed %d: %s refused %d records sent by non-owners (echo)", c.seed, id, refused)
		}
	}
}

// beatKeyOwnedBy returns a beat key whose HRW owner among members is want.
func beatKeyOwnedBy(members []string, want string, salt int) string {
	for i := 0; ; i++ {
		k := fmt.Sprintf("10.0.%d.%d:80", salt, i)
		if hrwOwner(members, k) == want {
			return k
		}
	}
}
