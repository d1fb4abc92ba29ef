package metrics_test

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/metrics"
)

// A host registers the collector in a registry of its own (no global one) and serves it with
// promhttp.HandlerFor. Here the source is a standalone registry holding one instance: only the
// registry's metrics are exported.
func Example() {
	reg, err := registry.New(registry.DefaultConfig())
	if err != nil {
		panic(err)
	}
	defer reg.Close()
	ctx := context.Background()
	if err := reg.Start(ctx); err != nil {
		panic(err)
	}
	if err := reg.Register(ctx, model.NewInstance(model.ServiceKey{Name: "orders"}, "10.0.0.1", 8080)); err != nil {
		panic(err)
	}

	promReg := prometheus.NewRegistry()
	promReg.MustRegister(metrics.New(metrics.Sources{Registry: reg}))
	mfs, err := promReg.Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			if v == 0 || mf.GetType() == dto.MetricType_HISTOGRAM { // skip zeros and the histogram
				continue
			}
			labels := ""
			for _, l := range m.GetLabel() {
				labels += " " + l.GetName() + "=" + l.GetValue()
			}
			fmt.Printf("%s%s %v\n", mf.GetName(), labels, v)
		}
	}
	// Output:
	// muster_registry_instances 1
	// muster_registry_namespace_instances kind=ephemeral namespace=public 1
	// muster_registry_namespace_instances_by_health health=healthy namespace=public 1
	// muster_registry_services namespace=public 1
	// muster_registry_writes_total op=register 1
}
