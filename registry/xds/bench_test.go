package xds_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry/registrytest"
)

// BenchmarkFanout: services of 10 endpoints each, as many ADS clients as
// services, each subscribed to the ClusterLoadAssignments of 10 of them, so
// that every service has exactly 10 subscribers whatever the number of
// services. Each iteration is one Muster write (a re-registration that
// changes one endpoint's weight, services in turn) and lasts until every
// subscriber of that service has received the new assignment (and ACKed
// it, as gRPC's client does). Reported:
//
//   - p50-ms, p99-ms: the time from the write to the last subscriber's
//     update;
//   - B/change: bytes of xDS responses sent per change, over all its
//     subscribers; B/update: the same per subscriber. Neither depends on
//     the number of services: a change sends the changed service's
//     assignment alone, to its subscribers alone;
//   - cpu-ms/change: the process's CPU time (server and clients) per
//     change, to set against the latencies on a loaded machine;
//   - heap-B/client: the heap in use once every client is connected and
//     up to date, less the heap before the first connected, per client.
//     It counts both ends (the client streams run in this process too)
//     and the served services' resources and watchers.
//
// The clients' streams share 16 gRPC connections, as xDS clients behind a
// few proxies would; a connection of its own per client adds gRPC's
// transport buffers (some 64 KiB on each end) to the heap per client.
//
// The README states the figures: go test -run '^$' -bench Fanout
// -benchtime 2000x ./ in registry/xds.
func BenchmarkFanout(b *testing.B) {
	for _, services := range []int{100, 1000} {
		for _, delta := range []bool{true, false} {
			proto := "sotw"
			if delta {
				proto = "delta"
			}
			b.Run(fmt.Sprintf("services=%d/clients=%d/%s", services, services, proto), func(b *testing.B) {
				benchFanout(b, services, services, delta)
			})
		}
	}
}

const (
	benchEndpoints  = 10 // per service
	benchWatched    = 10 // services per client
	benchConns      = 16 // gRPC connections the clients' streams share
	benchBaseWeight = 1
)

func benchName(s int) string { return "svc-" + strconv.Itoa(s) }

func benchInstance(s, e int, weight float64) model.Instance {
	inst := model.NewInstance(model.ServiceKey{Name: benchName(s)}, fmt.Sprintf("10.%d.%d.%d", s>>8&255, s&255, e), 8080)
	inst.Weight = weight
	return inst
}

func benchFanout(b *testing.B, services, clients int, delta bool) {
	reg := registrytest.New(b, registrytest.Options{})
	for s := range services {
		for e := range benchEndpoints {
			if err := reg.Register(ctx, benchInstance(s, e, benchBaseWeight)); err != nil {
				b.Fatal(err)
			}
		}
	}
	x := startXDS(b, reg, "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	conns := make([]*grpc.ClientConn, min(benchConns, clients))
	for i := range conns {
		cc, err := grpc.NewClient(x.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		defer cc.Close()
		conns[i] = cc
	}

	p := &probe{}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	// Client c watches services 10c … 10c+9 (mod services): each service
	// is watched by exactly 10 clients.
	subscribers := make([][]int, services)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	ready := make(chan error, clients)
	for c := range clients {
		names := make([]string, benchWatched)
		for j := range names {
			s := (c*benchWatched + j) % services
			names[j] = benchName(s)
			subscribers[s] = append(subscribers[s], c)
		}
		bc := &benchClient{id: c, names: names, p: p, seen: make(map[string]uint32, len(names))}
		if err := bc.open(ctx, conns[c%len(conns)], delta); err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			bc.run(ready)
		}()
	}
	for range clients {
		if err := <-ready; err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	heapPerClient := (float64(after.HeapInuse) - float64(before.HeapInuse)) / float64(clients)

	st0 := x.Stats()
	cpu0 := cpuTime()
	latencies := make([]time.Duration, 0, b.N)
	marks := make([]uint32, services) // the marker weight each service holds
	i := 0
	for b.Loop() {
		s := i % services
		i++
		// A weight each time different from the service's last: the
		// subscribers recognise the change by it.
		w := 2 + float64((i/services)%50)
		if uint32(w*100) == marks[s] {
			w++
		}
		marks[s] = uint32(w * 100)
		done := p.arm(benchName(s), marks[s], len(subscribers[s]))
		start := time.Now() // real time: the benchmark's measure
		if err := reg.Register(ctx, benchInstance(s, 0, w)); err != nil {
			b.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second): // real time
			b.Fatalf("change %d of %s: %d subscribers of %d not updated within 30 s", i, benchName(s), p.left(), len(subscribers[s]))
		}
		latencies = append(latencies, time.Since(start)) // real time
	}
	b.StopTimer()
	cpu := cpuTime() - cpu0
	st := x.Stats()
	var sent, responses uint64
	if delta {
		sent, responses = st.DeltaBytes-st0.DeltaBytes, st.DeltaResponses-st0.DeltaResponses
	} else {
		sent, responses = st.SotWBytes-st0.SotWBytes, st.SotWResponses-st0.SotWResponses
	}
	slices.Sort(latencies)
	n := len(latencies)
	b.ReportMetric(float64(latencies[n/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(latencies[min(n-1, n*99/100)].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(sent)/float64(n), "B/change")
	b.ReportMetric(float64(sent)/float64(max(responses, 1)), "B/update")
	b.ReportMetric(heapPerClient, "heap-B/client")
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(n), "cpu-ms/change")
}

// probe is the change the benchmark waits for: the assignment of name
// whose marker (largest) weight is mark, at left more subscribers.
type probe struct {
	mu   sync.Mutex
	name string
	mark uint32
	n    int
	done chan struct{}
}

func (p *probe) arm(name string, mark uint32, subscribers int) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.name, p.mark, p.n, p.done = name, mark, subscribers, make(chan struct{})
	return p.done
}

func (p *probe) left() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// saw records that a subscriber holds mark for name.
func (p *probe) saw(name string, mark uint32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil || name != p.name || mark != p.mark || p.n == 0 {
		return
	}
	if p.n--; p.n == 0 {
		close(p.done)
	}
}

// benchClient is one ADS client subscribed to the assignments of names.
type benchClient struct {
	id    int
	names []string
	p     *probe
	seen  map[string]uint32 // name → marker of the last assignment
	sotw  discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	delta discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
}

func (c *benchClient) open(ctx context.Context, cc *grpc.ClientConn, delta bool) error {
	ads := discovery.NewAggregatedDiscoveryServiceClient(cc)
	var err error
	node := benchNode(c.id)
	if delta {
		if c.delta, err = ads.DeltaAggregatedResources(ctx); err != nil {
			return err
		}
		return c.delta.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: resource.EndpointType, ResourceNamesSubscribe: c.names})
	}
	if c.sotw, err = ads.StreamAggregatedResources(ctx); err != nil {
		return err
	}
	return c.sotw.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.EndpointType, ResourceNames: c.names})
}

// run receives, records and ACKs until the stream ends; it reports on
// ready once it holds every subscribed assignment.
func (c *benchClient) run(ready chan<- error) {
	reported := false
	report := func(err error) {
		if !reported {
			reported = true
			ready <- err
		}
	}
	for {
		var resources []*anypb.Any
		var ack func() error
		if c.delta != nil {
			r, err := c.delta.Recv()
			if err != nil {
				report(err)
				return
			}
			for _, res := range r.GetResources() {
				resources = append(resources, res.GetResource())
			}
			ack = func() error {
				return c.delta.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.EndpointType, ResponseNonce: r.GetNonce()})
			}
		} else {
			r, err := c.sotw.Recv()
			if err != nil {
				report(err)
				return
			}
			resources = r.GetResources()
			ack = func() error {
				return c.sotw.Send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: c.names, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()})
			}
		}
		for _, a := range resources {
			var cla endpoint.ClusterLoadAssignment
			if err := proto.Unmarshal(a.GetValue(), &cla); err != nil {
				report(err)
				return
			}
			var mark uint32
			for _, l := range cla.GetEndpoints() {
				for _, e := range l.GetLbEndpoints() {
					mark = max(mark, e.GetLoadBalancingWeight().GetValue())
				}
			}
			c.seen[cla.GetClusterName()] = mark
			c.p.saw(cla.GetClusterName(), mark)
		}
		if err := ack(); err != nil {
			report(err)
			return
		}
		if len(c.seen) == len(c.names) {
			report(nil)
		}
	}
}

func benchNode(id int) *core.Node { return &core.Node{Id: "bench-client-" + strconv.Itoa(id)} }
