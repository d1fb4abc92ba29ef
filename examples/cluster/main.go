// Command cluster is Muster's main demo: it runs a registry, plays a short
// scenario, narrates it, and ends with a summary table.
//
// The demo still runs a single standalone node and says so. The engine has
// cluster mode (Distro replication, Raft-stored persistent data, active
// health checks); the demo's three-node version on loopback is next.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
)

func main() {
	nodes := flag.Int("nodes", 1, "number of nodes (this release runs 1: replication is not there yet)")
	beatTimeout := flag.Duration("beat-timeout", time.Second, "how long a beat instance stays healthy without beats (Nacos: 15s)")
	flag.Parse()
	if err := run(*nodes, *beatTimeout); err != nil {
		log.Fatal(err)
	}
}

// step is one line of the summary table.
type step struct {
	name, result string
	took         time.Duration
}

type demo struct {
	ctx   context.Context
	reg   *registry.Registry
	steps []step
}

// do runs one step of the scenario and records how long it took.
func (d *demo) do(name string, f func() (string, error)) error {
	fmt.Printf("\n== %s\n", name)
	start := time.Now()
	result, err := f()
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	d.steps = append(d.steps, step{name, result, time.Since(start)})
	return nil
}

func say(format string, args ...any) { fmt.Printf("   "+format+"\n", args...) }

func run(nodes int, beatTimeout time.Duration) error {
	fmt.Println("Muster demo")
	if nodes != 1 {
		fmt.Printf("note: %d nodes asked for, but this demo runs 1 standalone node; the three-node demo is next\n", nodes)
	} else {
		fmt.Println("note: this demo runs one standalone node; the three-node demo (Distro, Raft, health checks) is next")
	}
	ctx := context.Background()
	cfg := registry.DefaultConfig()
	cfg.NodeID = "node-1"
	reg, err := registry.New(cfg)
	if err != nil {
		return err
	}
	if err := reg.Start(ctx); err != nil {
		return err
	}
	defer reg.Close()
	d := &demo{ctx: ctx, reg: reg}

	orders := model.ServiceKey{Group: "shop", Name: "orders"}
	payments := model.ServiceKey{Group: "shop", Name: "payments"}
	db := model.ServiceKey{Group: "infra", Name: "mysql"}

	// A watcher narrates every change of "orders", as a subscriber would see it.
	w, err := reg.Watch(ctx, model.Query{Service: orders})
	if err != nil {
		return err
	}
	defer w.Close()
	seen := make(chan uint64, 64)
	go func() {
		for {
			u, err := w.Next(ctx)
			if err != nil {
				close(seen)
				return
			}
			say("[watch orders] revision %d: %s", u.Revision, describe(u.Delta))
			seen <- u.Revision
		}
	}()
	waitWatch := func() error { // until the watcher has caught up with the registry
		v, err := reg.Query(ctx, model.Query{Service: orders})
		if err != nil {
			return err
		}
		deadline := time.After(5 * time.Second)
		for {
			select {
			case rev := <-seen:
				if rev >= v.Revision {
					return nil
				}
			case <-deadline:
				return fmt.Errorf("watcher did not reach revision %d", v.Revision)
			}
		}
	}
	if err := waitWatch(); err != nil {
		return err
	}

	var client *registry.Session
	if err := d.do("sessions register ephemeral instances", func() (string, error) {
		client, err = reg.OpenSession(ctx, registry.SessionOptions{TTL: 10 * time.Second})
		if err != nil {
			return "", err
		}
		for i := range 3 {
			if err := client.Register(ctx, model.NewInstance(orders, fmt.Sprintf("10.0.1.%d", i+1), 8080)); err != nil {
				return "", err
			}
		}
		if err := client.Register(ctx, model.NewInstance(payments, "10.0.1.1", 9090)); err != nil {
			return "", err
		}
		say("session %s published 3 orders instances and 1 payments instance", client.ID())
		return "4 instances in 2 services", waitWatch()
	}); err != nil {
		return err
	}

	if err := d.do("weighted selection", func() (string, error) {
		w := 0.25
		if err := reg.PatchInstance(ctx, model.InstancePatch{
			Key: model.NewInstance(orders, "10.0.1.1", 8080).Key(), Weight: &w,
		}); err != nil {
			return "", err
		}
		say("operator patched 10.0.1.1 to weight 0.25 (the others weigh 1)")
		picks := map[string]int{}
		for range 9000 {
			in, err := reg.SelectOne(ctx, model.Query{Service: orders})
			if err != nil {
				return "", err
			}
			picks[in.IP]++
		}
		say("9000 picks: %v", picks)
		return fmt.Sprintf("10.0.1.1 got %.1f%% (expected 11.1%%)", float64(picks["10.0.1.1"])/90), waitWatch()
	}); err != nil {
		return err
	}

	if err := d.do("a beat instance stops beating", func() (string, error) {
		beat := model.NewInstance(orders, "10.0.2.1", 8080)
		beat.Metadata = model.NewMetadata(map[string]string{
			model.MetaHeartBeatInterval: fmt.Sprint(beatTimeout.Milliseconds() / 3),
			model.MetaHeartBeatTimeout:  fmt.Sprint(beatTimeout.Milliseconds()),
			model.MetaIPDeleteTimeout:   fmt.Sprint(2 * beatTimeout.Milliseconds()),
		})
		interval, err := reg.HeartbeatInstance(ctx, beat)
		if err != nil {
			return "", err
		}
		say("10.0.2.1 registered by its first beat; told to beat every %v, then it goes silent", interval)
		start := time.Now()
		unhealthy, gone := waitFor(reg, orders, "10.0.2.1", beatTimeout*4)
		if unhealthy == 0 || gone == 0 {
			return "", fmt.Errorf("the silent instance did not expire in time")
		}
		say("unhealthy after %v, removed after %v", unhealthy.Round(time.Millisecond), gone.Round(time.Millisecond))
		_ = start
		return fmt.Sprintf("unhealthy at %v, gone at %v", unhealthy.Round(10*time.Millisecond), gone.Round(10*time.Millisecond)), waitWatch()
	}); err != nil {
		return err
	}

	if err := d.do("a persistent service with manual health", func() (string, error) {
		def := model.Service{Key: db, ProtectThreshold: 0.5, Clusters: []model.Cluster{{
			Name: model.DefaultCluster, HealthCheck: model.HealthCheck{Type: model.CheckNone},
		}}}
		if err := reg.CreateService(ctx, def); err != nil {
			return "", err
		}
		for i := range 2 {
			in := model.NewInstance(db, fmt.Sprintf("10.0.3.%d", i+1), 3306)
			in.Ephemeral = false
			if err := reg.Register(ctx, in); err != nil {
				return "", err
			}
		}
		if err := reg.SetHealth(ctx, model.NewInstance(db, "10.0.3.1", 3306).Key(), false); err != nil {
			return "", err
		}
		v, _ := reg.Query(ctx, model.Query{Service: db, HealthyOnly: true})
		say("1 of 2 healthy, threshold 0.5: protected=%v, %d instances served", v.Protected, len(v.Instances))
		return fmt.Sprintf("protection served %d of 2", len(v.Instances)), nil
	}); err != nil {
		return err
	}

	if err := d.do("the session closes", func() (string, error) {
		if err := client.Close(); err != nil {
			return "", err
		}
		v, _ := reg.Query(ctx, model.Query{Service: orders})
		say("every instance of the session left at once; orders now has %d", len(v.Instances))
		return "4 instances removed in one change per service", waitWatch()
	}); err != nil {
		return err
	}

	fmt.Println("\nSummary")
	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "step\tresult\ttook")
	for _, s := range d.steps {
		fmt.Fprintf(tw, "%s\t%s\t%v\n", s.name, s.result, s.took.Round(time.Microsecond))
	}
	return tw.Flush()
}

// waitFor polls until the instance ip of svc is unhealthy and then gone, and
// returns how long each took.
func waitFor(reg *registry.Registry, svc model.ServiceKey, ip string, limit time.Duration) (unhealthy, gone time.Duration) {
	start := time.Now()
	for time.Since(start) < limit {
		v, err := reg.Query(context.Background(), model.Query{Service: svc, IncludeDisabled: true})
		if err != nil {
			return
		}
		found := false
		for i := range v.Instances {
			if v.Instances[i].IP == ip {
				found = true
				if !v.RealHealthy(i) && unhealthy == 0 {
					unhealthy = time.Since(start)
				}
			}
		}
		if !found {
			gone = time.Since(start)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	return
}

// describe renders a delta for the narration.
func describe(d model.Delta) string {
	var parts []string
	for _, in := range d.Added {
		parts = append(parts, "+"+in.IP)
	}
	for _, in := range d.Removed {
		parts = append(parts, "-"+in.IP)
	}
	for _, in := range d.Updated {
		h := "healthy"
		if !in.Healthy {
			h = "unhealthy"
		}
		parts = append(parts, fmt.Sprintf("~%s (weight %g, %s)", in.IP, in.Weight, h))
	}
	if len(parts) == 0 {
		return "no instances yet"
	}
	return strings.Join(parts, " ")
}
