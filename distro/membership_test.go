package distro

import (
	"bytes"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/goleak"

	"github.com/muster-io/muster/distro/gossip"
	"github.com/muster-io/muster/internal/ports"
)

func TestStaticNotifiesSynchronously(t *testing.T) {
	s := NewStatic(Member{ID: "a"})
	var got [][]string
	cancel := s.Subscribe(func(ms []Member) {
		ids := make([]string, len(ms))
		for i, m := range ms {
			ids[i] = m.ID
		}
		got = append(got, ids)
	})
	s.Set(Member{ID: "c"}, Member{ID: "b"})
	s.Set(Member{ID: "b"}, Member{ID: "c"}) // no change: no call
	s.Remove("c", "a")                      // self is never removed
	s.Add(Member{ID: "d", Addr: "x:1"})
	cancel()
	cancel()
	s.Set()
	want := [][]string{{"a", "b", "c"}, {"a", "b"}, {"a", "b", "d"}}
	if len(got) != len(want) {
		t.Fatalf("notifications %v, want %v", got, want)
	}
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("notification %d = %v, want %v", i, got[i], want[i])
		}
	}
	if ms := s.Members(); len(ms) != 1 || ms[0].ID != "a" {
		t.Fatalf("Members = %v", ms)
	}
}

func TestMemberlistConfigValidate(t *testing.T) {
	base := gossip.DefaultConfig()
	base.NodeID = "n1"
	if err := base.Validate(); !errors.Is(err, ErrInvalidConfig) || !contains(err.Error(), "SecretKey is required") || !contains(err.Error(), "Insecure: true") {
		t.Fatalf("the default config without a gossip key: %v, want SecretKey required unless Insecure: true", err)
	}
	if base.BindAddr != "127.0.0.1" {
		t.Fatalf("default BindAddr %q, want loopback", base.BindAddr)
	}
	insecure := base
	insecure.Insecure = true
	if err := insecure.Validate(); err != nil {
		t.Fatalf("Insecure without a key: %v", err)
	}
	base.SecretKey = testGossipKey
	if err := base.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*gossip.Config){
		"NodeID":         func(c *gossip.Config) { c.NodeID = "" },
		"BindPort":       func(c *gossip.Config) { c.BindPort = 70000 },
		"SecretKey":      func(c *gossip.Config) { c.SecretKey = []byte("short") },
		"ExtraKeys[1]":   func(c *gossip.Config) { c.ExtraKeys = [][]byte{testGossipKey[:16], []byte("short")} },
		"ExtraKeys need": func(c *gossip.Config) { c.SecretKey, c.Insecure, c.ExtraKeys = nil, true, [][]byte{testGossipKey} },
		"ProbeTimeout":   func(c *gossip.Config) { c.ProbeTimeout = c.ProbeInterval },
		"Seeds[0]":       func(c *gossip.Config) { c.Seeds = []string{"no-port"} },
		"RejoinInterval": func(c *gossip.Config) { c.RejoinInterval = -time.Second },
	} {
		cfg := base
		mod(&cfg)
		err := cfg.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
		if _, err := gossip.New(cfg); err == nil {
			t.Errorf("%s: gossip.New accepted it", name)
		}
	}
}

// The memberlist membership carries the transport address and reports joins and crashes; a node
// restarted (without seeds) after the others declared it dead comes back only through their
// periodic re-join of the seeds.
func TestMemberlistJoinCrashRejoin(t *testing.T) {
	if testing.Short() {
		t.Skip("real sockets")
	}
	// m1 restarts on its address: a port outside the kernel's ephemeral
	// range, which no connection takes as its source port meanwhile.
	addr, err := ports.Loopback(true)
	if err != nil {
		t.Fatal(err)
	}
	c1 := fastMemberlist("m1", "127.0.0.1:1111", nil)
	_, port, _ := net.SplitHostPort(addr)
	c1.BindPort = atoi(port)
	m1 := startMemberlist(t, c1)
	seed := m1.BindAddr()
	c2 := fastMemberlist("m2", "127.0.0.1:2222", []string{seed})
	c2.GossipToTheDeadTime = 10 * time.Millisecond // m2 stops gossiping to m1 at once once it is dead
	m2 := startMemberlist(t, c2)
	changes := make(chan []Member, 64)
	cancel := m2.Subscribe(func(ms []Member) { changes <- ms })
	defer cancel()
	pollUntil(t, 5*time.Second, "m1 sees m2", func() bool { a, err := m1.Addr("m2"); return err == nil && a == "127.0.0.1:2222" })
	if a, err := m2.Addr("m1"); err != nil || a != "127.0.0.1:1111" {
		t.Fatalf("m2: Addr(m1) = %q, %v", a, err)
	}

	m1.Kill() // crash: no leave broadcast
	pollUntil(t, 5*time.Second, "m1 detected dead", func() bool { _, err := m2.Addr("m1"); return errors.Is(err, ErrUnknownMember) })
	// Subscribers hear of a change from the notifier's goroutine, after
	// Addr sees it: wait for the list without m1.
	pollUntil(t, 5*time.Second, "m2's subscriber told m1 is gone", func() bool {
		for {
			select {
			case ms := <-changes:
				if !slices.ContainsFunc(ms, func(m Member) bool { return m.ID == "m1" }) {
					return true
				}
			default:
				return false
			}
		}
	})
	if err := m1.Start(t.Context()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Close: %v", err)
	}

	// m1 restarts on the same address with no seeds: only m2's re-join brings them together.
	host, port, _ := net.SplitHostPort(seed)
	cfg := fastMemberlist("m1", "127.0.0.1:3333", nil)
	cfg.BindAddr, cfg.BindPort = host, atoi(port)
	m1b := startMemberlist(t, cfg)
	pollUntil(t, 5*time.Second, "re-joined after the restart", func() bool {
		a, err := m2.Addr("m1")
		_, err2 := m1b.Addr("m2")
		return err == nil && a == "127.0.0.1:3333" && err2 == nil
	})
}

// WrapTransport puts the wrapper between memberlist and the network: here
// two nodes whose wrappers turn mute (drop their packets, refuse to dial)
// find each other dead.
func TestMemberlistWrapTransport(t *testing.T) {
	if testing.Short() {
		t.Skip("real sockets")
	}
	var mute atomic.Bool
	var writes atomic.Int64
	c1 := fastMemberlist("w1", "127.0.0.1:1111", nil)
	c1.WrapTransport = func(tr memberlist.Transport) memberlist.Transport {
		return &muteTransport{Transport: tr, mute: &mute, writes: &writes}
	}
	m1 := startMemberlist(t, c1)
	c2 := fastMemberlist("w2", "127.0.0.1:2222", []string{m1.BindAddr()})
	c2.WrapTransport = c1.WrapTransport
	m2 := startMemberlist(t, c2)
	pollUntil(t, 5*time.Second, "w2 sees w1", func() bool { _, err := m2.Addr("w1"); return err == nil })
	pollUntil(t, 5*time.Second, "w1 gossips through the wrapper", func() bool { return writes.Load() > 0 })
	mute.Store(true)
	pollUntil(t, 5*time.Second, "each finds the other dead", func() bool {
		_, err1 := m2.Addr("w1")
		_, err2 := m1.Addr("w2")
		return errors.Is(err1, ErrUnknownMember) && errors.Is(err2, ErrUnknownMember)
	})
}

// TestMemberlistUncompressed: gossip goes out without LZW compression
// (gossip.Memberlist turns memberlist's default off). Without a key the
// packets are plain: none is a compressMsg (9), bare or behind the CRC
// header (hasCrcMsg, 12, and four bytes).
func TestMemberlistUncompressed(t *testing.T) {
	if testing.Short() {
		t.Skip("real sockets")
	}
	var mu sync.Mutex
	var packets [][]byte
	c1 := fastMemberlist("u1", "127.0.0.1:1111", nil)
	c1.SecretKey, c1.Insecure = nil, true
	c1.WrapTransport = func(tr memberlist.Transport) memberlist.Transport {
		return &recordTransport{Transport: tr, record: func(b []byte) {
			mu.Lock()
			packets = append(packets, bytes.Clone(b))
			mu.Unlock()
		}}
	}
	m1 := startMemberlist(t, c1)
	c2 := fastMemberlist("u2", "127.0.0.1:2222", []string{m1.BindAddr()})
	c2.SecretKey, c2.Insecure = nil, true
	m2 := startMemberlist(t, c2)
	pollUntil(t, 5*time.Second, "u1 gossips to u2", func() bool {
		_, err := m2.Addr("u1")
		mu.Lock()
		defer mu.Unlock()
		return err == nil && len(packets) >= 5
	})
	mu.Lock()
	defer mu.Unlock()
	for _, b := range packets {
		if len(b) > 5 && b[0] == 12 {
			b = b[5:]
		}
		if len(b) > 0 && b[0] == 9 {
			t.Fatalf("a compressed gossip packet: %x", b[:min(len(b), 16)])
		}
	}
}

// recordTransport passes every packet written to record.
type recordTransport struct {
	memberlist.Transport
	record func([]byte)
}

func (r *recordTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	r.record(b)
	return r.Transport.WriteTo(b, addr)
}

type muteTransport struct {
	memberlist.Transport
	mute   *atomic.Bool
	writes *atomic.Int64
}

func (m *muteTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	m.writes.Add(1)
	if m.mute.Load() {
		return time.Now(), nil
	}
	return m.Transport.WriteTo(b, addr)
}

func (m *muteTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if m.mute.Load() {
		return nil, errors.New("mute")
	}
	return m.Transport.DialTimeout(addr, timeout)
}

// startMemberlist starts a membership from cfg; it closes when the test
// ends (Close is idempotent, so a test may close or kill it earlier).
func startMemberlist(t *testing.T, cfg gossip.Config) *gossip.Memberlist {
	t.Helper()
	m, err := gossip.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// Nodes with different gossip keys never see each other; with the same key they do.
func TestMemberlistSecretKey(t *testing.T) {
	if testing.Short() {
		t.Skip("real sockets")
	}
	start := func(id string, key []byte, seeds []string) *gossip.Memberlist {
		c := fastMemberlist(id, "", seeds)
		c.SecretKey = key
		c.RejoinInterval = 0
		m, err := gossip.New(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	k1, k2 := []byte("0123456789abcdef"), []byte("fedcba9876543210")
	m1 := start("k1", k1, nil)
	intruder := start("k2", k2, []string{m1.BindAddr()})
	if len(intruder.Members()) != 1 || len(m1.Members()) != 1 {
		t.Fatalf("a node with another key joined: %v / %v", intruder.Members(), m1.Members())
	}
	friend := start("k3", k1, []string{m1.BindAddr()})
	if len(friend.Members()) != 2 {
		t.Fatalf("a node with the same key did not join: %v", friend.Members())
	}
}

// A Close that runs while Start is creating memberlist wins: Start shuts the
// new memberlist down and fails with ErrClosed, leaving nothing running.
func TestMemberlistCloseDuringStart(t *testing.T) {
	if testing.Short() {
		t.Skip("real sockets")
	}
	leaks := goleak.IgnoreCurrent()
	var m *gossip.Memberlist
	cfg := fastMemberlist("x1", "127.0.0.1:1", nil)
	cfg.WrapTransport = func(tr memberlist.Transport) memberlist.Transport {
		_ = m.Close() // runs inside Start, before memberlist.Create
		return tr
	}
	m, err := gossip.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(t.Context()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start with a Close under way: %v, want ErrClosed", err)
	}
	if err := goleak.Find(leaks); err != nil {
		t.Fatalf("memberlist left running: %v", err)
	}
}

// TestMemberlistConfigValidateEvery: Validate reports every rule a config breaks, in one error.
func TestMemberlistConfigValidateEvery(t *testing.T) {
	c := gossip.DefaultConfig() // no NodeID, no SecretKey
	c.BindPort, c.Seeds = -1, []string{"nohostport"}
	err := c.Validate()
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Validate = %v, want ErrInvalidConfig", err)
	}
	for _, field := range []string{"NodeID", "SecretKey", "BindPort", "Seeds[0]"} {
		if !contains(err.Error(), field) {
			t.Errorf("Validate = %v, does not name %s", err, field)
		}
	}
}
