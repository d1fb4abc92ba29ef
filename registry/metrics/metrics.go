package metrics

import (
	"reflect"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/muster-io/muster/distro"
	"github.com/muster-io/muster/health"
	"github.com/muster-io/muster/internal/metric"
	"github.com/muster-io/muster/raftstore"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/transport"
)

// RegistrySource is what the collector reads from a registry: *registry.Registry implements
// it. Stats is called once per scrape and must be safe for concurrent use.
type RegistrySource interface {
	Stats() registry.Stats
}

// TransportSource is a transport with counters: *transport.TCP implements it.
type TransportSource interface {
	Stats() transport.TCPStats
}

// DistroSource is a Distro replicator: *distro.Replicator implements it.
type DistroSource interface {
	Stats() distro.Stats
}

// HealthSource is a health-check scheduler: *health.Scheduler implements it.
type HealthSource interface {
	Stats() health.SchedulerStats
}

// RaftSource is a Raft replica: *raftstore.Node implements it.
type RaftSource interface {
	Stats() raftstore.Stats
}

// Sources names the engines the collector reads. Every field is optional: a nil one (or a
// typed nil pointer) is skipped, and its metrics are neither described nor collected.
type Sources struct {
	Registry  RegistrySource
	Transport TransportSource
	Distro    DistroSource
	Health    HealthSource
	Raft      RaftSource
	// Node, if not empty, is added to every metric as the constant label node="<Node>", for
	// several nodes collected into one Prometheus registry (tests, one process running
	// several nodes). A process running one node leaves it empty and lets the scrape
	// target's labels say which node it is.
	Node string
}

// New returns a collector of the sources' metrics. It starts nothing and holds no state
// between scrapes; register it with a prometheus.Registerer of the host's choice.
func New(src Sources) prometheus.Collector {
	c := &collector{src: src}
	if isNil(src.Registry) {
		c.src.Registry = nil
	}
	if isNil(src.Transport) {
		c.src.Transport = nil
	}
	if isNil(src.Distro) {
		c.src.Distro = nil
	}
	if isNil(src.Health) {
		c.src.Health = nil
	}
	if isNil(src.Raft) {
		c.src.Raft = nil
	}
	var constLabels prometheus.Labels
	if src.Node != "" {
		constLabels = prometheus.Labels{"node": src.Node}
	}
	c.d = newDescs(constLabels)
	return c
}

// isNil reports whether v is nil or a nil pointer, map, slice, func or channel in an
// interface (a node without Raft returns a nil *raftstore.Node from Raft()).
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

type collector struct {
	src Sources
	d   *descs
}

// Describe implements prometheus.Collector: the descriptors of the present sources.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, g := range c.groups() {
		for _, d := range g {
			ch <- d
		}
	}
}

func (c *collector) groups() [][]*prometheus.Desc {
	var gs [][]*prometheus.Desc
	if c.src.Registry != nil {
		gs = append(gs, c.d.registry)
	}
	if c.src.Transport != nil {
		gs = append(gs, c.d.transport)
	}
	if c.src.Distro != nil {
		gs = append(gs, c.d.distro)
	}
	if c.src.Health != nil {
		gs = append(gs, c.d.health)
	}
	if c.src.Raft != nil {
		gs = append(gs, c.d.raft)
	}
	return gs
}

// Collect implements prometheus.Collector: one Stats call per source.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	e := emitter{ch: ch}
	d := c.d
	if s := c.src.Registry; s != nil {
		st := s.Stats()
		n := st.Counts
		if len(n.Namespaces) == 0 {
			e.gauge(d.regServices, 0, "")
		}
		for ns, v := range n.Namespaces {
			e.gauge(d.regServices, float64(v), ns)
		}
		e.gauge(d.regInstances, float64(n.Instances))
		e.gauge(d.regSessions, float64(n.Sessions))
		e.gauge(d.regWatchers, float64(n.Watchers))
		for ns, v := range st.Namespaces {
			e.gauge(d.regNsInstances, float64(v.Ephemeral), ns, "ephemeral")
			e.gauge(d.regNsInstances, float64(v.Persistent), ns, "persistent")
			e.gauge(d.regNsHealth, float64(v.Healthy), ns, "healthy")
			e.gauge(d.regNsHealth, float64(v.Unhealthy), ns, "unhealthy")
			e.gauge(d.regNsSessions, float64(v.Sessions), ns)
			e.gauge(d.regNsWatchers, float64(v.Watchers), ns)
		}
		for op := range registry.NumOps {
			o := st.Ops[op]
			e.counter(d.regWrites, o.Calls, op.String())
			for r := range registry.NumReasons {
				e.counter(d.regWriteErrors, o.Errors[r], op.String(), r.String())
			}
		}
		e.counter(d.regForwarded, st.Forwarded)
		e.counter(d.regForwardFailures, st.ForwardFailures)
		e.counter(d.regServed, st.Served)
		e.counter(d.regExpired, st.LeasesExpired, "lease")
		e.counter(d.regExpired, st.SessionsExpired, "session")
		e.histogram(d.regWatchDelivery, st.WatchDelivery)
	}
	if s := c.src.Transport; s != nil {
		t := s.Stats()
		e.gauge(d.trConns, float64(t.Conns))
		e.counter(d.trDials, t.Dials)
		e.counter(d.trDialFailures, t.DialFailures)
		e.counter(d.trAccepted, t.Accepted)
		for r := range transport.NumRefuseReasons {
			e.counter(d.trRefused, t.RefusedBy[r], r.String())
		}
		e.counter(d.trLimited, t.Limited)
		e.counter(d.trKept, t.Kept)
		e.counter(d.trShed, t.Shed-min(t.ShedBytes, t.Shed), "count")
		e.counter(d.trShed, t.ShedBytes, "bytes")
		e.counter(d.trFramesIn, t.FramesIn)
		e.counter(d.trFramesOut, t.FramesOut)
		e.counter(d.trBytesIn, t.BytesIn)
		e.counter(d.trBytesOut, t.BytesOut)
	}
	if s := c.src.Distro; s != nil {
		t := s.Stats()
		e.gauge(d.dReady, b2f(t.Ready))
		e.gauge(d.dLoadDuration, t.LoadDuration.Seconds())
		e.gauge(d.dLoadPeers, float64(t.LoadPeers))
		e.gauge(d.dMembers, float64(t.Members))
		e.gauge(d.dRecords, float64(t.LiveRecords), "live")
		e.gauge(d.dRecords, float64(t.Records-t.LiveRecords), "tombstone")
		e.gauge(d.dOwned, float64(t.OwnedRecords))
		e.gauge(d.dPending, float64(t.PendingSyncs))
		e.counter(d.dSyncsSent, t.SyncsSent)
		e.counter(d.dSyncRecordsSent, t.SyncRecordsSent)
		e.counter(d.dSyncFailures, t.SyncFailures)
		e.counter(d.dSyncsReceived, t.SyncsReceived)
		e.counter(d.dRecordsReceived, t.RecordsReceived)
		e.counter(d.dRecordsApplied, t.RecordsApplied)
		e.counter(d.dRecordsRefused, t.RefusedStale, "stale")
		e.counter(d.dRecordsRefused, t.RefusedNotOwner, "not_owner")
		e.counter(d.dMessagesRefused, t.RefusedNotMember, "not_member")
		e.counter(d.dMessagesRefused, t.Malformed, "malformed")
		e.counter(d.dVerifyRounds, t.VerifyRounds)
		e.counter(d.dVerifyFailures, t.VerifyFailures)
		e.counter(d.dDivergent, t.DivergentBuckets)
		e.counter(d.dVerifyAnswered, t.VerifyAnswered)
		e.counter(d.dRepairRecords, t.RepairRecords)
		e.counter(d.dRepairDrops, t.RepairDrops)
		e.counter(d.dRepairsReceived, t.RepairsReceived)
		e.counter(d.dOrphans, t.OrphansRemoved)
		e.counter(d.dAdoptions, t.Adoptions)
		e.counter(d.dSnapshotPages, t.SnapshotPages)
		e.counter(d.dVersionConflicts, t.VersionConflicts)
	}
	if s := c.src.Health; s != nil {
		t := s.Stats()
		e.gauge(d.hTargets, float64(t.Targets))
		e.gauge(d.hProbed, float64(t.Probed))
		e.gauge(d.hRunning, float64(t.Running))
		for _, k := range []struct {
			typ string
			c   health.CheckCounts
		}{{"tcp", t.TCP}, {"http", t.HTTP}, {"mysql", t.MySQL}} {
			e.counter(d.hChecks, k.c.Healthy, k.typ, "healthy")
			e.counter(d.hChecks, k.c.Failed-min(k.c.Definite, k.c.Failed), k.typ, "failed")
			e.counter(d.hChecks, k.c.Definite, k.typ, "definite_failure")
		}
		e.counter(d.hFlips, t.ToHealthy, "healthy")
		e.counter(d.hFlips, t.ToUnhealthy, "unhealthy")
		e.counter(d.hDampings, t.Dampings)
		e.gauge(d.hDamped, float64(t.Damped))
	}
	if s := c.src.Raft; s != nil {
		t := s.Stats()
		applied := t.Proposals - min(t.Proposals, t.ProposalsFailed+t.ProposalsRejected)
		e.counter(d.rProposals, applied, "applied")
		e.counter(d.rProposals, t.ProposalsRejected, "rejected")
		e.counter(d.rProposals, t.ProposalsFailed, "failed")
		e.counter(d.rEntries, t.Entries)
		e.counter(d.rEntriesFailed, t.EntriesFailed)
		e.counter(d.rForwarded, t.EntriesForwarded-min(t.EntriesForwarded, t.ForwardFallbacks), "taken")
		e.counter(d.rForwarded, t.ForwardFallbacks, "fell_back")
		e.counter(d.rForwardedIn, t.EntriesForwardedIn)
		e.counter(d.rMerged, t.MergedEntries)
		e.counter(d.rBatchWaits, t.BatchWaitsFilled, "filled")
		e.counter(d.rBatchWaits, t.BatchWaitsExpired, "expired")
		e.counter(d.rCommitDeferred, t.CommitWritesDeferred)
		e.counter(d.rLogWrites, t.LogWrites)
		e.counter(d.rEntryRetries, t.EntryAttemptsTimedOut, "timed_out")
		e.counter(d.rEntryRetries, t.EntryRetries-min(t.EntryRetries, t.EntryAttemptsTimedOut), "failed")
		e.gauge(d.rLazyCommit, b2f(t.LazyCommit))
		e.histogram(d.rProposeLatency, t.ProposeLatency)
		e.counter(d.rLeaderChanges, t.LeaderChanges)
		e.gauge(d.rHasLeader, b2f(t.LeaderID != 0))
		e.gauge(d.rIsLeader, b2f(t.IsLeader))
		e.gauge(d.rTerm, float64(t.Term))
		e.gauge(d.rApplied, float64(t.Applied))
		e.gauge(d.rLastIndex, float64(t.LastIndex))
		e.gauge(d.rApplyLag, float64(t.ApplyLag))
		e.counter(d.rSnapshots, t.SnapshotsCreated, "created")
		e.counter(d.rSnapshots, t.SnapshotsSent, "sent")
		e.counter(d.rSnapshots, t.SnapshotsAborted, "aborted")
		e.counter(d.rSnapshots, t.SnapshotsReceived, "received")
		e.counter(d.rSnapshots, t.SnapshotsRecovered, "recovered")
		in := t.Inbound
		e.counter(d.rInBatches, in.Batches)
		e.counter(d.rInChunks, in.Chunks)
		for _, r := range []struct {
			reason string
			n      uint64
		}{
			{"malformed", in.Malformed}, {"oversized", in.Oversized}, {"deployment", in.Deployment},
			{"shard", in.Shard}, {"target", in.Target}, {"sender", in.Sender}, {"peer", in.Peer},
			{"type", in.Type}, {"chunk", in.Chunk},
		} {
			e.counter(d.rInDropped, r.n, r.reason)
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// emitter sends const metrics; the descriptors are fixed, so MustNew cannot fail on them.
type emitter struct{ ch chan<- prometheus.Metric }

func (e emitter) gauge(d *prometheus.Desc, v float64, labels ...string) {
	e.ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func (e emitter) counter(d *prometheus.Desc, v uint64, labels ...string) {
	e.ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
}

// histogram converts a latency snapshot (durations) to a Prometheus histogram in seconds.
func (e emitter) histogram(d *prometheus.Desc, h metric.HistogramSnapshot, labels ...string) {
	buckets := make(map[float64]uint64, len(h.Bounds))
	h.Cumulative(func(le time.Duration, n uint64) { buckets[le.Seconds()] = n })
	e.ch <- prometheus.MustNewConstHistogram(d, h.Count, h.Sum.Seconds(), buckets, labels...)
}
