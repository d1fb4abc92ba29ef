package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strconv"
	"strings"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	mustermetrics "github.com/muster-io/muster/registry/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The Nacos 1.x HTTP OpenAPI of naming, under /nacos/v1/ns. Parameters come
// from the query string or a form body, as Nacos reads them. Errors are
// plain text with Nacos's HTTP status codes: 400 for bad parameters, 404
// for a missing resource, 500 otherwise.

func (s *Server) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/nacos/v1/ns/instance", s.hInstance)
	mux.HandleFunc("/nacos/v1/ns/instance/list", s.hInstanceList)
	mux.HandleFunc("/nacos/v1/ns/instance/beat", s.hBeat)
	mux.HandleFunc("/nacos/v1/ns/service", s.hService)
	mux.HandleFunc("/nacos/v1/ns/service/list", s.hServiceList)
	mux.HandleFunc("/nacos/v1/ns/catalog/services", s.hCatalog)
	mux.HandleFunc("/nacos/v1/ns/operator/metrics", s.hMetrics)
	mux.HandleFunc("/nacos/v1/core/loader/current", s.hLoaderCurrent)
	mux.HandleFunc("/nacos/v1/auth/login", s.hLogin)
	mux.HandleFunc("/nacos/v1/auth/users/login", s.hLogin)
	mux.HandleFunc("/nacos/v1/auth/users", s.hUsers)
	mux.HandleFunc("/nacos/v1/auth/roles", s.hRoles)
	mux.HandleFunc("/nacos/v1/auth/permissions", s.hPermissions)
	// Prometheus: Muster's metrics (docs/monitoring.md), at the usual path
	// and at Nacos's.
	prom := http.HandlerFunc(s.hPrometheus)
	mux.Handle("/metrics", prom)
	mux.Handle("/nacos/actuator/prometheus", prom)
	s.mountConsole(mux) // the web console at /nacos/ (webconsole.go)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
		if err := r.ParseForm(); err != nil {
			http.Error(w, "caused: malformed parameters: "+err.Error(), http.StatusBadRequest)
			return
		}
		// Go parses a form body for POST, PUT and PATCH only; Nacos reads
		// one on DELETE too.
		if r.Method == http.MethodDelete && strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
			b, err := io.ReadAll(r.Body)
			vals, err2 := url.ParseQuery(string(b))
			if err = errors.Join(err, err2); err != nil {
				http.Error(w, "caused: malformed parameters: "+err.Error(), http.StatusBadRequest)
				return
			}
			for k, vs := range vals {
				r.Form[k] = append(r.Form[k], vs...)
			}
		}
		mux.ServeHTTP(w, r)
	})
}

// params reads a request's parameters.
type params struct {
	r *http.Request
}

func (p params) str(k string) string { return strings.TrimSpace(p.r.FormValue(k)) }

func (p params) boolean(k string, def bool) (bool, error) {
	v := p.str(k)
	if v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return def, fmt.Errorf("%w: parameter %s: %q is not a boolean", model.ErrInvalid, k, v)
	}
	return b, nil
}

func (p params) float(k string, def float64) (float64, error) {
	v := p.str(k)
	if v == "" {
		return def, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return def, fmt.Errorf("%w: parameter %s: %q is not a number", model.ErrInvalid, k, v)
	}
	return f, nil
}

func (p params) integer(k string, def int) (int, error) {
	v := p.str(k)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return def, fmt.Errorf("%w: parameter %s: %q is not an integer", model.ErrInvalid, k, v)
	}
	return n, nil
}

// metadata parses Nacos's metadata parameter: a JSON object, or k=v,k=v.
func metadataParam(v string) (map[string]string, error) {
	if v == "" {
		return nil, nil
	}
	m := map[string]string{}
	if strings.HasPrefix(v, "{") {
		if err := json.Unmarshal([]byte(v), &m); err != nil {
			return nil, fmt.Errorf("%w: parameter metadata: %v", model.ErrInvalid, err)
		}
		return m, nil
	}
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("%w: parameter metadata: %q is not key=value", model.ErrInvalid, kv)
		}
		m[strings.TrimSpace(k)] = strings.TrimSpace(val)
	}
	return m, nil
}

func (p params) service() (model.ServiceKey, error) {
	name := p.str("serviceName")
	if name == "" {
		return model.ServiceKey{}, fmt.Errorf("%w: parameter serviceName is required", model.ErrInvalid)
	}
	if err := checkGrouped(name, p.str("groupName")); err != nil {
		return model.ServiceKey{}, err
	}
	k := serviceKey(p.str("namespaceId"), p.str("groupName"), name)
	return k, k.Validate()
}

// target is what a request acts on, for its permission check: namespace,
// group and service name ("" for every one).
func (p params) target() (ns, group, name string) {
	name = p.str("serviceName")
	group = p.str("groupName")
	if name != "" {
		group, name = splitGrouped(name, group)
	}
	return p.str("namespaceId"), group, name
}

// allowTarget checks the request against its sender's permissions on its
// target (see params.target).
func (s *Server) allowTarget(w http.ResponseWriter, r *http.Request, write bool) bool {
	ns, group, name := params{r}.target()
	return s.allow(w, r, ns, group, name, write)
}

// instanceKey reads the ip, port, cluster and service of an instance.
func (p params) instanceKey() (model.InstanceKey, error) {
	svc, err := p.service()
	if err != nil {
		return model.InstanceKey{}, err
	}
	port, err := p.integer("port", 0)
	if err != nil {
		return model.InstanceKey{}, err
	}
	if err := checkPort(port); err != nil {
		return model.InstanceKey{}, err
	}
	k := model.InstanceKey{Service: svc, Cluster: p.str("clusterName"), IP: p.str("ip"), Port: port}
	if k.Cluster == "" {
		k.Cluster = p.str("cluster")
	}
	k = k.WithDefaults()
	return k, k.Validate()
}

// instance reads a whole instance (register and update).
func (p params) instance() (model.Instance, error) {
	k, err := p.instanceKey()
	if err != nil {
		return model.Instance{}, err
	}
	inst := model.NewInstance(k.Service, k.IP, k.Port)
	inst.Cluster = k.Cluster
	var errs []error
	var e error
	inst.Weight, e = p.float("weight", 1)
	errs = append(errs, e)
	enabled := p.str("enabled")
	if enabled == "" {
		enabled = p.str("enable")
	}
	if enabled != "" {
		inst.Enabled, e = strconv.ParseBool(enabled)
		if e != nil {
			e = fmt.Errorf("%w: parameter enabled: %q is not a boolean", model.ErrInvalid, enabled)
		}
		errs = append(errs, e)
	}
	inst.Healthy, e = p.boolean("healthy", true)
	errs = append(errs, e)
	inst.Ephemeral, e = p.boolean("ephemeral", true)
	errs = append(errs, e)
	md, e := metadataParam(p.str("metadata"))
	errs = append(errs, e)
	if len(md) > 0 {
		inst.Metadata = model.NewMetadata(md)
	}
	return inst, errors.Join(errs...)
}

// fail writes err with Nacos's status code for it.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	code, msg := errCode(err)
	status := http.StatusInternalServerError
	switch code {
	case codeInvalidParam:
		status = http.StatusBadRequest
	case codeNotFound:
		status = http.StatusNotFound
	case codeConflict:
		status = http.StatusBadRequest
	case codeNotReady, codeOverThreshold:
		status = http.StatusServiceUnavailable
	}
	// The 1.x clients report a refused request only as "retry 3 times
	// request failed!": the reason is in this log line.
	s.log.Info("HTTP request refused", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	http.Error(w, "caused: "+msg, status)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func writeOK(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte("ok"))
}

func (s *Server) hInstance(w http.ResponseWriter, r *http.Request) {
	p := params{r}
	ctx := r.Context()
	if !s.allowTarget(w, r, r.Method != http.MethodGet) {
		return
	}
	switch r.Method {
	case http.MethodPost: // register
		inst, err := p.instance()
		if err == nil {
			err = s.reg.Register(ctx, inst)
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeOK(w)
	case http.MethodDelete: // deregister
		k, err := p.instanceKey()
		if err == nil {
			err = s.reg.Deregister(ctx, k)
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeOK(w)
	case http.MethodPut: // update: an operator's patch over the registered instance
		inst, err := p.instance()
		if err != nil {
			s.fail(w, r, err)
			return
		}
		patch := model.InstancePatch{Key: inst.Key(), Metadata: inst.Metadata}
		if p.str("weight") != "" {
			patch.Weight = &inst.Weight
		}
		if p.str("enabled") != "" || p.str("enable") != "" {
			patch.Enabled = &inst.Enabled
		}
		if err := s.reg.PatchInstance(ctx, patch); err != nil {
			s.fail(w, r, err)
			return
		}
		writeOK(w)
	case http.MethodGet: // get one instance
		k, err := p.instanceKey()
		if err != nil {
			s.fail(w, r, err)
			return
		}
		inst, err := s.reg.GetInstance(ctx, k)
		if errors.Is(err, registry.ErrNotFound) {
			err = fmt.Errorf("%w: no matched ip found! %s", registry.ErrNotFound, k)
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		n := fromModel(inst, inst.Healthy)
		writeJSON(w, map[string]any{
			"service": k.Service.GroupedName(), "ip": n.IP, "port": n.Port, "clusterName": n.ClusterName,
			"weight": n.Weight, "healthy": n.Healthy, "enabled": n.Enabled, "ephemeral": n.Ephemeral,
			"instanceId": n.InstanceID, "metadata": n.Metadata,
		})
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

func (s *Server) hInstanceList(w http.ResponseWriter, r *http.Request) {
	p := params{r}
	if !s.allowTarget(w, r, false) {
		return
	}
	svc, err := p.service()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	healthyOnly, err := p.boolean("healthyOnly", false)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	clusters := p.str("clusters")
	q := model.Query{Service: svc, Clusters: splitClusters(clusters), HealthyOnly: healthyOnly}
	v, err := s.reg.Query(r.Context(), q)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	name := p.str("serviceName") // echoed verbatim: the client's cache key
	// A service the registry does not hold yet gets a subscriber too, as
	// Nacos 1.4 subscribes before it looks the service up: a consumer that
	// starts before its providers is pushed the first one at once. What
	// unknown names cost is bounded by -udp-subs-per-ip and
	// -max-subscriptions.
	if udpPort, _ := p.integer("udpPort", 0); udpPort > 0 && udpPort <= 65535 {
		// Pushes go to the host the request came from, not to the
		// clientIP parameter (Nacos's choice), which anyone could set to
		// make this node send UDP to a third party.
		ip, _, _ := net.SplitHostPort(r.RemoteAddr)
		if err := s.udp.subscribe(net.JoinHostPort(ip, strconv.Itoa(udpPort)), ip, model.Query{Service: svc, Clusters: q.Clusters}, name, clusters, v.Revision); err != nil {
			s.log.Debug("no UDP subscription", "client", ip, "service", svc, "err", err)
		}
	}
	si := serviceInfo(v, name, svc.Group, clusters, s.ref.next())
	writeJSON(w, struct {
		nServiceInfo
		Dom string `json:"dom"`
	}{si, name})
}

// hBeat serves a 1.x client's beat. A beat that carries its instance
// registers it again when it expired (Nacos 1.x does the same); a light
// beat of an unknown instance gets code 20404, and the client registers.
func (s *Server) hBeat(w http.ResponseWriter, r *http.Request) {
	p := params{r}
	ctx := r.Context()
	type beat struct {
		IP          string            `json:"ip"`
		Port        int               `json:"port"`
		Weight      float64           `json:"weight"`
		ServiceName string            `json:"serviceName"`
		Cluster     string            `json:"cluster"`
		Metadata    map[string]string `json:"metadata"`
	}
	var b beat
	full := p.str("beat") != ""
	if full {
		if err := json.Unmarshal([]byte(p.str("beat")), &b); err != nil {
			s.fail(w, r, fmt.Errorf("%w: parameter beat: %v", model.ErrInvalid, err))
			return
		}
	} else {
		b.IP, b.Cluster = p.str("ip"), p.str("clusterName")
		b.Port, _ = p.integer("port", 0)
	}
	name := p.str("serviceName")
	if name == "" {
		name = b.ServiceName
	}
	if g, n := splitGrouped(name, p.str("groupName")); !s.allow(w, r, p.str("namespaceId"), g, n, true) {
		return
	}
	svc := serviceKey(p.str("namespaceId"), p.str("groupName"), name)
	if err := checkPort(b.Port); err != nil {
		s.fail(w, r, err)
		return
	}
	key := model.InstanceKey{Service: svc, Cluster: b.Cluster, IP: b.IP, Port: b.Port}.WithDefaults()
	var interval = model.DefaultHeartBeatInterval
	var err error
	if full {
		inst := model.NewInstance(svc, b.IP, b.Port)
		inst.Cluster, inst.Weight = key.Cluster, b.Weight
		if len(b.Metadata) > 0 {
			inst.Metadata = model.NewMetadata(b.Metadata)
		}
		var res registry.BeatResult
		res, err = s.reg.HeartbeatInstance(ctx, inst)
		interval = res.Interval
		if err == nil && res.Registered {
			// Nacos registers a full beat's instance again (its lease had
			// lapsed, or the node it was on died): worth a debug line.
			s.log.Debug("beat registered its instance again", "instance", key.String())
		}
	} else {
		interval, err = s.reg.Heartbeat(ctx, key)
		if errors.Is(err, registry.ErrNotFound) {
			writeJSON(w, map[string]any{"code": 20404, "clientBeatInterval": interval.Milliseconds(), "lightBeatEnabled": true})
			return
		}
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.beats.Add(1)
	writeJSON(w, map[string]any{"code": 10200, "clientBeatInterval": interval.Milliseconds(), "lightBeatEnabled": true})
}

func (s *Server) hService(w http.ResponseWriter, r *http.Request) {
	p := params{r}
	ctx := r.Context()
	if !s.allowTarget(w, r, r.Method != http.MethodGet) {
		return
	}
	svc, err := p.service()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	def := func() (model.Service, error) {
		d := model.Service{Key: svc}
		var errs []error
		var e error
		d.ProtectThreshold, e = p.float("protectThreshold", 0)
		errs = append(errs, e)
		d.Ephemeral, e = p.boolean("ephemeral", false) // Nacos 2.x's default
		errs = append(errs, e)
		md, e := metadataParam(p.str("metadata"))
		errs = append(errs, e)
		if len(md) > 0 {
			d.Metadata = model.NewMetadata(md)
		}
		return d, errors.Join(errs...)
	}
	switch r.Method {
	case http.MethodPost:
		d, err := def()
		if err == nil {
			err = s.reg.CreateService(ctx, d)
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeOK(w)
	case http.MethodPut:
		cur, err := s.reg.GetService(ctx, svc)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		d, err := def()
		if err != nil {
			s.fail(w, r, err)
			return
		}
		cur.ProtectThreshold = d.ProtectThreshold
		if p.str("metadata") != "" {
			cur.Metadata = d.Metadata
		}
		if err := s.reg.UpdateService(ctx, cur); err != nil {
			s.fail(w, r, err)
			return
		}
		writeOK(w)
	case http.MethodDelete:
		if err := s.reg.DeleteService(ctx, svc); err != nil {
			s.fail(w, r, err)
			return
		}
		writeOK(w)
	case http.MethodGet:
		d, err := s.reg.GetService(ctx, svc)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		v, err := s.reg.Query(ctx, model.Query{Service: svc, IncludeDisabled: true})
		if err != nil {
			s.fail(w, r, err)
			return
		}
		clusters := []map[string]any{}
		seen := map[string]bool{}
		for _, inst := range v.Instances {
			c := inst.Key().Cluster
			if !seen[c] {
				seen[c] = true
				clusters = append(clusters, map[string]any{"name": c, "healthChecker": map[string]any{"type": string(d.Cluster(c).HealthCheck.Type)}, "metadata": map[string]string{}})
			}
		}
		md := d.Metadata.Map()
		if md == nil {
			md = map[string]string{}
		}
		writeJSON(w, map[string]any{
			"namespaceId": svc.Namespace, "groupName": svc.Group, "name": svc.Name,
			"protectThreshold": d.ProtectThreshold, "metadata": md, "ephemeral": d.Ephemeral,
			"selector": map[string]string{"type": "none"}, "clusters": clusters,
		})
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

func (s *Server) hServiceList(w http.ResponseWriter, r *http.Request) {
	p := params{r}
	if !s.allow(w, r, p.str("namespaceId"), p.str("groupName"), "", false) {
		return
	}
	page, err := p.integer("pageNo", 1)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	size, err := p.integer("pageSize", 20)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	group := p.str("groupName")
	if group == "" {
		group = model.DefaultGroup
	}
	l, err := s.reg.ListServices(r.Context(), registry.ListOptions{Namespace: namespaceOf(p.str("namespaceId")), Group: group, Page: page, PageSize: size})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	doms := make([]string, 0, len(l.Services))
	for _, sv := range l.Services {
		doms = append(doms, sv.Key.Name)
	}
	writeJSON(w, map[string]any{"count": l.Total, "doms": doms})
}

// hCatalog serves the console's catalog: services with their counts,
// filtered by a substring of the name and of the group.
func (s *Server) hCatalog(w http.ResponseWriter, r *http.Request) {
	p := params{r}
	ctx := r.Context()
	if !s.allow(w, r, p.str("namespaceId"), "", "", false) {
		return
	}
	page, err := p.integer("pageNo", 1)
	if err == nil && page < 1 {
		err = fmt.Errorf("%w: pageNo must be ≥ 1", model.ErrInvalid)
	}
	size, err2 := p.integer("pageSize", 20)
	if err = errors.Join(err, err2); err != nil {
		s.fail(w, r, err)
		return
	}
	l, err := s.reg.ListServices(ctx, registry.ListOptions{
		Namespace: namespaceOf(p.str("namespaceId")), Page: page, PageSize: size,
		NameContains: p.str("serviceNameParam"), GroupContains: p.str("groupNameParam"),
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	list := []map[string]any{}
	for _, sv := range l.Services {
		v, err := s.reg.Query(ctx, model.Query{Service: sv.Key, IncludeDisabled: true})
		if err != nil {
			s.fail(w, r, err)
			return
		}
		clusters := map[string]bool{}
		for _, inst := range v.Instances {
			clusters[inst.Key().Cluster] = true
		}
		list = append(list, map[string]any{
			"name": sv.Key.Name, "groupName": sv.Key.Group, "clusterCount": len(clusters),
			"ipCount": len(v.Instances), "healthyInstanceCount": v.HealthyCount(), "triggerFlag": fmt.Sprint(v.Protected),
		})
	}
	writeJSON(w, map[string]any{"count": l.Total, "serviceList": list})
}

func (s *Server) hMetrics(w http.ResponseWriter, r *http.Request) {
	c := s.reg.Counts()
	status := "UP"
	if !s.reg.Ready() {
		status = "DOWN"
	}
	if r.FormValue("gc") == "true" { // nacosd's own: measure live memory
		if s.auth.Enabled() {
			if _, ok := s.admin(w, r); !ok {
				return
			}
		}
		runtime.GC()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	conns := len(s.api.snapshot())
	p50, p99, pushes := s.metrics.percentiles()
	writeJSON(w, map[string]any{
		"status": status, "serviceCount": c.Services, "instanceCount": c.Instances, "watcherCount": c.Watchers,
		"subscribeCount":             s.subs.n.Load(), // gRPC and UDP subscriptions
		"clientCount":                conns + s.udp.count(),
		"connectionBasedClientCount": conns, "responsibleClientCount": conns,
		"pushCount": pushes, "pushP50Ms": p50.Milliseconds(), "pushP99Ms": p99.Milliseconds(),
		"mem": float64(ms.HeapInuse) / float64(max(ms.Sys, 1)), "cpu": 0, "load": 0,
		"heapInuseBytes": ms.HeapInuse, "goroutines": runtime.NumGoroutine(),
		"beatCount": s.beats.Load(),
	})
}

// hLoaderCurrent lists this node's gRPC connections, as Nacos's
// /v1/core/loader/current does: by connection ID, with the client's IP,
// SDK version and labels (its session's labels, see sessionLabels), when it
// connected, when it was last heard from, and nacosd's own session ID and
// count of the connection's instances.
func (s *Server) hLoaderCurrent(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if s.auth.Enabled() { // the clients' addresses and labels: admins only
		if _, ok := s.admin(w, r); !ok {
			return
		}
	}
	sessions, err := s.reg.Sessions(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	conns := map[string]*conn{}
	if s.api != nil {
		for _, c := range s.api.snapshot() {
			conns[c.sess.ID()] = c
		}
	}
	out := map[string]any{}
	for _, si := range sessions {
		c := conns[si.ID]
		if c == nil {
			continue // its connection has just ended
		}
		labels := si.Labels
		if labels == nil {
			labels = map[string]string{}
		}
		out[c.id] = map[string]any{
			"metaInfo": map[string]any{
				"connectType": "GRPC", "connectionId": c.id, "clientIp": labels["clientIp"], "version": labels["clientVersion"],
				"appName": labels["AppName"], "labels": labels,
				"createTime": si.Opened.UnixMilli(), "lastActiveTime": c.lastActive.Load(),
			},
			"sessionId": si.ID, "instanceCount": si.Instances,
		}
	}
	writeJSON(w, out)
}

// hPrometheus serves Muster's metrics of this node in the Prometheus text
// format: the registry's, and in a cluster the transport's, Distro's,
// Raft's and the health checks'.
func (s *Server) hPrometheus(w http.ResponseWriter, r *http.Request) {
	src := mustermetrics.Sources{Registry: s.reg, Health: s.reg.Internals().HealthChecks()}
	if s.node != nil {
		src.Transport, src.Distro, src.Raft = s.node.Transport(), s.node.Replicator(), s.node.Raft()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(mustermetrics.New(src), s.limits)
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
}
