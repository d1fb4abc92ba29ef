package console

// This file is the only one of the package that calls the engine's APIs
// (registry, distro, raftstore): everything else asks the engine interface
// below, in the console's own types. When those APIs move, this file moves
// with them.

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/muster-io/muster/distro"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/raftstore"
	"github.com/muster-io/muster/registry"
)

// Node is one node the console shows: its registry, and optionally its Raft
// replica. A node's Distro replicator is found through the registry.
type Node struct {
	// Registry is the node's registry. Required.
	Registry *registry.Registry
	// Raft is the node's Raft replica (*raftstore.Node, node.Node.Raft()),
	// for the leader, the term and the indexes on the cluster page; nil
	// leaves them out.
	Raft RaftSource
}

// RaftSource is a Raft replica: *raftstore.Node implements it. Both methods
// must not block.
type RaftSource interface {
	Stats() raftstore.Stats
	Info() raftstore.Info
}

// distroSource is what the console asks of a registry's replicator:
// *distro.Replicator implements it.
type distroSource interface {
	Stats() distro.Stats
	Compare(ctx context.Context, peer string) (distro.ConsistencyReport, error)
}

// engine is everything the console asks of the nodes it shows. The first
// node is the one it reads from and writes through. Methods may be called
// concurrently.
type engine interface {
	// nodeIDs returns the IDs of the nodes shown, the local one first.
	nodeIDs() []string
	// namespaces lists the namespaces that hold services, with their counts
	// (the default one always).
	namespaces() []nsRow
	// services returns a page of a namespace's services, with each one's
	// counts and protection state.
	services(ctx context.Context, ns, search string, page, size int) (svcPage, error)
	// service returns a service's definition (passwords redacted), its
	// instances (disabled ones included) and the publishers of the
	// instances [from, from+n).
	service(ctx context.Context, key model.ServiceKey, from, n int) (svcDetail, error)
	// definition returns a service's stored definition, passwords included,
	// for an update.
	definition(ctx context.Context, key model.ServiceKey) (model.Service, error)
	// history returns what each node knows of an instance.
	history(key model.InstanceKey) []nodeHistory
	// watchService and watchCatalog return a function that blocks until the
	// service (or the namespace's list of services) changed after the
	// previous call (the first call returns at once), and one that closes
	// the watch.
	watchService(ctx context.Context, key model.ServiceKey) (next func(context.Context) error, stop func(), err error)
	watchCatalog(ctx context.Context, ns string) (next func(context.Context) error, stop func(), err error)
	// The writes, through the local node.
	patch(ctx context.Context, p model.InstancePatch) error
	removePatch(ctx context.Context, key model.InstanceKey) error
	updateService(ctx context.Context, def model.Service) error
	deregister(ctx context.Context, key model.InstanceKey) error
	// cluster describes each node shown and the members they see.
	cluster() []nodeState
	// compare runs a consistency check of node from's Distro records
	// against peer's.
	compare(ctx context.Context, from, peer string) (compareResult, error)
	// sample reads each node's counters for the charts.
	sample() []nodeSample
}

// nodes is the engine over Config.Nodes.
type nodes struct {
	list func() []Node
}

func (e nodes) get() []Node {
	var out []Node
	for _, n := range e.list() {
		if n.Registry != nil {
			out = append(out, n)
		}
	}
	return out
}

func (e nodes) local() (*registry.Registry, error) {
	ns := e.get()
	if len(ns) == 0 {
		return nil, errNoNode
	}
	return ns[0].Registry, nil
}

func (e nodes) nodeIDs() []string {
	var ids []string
	for _, n := range e.get() {
		ids = append(ids, n.Registry.NodeID())
	}
	return ids
}

func (e nodes) namespaces() []nsRow {
	reg, err := e.local()
	if err != nil {
		return []nsRow{{Name: model.DefaultNamespace}}
	}
	counts := reg.Counts()
	rows := []nsRow{{Name: model.DefaultNamespace, Services: counts.Namespaces[model.DefaultNamespace]}}
	for name, n := range counts.Namespaces {
		if name != model.DefaultNamespace {
			rows = append(rows, nsRow{Name: name, Services: n})
		}
	}
	sort.Slice(rows[1:], func(i, j int) bool { return rows[1+i].Name < rows[1+j].Name })
	return rows
}

func (e nodes) services(ctx context.Context, ns, search string, page, size int) (svcPage, error) {
	reg, err := e.local()
	if err != nil {
		return svcPage{}, err
	}
	opts := registry.ListOptions{Namespace: ns, Page: page, PageSize: size}
	// "group@@name" searches both, as Nacos's grouped names read.
	if g, n, ok := strings.Cut(search, "@@"); ok {
		opts.GroupContains, opts.NameContains = g, n
	} else {
		opts.NameContains = search
	}
	list, err := reg.ListServices(ctx, opts)
	if err != nil {
		return svcPage{}, err
	}
	out := svcPage{Total: list.Total}
	for _, s := range list.Services {
		row := svcRow{Key: s.Key, Ephemeral: s.Ephemeral, Defined: s.Defined, Instances: s.Instances}
		all, err := reg.Query(ctx, model.Query{Service: s.Key, IncludeDisabled: true})
		if err != nil {
			return svcPage{}, err
		}
		for i := range all.Instances {
			if all.RealHealthy(i) {
				row.Healthy++
			}
		}
		row.Threshold = all.Service.ProtectThreshold
		served, err := reg.Query(ctx, model.Query{Service: s.Key})
		if err != nil {
			return svcPage{}, err
		}
		row.Protected = served.Protected
		out.Rows = append(out.Rows, row)
	}
	return out, nil
}

func (e nodes) service(ctx context.Context, key model.ServiceKey, from, n int) (svcDetail, error) {
	reg, err := e.local()
	if err != nil {
		return svcDetail{}, err
	}
	def, err := reg.GetService(ctx, key)
	if err != nil && !errors.Is(err, registry.ErrNotFound) {
		return svcDetail{}, err
	}
	all, err := reg.Query(ctx, model.Query{Service: key, IncludeDisabled: true})
	if err != nil {
		return svcDetail{}, err
	}
	served, err := reg.Query(ctx, model.Query{Service: key})
	if err != nil {
		return svcDetail{}, err
	}
	d := svcDetail{
		Key:       key.WithDefaults(),
		Exists:    err == nil && (all.Revision > 0 || def.Key.Name != ""),
		Def:       def.Redacted(),
		Revision:  all.Revision,
		Protected: served.Protected,
		Total:     len(all.Instances),
	}
	if d.Def.Key.Name == "" {
		d.Def.Key = d.Key
		d.Def.Ephemeral = true
	}
	end := min(from+n, len(all.Instances))
	for i := from; i < end; i++ {
		in := all.Instances[i]
		row := instRow{Inst: in, RealHealthy: all.RealHealthy(i)}
		ex := reg.Explain(in.Key())
		published := ex.Instance
		row.Patched = ex.Present && (published.Weight != in.Weight || published.Enabled != in.Enabled || !published.Metadata.Equal(in.Metadata))
		for _, p := range ex.Publishers {
			row.Publishers = append(row.Publishers, describePublisher(p, ex.Events))
		}
		d.Rows = append(d.Rows, row)
	}
	return d, nil
}

// describePublisher says what publisher id is: the persistent store (""),
// a beat publisher (ip:port) or a session, and for a session the node that
// owns it, from the events it made.
func describePublisher(id string, events []registry.Event) publisher {
	if id == "" {
		return publisher{Kind: "persistent"}
	}
	p := publisher{Kind: "session", ID: id}
	if strings.Contains(id, ":") {
		p.Kind = "beat"
	}
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Publisher == id && events[i].Node != "" {
			p.Node = events[i].Node
			break
		}
	}
	return p
}

func (e nodes) definition(ctx context.Context, key model.ServiceKey) (model.Service, error) {
	reg, err := e.local()
	if err != nil {
		return model.Service{}, err
	}
	return reg.GetService(ctx, key)
}

func (e nodes) history(key model.InstanceKey) []nodeHistory {
	var out []nodeHistory
	for _, n := range e.get() {
		ex := n.Registry.Explain(key)
		h := nodeHistory{Node: n.Registry.NodeID(), Present: ex.Present, Instance: ex.Instance}
		for _, p := range ex.Publishers {
			h.Publishers = append(h.Publishers, describePublisher(p, ex.Events))
		}
		if c := ex.Check; c != nil {
			h.Check = &checkState{Type: string(c.Type), Healthy: c.Healthy, Checks: c.Checks,
				LastCheck: c.LastCheck, Damped: c.Damped, DampReason: c.DampReason,
				OK: c.ConsecutiveOK, Fail: c.ConsecutiveFail}
		}
		for _, ev := range ex.Events {
			h.Events = append(h.Events, event{Seq: ev.Seq, At: ev.At, Kind: ev.Kind.String(),
				Publisher: ev.Publisher, Node: ev.Node, Reason: ev.Reason,
				Removed: ev.Kind == registry.EventRemoved, Patch: ev.Kind == registry.EventPatched,
				PatchGone: ev.Kind == registry.EventPatchRemoved,
				Bad:       ev.Kind == registry.EventUnhealthy || ev.Kind == registry.EventDamped})
		}
		out = append(out, h)
	}
	return out
}

func (e nodes) watchService(ctx context.Context, key model.ServiceKey) (func(context.Context) error, func(), error) {
	reg, err := e.local()
	if err != nil {
		return nil, nil, err
	}
	w, err := reg.Watch(ctx, model.Query{Service: key, IncludeDisabled: true})
	if err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context) error { _, err := w.Next(ctx); return err }, w.Close, nil
}

func (e nodes) watchCatalog(ctx context.Context, ns string) (func(context.Context) error, func(), error) {
	reg, err := e.local()
	if err != nil {
		return nil, nil, err
	}
	w, err := reg.WatchServices(ctx, ns)
	if err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context) error { _, err := w.Next(ctx); return err }, w.Close, nil
}

func (e nodes) patch(ctx context.Context, p model.InstancePatch) error {
	reg, err := e.local()
	if err != nil {
		return err
	}
	return reg.PatchInstance(ctx, p)
}

func (e nodes) removePatch(ctx context.Context, key model.InstanceKey) error {
	reg, err := e.local()
	if err != nil {
		return err
	}
	return reg.RemovePatch(ctx, key)
}

func (e nodes) updateService(ctx context.Context, def model.Service) error {
	reg, err := e.local()
	if err != nil {
		return err
	}
	err = reg.UpdateService(ctx, def)
	if errors.Is(err, registry.ErrNotFound) {
		// A service that exists through its instances only gets its first
		// stored definition.
		err = reg.CreateService(ctx, def)
	}
	return err
}

func (e nodes) deregister(ctx context.Context, key model.InstanceKey) error {
	reg, err := e.local()
	if err != nil {
		return err
	}
	return reg.Deregister(ctx, key)
}

func (e nodes) cluster() []nodeState {
	var out []nodeState
	for _, n := range e.get() {
		st := nodeState{ID: n.Registry.NodeID(), Ready: n.Registry.Ready(), Counts: n.Registry.Counts().Instances}
		if rep := n.Registry.Internals().Replicator(); rep != nil {
			st.Members = slices.Sorted(slices.Values(rep.Members()))
			if d, ok := rep.(distroSource); ok {
				ds := d.Stats()
				st.Distro = &distroState{Ready: ds.Ready, Members: ds.Members, Records: ds.Records,
					Owned: ds.OwnedRecords, Pending: ds.PendingSyncs, LoadDuration: ds.LoadDuration,
					VerifyFailures: ds.VerifyFailures, SyncFailures: ds.SyncFailures}
			}
		}
		if n.Raft != nil {
			rs, info := n.Raft.Stats(), n.Raft.Info()
			st.Raft = &raftState{Replica: info.ReplicaID, Term: rs.Term, IsLeader: rs.IsLeader,
				Applied: rs.Applied, Last: rs.LastIndex, Lag: rs.ApplyLag}
			if info.HasLeader {
				st.Raft.Leader = info.Members[info.LeaderID]
			}
			for _, addr := range info.Members {
				st.Voters = append(st.Voters, addr)
			}
			slices.Sort(st.Voters)
		}
		out = append(out, st)
	}
	return out
}

func (e nodes) compare(ctx context.Context, from, peer string) (compareResult, error) {
	for _, n := range e.get() {
		if n.Registry.NodeID() != from {
			continue
		}
		d, ok := n.Registry.Internals().Replicator().(distroSource)
		if !ok {
			return compareResult{}, errNoDistro
		}
		rep, err := d.Compare(ctx, peer)
		if err != nil {
			return compareResult{}, err
		}
		res := compareResult{From: from, Peer: peer, Consistent: rep.Consistent(), Here: rep.Here,
			There: rep.There, Equal: rep.Equal, Buckets: rep.Buckets, Divergent: rep.DivergentBuckets,
			MissingHere: rep.MissingHere, MissingThere: rep.MissingThere, Older: rep.Older,
			Newer: rep.Newer, Conflicts: rep.Conflicts, Skipped: rep.SkippedBuckets}
		for i, d := range rep.Diffs {
			if i == maxDiffsShown {
				break
			}
			res.Diffs = append(res.Diffs, diffRow{Key: d.Key, Diff: d.Diff.String()})
		}
		return res, nil
	}
	return compareResult{}, errUnknownNode
}

func (e nodes) sample() []nodeSample {
	var out []nodeSample
	for _, n := range e.get() {
		st := n.Registry.Stats()
		s := nodeSample{Node: n.Registry.NodeID(), Instances: st.Instances, Delivery: st.WatchDelivery.Counts,
			Bounds: st.WatchDelivery.Bounds}
		for _, op := range st.Ops {
			s.Writes += op.Calls
		}
		out = append(out, s)
	}
	return out
}

// statusOf maps an engine's error to an HTTP status.
func statusOf(err error) int {
	switch {
	case errors.Is(err, model.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, registry.ErrNotFound), errors.Is(err, errUnknownNode):
		return http.StatusNotFound
	case errors.Is(err, registry.ErrKindMismatch), errors.Is(err, registry.ErrHealthChecked),
		errors.Is(err, registry.ErrServiceExists), errors.Is(err, registry.ErrServiceNotEmpty),
		errors.Is(err, registry.ErrSessionInstance), errors.Is(err, errNoDistro):
		return http.StatusConflict
	case errors.Is(err, registry.ErrLimit):
		return http.StatusTooManyRequests
	case errors.Is(err, registry.ErrNotReady), errors.Is(err, registry.ErrNoLeader),
		errors.Is(err, registry.ErrUnavailable), errors.Is(err, registry.ErrClosed), errors.Is(err, errNoNode):
		return http.StatusServiceUnavailable
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// The console's own types, filled above.

type nsRow struct {
	Name     string
	Services int
}

type svcPage struct {
	Rows  []svcRow
	Total int
}

type svcRow struct {
	Key                model.ServiceKey
	Ephemeral, Defined bool
	Instances, Healthy int
	Protected          bool
	Threshold          float64
}

type svcDetail struct {
	Key       model.ServiceKey
	Exists    bool
	Def       model.Service // passwords redacted
	Revision  uint64
	Protected bool
	Total     int // instances
	Rows      []instRow
}

type instRow struct {
	Inst        model.Instance // as served: patched, served health
	RealHealthy bool
	Patched     bool
	Publishers  []publisher
}

type publisher struct {
	Kind string // "session", "beat" or "persistent"
	ID   string
	Node string // the node that made its latest change here, if known
}

type nodeHistory struct {
	Node       string
	Present    bool
	Instance   model.Instance
	Publishers []publisher
	Check      *checkState
	Events     []event
}

type checkState struct {
	Type       string
	Healthy    bool
	Checks     uint64
	LastCheck  time.Time
	OK, Fail   int
	Damped     bool
	DampReason string
}

type event struct {
	Seq                 uint64
	At                  time.Time
	Kind                string
	Publisher, Node     string
	Reason              string
	Removed, Patch, Bad bool
	PatchGone           bool
}

type nodeState struct {
	ID      string
	Ready   bool
	Counts  int // instances held
	Members []string
	Voters  []string
	Distro  *distroState
	Raft    *raftState
}

type distroState struct {
	Ready                        bool
	Members, Records, Owned      int
	Pending                      int
	LoadDuration                 time.Duration
	VerifyFailures, SyncFailures uint64
}

type raftState struct {
	Replica, Term      uint64
	Leader             string
	IsLeader           bool
	Applied, Last, Lag uint64
}

type compareResult struct {
	From, Peer                                      string
	Consistent                                      bool
	Here, There, Equal, Buckets, Divergent, Skipped int
	MissingHere, MissingThere, Older, Newer         int
	Conflicts                                       int
	Diffs                                           []diffRow
}

type diffRow struct {
	Key, Diff string
}

type nodeSample struct {
	Node      string
	Writes    uint64 // every write call so far
	Instances int
	Delivery  []uint64 // the watch-delivery histogram's buckets so far
	Bounds    []time.Duration
}

// maxDiffsShown caps the differing records a consistency check lists.
const maxDiffsShown = 50
