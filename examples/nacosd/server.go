package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/muster-io/muster/health"
	"github.com/muster-io/muster/health/mysqlcheck"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/raftstore"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/console"
	"github.com/muster-io/muster/registry/node"
	"github.com/muster-io/muster/registry/raftcp"
	"github.com/muster-io/muster/transport"
	pb "github.com/nacos-group/nacos-sdk-go/v2/api/grpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
)

// Peer is one node of a nacosd cluster: its ID and its HTTP address. Its
// other ports follow Nacos's layout: gRPC on port+1000, the node-to-node
// transport (Distro and Raft) on port−1000, gossip (memberlist, TCP and
// UDP) on port+1001.
type Peer struct {
	ID   string
	Addr string
}

// Config configures a Server. Start from DefaultConfig.
type Config struct {
	// HTTPAddr is the Nacos 1.x OpenAPI address (default 127.0.0.1:8848).
	HTTPAddr string
	// GRPCAddr is the Nacos 2.x gRPC address; empty means the HTTP port +
	// 1000, where the clients look for it.
	GRPCAddr string
	// DataDir, when set, keeps persistent data in a Raft group on disk
	// there (one replica when standalone). Empty: in memory, lost on exit
	// (in a cluster, a temporary directory removed on exit).
	DataDir string

	// NodeID and Peers make this server one node of a cluster; Peers
	// lists every node, this one included. Empty Peers: standalone.
	NodeID string
	Peers  []Peer
	// Secret authenticates node-to-node traffic (required in a cluster,
	// at least 16 bytes). The gossip key and the Raft deployment ID are
	// derived from it.
	Secret []byte

	// PushTimeout bounds the wait for a client's acknowledgement of a push;
	// PushRetries is how often an unacknowledged push is sent.
	PushTimeout time.Duration
	PushRetries int
	// IdleTimeout: a gRPC connection silent for this long gets a
	// ClientDetectionRequest, and is closed (its instances leave) if it
	// does not answer within DetectTimeout.
	IdleTimeout   time.Duration
	DetectTimeout time.Duration
	// DrainTimeout bounds how long a graceful shutdown waits for clients
	// told to reconnect elsewhere to leave; ResetGrace is how long their
	// sessions outlive their connections, while they register again on
	// another node.
	DrainTimeout time.Duration
	ResetGrace   time.Duration
	// MaxSubscriptions caps the subscriptions (watches) of all clients.
	MaxSubscriptions int
	// UDPSubsPerIP caps the UDP subscriptions (1.x list calls with
	// udpPort set) from one source IP; they count against
	// MaxSubscriptions too.
	UDPSubsPerIP int
	// UDPPushRetries and UDPAckTimeout govern UDP pushes to 1.x clients.
	UDPPushRetries int
	UDPAckTimeout  time.Duration
	// Limits are the per-client limits (limits.go).
	Limits ClientLimits
	// TLS configures TLS on the client ports, HTTP and gRPC (tls.go; off
	// when empty).
	TLS TLSConfig
	// NoConsole leaves the web console out (webconsole.go; -console=false).
	NoConsole bool

	// Auth configures client authentication and authorization (off by
	// default; see Validate for where that is allowed).
	Auth AuthConfig
	// Open says that serving clients without authentication on a
	// non-loopback address is wanted (-open): every client that reaches
	// the ports may then read and change everything (but nacosd's users).
	Open bool

	// Fast shortens the cluster's failure detection, sync and health-check
	// timings, for tests.
	Fast bool

	Logger *slog.Logger
}

// DefaultConfig returns nacosd's defaults.
func DefaultConfig() Config {
	return Config{
		HTTPAddr:         "127.0.0.1:8848",
		PushTimeout:      3 * time.Second,
		PushRetries:      5,
		IdleTimeout:      20 * time.Second,
		DetectTimeout:    3 * time.Second,
		DrainTimeout:     3 * time.Second,
		ResetGrace:       500 * time.Millisecond,
		MaxSubscriptions: 1 << 20,
		UDPSubsPerIP:     256,
		UDPPushRetries:   3,
		UDPAckTimeout:    time.Second,
		Limits:           DefaultClientLimits(),
	}
}

// portAt returns addr's host with port+delta.
func portAt(addr string, delta int) (string, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("address %q: %w", addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("address %q: port must be 1–65535", addr)
	}
	if n+delta < 1 || n+delta > 65535 {
		return "", fmt.Errorf("address %q: port%+d is out of range (nacosd needs HTTP port−1000 to port+1001)", addr, delta)
	}
	return net.JoinHostPort(host, strconv.Itoa(n+delta)), nil
}

// Validate reports every invalid field.
func (c *Config) Validate() error {
	var errs []error
	if _, err := portAt(c.HTTPAddr, 0); err != nil {
		errs = append(errs, fmt.Errorf("-addr: %w", err))
	}
	if len(c.Peers) > 0 {
		if c.NodeID == "" {
			errs = append(errs, errors.New("-node-id is required in a cluster"))
		}
		if len(c.Secret) < 16 {
			errs = append(errs, errors.New("a cluster needs a node-to-node secret of at least 16 bytes (-secret-file)"))
		}
		seen, self := map[string]bool{}, false
		for _, p := range c.Peers {
			if p.ID == "" || seen[p.ID] {
				errs = append(errs, fmt.Errorf("peer %q: IDs must be non-empty and unique", p.ID))
			}
			seen[p.ID] = true
			for _, d := range []int{-1000, 1000, 1001} {
				if _, err := portAt(p.Addr, d); err != nil {
					errs = append(errs, fmt.Errorf("peer %s: %w", p.ID, err))
					break
				}
			}
			if p.ID == c.NodeID {
				self = true
				if p.Addr != c.HTTPAddr {
					errs = append(errs, fmt.Errorf("peer %s is %s but -addr is %s: a node's own entry must be its -addr", p.ID, p.Addr, c.HTTPAddr))
				}
			}
		}
		if c.NodeID != "" && !self {
			errs = append(errs, fmt.Errorf("-node-id %q is not in the peer list", c.NodeID))
		}
	}
	if err := c.Auth.Validate(); err != nil {
		errs = append(errs, err)
	}
	if host, _, err := net.SplitHostPort(c.HTTPAddr); err == nil && !c.Auth.Enabled && !c.Open && !isLoopback(host) {
		errs = append(errs, fmt.Errorf("-addr %s is not a loopback address, and authentication is off: "+
			"nacosd refuses to serve clients there without it; turn it on (-auth -auth-key-file FILE -admin-password-file FILE), "+
			"or pass -open to say that every client that reaches the ports may read and change every namespace", c.HTTPAddr))
	}
	if err := c.Limits.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.TLS.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.MaxSubscriptions < 0 || c.UDPSubsPerIP < 0 {
		errs = append(errs, errors.New("subscription limits must not be negative"))
	}
	if c.PushTimeout <= 0 || c.PushRetries < 1 || c.IdleTimeout <= 0 || c.DetectTimeout <= 0 || c.DrainTimeout < 0 || c.ResetGrace < 0 {
		errs = append(errs, errors.New("push and detection timings must be positive"))
	}
	return errors.Join(errs...)
}

// isLoopback reports whether host (an IP or "localhost") only reaches this
// machine; a wildcard or empty host does not.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Server is one nacosd node: a Muster registry behind Nacos's gRPC and
// HTTP APIs.
type Server struct {
	cfg  Config
	base *slog.Logger // the packages of Muster add the node ID themselves
	log  *slog.Logger

	reg     *registry.Registry
	node    *node.Node // a cluster node: transport, membership, Distro, Raft and reg
	memTr   transport.Transport
	mysql   *mysqlcheck.Checker // the standalone registry's MySQL health checker
	tempDir string

	grpcLn  net.Listener
	httpLn  net.Listener
	grpcSrv *grpc.Server
	httpSrv *http.Server
	api     *grpcAPI
	hub     *pushHub // the 2.x subscriptions' topics (push.go)
	udp     *udpPusher
	auth    *Auth
	console *console.Console

	ref     refClock
	subs    limiter
	limits  *clientLimits
	names   ambiguousNames // refused grouped names (naming.go)
	metrics metrics
	beats   atomic.Int64 // 1.x beats answered 10200

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// limiter counts subscriptions against a cap.
type limiter struct {
	n   atomic.Int64
	max int64
}

func (l *limiter) acquire() error {
	if l.n.Add(1) > l.max {
		l.n.Add(-1)
		return fmt.Errorf("%w: too many subscriptions on this node (%d)", model.ErrInvalid, l.max)
	}
	return nil
}

func (l *limiter) release() { l.n.Add(-1) }

// metrics are nacosd's own counters, shown by operator/metrics.
type metrics struct {
	mu       sync.Mutex
	pushes   int64
	failures int64
	lat      []time.Duration // a ring of the last push latencies
	next     int
}

func (m *metrics) push(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pushes++
	if len(m.lat) < 100000 {
		m.lat = append(m.lat, d)
	} else {
		m.lat[m.next] = d
		m.next = (m.next + 1) % len(m.lat)
	}
}

func (m *metrics) pushFailed() {
	m.mu.Lock()
	m.failures++
	m.mu.Unlock()
}

// percentiles returns the p50 and p99 of the recorded push latencies.
func (m *metrics) percentiles() (time.Duration, time.Duration, int64) {
	m.mu.Lock()
	l := append([]time.Duration(nil), m.lat...)
	n := m.pushes
	m.mu.Unlock()
	if len(l) == 0 {
		return 0, 0, n
	}
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	return l[len(l)/2], l[len(l)*99/100], n
}

// NewServer validates cfg; it starts nothing.
func NewServer(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.GRPCAddr == "" {
		cfg.GRPCAddr, _ = portAt(cfg.HTTPAddr, 1000)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.NodeID == "" {
		cfg.NodeID = "nacosd"
	}
	s := &Server{cfg: cfg, base: log, log: log.With("node", cfg.NodeID)}
	s.subs.max = int64(cfg.MaxSubscriptions)
	s.limits = newClientLimits(cfg.Limits, s.log)
	return s, nil
}

// standaloneDeployment is the Raft deployment ID of a durable standalone
// node ("nacosd" in ASCII).
const standaloneDeployment = 0x6e61636f7364

// derive returns a key for purpose from the shared secret.
func derive(secret []byte, purpose string) []byte {
	h := sha256.New()
	h.Write([]byte("nacosd/" + purpose + "/"))
	h.Write(secret)
	return h.Sum(nil)
}

// Start opens the listeners and starts the registry (and, in a cluster,
// the transport and the membership). A failed Start undoes what it did.
func (s *Server) Start(ctx context.Context) (err error) {
	s.ctx, s.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			s.shutdown(false)
		}
	}()
	// Listen first: a port in use is the commonest failure, and it should
	// cost nothing to report.
	if s.httpLn, err = net.Listen("tcp", s.cfg.HTTPAddr); err != nil {
		return fmt.Errorf("HTTP listener: %w", err)
	}
	if s.grpcLn, err = net.Listen("tcp", s.cfg.GRPCAddr); err != nil {
		return fmt.Errorf("gRPC listener (HTTP port + 1000): %w", err)
	}
	s.grpcLn = s.limits.listener(s.grpcLn)
	if len(s.cfg.Peers) > 0 {
		ncfg, err := s.nodeConfig()
		if err != nil {
			return err
		}
		if s.node, err = node.Start(ctx, ncfg); err != nil {
			return fmt.Errorf("cluster node (transport on HTTP port − 1000, gossip on HTTP port + 1001): %w", err)
		}
		s.reg = s.node.Registry()
	} else {
		rcfg, err := s.standaloneConfig()
		if err != nil {
			return err
		}
		if s.reg, err = registry.New(rcfg); err != nil {
			return err
		}
		if err = s.reg.Start(ctx); err != nil {
			return err
		}
	}

	s.auth = newAuth(s.cfg.Auth, s.reg, s.log)
	if s.auth.Enabled() && s.cfg.Auth.AdminPassword != "" {
		s.goFunc(s.bootstrapAuth)
	}
	s.api = newGRPCAPI(s)
	s.hub = newPushHub(s)
	if err = s.startConsole(s.ctx); err != nil {
		return err
	}
	tlsCfg, err := s.serverTLS()
	if err != nil {
		return err
	}
	var creds []grpc.ServerOption
	if tlsCfg != nil {
		creds = append(creds, grpc.Creds(credentials.NewTLS(tlsCfg.Clone())))
	}
	s.grpcSrv = grpc.NewServer(append(creds,
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		// One limit for every message (batch registrations need room); a
		// ConnectionSetupRequest's labels are read only up to maxSetupBody.
		grpc.MaxRecvMsgSize(10<<20),
		// At most 128 streams at once on a connection (a Nacos client has
		// its bi-stream and a few requests in flight): gRPC reads a unary
		// request whole as it arrives, up to MaxRecvMsgSize, so this is
		// what bounds the request bytes one connection can make the server
		// hold, before any authentication. A client past it waits for a
		// stream to end (HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS).
		grpc.MaxConcurrentStreams(maxStreamsPerConn),
		// gRPC's read and write buffers (32 KiB) are pooled: a connection
		// holds them only while it reads or writes, so an idle client no
		// longer pays for them (with gRPC 1.56 it did: 175 KiB a
		// connection with them, 8 KiB ones set here then), and a push of
		// a large service takes a few write calls, not one per 8 KiB.
		// Pushes share their encoded body among subscribers (push.go):
		// the codec sends it as it is. Everything else is plain proto.
		grpc.ForceServerCodecV2(newPushCodec()),
		// Static flow-control windows of 1 MiB (grpc-java's default, which
		// Nacos's own server runs on). grpc-go's dynamic window sends a BDP
		// ping whenever data arrives with none outstanding: nearly every
		// request of a connection with one request at a time, a ping frame
		// written and its ack read each, and it lets a connection's window
		// grow to 16 MiB. (gRPC reads data as it arrives and updates the
		// connection's window then, so the window paces a sender; it does
		// not bound the server's memory: MaxConcurrentStreams above does.)
		grpc.StaticStreamWindowSize(1<<20),
		grpc.StaticConnWindowSize(1<<20),
		// No HPACK dynamic table for request headers: the server's
		// SETTINGS ask clients to send them without one (every gRPC client
		// honours it: grpc-go, grpc-java's Netty, Node's http2), so a
		// connection does not keep a table of its client's past headers,
		// about 2 KiB each. A request's headers are a few dozen bytes more
		// on the wire, and the CPU a registration costs did not move
		// (README, Benchmark). A client that ignores the setting still
		// works: gRPC's decoder keeps accepting HTTP/2's default of 4 KiB.
		grpc.HeaderTableSize(0),
	)...)
	s.grpcSrv.RegisterService(&requestDesc, s.api) // pb.RegisterRequestServer, with the handler of grpc.go
	pb.RegisterBiRequestStreamServer(s.grpcSrv, s.api)

	if s.udp, err = newUDPPusher(s); err != nil {
		return err
	}
	s.httpSrv = &http.Server{Handler: s.httpLimit(s.httpHandler()), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(s.log.With("api", "http").Handler(), slog.LevelInfo)} // TLS handshake failures among them
	serveHTTP := func() error { return s.httpSrv.Serve(s.httpLn) }
	if tlsCfg != nil {
		s.httpSrv.TLSConfig = tlsCfg.Clone()
		serveHTTP = func() error { return s.httpSrv.ServeTLS(s.httpLn, "", "") }
	}

	s.goFunc(func() { _ = s.grpcSrv.Serve(s.grpcLn) })
	s.goFunc(func() { _ = serveHTTP() })
	s.goFunc(func() { s.api.detect(s.ctx, s.cfg.IdleTimeout, s.cfg.DetectTimeout) })
	for range requestWorkers {
		s.goFunc(func() { s.api.serveRequests(s.ctx) })
	}
	s.goFunc(func() { s.udp.run(s.ctx) })
	s.goFunc(s.udp.readAcks)
	s.log.Info("nacosd started", "http", s.httpLn.Addr().String(), "grpc", s.grpcLn.Addr().String(),
		"cluster", len(s.cfg.Peers) > 0, "durable", s.cfg.DataDir != "", "data", s.cfg.DataDir, "auth", s.auth.Enabled(), "tls", tlsCfg != nil, "mutualTLS", s.cfg.TLS.ClientCAFile != "")
	return nil
}

// bootstrapAuth creates the admin user once the registry serves, retrying
// while it cannot (a cluster electing its Raft leader).
func (s *Server) bootstrapAuth() {
	if err := s.reg.WaitReady(s.ctx); err != nil {
		return
	}
	for {
		// A minute: the bcrypt hash is made within the attempt, and takes
		// seconds on a loaded machine (under -race, tens of seconds).
		ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
		err := s.auth.bootstrap(ctx)
		cancel()
		if err == nil || s.ctx.Err() != nil {
			return
		}
		s.log.Warn("cannot create the admin user yet; retrying", "err", err)
		t := time.NewTimer(time.Second)
		select {
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// now is the wall clock (nacosd is a program, not the library).
func (s *Server) now() time.Time { return time.Now() }

func (s *Server) goFunc(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// HTTPAddr and GRPCAddr return the bound addresses.
func (s *Server) HTTPAddr() string { return s.httpLn.Addr().String() }
func (s *Server) GRPCAddr() string { return s.grpcLn.Addr().String() }

// Registry returns the server's registry.
func (s *Server) Registry() *registry.Registry { return s.reg }

// WaitReady waits until the registry serves.
func (s *Server) WaitReady(ctx context.Context) error { return s.reg.WaitReady(ctx) }

// standaloneConfig wires a standalone registry: in memory, or durable
// (one Raft replica in DataDir over an in-process network: no port opens).
func (s *Server) standaloneConfig() (registry.Config, error) {
	cfg := registry.DefaultConfig()
	cfg.NodeID, cfg.Logger = s.cfg.NodeID, s.base
	cfg.HistoryEvents = registry.DefaultHistoryEvents
	if s.cfg.Fast {
		hc := *cfg.HealthChecks
		hc.FirstIntervalMin, hc.FirstIntervalMax = 50*time.Millisecond, 100*time.Millisecond
		hc.TCPInterval.Min, hc.TCPInterval.Max = 100*time.Millisecond, 200*time.Millisecond
		cfg.HealthChecks = &hc
		cfg.SweepInterval = 100 * time.Millisecond
	}
	// MySQL checks, as in Nacos (the registry has no built-in MySQL checker).
	mc, err := mysqlcheck.New(mysqlcheck.Config{Logger: s.base})
	if err != nil {
		return cfg, err
	}
	s.mysql = mc
	hc := *cfg.HealthChecks
	hc.Checkers = map[model.CheckType]health.Checker{model.CheckMySQL: mc}
	cfg.HealthChecks = &hc
	if s.cfg.DataDir == "" {
		return cfg, nil
	}
	tr, err := (&transport.MemNetwork{}).Node(s.cfg.NodeID)
	if err != nil {
		return cfg, err
	}
	s.memTr = tr
	rc := raftstore.DefaultConfig()
	rc.ReplicaID, rc.Transport, rc.Dir, rc.Logger = 1, tr, s.cfg.DataDir, s.base
	rc.InitialMembers = map[uint64]string{1: s.cfg.NodeID}
	// The only replica talks to no one (an in-process network), so no
	// other deployment can reach it: a fixed ID serves.
	rc.DeploymentID = standaloneDeployment
	rc.RTTMillisecond = 10
	cfg.Store = raftcp.New(rc).Open
	return cfg, nil
}

// nodeConfig is the cluster node's configuration: Nacos's port layout
// (transport on HTTP port − 1000, gossip on + 1001, every peer a seed),
// Raft replica IDs in the order of the sorted peer IDs, and the transport
// secret, gossip key and Raft deployment ID derived from the secret.
func (s *Server) nodeConfig() (node.Config, error) {
	cfg := node.DefaultConfig()
	cfg.NodeID, cfg.Logger, cfg.Dir = s.cfg.NodeID, s.base, s.cfg.DataDir
	peers := slices.SortedFunc(slices.Values(s.cfg.Peers), func(a, b Peer) int { return strings.Compare(a.ID, b.ID) })
	cfg.RaftMembers = map[uint64]string{}
	for i, p := range peers {
		gossip, _ := portAt(p.Addr, 1001)
		cfg.Seeds = append(cfg.Seeds, gossip)
		cfg.RaftMembers[uint64(i+1)] = p.ID
		if p.ID == s.cfg.NodeID {
			cfg.TransportAddr, _ = portAt(p.Addr, -1000)
			cfg.GossipAddr = gossip
		}
	}
	cfg.Secret, cfg.GossipKey, cfg.GossipLabel = derive(s.cfg.Secret, "transport"), derive(s.cfg.Secret, "gossip"), "nacosd"
	cfg.DeploymentID = binary.BigEndian.Uint64(derive(s.cfg.Secret, "deployment")) | 1
	cfg.Timings = node.LAN()
	if s.cfg.Fast {
		t, p := node.Fast(), 100*time.Millisecond
		t.ProbeInterval, t.ProbeTimeout, t.GossipInterval, t.PushPull = p, p/2, p/5, 5*p
		t.GossipTCPTimeout, t.GossipDead, t.Rejoin, t.Leave = p, 5*p, 2*p, p
		t.CheckInterval = p // first checks within 50–100 ms, then every 100–200 ms
		cfg.Timings = t
	}
	cfg.Timings.SyncDelay, cfg.Timings.Forward = 5*time.Millisecond, time.Second // Nacos: 1 s sync delay
	if cfg.Dir == "" {
		dir, err := os.MkdirTemp("", "nacosd-"+s.cfg.NodeID+"-")
		if err != nil {
			return cfg, err
		}
		s.tempDir, cfg.Dir = dir, dir
	}
	return cfg, nil
}

// Close shuts the server down gracefully: clients are told to reconnect
// elsewhere (ConnectResetRequest), then connections, the registry (which
// hands its sessions over to the peers) and the network close, in that
// order. It is idempotent.
func (s *Server) Close() error {
	s.once.Do(func() { s.shutdown(true) })
	return nil
}

// Kill stops the server as a crash would: no reset, no handover; the
// network goes first. For tests.
func (s *Server) Kill() {
	s.once.Do(func() {
		if s.node != nil { // the network first; shutdown closes the rest
			_ = s.node.Transport().Close()
			if ml := s.node.Gossip(); ml != nil {
				_ = ml.Kill()
			}
		}
		s.shutdown(false)
	})
}

func (s *Server) shutdown(graceful bool) {
	if s.api != nil && graceful {
		// Clients are told to move, then given time to: their connections
		// end as they reconnect elsewhere, and their sessions here stay a
		// grace period longer, while they register again on their new node.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s.api.reset(ctx)
		cancel()
		if len(s.cfg.Peers) > 1 { // standalone, there is nowhere to go
			ctx, cancel = context.WithTimeout(context.Background(), s.cfg.DrainTimeout)
			s.api.drain(ctx)
			cancel()
			t := time.NewTimer(s.cfg.ResetGrace)
			<-t.C
		}
	}
	if s.console != nil { // its event streams end, so that the HTTP server's shutdown need not wait for them
		_ = s.console.Close()
	}
	if s.httpSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = s.httpSrv.Shutdown(ctx)
		cancel()
	} else if s.httpLn != nil {
		_ = s.httpLn.Close()
	}
	if s.grpcSrv != nil {
		s.api.killAll()
		s.grpcSrv.Stop()
	} else if s.grpcLn != nil {
		_ = s.grpcLn.Close()
	}
	if s.cancel != nil {
		s.cancel()
	}
	if s.udp != nil {
		s.udp.close()
	}
	s.wg.Wait()
	if s.node != nil {
		_ = s.node.Close() // the registry (handing sessions over), the membership, the transport
	} else if s.reg != nil {
		_ = s.reg.Close()
	}
	if s.mysql != nil {
		_ = s.mysql.Close()
	}
	if s.memTr != nil {
		_ = s.memTr.Close()
	}
	if s.tempDir != "" {
		_ = os.RemoveAll(s.tempDir)
	}
	s.log.Info("nacosd stopped")
}
