package gossip

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/jonboulle/clockwork"
	"github.com/muster-io/muster/distro/membership"
	"github.com/muster-io/muster/internal/cfgerr"
	"github.com/muster-io/muster/internal/logx"
)

// Config configures a Memberlist membership. Start from DefaultConfig.
type Config struct {
	NodeID        string   // required: unique node name (memberlist's Name)
	BindAddr      string   // address to bind gossip to; default (and when empty) "127.0.0.1", never a wildcard unless set so
	BindPort      int      // gossip port (UDP and TCP); 0 picks a free one (see Memberlist.BindAddr)
	AdvertiseAddr string   // address peers should use, if not the bound one
	AdvertisePort int      // port peers should use with AdvertiseAddr (0: the bound port)
	TransportAddr string   // this node's transport address, carried in the node meta (≤ 512 bytes)
	Seeds         []string // host:port of gossip addresses to join at Start and re-join periodically
	// RejoinInterval is the period of re-joining the seeds that are not members. It heals
	// partitions longer than GossipToTheDeadTime, which memberlist never heals by itself. 0
	// disables it.
	RejoinInterval time.Duration
	// SecretKey is the gossip key (AES-GCM; 16, 24 or 32 bytes): memberlist encrypts and
	// authenticates every gossip packet and stream with it, and drops what is not sealed with a
	// key of the keyring, so a node without it cannot join, probe or be gossiped about. Required
	// unless Insecure is set. It is the keyring's primary key (the one that encrypts).
	SecretKey []byte
	// ExtraKeys are further keyring keys accepted for decryption but not used to encrypt: a node
	// started during a rotation lists the other key here. Rotate a running node's keys with
	// Memberlist.AddKey, UseKey and RemoveKey.
	ExtraKeys [][]byte
	// Insecure allows a memberlist without SecretKey: anyone who can reach the gossip port joins
	// the cluster, becomes the HRW owner of beat keys and learns every member. Tests only.
	Insecure bool
	// Label isolates clusters sharing a network: packets with another label are dropped.
	Label string

	// Failure detection and gossip timings (memberlist's). The defaults are memberlist's LAN
	// profile: a crashed node is detected in about 5 s. Tests use ~100 ms probes.
	ProbeInterval       time.Duration
	ProbeTimeout        time.Duration
	SuspicionMult       int
	GossipInterval      time.Duration
	PushPullInterval    time.Duration
	TCPTimeout          time.Duration
	GossipToTheDeadTime time.Duration
	// LeaveTimeout bounds the leave broadcast in Close.
	LeaveTimeout time.Duration

	// WrapTransport, if not nil, wraps the network transport memberlist uses (its own
	// NetTransport, bound to BindAddr:BindPort). Tests use it to inject faults into the
	// gossip traffic of a real node.
	WrapTransport func(memberlist.Transport) memberlist.Transport

	Clock  clockwork.Clock // times the re-join loop; nil: real time (memberlist itself always runs on real time)
	Logger *slog.Logger    // memberlist's own log lines are bridged to it at their level; nil discards
}

// DefaultConfig returns memberlist's LAN timings, BindAddr "127.0.0.1" (loopback: set a
// reachable address to form a cluster across hosts), port 7946, a 10 s re-join and a 1 s leave
// timeout. SecretKey has no default: Validate refuses a config without it unless Insecure is set.
func DefaultConfig() Config {
	d := memberlist.DefaultLANConfig()
	return Config{
		BindAddr:            defaultBindAddr,
		BindPort:            d.BindPort,
		RejoinInterval:      10 * time.Second,
		ProbeInterval:       d.ProbeInterval,
		ProbeTimeout:        d.ProbeTimeout,
		SuspicionMult:       d.SuspicionMult,
		GossipInterval:      d.GossipInterval,
		PushPullInterval:    d.PushPullInterval,
		TCPTimeout:          d.TCPTimeout,
		GossipToTheDeadTime: d.GossipToTheDeadTime,
		LeaveTimeout:        time.Second,
	}
}

// defaultBindAddr is the gossip bind address when none is set: loopback, never a wildcard.
const defaultBindAddr = "127.0.0.1"

// validGossipKey reports whether key has an AES key size.
func validGossipKey(key []byte) bool { return len(key) == 16 || len(key) == 24 || len(key) == 32 }

// Validate reports every rule c breaks, each naming the field and the rule, joined in one error
// wrapping membership.ErrInvalidConfig (nil if none).
func (c *Config) Validate() error {
	var errs []error
	check := func(ok bool, field, rule string) {
		if !ok {
			errs = append(errs, fmt.Errorf("Memberlist %s %s", field, rule))
		}
	}
	check(c.NodeID != "" && len(c.NodeID) <= membership.MaxIDLen, "NodeID", fmt.Sprintf("must be 1–%d bytes", membership.MaxIDLen))
	check(c.BindPort >= 0 && c.BindPort <= 65535, "BindPort", "must be 0–65535")
	check(c.AdvertisePort >= 0 && c.AdvertisePort <= 65535, "AdvertisePort", "must be 0–65535")
	check(len(c.TransportAddr) <= memberlist.MetaMaxSize, "TransportAddr", fmt.Sprintf("must be at most %d bytes", memberlist.MetaMaxSize))
	check(c.RejoinInterval >= 0, "RejoinInterval", "must be >= 0 (0 disables)")
	check(len(c.SecretKey) != 0 || c.Insecure, "SecretKey", "is required (16, 24 or 32 bytes): without a gossip key anyone who can reach the gossip port joins the cluster; set Insecure: true to run without one")
	check(len(c.SecretKey) == 0 || validGossipKey(c.SecretKey), "SecretKey", fmt.Sprintf("must be 16, 24 or 32 bytes, got %d", len(c.SecretKey)))
	check(len(c.ExtraKeys) == 0 || len(c.SecretKey) != 0, "ExtraKeys", "need a SecretKey (the primary key)")
	check(c.ProbeInterval > 0 && c.ProbeTimeout > 0 && c.ProbeTimeout < c.ProbeInterval, "ProbeTimeout", "must be > 0 and below ProbeInterval")
	check(c.SuspicionMult >= 1, "SuspicionMult", "must be >= 1")
	check(c.GossipInterval > 0 && c.PushPullInterval > 0 && c.TCPTimeout > 0 && c.GossipToTheDeadTime > 0, "GossipInterval, PushPullInterval, TCPTimeout and GossipToTheDeadTime", "must be > 0")
	check(c.LeaveTimeout > 0, "LeaveTimeout", "must be > 0")
	for i, k := range c.ExtraKeys {
		check(validGossipKey(k), "ExtraKeys["+strconv.Itoa(i)+"]", fmt.Sprintf("must be 16, 24 or 32 bytes, got %d", len(k)))
	}
	for i, s := range c.Seeds {
		_, _, err := net.SplitHostPort(s)
		check(err == nil, "Seeds["+strconv.Itoa(i)+"]", "must be host:port")
	}
	return cfgerr.Join(membership.ErrInvalidConfig, errs...)
}

// Memberlist is a Membership over hashicorp/memberlist: SWIM failure detection and gossip, the
// transport address carried in each node's meta, and a periodic re-join of the seeds.
//
// Members and Subscribe are safe for concurrent use. Subscribers are called from the
// Memberlist's own notifier goroutine, never from memberlist's internals (whose locks are held
// while it reports events), with the latest list; intermediate lists may be skipped.
type Memberlist struct {
	cfg Config
	clk clockwork.Clock
	log *slog.Logger

	// mu is never held while calling into memberlist: memberlist calls the event delegate
	// (update) with its own node lock held.
	mu      sync.Mutex
	ml      *memberlist.Memberlist
	kr      *memberlist.Keyring // nil for an Insecure node
	keyMu   sync.Mutex          // serializes key rotation calls (the keyring's slice is shared)
	self    string              // the bound gossip address (host:port), set by Start
	members map[string]membership.Member
	subs    map[int]func([]membership.Member)
	nextSub int
	started bool
	closed  bool
	// stopping is set once Close or Kill has begun (see logBridge).
	stopping atomic.Bool

	notifyMu sync.Mutex // serializes subscriber calls and cancels
	changed  chan struct{}
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// New validates cfg and returns a membership that has not started.
func New(cfg Config) (*Memberlist, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Seeds = slices.Clone(cfg.Seeds)
	cfg.SecretKey = slices.Clone(cfg.SecretKey)
	extra := make([][]byte, len(cfg.ExtraKeys))
	for i, k := range cfg.ExtraKeys {
		extra[i] = slices.Clone(k)
	}
	cfg.ExtraKeys = extra
	if cfg.BindAddr == "" {
		cfg.BindAddr = defaultBindAddr
	}
	m := &Memberlist{cfg: cfg, clk: cfg.Clock, log: cfg.Logger, members: map[string]membership.Member{}, subs: map[int]func([]membership.Member){}, changed: make(chan struct{}, 1)}
	if m.clk == nil {
		m.clk = clockwork.NewRealClock()
	}
	if m.log == nil {
		m.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	m.log = logx.WithNode(m.log, cfg.NodeID)
	m.members[cfg.NodeID] = membership.Member{ID: cfg.NodeID, Addr: cfg.TransportAddr}
	return m, nil
}

// Start creates the memberlist node, joins the seeds (failing to reach any is logged, not an
// error: this may be the first node) and starts the re-join loop.
func (m *Memberlist) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return membership.ErrClosed
	}
	if m.started {
		m.mu.Unlock()
		return membership.ErrStarted
	}
	m.started = true
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.mu.Unlock()
	// No lock held from here: memberlist reports events (our own join first) from inside Create.
	// A fresh *Config every time: memberlist.Create writes into it.
	c := memberlist.DefaultLANConfig()
	c.Name = m.cfg.NodeID
	c.BindAddr = m.cfg.BindAddr // never empty (New): memberlist's own default is a wildcard
	c.BindPort = m.cfg.BindPort
	c.AdvertiseAddr = m.cfg.AdvertiseAddr
	c.AdvertisePort = m.cfg.AdvertisePort
	if c.AdvertisePort == 0 {
		c.AdvertisePort = m.cfg.BindPort
	}
	c.Label = m.cfg.Label
	if len(m.cfg.SecretKey) > 0 {
		kr, err := memberlist.NewKeyring(m.cfg.ExtraKeys, m.cfg.SecretKey)
		if err != nil {
			m.cancel()
			return fmt.Errorf("distro: memberlist keyring: %w", err)
		}
		// Incoming packets and streams must be sealed with a keyring key (memberlist's default;
		// set here so that a change of its default cannot open the cluster).
		c.Keyring, c.GossipVerifyIncoming, c.GossipVerifyOutgoing = kr, true, true
	}
	// No LZW: gossip messages are small (pings, acks, a few members'
	// states), so compressing each one costs a fresh 20 KiB coder and
	// saves next to nothing; and compressing before the keyring seals a
	// message makes its length tell of its content. Compressed messages
	// from other nodes are still read (memberlist always decodes them).
	c.EnableCompression = false
	c.ProbeInterval, c.ProbeTimeout = m.cfg.ProbeInterval, m.cfg.ProbeTimeout
	c.SuspicionMult = m.cfg.SuspicionMult
	c.GossipInterval, c.PushPullInterval = m.cfg.GossipInterval, m.cfg.PushPullInterval
	c.TCPTimeout, c.GossipToTheDeadTime = m.cfg.TCPTimeout, m.cfg.GossipToTheDeadTime
	c.Delegate = mlDelegate{m}
	c.Events = mlEvents{m}
	c.Logger = log.New(&logBridge{log: m.log, stopping: &m.stopping}, "", 0)
	if m.cfg.WrapTransport != nil {
		nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
			BindAddrs: []string{c.BindAddr}, BindPort: c.BindPort, Logger: c.Logger,
		})
		if err != nil {
			m.cancel()
			return fmt.Errorf("distro: memberlist: %w", err)
		}
		if c.AdvertisePort == 0 { // memberlist takes the advertised port from the config
			c.AdvertisePort = nt.GetAutoBindPort()
		}
		c.Transport = m.cfg.WrapTransport(nt)
	}
	ml, err := memberlist.Create(c)
	if err != nil {
		if c.Transport != nil { // memberlist does not shut down a transport it was given
			_ = c.Transport.Shutdown()
		}
		m.cancel()
		return fmt.Errorf("distro: memberlist: %w", err)
	}
	local := ml.LocalNode()
	self := net.JoinHostPort(local.Addr.String(), strconv.Itoa(int(local.Port)))
	m.mu.Lock()
	if m.closed { // Close ran while memberlist was being created: undo
		m.mu.Unlock()
		_ = ml.Shutdown()
		return membership.ErrClosed
	}
	m.ml, m.self, m.kr = ml, self, c.Keyring
	seeds := m.seedsToJoin()
	m.goFunc(m.notifier) // under mu: stop's wg.Wait comes after it sees ml
	if m.cfg.RejoinInterval > 0 && len(m.cfg.Seeds) > 0 {
		m.goFunc(m.rejoin)
	}
	m.mu.Unlock()
	if len(m.cfg.Seeds) > 0 {
		if len(seeds) > 0 {
			if n, err := ml.Join(seeds); err != nil {
				m.log.Info("distro: memberlist: no seed reachable, starting alone", "seeds", seeds, "err", err)
			} else {
				m.log.Info("distro: memberlist: joined", "contacted", n)
			}
		}
	}
	return nil
}

func (m *Memberlist) goFunc(fn func()) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		fn()
	}()
}

// seedsToJoin returns the seeds other than this node's own gossip address. m.mu is held.
func (m *Memberlist) seedsToJoin() []string {
	var out []string
	for _, s := range m.cfg.Seeds {
		if s != m.self {
			out = append(out, s)
		}
	}
	return out
}

// rejoin periodically joins the seeds: after a partition longer than GossipToTheDeadTime the two
// sides never merge again on their own.
func (m *Memberlist) rejoin() {
	t := m.clk.NewTicker(m.cfg.RejoinInterval)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.Chan():
		}
		m.mu.Lock()
		ml := m.ml
		seeds := m.seedsToJoin()
		m.mu.Unlock()
		if ml == nil || len(seeds) == 0 {
			continue
		}
		if _, err := ml.Join(seeds); err != nil {
			m.log.Debug("distro: memberlist: re-join failed", "err", err)
		}
	}
}

// Close leaves the cluster (broadcasting it, bounded by LeaveTimeout), shuts memberlist down
// and waits for the goroutines. Idempotent.
func (m *Memberlist) Close() error { return m.stop(true) }

// Kill shuts down without broadcasting a leave, as a crash would: peers find the node dead by
// probing. For tests and demos; otherwise like Close.
func (m *Memberlist) Kill() error { return m.stop(false) }

// stop shuts down, broadcasting a leave first if leave is set (without it peers detect the node
// dead by probing, as after a crash).
func (m *Memberlist) stop(leave bool) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		m.wg.Wait()
		return nil
	}
	m.closed = true
	m.stopping.Store(true)
	ml, cancel := m.ml, m.cancel
	m.mu.Unlock()
	if cancel != nil {
		defer func() {
			m.wg.Wait()
		}()
		cancel()
	}
	if ml == nil {
		return nil
	}
	// Leave before Shutdown: Leave after Shutdown panics. Shutdown does not wait for memberlist's
	// goroutines; they end shortly after.
	if leave {
		if err := ml.Leave(m.cfg.LeaveTimeout); err != nil {
			m.log.Debug("distro: memberlist: leave", "err", err)
		}
	}
	return ml.Shutdown()
}

// keyring returns the running memberlist's keyring, or an error naming why there is none.
func (m *Memberlist) keyring() (*memberlist.Keyring, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.closed:
		return nil, membership.ErrClosed
	case m.kr == nil && m.ml == nil:
		return nil, fmt.Errorf("%w: memberlist not started", membership.ErrNotStarted)
	case m.kr == nil:
		return nil, fmt.Errorf("%w: Memberlist has no gossip key (Insecure): it cannot rotate keys", membership.ErrInvalidConfig)
	}
	return m.kr, nil
}

// AddKey adds key (16, 24 or 32 bytes) to the running node's keyring: it is accepted for
// decryption at once, but not used to encrypt until UseKey. A rotation adds the new key on every
// node, then switches every node to it with UseKey, then removes the old one with RemoveKey; at
// every step each node can read what every other sends. Safe for concurrent use.
func (m *Memberlist) AddKey(key []byte) error {
	if !validGossipKey(key) {
		return fmt.Errorf("%w: Memberlist AddKey key must be 16, 24 or 32 bytes, got %d", membership.ErrInvalidConfig, len(key))
	}
	kr, err := m.keyring()
	if err != nil {
		return err
	}
	m.keyMu.Lock()
	defer m.keyMu.Unlock()
	return kr.AddKey(slices.Clone(key))
}

// UseKey makes key, already in the keyring (AddKey), the one this node encrypts with. Switch a
// node only once every node has the key.
func (m *Memberlist) UseKey(key []byte) error {
	kr, err := m.keyring()
	if err != nil {
		return err
	}
	m.keyMu.Lock()
	defer m.keyMu.Unlock()
	if err := kr.UseKey(key); err != nil {
		return fmt.Errorf("%w: Memberlist UseKey: %w", membership.ErrInvalidConfig, err)
	}
	return nil
}

// RemoveKey removes key from the keyring; packets sealed with it are dropped from then on. The
// key in use (UseKey) cannot be removed. Remove the old key only once every node has switched.
func (m *Memberlist) RemoveKey(key []byte) error {
	kr, err := m.keyring()
	if err != nil {
		return err
	}
	m.keyMu.Lock()
	defer m.keyMu.Unlock()
	if err := kr.RemoveKey(key); err != nil {
		return fmt.Errorf("%w: Memberlist RemoveKey: %w", membership.ErrInvalidConfig, err)
	}
	return nil
}

// Keys returns the keyring's keys, the one in use first (copies); nil for an Insecure node.
func (m *Memberlist) Keys() [][]byte {
	kr, err := m.keyring()
	if err != nil {
		return nil
	}
	m.keyMu.Lock()
	defer m.keyMu.Unlock()
	keys := kr.GetKeys() // memberlist lists the primary key first
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = slices.Clone(k)
	}
	return out
}

// Members returns the live members, self included, sorted by ID.
func (m *Memberlist) Members() []membership.Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.listLocked()
}

func (m *Memberlist) listLocked() []membership.Member {
	out := make([]membership.Member, 0, len(m.members))
	for _, mb := range m.members {
		out = append(out, mb)
	}
	slices.SortFunc(out, func(a, b membership.Member) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Addr returns the transport address of a live member (for transport.TCPConfig.Resolve). It
// fails with membership.ErrUnknownMember for an ID that is not live or has no address.
func (m *Memberlist) Addr(id string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mb, ok := m.members[id]
	if !ok || mb.Addr == "" {
		return "", fmt.Errorf("%w: %q", membership.ErrUnknownMember, id)
	}
	return mb.Addr, nil
}

// BindAddr returns the gossip address actually bound (host:port), for other nodes' Seeds; empty
// before Start.
func (m *Memberlist) BindAddr() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.self
}

// Subscribe registers fn; see Membership. fn is called from the notifier goroutine.
func (m *Memberlist) Subscribe(fn func([]membership.Member)) (cancel func()) {
	m.mu.Lock()
	id := m.nextSub
	m.nextSub++
	m.subs[id] = fn
	m.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			m.notifyMu.Lock()
			defer m.notifyMu.Unlock()
			m.mu.Lock()
			delete(m.subs, id)
			m.mu.Unlock()
		})
	}
}

// notifier calls the subscribers with the latest list after each change.
func (m *Memberlist) notifier() {
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-m.changed:
		}
		m.notifyMu.Lock()
		m.mu.Lock()
		list := m.listLocked()
		keys := make([]int, 0, len(m.subs))
		for k := range m.subs {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		subs := make([]func([]membership.Member), len(keys))
		for i, k := range keys {
			subs[i] = m.subs[k]
		}
		m.mu.Unlock()
		for _, fn := range subs {
			fn(slices.Clone(list))
		}
		m.notifyMu.Unlock()
	}
}

func (m *Memberlist) update(n *memberlist.Node, alive bool) {
	m.mu.Lock()
	if alive {
		m.members[n.Name] = membership.Member{ID: n.Name, Addr: string(n.Meta)}
	} else if n.Name != m.cfg.NodeID {
		delete(m.members, n.Name)
	}
	m.mu.Unlock()
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// mlEvents receives memberlist's events. memberlist holds its node lock while calling these:
// they only update our map and signal the notifier.
type mlEvents struct{ m *Memberlist }

func (e mlEvents) NotifyJoin(n *memberlist.Node)   { e.m.update(n, true) }
func (e mlEvents) NotifyLeave(n *memberlist.Node)  { e.m.update(n, false) }
func (e mlEvents) NotifyUpdate(n *memberlist.Node) { e.m.update(n, true) }

// mlDelegate publishes the transport address as node meta; distro sends no gossip messages.
type mlDelegate struct{ m *Memberlist }

func (d mlDelegate) NodeMeta(limit int) []byte {
	if len(d.m.cfg.TransportAddr) > limit {
		return nil
	}
	return []byte(d.m.cfg.TransportAddr)
}
func (d mlDelegate) NotifyMsg([]byte)                           {}
func (d mlDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d mlDelegate) LocalState(join bool) []byte                { return nil }
func (d mlDelegate) MergeRemoteState(buf []byte, join bool)     {}

// logBridge turns memberlist's "[LEVEL] memberlist: ..." lines into slog records. Once the
// node is stopping, memberlist's goroutines that still run after its sockets closed (Shutdown
// does not wait for them) log their failed reads and writes as errors: those are expected, and
// logged at Debug.
type logBridge struct {
	log      *slog.Logger
	stopping *atomic.Bool
}

func (b *logBridge) Write(p []byte) (int, error) {
	s := strings.TrimSpace(string(p))
	lvl := slog.LevelInfo
	for _, l := range []struct {
		tag string
		lvl slog.Level
	}{{"[DEBUG]", slog.LevelDebug}, {"[INFO]", slog.LevelInfo}, {"[WARN]", slog.LevelWarn}, {"[ERR]", slog.LevelError}, {"[ERROR]", slog.LevelError}} {
		if strings.HasPrefix(s, l.tag) {
			lvl, s = l.lvl, strings.TrimSpace(s[len(l.tag):])
			break
		}
	}
	if lvl > slog.LevelDebug && b.stopping != nil && b.stopping.Load() && strings.Contains(s, net.ErrClosed.Error()) {
		lvl = slog.LevelDebug
	}
	b.log.Log(context.Background(), lvl, s, "component", "memberlist")
	return len(p), nil
}
