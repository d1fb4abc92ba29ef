package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
)

// udpPusher pushes changes to Nacos 1.x subscribers over UDP. A 1.x client
// that lists a service with udpPort set becomes a subscriber of it; each
// change is sent as {"type":"dom","data":<service info JSON>,
// "lastRefTime":n}, and resent until the client acknowledges it
// ({"type":"push-ack","lastRefTime":n}) or the retries run out. A
// subscriber that stops listing the service (the client polls every
// cacheMillis) expires after subscriberTTL.
type udpPusher struct {
	s    *Server
	conn *net.UDPConn

	mu     sync.Mutex
	subs   map[udpKey]*udpSub
	perIP  map[string]int           // subscriptions by source IP, at most Config.UDPSubsPerIP
	acks   map[string]chan struct{} // lastRefTime → waiting push
	closed bool
	wg     sync.WaitGroup // push loops
}

const subscriberTTL = 30 * time.Second

type udpKey struct {
	addr     string
	svc      model.ServiceKey
	clusters string
}

type udpSub struct {
	key      udpKey
	ip       string // the source IP, as counted in perIP
	addr     *net.UDPAddr
	name     string
	lastSeen time.Time
	cancel   context.CancelFunc
	// served is the newest revision the subscriber was given, by a push or
	// by its own list call: an older push is never sent after it.
	served atomic.Uint64
}

func newUDPPusher(s *Server) (*udpPusher, error) {
	host, _, _ := net.SplitHostPort(s.cfg.HTTPAddr)
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(host)})
	if err != nil {
		c, err = net.ListenUDP("udp", &net.UDPAddr{})
		if err != nil {
			return nil, err
		}
	}
	return &udpPusher{s: s, conn: c, subs: map[udpKey]*udpSub{}, perIP: map[string]int{}, acks: map[string]chan struct{}{}}, nil
}

// readAcks reads the clients' acknowledgements until the socket closes.
func (u *udpPusher) readAcks() {
	buf := make([]byte, 64<<10)
	for {
		n, _, err := u.conn.ReadFromUDP(buf)
		if err != nil {
			return // closed
		}
		ref, ok := ackRef(buf[:n])
		if !ok {
			continue
		}
		u.mu.Lock()
		ch := u.acks[ref] // lastRefTime values are unique on this node
		u.mu.Unlock()
		if ch != nil {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// ackRef returns the lastRefTime of a push acknowledgement. Nacos's server
// accepts it as a JSON string (the Java and Go clients send one) or a
// number (the Node.js client echoes the push's number), and so does
// nacosd.
func ackRef(b []byte) (string, bool) {
	var ack struct {
		Type        string          `json:"type"`
		LastRefTime json.RawMessage `json:"lastRefTime"`
	}
	if json.Unmarshal(b, &ack) != nil || len(ack.LastRefTime) == 0 {
		return "", false
	}
	var str string
	if json.Unmarshal(ack.LastRefTime, &str) == nil {
		return str, true
	}
	var num json.Number
	if json.Unmarshal(ack.LastRefTime, &num) == nil {
		if _, err := num.Int64(); err == nil {
			return num.String(), true
		}
	}
	return "", false
}

// run expires silent subscribers until ctx ends.
func (u *udpPusher) run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			u.mu.Lock()
			for k, s := range u.subs {
				u.dropLocked(k, s)
			}
			u.mu.Unlock()
			return
		case now := <-t.C:
			u.mu.Lock()
			for k, s := range u.subs {
				if now.Sub(s.lastSeen) > subscriberTTL {
					u.dropLocked(k, s)
				}
			}
			u.mu.Unlock()
		}
	}
}

// close closes the socket and waits for the push loops; no subscriber is
// added afterwards.
func (u *udpPusher) close() {
	u.mu.Lock()
	u.closed = true
	u.mu.Unlock()
	_ = u.conn.Close()
	u.wg.Wait()
}

func (u *udpPusher) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.subs)
}

// dropLocked ends subscriber s and gives back what it held: its place in
// the server's subscription limiter and in its source IP's count. The
// caller holds u.mu.
func (u *udpPusher) dropLocked(k udpKey, s *udpSub) {
	s.cancel()
	delete(u.subs, k)
	if u.perIP[s.ip]--; u.perIP[s.ip] <= 0 {
		delete(u.perIP, s.ip)
	}
	u.s.subs.release()
}

// subscribe makes addr (whose host is ip, the request's source) a
// subscriber of q, or renews it. A new subscription takes a place in the
// server's subscription limiter, the one gRPC subscriptions take, and
// counts against its source IP's cap (Config.UDPSubsPerIP): a host that
// lists many services with udpPort set cannot fill the registry's watchers
// and lock gRPC clients out. Past either cap the client is simply not
// pushed to; it still gets its list answers, and its polls.
func (u *udpPusher) subscribe(addr, ip string, q model.Query, name, clusters string, rev uint64) error {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return err
	}
	key := udpKey{addr: addr, svc: q.Service.WithDefaults(), clusters: clusters}
	u.mu.Lock()
	defer u.mu.Unlock()
	if s := u.subs[key]; s != nil {
		s.lastSeen = time.Now()
		s.noteServed(rev)
		return nil
	}
	if u.closed || u.s.ctx.Err() != nil {
		return errUDPClosed
	}
	if lim := u.s.cfg.UDPSubsPerIP; u.perIP[ip] >= lim {
		return fmt.Errorf("%w: too many UDP subscriptions from %s (%d)", model.ErrInvalid, ip, lim)
	}
	if err := u.s.subs.acquire(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(u.s.ctx)
	w, err := u.s.reg.Watch(ctx, q)
	if err != nil {
		cancel()
		u.s.subs.release()
		return err
	}
	s := &udpSub{key: key, ip: ip, addr: ua, name: name, lastSeen: time.Now(), cancel: cancel}
	s.noteServed(rev)
	u.subs[key] = s
	u.perIP[ip]++
	latest := make(chan registry.Update, 1)
	u.wg.Add(2)
	go u.watch(ctx, w, latest)
	go u.loop(ctx, s, latest)
	return nil
}

// noteServed records that the subscriber was given revision rev.
func (s *udpSub) noteServed(rev uint64) {
	for {
		cur := s.served.Load()
		if rev <= cur || s.served.CompareAndSwap(cur, rev) {
			return
		}
	}
}

// watch hands the newest update of w to latest (capacity 1: an update not
// yet taken is replaced by a newer one), skipping the first view, which
// the client got from its list call. It closes latest when w ends.
func (u *udpPusher) watch(ctx context.Context, w *registry.Watcher, latest chan registry.Update) {
	defer u.wg.Done()
	defer close(latest)
	defer w.Close()
	if _, err := w.Next(ctx); err != nil {
		return
	}
	for {
		up, err := w.Next(ctx)
		if err != nil {
			return
		}
		select {
		case <-latest: // superseded before it was pushed
		default:
		}
		latest <- up
	}
}

var errUDPClosed = errors.New("the UDP pusher is closed")

// loop pushes each update from latest, resending it until the client
// acknowledges it or the retries run out. A newer update ends the resends
// of an older one at once, and an update older than what the subscriber
// was last given (its own list call can be newer) is not sent: a resend
// never brings back an instance the client has seen leave.
func (u *udpPusher) loop(ctx context.Context, s *udpSub, latest chan registry.Update) {
	defer u.wg.Done()
	up, ok := <-latest
	for ok {
		next, more := u.push(ctx, s, up, latest)
		if ctx.Err() != nil {
			return
		}
		if next == nil {
			up, ok = <-latest
		} else {
			up, ok = *next, more
		}
	}
}

// push sends one update; it returns a newer update that arrived meanwhile
// (and whether latest is still open), or nil.
func (u *udpPusher) push(ctx context.Context, s *udpSub, up registry.Update, latest chan registry.Update) (*registry.Update, bool) {
	if up.View.Revision < s.served.Load() {
		return nil, true // the client already holds something newer
	}
	ref := u.s.ref.next()
	si := serviceInfo(up.View, s.name, s.key.svc.Group, s.key.clusters, ref)
	data, _ := json.Marshal(si)
	msg, _ := json.Marshal(map[string]any{"type": "dom", "data": string(data), "lastRefTime": ref})
	ackKey := strconv.FormatInt(ref, 10)
	ch := make(chan struct{}, 1)
	u.mu.Lock()
	u.acks[ackKey] = ch
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		delete(u.acks, ackKey)
		u.mu.Unlock()
	}()
	s.noteServed(up.View.Revision)
	start := time.Now()
	for attempt := 0; attempt < u.s.cfg.UDPPushRetries; attempt++ {
		if up.View.Revision < s.served.Load() {
			return nil, true // a list call answered something newer meanwhile
		}
		if _, err := u.conn.WriteToUDP(msg, s.addr); err != nil {
			break
		}
		t := time.NewTimer(u.s.cfg.UDPAckTimeout)
		select {
		case <-ch:
			t.Stop()
			u.s.metrics.push(time.Since(start))
			return nil, true
		case next, more := <-latest:
			t.Stop()
			if !more {
				return nil, false
			}
			return &next, true
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, false
		}
	}
	u.s.metrics.pushFailed()
	return nil, true
}
