package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// Per-client limits (issue 28 item 2). The node-wide caps (the registry's
// Limits, MaxSubscriptions) bound what all clients cost together, but not
// fairly: one client could take all of it. These bound each client:
//
//   - gRPC connections per source IP: a connection past the cap is
//     accepted, answered ResourceExhausted on its ServerCheckRequest (the
//     SDK logs "fail to connect to server ... ResourceExhausted desc = too
//     many gRPC connections from IP ...") and closed after refusedLinger;
//     more than maxRefusedPerIP such connections at once from one IP are
//     closed unanswered;
//   - subscriptions per gRPC connection, and ephemeral instances per gRPC
//     connection and per source IP (over all its connections): a request
//     past one is refused with Nacos's errorCode 503 (OVER_THRESHOLD) and
//     a message naming the limit and its flag;
//   - requests per second per gRPC connection and per HTTP source IP (a
//     token bucket holding ClientBurstSeconds seconds' worth): a request
//     past it is refused with errorCode 503 over gRPC and HTTP 503 over
//     HTTP, as Nacos's TPS control answers ("Tps Flow restricted").
//
// Each refusal counts in nacosd_client_limit_refusals_total{limit} and is
// logged (at most once per limit and source IP every limitLogEvery).

// ClientLimits are the per-client limits; 0 turns one off.
type ClientLimits struct {
	// ConnsPerIP caps the gRPC connections from one source IP (default
	// 256: a host running many SDK clients, or a NAT, shares an IP).
	ConnsPerIP int
	// SubsPerConn caps the subscriptions of one gRPC connection (default
	// 4096: a gateway subscribes to every service).
	SubsPerConn int
	// InstancesPerConn caps the ephemeral instances one gRPC connection
	// publishes (default 1000, the registry's MaxInstancesPerSession);
	// InstancesPerIP those of all connections from one source IP (default
	// 10,000).
	InstancesPerConn int
	InstancesPerIP   int
	// RequestsPerSec caps the requests a second of one gRPC connection, and
	// of one HTTP source IP (an IPv6 source counts by its /64), sustained;
	// a client may burst ClientBurstSeconds times as many at once (default
	// 500: a 1.x client beats every 5 s per instance and polls every 10 s
	// per subscribed service).
	RequestsPerSec float64
}

// DefaultClientLimits returns the defaults (see ClientLimits).
func DefaultClientLimits() ClientLimits {
	return ClientLimits{ConnsPerIP: 256, SubsPerConn: 4096, InstancesPerConn: 1000, InstancesPerIP: 10_000, RequestsPerSec: 500}
}

// Validate checks the limits.
func (l *ClientLimits) Validate() error {
	if l.ConnsPerIP < 0 || l.SubsPerConn < 0 || l.InstancesPerConn < 0 || l.InstancesPerIP < 0 || l.RequestsPerSec < 0 {
		return errors.New("per-client limits must not be negative (0 turns one off)")
	}
	return nil
}

const (
	// ClientBurstSeconds is the burst of the request rate, in seconds of
	// RequestsPerSec: a client starting up registers and subscribes at once.
	ClientBurstSeconds = 5
	// refusedLinger is how long a connection past ConnsPerIP stays open
	// for its ServerCheckRequest to be answered.
	refusedLinger = 5 * time.Second
	// maxRefusedPerIP bounds the connections past ConnsPerIP kept open at
	// once per source IP; more are closed unanswered.
	maxRefusedPerIP = 16
	// maxRateSources bounds the HTTP sources whose request rate is
	// tracked; past it, idle ones are forgotten.
	maxRateSources = 1 << 16
	// limitLogEvery spaces the log lines of one limit and source IP.
	limitLogEvery = 10 * time.Second
)

// codeOverThreshold is Nacos's NacosException.OVER_THRESHOLD, the
// errorCode of a request refused by its TPS or connection control.
const codeOverThreshold = 503

// errLimit is a request refused by a per-client limit.
type errLimit struct{ msg string }

func (e *errLimit) Error() string { return e.msg }

// clientLimits enforces ClientLimits.
type clientLimits struct {
	cfg ClientLimits
	log *slog.Logger

	mu       sync.Mutex
	sources  map[netip.Addr]*source   // gRPC connections and instances per source IP
	refused  map[string]bool          // remote addresses of connections past ConnsPerIP
	rates    map[netip.Addr]*rateSlot // HTTP request rate per source
	loggedAt map[string]time.Time

	refusals sync.Map // limit name → *atomic.Int64
}

type source struct {
	conns, refused, instances int
}

type rateSlot struct {
	lim *rate.Limiter
}

func newClientLimits(cfg ClientLimits, log *slog.Logger) *clientLimits {
	return &clientLimits{
		cfg: cfg, log: log.With("api", "limits"),
		sources: map[netip.Addr]*source{}, refused: map[string]bool{}, rates: map[netip.Addr]*rateSlot{}, loggedAt: map[string]time.Time{},
	}
}

// sourceIP returns the source of a remote address: its IP, an IPv6 one cut
// to its /64 (one host holds a whole /64).
func sourceIP(remote string) netip.Addr {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return netip.Addr{}
	}
	ip := ap.Addr().Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.Addr()
	}
	return ip
}

// hit counts and logs a refusal by limit name for the client at remote.
func (l *clientLimits) hit(limit, remote string) {
	v, _ := l.refusals.LoadOrStore(limit, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
	key := limit + " " + sourceIP(remote).String()
	now := time.Now()
	l.mu.Lock()
	last, seen := l.loggedAt[key]
	logIt := !seen || now.Sub(last) >= limitLogEvery
	if logIt {
		if len(l.loggedAt) >= maxRateSources {
			clear(l.loggedAt)
		}
		l.loggedAt[key] = now
	}
	l.mu.Unlock()
	if logIt {
		l.log.Warn("client limit reached; request refused (logged once per limit and source every 10 s)", "limit", limit, "remote", remote)
	}
}

// refusedCount returns how many requests limit refused.
func (l *clientLimits) refusedCount(limit string) int64 {
	if v, ok := l.refusals.Load(limit); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

// source returns ip's accounting, made if new; l.mu is held.
func (l *clientLimits) source(ip netip.Addr) *source {
	src := l.sources[ip]
	if src == nil {
		src = &source{}
		l.sources[ip] = src
	}
	return src
}

// --- gRPC connections per source IP ---

// listener counts the connections of each source IP (see ConnsPerIP).
type limitListener struct {
	net.Listener
	l *clientLimits
}

type limitConn struct {
	net.Conn
	l       *clientLimits
	ip      netip.Addr
	refused bool
	once    sync.Once
	timer   *time.Timer
}

func (l *clientLimits) listener(ln net.Listener) net.Listener {
	if l.cfg.ConnsPerIP == 0 {
		return ln
	}
	return &limitListener{Listener: ln, l: l}
}

func (ll *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := ll.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l := ll.l
		remote := c.RemoteAddr().String()
		ip := sourceIP(remote)
		l.mu.Lock()
		src := l.source(ip)
		lc := &limitConn{Conn: c, l: l, ip: ip}
		switch {
		case src.conns < l.cfg.ConnsPerIP:
			src.conns++
		case src.refused < maxRefusedPerIP:
			src.refused++
			lc.refused = true
			l.refused[remote] = true
		default:
			l.mu.Unlock()
			l.hit("conns_per_ip", remote)
			_ = c.Close()
			continue
		}
		l.mu.Unlock()
		if lc.refused {
			l.hit("conns_per_ip", remote)
			lc.timer = time.AfterFunc(refusedLinger, func() { _ = lc.Close() }) // real time
		}
		return lc, nil
	}
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		if c.timer != nil {
			c.timer.Stop()
		}
		l := c.l
		l.mu.Lock()
		defer l.mu.Unlock()
		src := l.sources[c.ip]
		if c.refused {
			src.refused--
			delete(l.refused, c.Conn.RemoteAddr().String())
		} else {
			src.conns--
		}
		if *src == (source{}) {
			delete(l.sources, c.ip)
		}
	})
	return err
}

// connRefused returns the refusal of a gRPC connection from remote past
// ConnsPerIP, or nil.
func (l *clientLimits) connRefused(remote string) error {
	l.mu.Lock()
	refused := l.refused[remote]
	l.mu.Unlock()
	if !refused {
		return nil
	}
	return &errLimit{fmt.Sprintf("too many gRPC connections from %s: at most %d per source IP (nacosd -max-conns-per-ip)", sourceIP(remote), l.cfg.ConnsPerIP)}
}

// --- instances per connection and per source IP ---

// reserveInstances accounts delta more (or fewer) instances to the
// connection at remote, which publishes have already: it refuses a growth
// past InstancesPerConn or InstancesPerIP. A reservation that is not used
// is given back with reserveInstances(remote, have+delta, -delta).
func (l *clientLimits) reserveInstances(remote string, have, delta int) error {
	if delta <= 0 {
		l.addInstances(remote, delta)
		return nil
	}
	if l.cfg.InstancesPerConn > 0 && have+delta > l.cfg.InstancesPerConn {
		l.hit("instances_per_conn", remote)
		return &errLimit{fmt.Sprintf("too many instances on this connection: %d would pass the limit of %d (nacosd -max-instances-per-conn)", have+delta, l.cfg.InstancesPerConn)}
	}
	ip := sourceIP(remote)
	l.mu.Lock()
	src := l.source(ip)
	if l.cfg.InstancesPerIP > 0 && src.instances+delta > l.cfg.InstancesPerIP {
		n := src.instances
		l.mu.Unlock()
		l.hit("instances_per_ip", remote)
		return &errLimit{fmt.Sprintf("too many instances from %s: %d would pass the limit of %d per source IP (nacosd -max-instances-per-ip)", ip, n+delta, l.cfg.InstancesPerIP)}
	}
	src.instances += delta
	l.mu.Unlock()
	return nil
}

// addInstances accounts delta instances to remote's source IP, unchecked.
func (l *clientLimits) addInstances(remote string, delta int) {
	if delta == 0 {
		return
	}
	ip := sourceIP(remote)
	l.mu.Lock()
	defer l.mu.Unlock()
	src := l.source(ip)
	src.instances += delta
	if *src == (source{}) {
		delete(l.sources, ip)
	}
}

// --- subscriptions per connection ---

func (l *clientLimits) checkSubs(remote string, have int) error {
	if l.cfg.SubsPerConn > 0 && have >= l.cfg.SubsPerConn {
		l.hit("subscriptions_per_conn", remote)
		return &errLimit{fmt.Sprintf("too many subscriptions on this connection: at most %d (nacosd -max-subs-per-conn)", l.cfg.SubsPerConn)}
	}
	return nil
}

// --- request rates ---

// newConnRate returns the request rate limiter of one gRPC connection, or
// nil when there is none.
func (l *clientLimits) newConnRate() *rate.Limiter {
	if l.cfg.RequestsPerSec == 0 {
		return nil
	}
	return rate.NewLimiter(rate.Limit(l.cfg.RequestsPerSec), int(l.cfg.RequestsPerSec*ClientBurstSeconds)+1)
}

func (l *clientLimits) rateRefusal(remote, what string) error {
	return &errLimit{fmt.Sprintf("Tps Flow restricted: more than %g requests a second %s (nacosd -max-requests-per-sec)", l.cfg.RequestsPerSec, what)}
}

// allowConn takes one request from a gRPC connection's budget.
func (l *clientLimits) allowConn(lim *rate.Limiter, remote string) error {
	if lim == nil || lim.Allow() {
		return nil
	}
	l.hit("requests_per_conn", remote)
	return l.rateRefusal(remote, "on one gRPC connection")
}

// allowHTTP takes one request from an HTTP source's budget.
func (l *clientLimits) allowHTTP(remote string) error {
	if l.cfg.RequestsPerSec == 0 {
		return nil
	}
	ip := sourceIP(remote)
	l.mu.Lock()
	slot := l.rates[ip]
	if slot == nil {
		if len(l.rates) >= maxRateSources {
			l.pruneRates()
		}
		slot = &rateSlot{lim: l.newConnRate()}
		l.rates[ip] = slot
	}
	ok := slot.lim.Allow()
	l.mu.Unlock()
	if ok {
		return nil
	}
	l.hit("requests_per_ip", remote)
	return l.rateRefusal(remote, "from "+ip.String()+" over HTTP")
}

// pruneRates forgets the sources whose bucket is full (idle for a burst's
// time); if none is, all (a flood from many sources costs them their
// burst, never memory). l.mu is held.
func (l *clientLimits) pruneRates() {
	now := time.Now()
	for ip, s := range l.rates {
		if s.lim.TokensAt(now) >= float64(s.lim.Burst()) {
			delete(l.rates, ip)
		}
	}
	if len(l.rates) >= maxRateSources {
		clear(l.rates)
	}
}

// httpLimit wraps an HTTP handler with the per-source request rate.
func (s *Server) httpLimit(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.limits.allowHTTP(r.RemoteAddr); err != nil {
			http.Error(w, "caused: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// --- metrics ---

var limitRefusalsDesc = prometheus.NewDesc("nacosd_client_limit_refusals_total",
	"Requests and connections refused by a per-client limit (nacosd's ClientLimits), by limit.", []string{"limit"}, nil)

func (l *clientLimits) Describe(ch chan<- *prometheus.Desc) { ch <- limitRefusalsDesc }

func (l *clientLimits) Collect(ch chan<- prometheus.Metric) {
	for _, name := range []string{"conns_per_ip", "subscriptions_per_conn", "instances_per_conn", "instances_per_ip", "requests_per_conn", "requests_per_ip", "ambiguous_name"} {
		ch <- prometheus.MustNewConstMetric(limitRefusalsDesc, prometheus.CounterValue, float64(l.refusedCount(name)), name)
	}
}
