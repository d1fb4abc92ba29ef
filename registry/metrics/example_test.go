package metrics_test

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/metrics"
)

// A host registers the collector in a registry of its own (no global one) and serves it with
// promhttp.HandlerFor. Here the source is a standalone registry: only its counts are exported.
func Example() {
	reg, err := registry.New(registry.DefaultConfig())
	if err != nil {
		panic(err)
	}
	defer reg.Close()

	promReg := prometheus.NewRegistry()
	promReg.MustRegister(metrics.New(metrics.Sources{Registry: reg}))
	mfs, err := promReg.Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		fmt.Println(mf.GetName(), mf.GetMetric()[0].GetGauge().GetValue())
	}
	// Output:
	// muster_registry_instances 0
	// muster_registry_services 0
	// muster_registry_sessions 0
	// muster_registry_watchers 0
}
