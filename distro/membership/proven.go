package membership

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// Prove checks that a member is who the membership says: for the transport, that an
// authenticated connection to m.ID (a handshake under that ID, with the transport's
// credentials) can be had. nil means proven.
type Prove func(ctx context.Context, m Member) error

// ProvenConfig configures a Proven membership.
type ProvenConfig struct {
	Self  string // this node's ID: always a member, never proven
	Prove Prove  // required
	// RetryMin and RetryMax bound the wait before a member that failed its proof is tried
	// again: doubling from RetryMin per failure. Defaults 200 ms and 5 s.
	RetryMin, RetryMax time.Duration
	// Timeout bounds one proof. Default 10 s.
	Timeout time.Duration
	Clock   clockwork.Clock // times the retries; nil: real time
	Logger  *slog.Logger    // nil discards
}

// Proven is a Membership that counts a member of another membership (gossip) only once it
// has proven its ID with Prove, over the transport: gossip membership alone is a hint, which
// anyone holding the gossip key but not the transport's credentials can join. Ownership (HRW),
// forwarding and lease handovers, which follow the membership, then count only members that
// can be reached under the ID they claim. A member is proven once per address: when it
// leaves or its address changes, it is proven again. Members that fail are retried with
// backoff.
//
// Members and Subscribe are safe for concurrent use; subscribers are called from Proven's own
// goroutine with the latest list (intermediate lists may be skipped). Close stops it.
type Proven struct {
	inner Membership
	cfg   ProvenConfig
	log   *slog.Logger

	mu      sync.Mutex
	live    map[string]Member // the inner membership's latest list
	proven  map[string]Member // ID -> the member as proven (its address)
	trying  map[string]bool
	fails   map[string]int
	next    map[string]time.Time
	subs    map[int]func([]Member)
	nextSub int
	last    []Member // the list last sent to subscribers
	closed  bool

	notifyMu sync.Mutex
	changed  chan struct{}
	kick     chan struct{}
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	unsub    func()
}

// NewProven wraps inner and starts proving its members; Close stops it (not inner).
func NewProven(inner Membership, cfg ProvenConfig) *Proven {
	if cfg.RetryMin <= 0 {
		cfg.RetryMin = 200 * time.Millisecond
	}
	if cfg.RetryMax < cfg.RetryMin {
		cfg.RetryMax = max(5*time.Second, cfg.RetryMin)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	p := &Proven{
		inner: inner, cfg: cfg, log: cfg.Logger,
		live: map[string]Member{}, proven: map[string]Member{}, trying: map[string]bool{},
		fails: map[string]int{}, next: map[string]time.Time{}, subs: map[int]func([]Member){},
		changed: make(chan struct{}, 1), kick: make(chan struct{}, 1),
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.setLive(inner.Members())
	p.unsub = inner.Subscribe(p.setLive)
	p.wg.Add(2)
	go func() { defer p.wg.Done(); p.proveLoop() }()
	go func() { defer p.wg.Done(); p.notifier() }()
	return p
}

// Close stops proving and notifying and waits for its goroutines. Idempotent.
func (p *Proven) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.unsub()
	p.cancel()
	p.wg.Wait()
	return nil
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// setLive takes the inner membership's list: a member that left, or whose address changed,
// must prove itself again.
func (p *Proven) setLive(list []Member) {
	p.mu.Lock()
	p.live = make(map[string]Member, len(list))
	for _, m := range list {
		p.live[m.ID] = m
	}
	for id, m := range p.proven {
		if l, ok := p.live[id]; !ok || l.Addr != m.Addr {
			delete(p.proven, id)
			delete(p.fails, id)
			delete(p.next, id)
		}
	}
	p.mu.Unlock()
	signal(p.changed)
	signal(p.kick)
}

// Members returns this node and the proven live members, sorted by ID.
func (p *Proven) Members() []Member {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.listLocked()
}

func (p *Proven) listLocked() []Member {
	out := make([]Member, 0, len(p.proven)+1)
	for id, m := range p.live {
		if _, ok := p.proven[id]; ok || id == p.cfg.Self {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Unproven returns the live members of the inner membership that have not proven their ID
// (yet), sorted.
func (p *Proven) Unproven() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for id := range p.live {
		if _, ok := p.proven[id]; !ok && id != p.cfg.Self {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// Subscribe registers fn; see Membership.
func (p *Proven) Subscribe(fn func([]Member)) (cancel func()) {
	p.mu.Lock()
	id := p.nextSub
	p.nextSub++
	p.subs[id] = fn
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			p.notifyMu.Lock()
			defer p.notifyMu.Unlock()
			p.mu.Lock()
			delete(p.subs, id)
			p.mu.Unlock()
		})
	}
}

// proveLoop starts a proof for each live member that needs one, whenever the list changes, a
// proof ends, or a retry falls due.
func (p *Proven) proveLoop() {
	tick := p.cfg.Clock.NewTicker(p.cfg.RetryMin)
	defer tick.Stop()
	for {
		p.startProofs()
		select {
		case <-p.ctx.Done():
			return
		case <-p.kick:
		case <-tick.Chan():
		}
	}
}

func (p *Proven) startProofs() {
	now := p.cfg.Clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	for id, m := range p.live {
		if id == p.cfg.Self || p.trying[id] || now.Before(p.next[id]) {
			continue
		}
		if _, ok := p.proven[id]; ok {
			continue
		}
		p.trying[id] = true
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.proveOne(m)
		}()
	}
}

func (p *Proven) proveOne(m Member) {
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.Timeout) // real time: bounds a network call
	err := p.cfg.Prove(ctx, m)
	cancel()
	p.mu.Lock()
	delete(p.trying, m.ID)
	live, ok := p.live[m.ID]
	switch {
	case !ok || live.Addr != m.Addr || p.ctx.Err() != nil:
		// left or moved meanwhile: the next round proves it afresh
	case err == nil:
		p.proven[m.ID] = m
		delete(p.fails, m.ID)
		delete(p.next, m.ID)
	default:
		p.fails[m.ID]++
		d := p.cfg.RetryMin
		for i := 1; i < p.fails[m.ID] && d < p.cfg.RetryMax; i++ {
			d *= 2
		}
		p.next[m.ID] = p.cfg.Clock.Now().Add(min(d, p.cfg.RetryMax))
		if n := p.fails[m.ID]; n&(n-1) == 0 { // 1st, 2nd, 4th, ...
			p.log.Warn("distro: a gossip member has not proven its ID over the transport: not counted as a member",
				"member", m.ID, "addr", m.Addr, "attempts", n, "err", err)
		}
	}
	p.mu.Unlock()
	if err == nil {
		signal(p.changed)
	}
	signal(p.kick)
}

// notifier calls the subscribers with the latest list when it changed.
func (p *Proven) notifier() {
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-p.changed:
		}
		p.notifyMu.Lock()
		p.mu.Lock()
		list := p.listLocked()
		same := slices.Equal(list, p.last)
		p.last = list
		keys := make([]int, 0, len(p.subs))
		for k := range p.subs {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		subs := make([]func([]Member), len(keys))
		for i, k := range keys {
			subs[i] = p.subs[k]
		}
		p.mu.Unlock()
		if !same {
			for _, fn := range subs {
				fn(slices.Clone(list))
			}
		}
		p.notifyMu.Unlock()
	}
}
