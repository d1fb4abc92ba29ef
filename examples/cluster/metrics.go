package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	pmodel "github.com/prometheus/common/model"

	"github.com/muster-io/muster/registry/metrics"
)

// metricsServer serves /metrics for every running node of the cluster,
// each node's series labelled node="<id>". The set of nodes changes as the
// scenario crashes and restarts them, so each scrape gathers a Prometheus
// registry of the nodes running at that moment.
type metricsServer struct {
	c   *cluster
	l   net.Listener
	srv *http.Server
}

// serveMetrics listens on addr (loopback only: the demo never binds a
// wildcard address) and serves /metrics until close.
func serveMetrics(c *cluster, addr string) (*metricsServer, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("-metrics %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("-metrics %q: the demo serves its metrics on a loopback address only", addr)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	m := &metricsServer{c: c, l: l}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		promhttp.HandlerFor(m.gatherer(), promhttp.HandlerOpts{}).ServeHTTP(w, r)
	})
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = m.srv.Serve(l) }()
	return m, nil
}

// gatherer returns a Prometheus registry of the running nodes.
func (m *metricsServer) gatherer() prometheus.Gatherer {
	reg := prometheus.NewRegistry()
	for _, n := range m.c.live() {
		reg.MustRegister(metrics.New(metrics.Sources{
			Registry:  n.reg,
			Transport: n.n.Transport(),
			Distro:    n.n.Replicator(),
			Health:    n.reg.Internals().HealthChecks(),
			Raft:      n.n.Raft(),
			Node:      n.id,
		}))
	}
	return reg
}

func (m *metricsServer) url() string { return "http://" + m.l.Addr().String() + "/metrics" }

func (m *metricsServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = m.srv.Shutdown(ctx)
}

// scrape fetches the server's /metrics over HTTP and parses it with the
// Prometheus text parser, as a Prometheus server would.
func scrape(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	p := expfmt.NewTextParser(pmodel.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// sample returns the value of the series of family name whose labels
// include want (name, value pairs), summed over the series that match.
func sample(mfs map[string]*dto.MetricFamily, name string, want ...string) (float64, error) {
	mf := mfs[name]
	if mf == nil {
		return 0, fmt.Errorf("no metric %s", name)
	}
	var sum float64
	found := false
next:
	for _, m := range mf.GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for i := 0; i+1 < len(want); i += 2 {
			if have[want[i]] != want[i+1] {
				continue next
			}
		}
		found = true
		switch {
		case m.GetCounter() != nil:
			sum += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			sum += m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	if !found {
		return 0, errors.New("no series of " + name + " with " + strings.Join(want, "="))
	}
	return sum, nil
}
