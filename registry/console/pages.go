package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/muster-io/muster/model"
)

// The pages: each handler authorizes, builds its data (the same function the
// event stream calls to refresh it) and renders the page.

func (c *Console) pageServices(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ns := nsParam(q)
	u, ok := c.authorize(w, r, ns, false)
	if !ok {
		return
	}
	p := c.newPage(r, u, "Services", "services")
	p.Live, p.Stream = "live-services", p.Link("api/events", "view", "services", "ns", ns, "q", q.Get("q"), "page", q.Get("page"))
	d, err := c.servicesData(r.Context(), r, q)
	if err != nil {
		p.Error = err.Error()
	}
	p.Data = d
	c.render(w, http.StatusOK, p)
}

func (c *Console) pageService(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	key, err := serviceParam(q)
	if err != nil {
		writePageError(w, err)
		return
	}
	u, ok := c.authorize(w, r, key.Namespace, false)
	if !ok {
		return
	}
	p := c.newPage(r, u, key.GroupedName(), "services")
	p.Live, p.Stream = "live-service", p.Link("api/events", "view", "service", "ns", key.Namespace, "group", key.Group, "name", key.Name, "page", q.Get("page"))
	d, err := c.serviceData(r.Context(), key, pageParam(q))
	if err != nil {
		p.Error = err.Error()
	}
	p.Data = d
	c.render(w, http.StatusOK, p)
}

func (c *Console) pageInstance(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	key, err := instanceParam(q)
	if err != nil {
		writePageError(w, err)
		return
	}
	u, ok := c.authorize(w, r, key.Service.Namespace, false)
	if !ok {
		return
	}
	p := c.newPage(r, u, key.IP+":"+strconv.Itoa(key.Port), "services")
	p.Live = "live-instance"
	p.Stream = p.Link("api/events", "view", "instance", "ns", key.Service.Namespace, "group", key.Service.Group,
		"name", key.Service.Name, "cluster", key.Cluster, "ip", key.IP, "port", key.Port)
	p.Data = c.instanceData(key)
	c.render(w, http.StatusOK, p)
}

func (c *Console) pageCluster(w http.ResponseWriter, r *http.Request) {
	u, ok := c.authorize(w, r, "", false)
	if !ok {
		return
	}
	p := c.newPage(r, u, "Cluster", "cluster")
	p.Live, p.Stream = "live-cluster", p.Link("api/events", "view", "cluster")
	p.Data = c.clusterData()
	c.render(w, http.StatusOK, p)
}

func writePageError(w http.ResponseWriter, err error) {
	http.Error(w, err.Error(), http.StatusBadRequest)
}

// The query parameters.

func nsParam(q url.Values) string {
	if ns := q.Get("ns"); ns != "" {
		return ns
	}
	return model.DefaultNamespace
}

func pageParam(q url.Values) int {
	n, err := strconv.Atoi(q.Get("page"))
	if err != nil || n < 1 {
		return 1
	}
	return n
}

func serviceParam(q url.Values) (model.ServiceKey, error) {
	key := model.ServiceKey{Namespace: q.Get("ns"), Group: q.Get("group"), Name: q.Get("name")}.WithDefaults()
	if err := key.Validate(); err != nil {
		return key, err
	}
	return key, nil
}

func instanceParam(q url.Values) (model.InstanceKey, error) {
	svc, err := serviceParam(q)
	if err != nil {
		return model.InstanceKey{}, err
	}
	port, err := strconv.Atoi(q.Get("port"))
	if err != nil {
		return model.InstanceKey{}, fmt.Errorf("port %q: not a number", q.Get("port"))
	}
	key := model.InstanceKey{Service: svc, Cluster: q.Get("cluster"), IP: q.Get("ip"), Port: port}.WithDefaults()
	if err := key.Validate(); err != nil {
		return key, err
	}
	return key, nil
}

// The services page.

type servicesData struct {
	NS         string
	Namespaces []nsRow
	Search     string
	Page       int
	Pages      int
	Total      int
	Rows       []svcRow
}

// maxSearch bounds the search text (service names are at most 512
// characters, groups 128).
const maxSearch = 700

func (c *Console) servicesData(ctx context.Context, r *http.Request, q url.Values) (servicesData, error) {
	d := servicesData{NS: nsParam(q), Search: q.Get("q"), Page: pageParam(q)}
	if len(d.Search) > maxSearch {
		d.Search = d.Search[:maxSearch]
	}
	for _, ns := range c.eng.namespaces() {
		if c.cfg.Authorize != nil && r != nil {
			if _, err := c.cfg.Authorize(r, ns.Name, false); err != nil {
				continue
			}
		}
		d.Namespaces = append(d.Namespaces, ns)
	}
	if len(d.NS) > 128 {
		return d, fmt.Errorf("namespace: longer than 128 characters")
	}
	pg, err := c.eng.services(ctx, d.NS, d.Search, d.Page, c.cfg.PageSize)
	if err != nil {
		return d, err
	}
	d.Rows, d.Total = pg.Rows, pg.Total
	d.Pages = max(1, (pg.Total+c.cfg.PageSize-1)/c.cfg.PageSize)
	return d, nil
}

// The service page.

type serviceData struct {
	svcDetail
	Page, Pages int
	Clusters    []clusterRows
	// Checks are the clusters' health-check settings for the edit dialog:
	// the stored ones and those of the clusters that have instances.
	Checks []model.Cluster
}

type clusterRows struct {
	Name  string
	Check model.HealthCheck
	Rows  []instRow
}

func (c *Console) serviceData(ctx context.Context, key model.ServiceKey, pageNo int) (serviceData, error) {
	size := c.cfg.PageSize
	det, err := c.eng.service(ctx, key, (pageNo-1)*size, size)
	d := serviceData{svcDetail: det, Page: pageNo, Pages: max(1, (det.Total+size-1)/size)}
	if err != nil {
		return d, err
	}
	for _, row := range det.Rows {
		name := row.Inst.Cluster
		if name == "" {
			name = model.DefaultCluster
		}
		i := slices.IndexFunc(d.Clusters, func(cr clusterRows) bool { return cr.Name == name })
		if i < 0 {
			d.Clusters = append(d.Clusters, clusterRows{Name: name, Check: det.Def.Cluster(name).HealthCheck})
			i = len(d.Clusters) - 1
		}
		d.Clusters[i].Rows = append(d.Clusters[i].Rows, row)
	}
	d.Checks = append(d.Checks, det.Def.Clusters...)
	for _, cr := range d.Clusters {
		if !slices.ContainsFunc(d.Checks, func(cl model.Cluster) bool { return cl.Name == cr.Name }) {
			d.Checks = append(d.Checks, model.Cluster{Name: cr.Name})
		}
	}
	if len(d.Checks) == 0 {
		d.Checks = []model.Cluster{{Name: model.DefaultCluster}}
	}
	return d, nil
}

// The instance page.

type instanceData struct {
	Key      model.InstanceKey
	Present  bool // on the local node
	Nodes    []nodeHistory
	Timeline timeline
	// PatchLive is set when the local node's journal shows a patch still in
	// force; PatchDeadline, when the instance is gone, is when its
	// countdown ends (the patch is dropped PatchTTL after the instance
	// left).
	PatchLive     bool
	PatchDeadline time.Time
	PatchTTL      time.Duration
	Removal       string // the latest removal's reason on the local node
}

func (c *Console) instanceData(key model.InstanceKey) instanceData {
	d := instanceData{Key: key, Nodes: c.eng.history(key), PatchTTL: c.cfg.PatchTTL}
	d.Timeline = drawTimeline(d.Nodes, c.clock.Now())
	if len(d.Nodes) == 0 {
		return d
	}
	local := d.Nodes[0]
	d.Present = local.Present
	var removedAt time.Time
	for _, ev := range local.Events {
		switch {
		case ev.Patch:
			d.PatchLive = true
		case ev.PatchGone:
			d.PatchLive = false
		case ev.Removed:
			removedAt, d.Removal = ev.At, ev.Reason
		}
	}
	if d.PatchLive && !d.Present && !removedAt.IsZero() {
		d.PatchDeadline = removedAt.Add(c.cfg.PatchTTL)
	}
	return d
}

// The cluster page.

type clusterData struct {
	Nodes   []nodeState
	Members []memberRow
	Leader  string
	Charts  []chart
	Local   string
}

type memberRow struct {
	ID    string
	State string // "serving", "loading", "member" (seen by the nodes, not shown here), "down"
	Voter bool
}

func (c *Console) clusterData() clusterData {
	d := clusterData{Nodes: c.eng.cluster()}
	states := map[string]string{}
	voters := map[string]bool{}
	for _, n := range d.Nodes {
		for _, m := range n.Members {
			if states[m] == "" {
				states[m] = "member"
			}
		}
		for _, v := range n.Voters {
			voters[v] = true
			if states[v] == "" {
				states[v] = "down"
			}
		}
		if n.Raft != nil && n.Raft.Leader != "" && d.Leader == "" {
			d.Leader = n.Raft.Leader
		}
	}
	for _, n := range d.Nodes {
		states[n.ID] = "loading"
		if n.Ready {
			states[n.ID] = "serving"
		}
	}
	for _, id := range slices.Sorted(mapKeys(states)) {
		d.Members = append(d.Members, memberRow{ID: id, State: states[id], Voter: voters[id]})
	}
	if len(d.Nodes) > 0 {
		d.Local = d.Nodes[0].ID
	}
	d.Charts = c.stats.charts()
	return d
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// The read API: the pages' data as JSON, for scripts and tests.

func (c *Console) apiMe(w http.ResponseWriter, r *http.Request) {
	ns := r.URL.Query().Get("ns")
	u, ok := c.authorize(w, r, ns, false)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"user": u.User, "auth": u.Auth, "write": u.CanWrite})
}

func (c *Console) apiServices(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if _, ok := c.authorize(w, r, nsParam(q), false); !ok {
		return
	}
	d, err := c.servicesData(r.Context(), r, q)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (c *Console) apiService(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	key, err := serviceParam(q)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	if _, ok := c.authorize(w, r, key.Namespace, false); !ok {
		return
	}
	d, err := c.serviceData(r.Context(), key, pageParam(q))
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (c *Console) apiInstance(w http.ResponseWriter, r *http.Request) {
	key, err := instanceParam(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	if _, ok := c.authorize(w, r, key.Service.Namespace, false); !ok {
		return
	}
	d := c.instanceData(key)
	writeJSON(w, http.StatusOK, map[string]any{"key": d.Key, "present": d.Present, "nodes": d.Nodes,
		"patchLive": d.PatchLive, "patchDeadline": d.PatchDeadline, "removal": d.Removal})
}

func (c *Console) apiCluster(w http.ResponseWriter, r *http.Request) {
	if _, ok := c.authorize(w, r, "", false); !ok {
		return
	}
	d := c.clusterData()
	writeJSON(w, http.StatusOK, map[string]any{"nodes": d.Nodes, "members": d.Members, "leader": d.Leader,
		"samples": c.stats.len()})
}
