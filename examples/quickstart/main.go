// Command quickstart embeds a Muster registry in a program: it registers
// instances, queries them, watches a service and picks instances by weight.
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
)

func main() {
	ctx := context.Background()
	reg, err := registry.New(registry.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	if err := reg.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer reg.Close()

	orders := model.ServiceKey{Group: "shop", Name: "orders"}

	// A session stands for a client connection: its instances live as long
	// as it does.
	sess, err := reg.OpenSession(ctx, registry.SessionOptions{TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	for i, weight := range []float64{1, 3} {
		inst := model.NewInstance(orders, fmt.Sprintf("10.0.0.%d", i+1), 8080)
		inst.Weight = weight
		inst.Metadata = model.NewMetadata(map[string]string{"version": "1.4"})
		if err := sess.Register(ctx, inst); err != nil {
			log.Fatal(err)
		}
	}

	// Watch the service: the first update is the current view.
	w, err := reg.Watch(ctx, model.Query{Service: orders})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	u, _ := w.Next(ctx)
	fmt.Printf("revision %d: %d instances\n", u.Revision, len(u.View.Instances))

	// An instance without a session is kept alive by heartbeats.
	beat := model.NewInstance(orders, "10.0.0.9", 8080)
	res, err := reg.HeartbeatInstance(ctx, beat) // a beat that carries its instance registers it
	if err != nil {
		log.Fatal(err)
	}
	u, _ = w.Next(ctx)
	fmt.Printf("revision %d: added %s, beat every %v\n", u.Revision, u.Delta.Added[0].IP, res.Interval)

	// Weighted selection among the three instances: 10.0.0.2 (weight 3)
	// comes up about three times as often as 10.0.0.1 and the beat instance
	// 10.0.0.9 (weight 1 each): about 600, 200 and 200 of 1000 picks.
	picks := map[string]int{}
	for range 1000 {
		inst, err := reg.SelectOne(ctx, model.Query{Service: orders})
		if err != nil {
			log.Fatal(err)
		}
		picks[inst.IP]++
	}
	fmt.Println("picks:", picks)

	// Closing the session removes its instances at once.
	_ = sess.Close()
	u, _ = w.Next(ctx)
	fmt.Printf("revision %d: removed %d, %d left\n", u.Revision, len(u.Delta.Removed), len(u.View.Instances))
}
