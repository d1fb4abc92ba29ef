package xds

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	xdsserver "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/jonboulle/clockwork"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
)

// Server is an xDS server (ADS, state of the world and incremental) whose
// resources are Muster's services. Register it on a grpc.Server; see the
// package doc for the mapping.
type Server struct {
	cfg   Config
	log   *slog.Logger
	clock clockwork.Clock

	// One go-control-plane LinearCache per type: a change of a resource
	// wakes the watches of that resource only.
	lds, rds, cds, eds *cache.LinearCache
	xds                xdsserver.Server

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// mu guards what follows, and orders publications against a service's
	// release, so that a released service's goroutine never writes again.
	// It is taken before the caches' own locks.
	mu       sync.Mutex
	closed   bool
	services map[string]*service   // served services, by resource name
	sotw     map[int64]*subscriber // SotW streams, by go-control-plane's ID
	delta    map[int64]*subscriber // delta streams (IDs of their own)

	st counters
}

// service is one served service: its resources are in the caches while
// refs > 0, and a goroutine follows its Muster watch.
type service struct {
	name   string
	key    model.ServiceKey
	refs   int // streams naming it
	cancel context.CancelFunc
}

// subscriber is what one stream asks for.
type subscriber struct {
	node  string
	types map[string]map[string]struct{} // type URL → names
	names map[string]int                 // name → how many types name it
	held  map[string]struct{}            // names this stream holds a ref on
}

func newSubscriber() *subscriber {
	return &subscriber{
		types: make(map[string]map[string]struct{}),
		names: make(map[string]int),
		held:  make(map[string]struct{}),
	}
}

type counters struct {
	sotwResponses, deltaResponses atomic.Uint64
	sotwBytes, deltaBytes         atomic.Uint64
	changes                       atomic.Uint64
	refused                       atomic.Uint64
	watchFailures                 atomic.Uint64
	nacks                         [4]atomic.Uint64 // by typeIndex
}

var typeURLs = [4]string{resource.ListenerType, resource.RouteType, resource.ClusterType, resource.EndpointType}

func typeIndex(url string) int {
	for i, u := range typeURLs {
		if u == url {
			return i
		}
	}
	return -1
}

// New returns a server following cfg.Source. It starts nothing: a service's
// goroutine starts when a client first asks for it.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg:      cfg,
		log:      cfg.Logger,
		clock:    cfg.Clock,
		services: make(map[string]*service),
		sotw:     make(map[int64]*subscriber),
		delta:    make(map[int64]*subscriber),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.clock == nil {
		s.clock = clockwork.NewRealClock()
	}
	var r uint64
	if cfg.Rand != nil {
		r = rand.New(cfg.Rand).Uint64()
	} else {
		r = rand.Uint64()
	}
	// A client that reconnects to another run, or another node, presents a
	// version of a different prefix: it is sent everything again.
	prefix := strconv.FormatUint(r, 36) + "."
	s.lds = cache.NewLinearCache(resource.ListenerType, cache.WithVersionPrefix(prefix))
	s.rds = cache.NewLinearCache(resource.RouteType, cache.WithVersionPrefix(prefix))
	s.cds = cache.NewLinearCache(resource.ClusterType, cache.WithVersionPrefix(prefix))
	s.eds = cache.NewLinearCache(resource.EndpointType, cache.WithVersionPrefix(prefix))
	mux := &cache.MuxCache{
		Classify:      func(r *cache.Request) string { return r.GetTypeUrl() },
		ClassifyDelta: func(r *cache.DeltaRequest) string { return r.GetTypeUrl() },
		Caches: map[string]cache.Cache{
			resource.ListenerType: s.lds,
			resource.RouteType:    s.rds,
			resource.ClusterType:  s.cds,
			resource.EndpointType: s.eds,
		},
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.xds = xdsserver.NewServer(s.ctx, mux, xdsserver.CallbackFuncs{
		StreamOpenFunc:          s.onStreamOpen,
		StreamClosedFunc:        s.onStreamClosed,
		StreamRequestFunc:       s.onStreamRequest,
		StreamResponseFunc:      s.onStreamResponse,
		DeltaStreamOpenFunc:     s.onDeltaStreamOpen,
		DeltaStreamClosedFunc:   s.onDeltaStreamClosed,
		StreamDeltaRequestFunc:  s.onStreamDeltaRequest,
		StreamDeltaResponseFunc: s.onStreamDeltaResponse,
	})
	return s, nil
}

// Register registers the server's Aggregated Discovery Service (state of
// the world and delta) on gs. The host owns gs: its listener, credentials
// and lifetime.
func (s *Server) Register(gs grpc.ServiceRegistrar) {
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, s.xds)
}

// Close ends every stream (they return; the clients keep their last
// resources and reconnect), stops every service's goroutine and waits for
// them. It is idempotent. Stop the grpc.Server after it.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for _, svc := range s.services {
		svc.cancel()
	}
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	return nil
}

// Stats are a server's counters.
type Stats struct {
	// Streams is the number of open streams, SotW and delta.
	Streams int
	// Services is the number of services served.
	Services int
	// Changes counts the ClusterLoadAssignments published after a change
	// of a served service.
	Changes uint64
	// SotWResponses, DeltaResponses count the responses sent, and
	// SotWBytes, DeltaBytes their sizes (protobuf encoding).
	SotWResponses, DeltaResponses uint64
	SotWBytes, DeltaBytes         uint64
	// NACKs counts the responses clients rejected, by type URL.
	NACKs map[string]uint64
	// Refused counts names not served: invalid, not canonical, or past
	// MaxServices.
	Refused uint64
	// WatchFailures counts failed Muster watches (each is retried).
	WatchFailures uint64
}

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	st := Stats{
		Changes:        s.st.changes.Load(),
		SotWResponses:  s.st.sotwResponses.Load(),
		DeltaResponses: s.st.deltaResponses.Load(),
		SotWBytes:      s.st.sotwBytes.Load(),
		DeltaBytes:     s.st.deltaBytes.Load(),
		Refused:        s.st.refused.Load(),
		WatchFailures:  s.st.watchFailures.Load(),
		NACKs:          make(map[string]uint64),
	}
	for i, u := range typeURLs {
		if n := s.st.nacks[i].Load(); n > 0 {
			st.NACKs[u] = n
		}
	}
	s.mu.Lock()
	st.Streams = len(s.sotw) + len(s.delta)
	st.Services = len(s.services)
	s.mu.Unlock()
	return st
}

// The callbacks run on the streams' goroutines, before go-control-plane
// opens the watch the request asks for: the resources of a newly named
// service are in the caches by then.

func (s *Server) onStreamOpen(_ context.Context, id int64, _ string) error {
	return s.open(s.sotw, id)
}

func (s *Server) onDeltaStreamOpen(_ context.Context, id int64, _ string) error {
	return s.open(s.delta, id)
}

func (s *Server) open(streams map[int64]*subscriber, id int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return status.Error(codes.Unavailable, ErrClosed.Error())
	}
	streams[id] = newSubscriber()
	return nil
}

func (s *Server) onStreamClosed(id int64, _ *core.Node)      { s.closeStream(s.sotw, id) }
func (s *Server) onDeltaStreamClosed(id int64, _ *core.Node) { s.closeStream(s.delta, id) }

func (s *Server) closeStream(streams map[int64]*subscriber, id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub := streams[id]
	if sub == nil {
		return
	}
	delete(streams, id)
	for name := range sub.held {
		s.release(name)
	}
}

func (s *Server) onStreamRequest(id int64, req *discovery.DiscoveryRequest) error {
	s.nack(id, req.GetNode(), req.GetTypeUrl(), req.GetVersionInfo(), req.GetErrorDetail())
	s.mu.Lock()
	defer s.mu.Unlock()
	sub := s.sotw[id]
	if sub == nil {
		return nil
	}
	sub.noteNode(req.GetNode())
	// A SotW request names the whole set of the type: diff it against the
	// previous one.
	typ := req.GetTypeUrl()
	old := sub.types[typ]
	next := make(map[string]struct{}, len(req.GetResourceNames()))
	for _, n := range req.GetResourceNames() {
		next[n] = struct{}{}
	}
	for n := range old {
		if _, ok := next[n]; !ok {
			s.unname(sub, n)
		}
	}
	sub.types[typ] = next
	for n := range next {
		if _, ok := old[n]; !ok {
			if err := s.name(sub, n); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *Server) onStreamDeltaRequest(id int64, req *discovery.DeltaDiscoveryRequest) error {
	s.nack(id, req.GetNode(), req.GetTypeUrl(), req.GetResponseNonce(), req.GetErrorDetail())
	s.mu.Lock()
	defer s.mu.Unlock()
	sub := s.delta[id]
	if sub == nil {
		return nil
	}
	sub.noteNode(req.GetNode())
	typ := req.GetTypeUrl()
	set := sub.types[typ]
	if set == nil {
		set = make(map[string]struct{})
		sub.types[typ] = set
	}
	for _, n := range req.GetResourceNamesUnsubscribe() {
		if _, ok := set[n]; ok {
			delete(set, n)
			s.unname(sub, n)
		}
	}
	for _, n := range req.GetResourceNamesSubscribe() {
		if _, ok := set[n]; !ok {
			set[n] = struct{}{}
			if err := s.name(sub, n); err != nil {
				return err
			}
		}
	}
	return nil
}

func (sub *subscriber) noteNode(n *core.Node) {
	if n != nil && sub.node == "" {
		sub.node = n.GetId()
	}
}

// nack counts and logs a rejected response. version is the version (SotW)
// or the nonce (delta) of what the client still runs.
func (s *Server) nack(id int64, node *core.Node, typ, version string, detail *rpcstatus.Status) {
	if detail == nil {
		return
	}
	if i := typeIndex(typ); i >= 0 {
		s.st.nacks[i].Add(1)
	}
	s.log.Warn("xds: a client rejected a response", "stream", id, "node", node.GetId(), "type", typ, "kept", version, "error", detail.GetMessage())
}

// name records that sub names n for one more type; the first time, it takes
// a ref on n's service. The caller holds mu.
func (s *Server) name(sub *subscriber, n string) error {
	sub.names[n]++
	if sub.names[n] > 1 {
		return nil
	}
	if len(sub.names) > s.cfg.MaxNamesPerStream {
		return status.Errorf(codes.ResourceExhausted, "%v: more than %d", ErrTooManyNames, s.cfg.MaxNamesPerStream)
	}
	if n == "*" || n == "" {
		return nil // wildcard: the caches answer it with what is served
	}
	if s.retain(n) {
		sub.held[n] = struct{}{}
	}
	return nil
}

// unname undoes one name. The caller holds mu.
func (s *Server) unname(sub *subscriber, n string) {
	if sub.names[n]--; sub.names[n] > 0 {
		return
	}
	delete(sub.names, n)
	if _, ok := sub.held[n]; ok {
		delete(sub.held, n)
		s.release(n)
	}
}

// retain takes a ref on the service named n, serving it if it was not. It
// reports whether n is served. The caller holds mu.
func (s *Server) retain(n string) bool {
	if svc := s.services[n]; svc != nil {
		svc.refs++
		return true
	}
	if s.closed {
		return false
	}
	key, err := ParseName(n)
	if err != nil {
		s.st.refused.Add(1)
		s.log.Debug("xds: a client asked for a name that is no service", "name", n, "err", err)
		return false
	}
	if len(s.services) >= s.cfg.MaxServices {
		s.st.refused.Add(1)
		s.log.Warn("xds: MaxServices reached; a service is not served", "name", n, "max", s.cfg.MaxServices)
		return false
	}
	ctx, cancel := context.WithCancel(s.ctx)
	svc := &service{name: n, key: key, refs: 1, cancel: cancel}
	s.services[n] = svc
	s.setStatic(n)
	s.wg.Add(1)
	go s.follow(ctx, svc)
	return true
}

// setStatic puts the resources of n that never change into the caches.
func (s *Server) setStatic(n string) {
	s.update(s.lds, n, buildListener(n))
	s.update(s.rds, n, buildRoute(n))
	s.update(s.cds, n, buildCluster(n, s.cfg.Policy))
}

func (s *Server) update(c *cache.LinearCache, n string, r types.Resource) {
	if err := c.UpdateResource(n, r); err != nil {
		s.log.Error("xds: cache update failed", "name", n, "err", err)
	}
}

// release drops a ref on n; the last one stops serving it. The caller holds
// mu.
func (s *Server) release(n string) {
	svc := s.services[n]
	if svc == nil {
		return
	}
	if svc.refs--; svc.refs > 0 {
		return
	}
	delete(s.services, n)
	svc.cancel()
	for _, c := range []*cache.LinearCache{s.lds, s.rds, s.cds, s.eds} {
		if err := c.DeleteResource(n); err != nil {
			s.log.Error("xds: cache delete failed", "name", n, "err", err)
		}
	}
}

// follow keeps svc's ClusterLoadAssignment equal to its Muster view until
// ctx ends: one Muster watch, shared by every client of the service, which
// coalesces changes a slow publication has not taken yet (a watcher skips
// to the newest view).
func (s *Server) follow(ctx context.Context, svc *service) {
	defer s.wg.Done()
	backoff := s.cfg.RetryMin
	for {
		err := s.watch(ctx, svc, &backoff)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, registry.ErrClosed) {
			s.log.Warn("xds: the registry closed; the service keeps its last assignment", "name", svc.name)
			return
		}
		s.st.watchFailures.Add(1)
		s.log.Warn("xds: watching a service failed; retrying", "name", svc.name, "err", err, "in", backoff)
		t := s.clock.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.Chan():
		}
		backoff = min(2*backoff, s.cfg.RetryMax)
	}
}

// watch publishes each view of svc until the watch fails or ctx ends.
func (s *Server) watch(ctx context.Context, svc *service, backoff *time.Duration) error {
	w, err := s.cfg.Source.Watch(ctx, model.Query{Service: svc.key})
	if err != nil {
		return err
	}
	defer w.Close()
	for {
		u, err := w.Next(ctx)
		if err != nil {
			return err
		}
		*backoff = s.cfg.RetryMin
		s.publish(svc, u.View)
	}
}

// publish puts the assignment built from v into the EDS cache, unless svc
// has been released meanwhile.
func (s *Server) publish(svc *service, v *model.ServiceView) {
	cla := buildAssignment(svc.name, v, s.locality, s.cfg.Region)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.services[svc.name] != svc {
		return
	}
	s.st.changes.Add(1)
	s.update(s.eds, svc.name, cla)
}

// locality returns an instance's zone.
func (s *Server) locality(inst *model.Instance) string {
	if s.cfg.LocalityKey != "" {
		if z := inst.Metadata.Value(s.cfg.LocalityKey); z != "" {
			return z
		}
	}
	if inst.Cluster == "" {
		return model.DefaultCluster
	}
	return inst.Cluster
}

func (s *Server) onStreamResponse(_ context.Context, _ int64, _ *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
	s.st.sotwResponses.Add(1)
	s.st.sotwBytes.Add(uint64(proto.Size(resp)))
}

func (s *Server) onStreamDeltaResponse(_ int64, _ *discovery.DeltaDiscoveryRequest, resp *discovery.DeltaDiscoveryResponse) {
	s.st.deltaResponses.Add(1)
	s.st.deltaBytes.Add(uint64(proto.Size(resp)))
}
