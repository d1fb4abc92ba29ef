package registry_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
)

// Register an instance, query it, and watch the service change.
func Example() {
	ctx := context.Background()
	reg, err := registry.New(registry.DefaultConfig())
	if err != nil {
		panic(err)
	}
	if err := reg.Start(ctx); err != nil {
		panic(err)
	}
	defer reg.Close()

	orders := model.ServiceKey{Name: "orders"}
	if err := reg.Register(ctx, model.NewInstance(orders, "10.0.0.1", 8080)); err != nil {
		panic(err)
	}
	view, _ := reg.Query(ctx, model.Query{Service: orders})
	for _, in := range view.Instances {
		fmt.Println("query:", in.IP, in.Port, in.Healthy)
	}

	w, _ := reg.Watch(ctx, model.Query{Service: orders})
	defer w.Close()
	u, _ := w.Next(ctx) // the current view
	fmt.Println("watch: added", len(u.Delta.Added))

	_ = reg.Register(ctx, model.NewInstance(orders, "10.0.0.2", 8080))
	u, _ = w.Next(ctx)
	fmt.Println("watch: added", u.Delta.Added[0].IP, "now", len(u.View.Instances))
	// Output:
	// query: 10.0.0.1 8080 true
	// watch: added 1
	// watch: added 10.0.0.2 now 2
}

// A session's instances live as long as the session.
func ExampleRegistry_OpenSession() {
	ctx := context.Background()
	reg, _ := registry.New(registry.DefaultConfig())
	_ = reg.Start(ctx)
	defer reg.Close()

	api := model.ServiceKey{Name: "api"}
	sess, _ := reg.OpenSession(ctx, registry.SessionOptions{TTL: 20 * time.Second})
	_ = sess.Register(ctx, model.NewInstance(api, "10.0.0.1", 80))
	_ = sess.Register(ctx, model.NewInstance(api, "10.0.0.1", 81))

	v, _ := reg.Query(ctx, model.Query{Service: api})
	fmt.Println("while open:", len(v.Instances))
	_ = sess.Close()
	v, _ = reg.Query(ctx, model.Query{Service: api})
	fmt.Println("after close:", len(v.Instances))
	// Output:
	// while open: 2
	// after close: 0
}

// Beat instances go unhealthy, then away, when their beats stop. A fake
// clock makes the 30 seconds pass at once.
func ExampleRegistry_Heartbeat() {
	ctx := context.Background()
	clock := clockwork.NewFakeClock()
	cfg := registry.DefaultConfig()
	cfg.Clock = clock
	reg, _ := registry.New(cfg)
	_ = reg.Start(ctx)
	defer reg.Close()

	web := model.ServiceKey{Name: "web"}
	inst := model.NewInstance(web, "10.0.0.7", 80)
	res, _ := reg.HeartbeatInstance(ctx, inst) // registers it: the registry did not hold it
	fmt.Println("registered:", res.Registered, "beat every", res.Interval)

	w, _ := reg.Watch(ctx, model.Query{Service: web, IncludeDisabled: true})
	defer w.Close()
	_, _ = w.Next(ctx)
	clock.Advance(16 * time.Second)
	u, _ := w.Next(ctx)
	fmt.Println("after 16 s: really healthy:", u.View.RealHealthy(0))
	clock.Advance(15 * time.Second)
	u, _ = w.Next(ctx)
	fmt.Println("after 31 s: instances:", len(u.View.Instances), "removed:", len(u.Delta.Removed))
	// Output:
	// registered: true beat every 5s
	// after 16 s: really healthy: false
	// after 31 s: instances: 0 removed: 1
}

// Weighted selection with float weights.
func ExampleRegistry_SelectOne() {
	ctx := context.Background()
	cfg := registry.DefaultConfig()
	cfg.Rand = rand.NewPCG(1, 2) // a fixed seed: the same picks every run
	reg, _ := registry.New(cfg)
	_ = reg.Start(ctx)
	defer reg.Close()

	pay := model.ServiceKey{Name: "pay"}
	for i, w := range []float64{0.25, 0.5} {
		in := model.NewInstance(pay, fmt.Sprintf("10.0.0.%d", i+1), 80)
		in.Weight = w
		_ = reg.Register(ctx, in)
	}
	counts := map[string]int{}
	for range 3000 {
		in, _ := reg.SelectOne(ctx, model.Query{Service: pay})
		counts[in.IP]++
	}
	fmt.Println("about twice as often:", counts["10.0.0.2"] > counts["10.0.0.1"]*3/2)
	// Output:
	// about twice as often: true
}

// One instance by its key, with an operator's patch applied.
func ExampleRegistry_GetInstance() {
	ctx := context.Background()
	reg, _ := registry.New(registry.DefaultConfig())
	_ = reg.Start(ctx)
	defer reg.Close()

	inst := model.NewInstance(model.ServiceKey{Name: "web"}, "10.0.0.7", 80)
	_ = reg.Register(ctx, inst)
	w := 2.5
	_ = reg.PatchInstance(ctx, model.InstancePatch{Key: inst.Key(), Weight: &w})
	got, _ := reg.GetInstance(ctx, inst.Key())
	fmt.Println(got.IP, got.Weight, got.Healthy)
	_, err := reg.GetInstance(ctx, model.NewInstance(inst.Service, "10.0.0.8", 80).Key())
	fmt.Println(errors.Is(err, registry.ErrNotFound))
	// Output:
	// 10.0.0.7 2.5 true
	// true
}

// Sessions carry labels that a listing of the node's sessions shows.
func ExampleRegistry_Sessions() {
	ctx := context.Background()
	reg, _ := registry.New(registry.DefaultConfig())
	_ = reg.Start(ctx)
	defer reg.Close()

	sess, _ := reg.OpenSession(ctx, registry.SessionOptions{Labels: map[string]string{"clientIp": "10.0.0.7", "app": "orders"}})
	_ = sess.Register(ctx, model.NewInstance(model.ServiceKey{Name: "orders"}, "10.0.0.7", 8080))
	list, _ := reg.Sessions(ctx)
	for _, s := range list {
		fmt.Println(s.Labels["app"], s.Labels["clientIp"], s.Instances)
	}
	// Output:
	// orders 10.0.0.7 1
}

// A catalog watch sees services appear and leave in a namespace.
func ExampleRegistry_WatchServices() {
	ctx := context.Background()
	reg, _ := registry.New(registry.DefaultConfig())
	_ = reg.Start(ctx)
	defer reg.Close()

	w, _ := reg.WatchServices(ctx, "") // the default namespace
	defer w.Close()
	u, _ := w.Next(ctx)
	fmt.Println("services:", len(u.Catalog.Services))
	_ = reg.CreateService(ctx, model.Service{Key: model.ServiceKey{Name: "pay"}})
	u, _ = w.Next(ctx)
	fmt.Println("added:", u.Added[0].Name)
	_ = reg.DeleteService(ctx, model.ServiceKey{Name: "pay"})
	u, _ = w.Next(ctx)
	fmt.Println("removed:", u.Removed[0].Name, "services:", len(u.Catalog.Services))
	// Output:
	// services: 0
	// added: pay
	// removed: pay services: 0
}
