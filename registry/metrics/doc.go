// Package metrics exports Muster's counters to Prometheus. It is the only package of the
// module that imports github.com/prometheus/client_golang: the engine packages keep their own
// counters (atomic, allocation-free on their hot paths) and return them as plain structs from
// Stats methods (transport.TCP.Stats, distro.Replicator.Stats, health.Scheduler.Stats,
// raftstore.Node.Stats, registry.Registry.Counts); an embedder who does not import this package
// links no metrics library.
//
// # Usage
//
// New returns a prometheus.Collector over the engines the host names in Sources; there is no
// global registry, the host registers the collector where it likes:
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(metrics.New(metrics.Sources{
//		Registry:  n.Registry(),
//		Transport: n.Transport(),
//		Raft:      n.Raft(), // nil without Raft: skipped
//	}))
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// Every source is optional and is a one-method interface, so a host can pass only the engines
// it runs, or its own adapter (a typed nil pointer counts as absent). Each scrape calls each
// source's Stats once; the collector holds no state of its own, so two collectors over two
// nodes in one process never see each other (set Sources.Node to tell them apart in one
// Prometheus registry: it becomes a constant "node" label).
//
// The metrics, their types, labels and meanings are listed in docs/monitoring.md. Names follow
// the Prometheus conventions: muster_<subsystem>_<name>, base units (seconds, bytes), _total
// on counters.
//
// # Growing
//
// Sources grow by adding: a new engine counter becomes a new field in its Stats struct and a
// new metric here; an optional capability of a source is found by type assertion (the
// registry's own counters, phase 2 of issue 17, will be read through a Stats method that the
// value passed as Sources.Registry is asked for).
package metrics
