package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
)

// The services of the scenario.
var (
	orders    = model.ServiceKey{Group: "shop", Name: "orders"}    // ephemeral, one instance per node's session
	payments  = model.ServiceKey{Group: "shop", Name: "payments"}  // ephemeral, in the first session
	inventory = model.ServiceKey{Group: "shop", Name: "inventory"} // ephemeral, kept alive by client beats
	database  = model.ServiceKey{Group: "infra", Name: "db"}       // persistent, TCP-checked
)

// demo is one run of the scenario.
type demo struct {
	ctx context.Context
	o   options
	c   *cluster

	outMu sync.Mutex // the narration: steps and watchers write to it
	steps []step

	bgCtx  context.Context // watchers and the beat client
	bgStop context.CancelFunc
	bg     sync.WaitGroup

	watchNode string            // the node the watchers are on
	sessionIP map[string]string // node ID → the orders IP its session published
	beats     []model.Instance  // inventory instances, beaten by the client
	dbPorts   []int             // the db instances' listeners' ports
	listeners map[int]*listener
	victim    int            // the node crashed and restarted
	metrics   *metricsServer // nil with -metrics ""
	console   *consoleServer // nil without -console
}

// run plays the scenario. It returns the steps done so far and the first
// failure.
func run(ctx context.Context, o options) ([]step, error) {
	if o.nodes < 3 || o.nodes > 9 {
		return nil, fmt.Errorf("-nodes must be 3–9 (a Raft majority has to survive one node down), got %d", o.nodes)
	}
	if o.out == nil {
		o.out = io.Discard
	}
	dir := o.dir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "muster-demo-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	c, err := newCluster(o.nodes, o.t, dir, logger(o.verbose))
	if err != nil {
		return nil, err
	}
	d := &demo{ctx: ctx, o: o, c: c, sessionIP: map[string]string{}, listeners: map[int]*listener{}}
	d.bgCtx, d.bgStop = context.WithCancel(ctx)
	defer d.shutdown()

	fmt.Fprintf(o.out, "Muster demo: %d nodes on 127.0.0.1, real TCP, memberlist, Dragonboat and Badger in %s\n", o.nodes, dir)
	if o.metrics != "" {
		if d.metrics, err = serveMetrics(c, o.metrics); err != nil {
			return nil, err
		}
		fmt.Fprintf(o.out, "Prometheus metrics of every node: %s\n", d.metrics.url())
	}
	if o.console != "" {
		if d.console, err = serveConsole(c, o.console); err != nil {
			return nil, err
		}
		fmt.Fprintf(o.out, "Web console of the nodes: %s\n", d.console.url())
	}
	for _, s := range []struct {
		name string
		f    func() (string, error)
	}{
		{fmt.Sprintf("start %d nodes", o.nodes), d.startNodes},
		{"ephemeral instances registered on different nodes", d.registerEphemeral},
		{"weighted selection", d.weighted},
		{"a TCP-checked persistent instance's listener stops", d.listenerStops},
		{"its listener comes back", d.listenerBack},
		{"the Raft leader's node crashes", d.crash},
		{"a persistent write while it is down", d.writeWhileDown},
		{"the node restarts", d.restart},
		{"what an operator sees", d.monitoring},
	} {
		if err := d.do(s.name, s.f); err != nil {
			return d.steps, err
		}
	}
	return d.steps, nil
}

// do runs one step, narrates it and records how long it took.
func (d *demo) do(name string, f func() (string, error)) error {
	d.printf("\n== %d. %s\n", len(d.steps)+1, name)
	start := time.Now()
	result, err := f()
	if err != nil {
		return fmt.Errorf("step %q: %w", name, err)
	}
	d.outMu.Lock()
	d.steps = append(d.steps, step{name, result, time.Since(start)})
	d.outMu.Unlock()
	d.say("-> %s", result)
	return nil
}

func (d *demo) printf(format string, args ...any) {
	d.outMu.Lock()
	defer d.outMu.Unlock()
	fmt.Fprintf(d.o.out, format, args...)
}

func (d *demo) say(format string, args ...any) { d.printf("   "+format+"\n", args...) }

// until polls cond until it holds and returns how long that took, or fails
// after limit.
func (d *demo) until(limit time.Duration, what string, cond func() bool) (time.Duration, error) {
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			return 0, fmt.Errorf("not within %v: %s", limit, what)
		}
		select {
		case <-d.ctx.Done():
			return 0, d.ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return time.Since(start), nil
}

// shutdown stops the client and the watchers, then every node gracefully.
func (d *demo) shutdown() {
	if d.console != nil {
		if d.o.linger > 0 {
			fmt.Fprintf(d.o.out, "The console stays up for %v at %s (Ctrl-C ends it)\n", d.o.linger, d.console.url())
			t := time.NewTimer(d.o.linger)
			select {
			case <-t.C:
			case <-d.ctx.Done():
			}
			t.Stop()
		}
		d.console.close()
	}
	if d.metrics != nil {
		d.metrics.close()
	}
	d.bgStop()
	d.bg.Wait()
	d.c.close()
	for _, l := range d.listeners {
		l.close()
	}
}

func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }

// ---- step 1 ----

func (d *demo) startNodes() (string, error) {
	for i := range d.c.specs {
		n, err := d.c.start(d.ctx, i)
		if err != nil {
			return "", err
		}
		d.say("%s: gossip %s, transport %s (Distro and Raft)", n.id, n.gossip, n.spec.tcp)
	}
	took, err := d.until(30*time.Second, "every node ready, in one membership, with one Raft leader", d.c.settled)
	if err != nil {
		return "", err
	}
	leader := d.c.leader()
	d.say("all %d ready after %s: each has loaded its peers' data and applied the Raft log; leader %s", len(d.c.specs), ms(took), leader)
	// The watchers go on a node that is not the leader, which is crashed later.
	for _, n := range d.c.live() {
		if n.id != leader {
			d.watchNode = n.id
			break
		}
	}
	w := d.c.node(d.c.index(d.watchNode))
	for _, svc := range []model.ServiceKey{orders, database} {
		if err := d.watch(w, svc); err != nil {
			return "", err
		}
	}
	d.say("watchers on %s print every change of %s and %s as a typed delta (+ added, - removed, ~ updated)", d.watchNode, orders.Name, database.Name)
	return fmt.Sprintf("%d members, Raft leader %s", len(d.c.specs), leader), nil
}

// settled reports whether every running node is ready, sees exactly the
// running nodes as members, and agrees on a Raft leader.
func (c *cluster) settled() bool {
	live := c.live()
	for _, n := range live {
		if !n.reg.Ready() || len(n.reg.Internals().Replicator().Members()) != len(live) {
			return false
		}
	}
	return c.leader() != ""
}

func (d *demo) watch(n *node, svc model.ServiceKey) error {
	w, err := n.reg.Watch(d.ctx, model.Query{Service: svc})
	if err != nil {
		return err
	}
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		defer w.Close()
		for {
			u, err := w.Next(d.bgCtx)
			if err != nil {
				return
			}
			d.say("[watch %s on %s] revision %d: %s", svc.Name, n.id, u.Revision, describe(u))
		}
	}()
	return nil
}

// describe renders an update for the narration: the delta of the served
// instances, and the real health of instances served healthy only because
// the protection threshold was reached.
func describe(u registry.Update) string {
	var parts []string
	for _, in := range u.Delta.Added {
		parts = append(parts, "+"+model.Endpoint(in.IP, in.Port))
	}
	for _, in := range u.Delta.Removed {
		parts = append(parts, "-"+model.Endpoint(in.IP, in.Port))
	}
	for _, in := range u.Delta.Updated {
		parts = append(parts, fmt.Sprintf("~%s (weight %g, %s)", model.Endpoint(in.IP, in.Port), in.Weight, health(in.Healthy)))
	}
	v := u.View
	if len(v.Instances) == 0 {
		return strings.Join(append(parts, "(no instances)"), " ")
	}
	if len(parts) > 0 && !v.Protected {
		return strings.Join(parts, " ")
	}
	// Nothing served changed, or protection hides real health: show it.
	var real []string
	for i, in := range v.Instances {
		real = append(real, model.Endpoint(in.IP, in.Port)+" "+health(v.RealHealthy(i)))
	}
	if v.Protected {
		parts = append(parts, "protection threshold reached, all served as healthy;")
	}
	parts = append(parts, "real health: "+strings.Join(real, ", "))
	return strings.Join(parts, " ")
}

func health(ok bool) string {
	if ok {
		return "healthy"
	}
	return "unhealthy"
}

// ---- step 2 ----

func (d *demo) registerEphemeral() (string, error) {
	live := d.c.live()
	for i, n := range live {
		s, err := n.reg.OpenSession(d.ctx, registry.SessionOptions{})
		if err != nil {
			return "", err
		}
		ip := fmt.Sprintf("10.0.1.%d", i+1)
		if err := s.Register(d.ctx, model.NewInstance(orders, ip, 8080)); err != nil {
			return "", err
		}
		d.sessionIP[n.id] = ip
		what := "orders " + ip + ":8080"
		if i == 0 {
			if err := s.Register(d.ctx, model.NewInstance(payments, "10.0.2.1", 9090)); err != nil {
				return "", err
			}
			what += " and payments 10.0.2.1:9090"
		}
		d.say("%s: a client session registers %s", n.id, what)
	}

	// Beat instances live on their owner (rendezvous hash of ip:port); the
	// demo picks two per node, so that the crash below moves some.
	d.beats = pickBeats(live[0], len(live), d.o.t)
	via := live[len(live)-1]
	for _, b := range d.beats {
		if _, err := via.reg.HeartbeatInstance(d.ctx, b); err != nil {
			return "", err
		}
	}
	var owners []string
	for _, b := range d.beats {
		owners = append(owners, fmt.Sprintf("%s→%s", b.IP, via.reg.Owner(b.IP, b.Port)))
	}
	d.say("%s: a client's first beats register %d inventory instances; each is forwarded to its owner: %s",
		via.id, len(d.beats), strings.Join(owners, " "))
	d.startBeating()

	total := len(live) + 1 + len(d.beats)
	took, err := d.until(10*time.Second, "every node serves every ephemeral instance", func() bool {
		for _, n := range d.c.live() {
			if len(served(n, orders)) != len(live) || len(served(n, payments)) != 1 || len(served(n, inventory)) != len(d.beats) {
				return false
			}
		}
		return true
	})
	if err != nil {
		return "", err
	}
	d.say("every node serves all %d after %s: each owner sent its records to the others", total, ms(took))
	return fmt.Sprintf("%d instances in 3 services, served by every node after %s", total, ms(took)), nil
}

// pickBeats returns inventory instances, two owned by each of n nodes in
// node v's view of the membership, with beat timings from t.
func pickBeats(v *node, n int, t timings) []model.Instance {
	md := model.NewMetadata(map[string]string{
		model.MetaHeartBeatInterval: strconv.FormatInt((t.BeatTimeout / 6).Milliseconds(), 10),
		model.MetaHeartBeatTimeout:  strconv.FormatInt(t.BeatTimeout.Milliseconds(), 10),
		model.MetaIPDeleteTimeout:   strconv.FormatInt(2*t.BeatTimeout.Milliseconds(), 10),
	})
	owned := map[string]int{}
	var out []model.Instance
	for k := 1; len(out) < 2*n && k < 250; k++ {
		b := model.NewInstance(inventory, fmt.Sprintf("10.0.3.%d", k), 7000)
		b.Metadata = md
		if o := v.reg.Owner(b.IP, b.Port); owned[o] < 2 {
			owned[o]++
			out = append(out, b)
		}
	}
	return out
}

// startBeating runs the client that beats every inventory instance, through
// any node that answers (a node that is not the owner forwards the beat).
func (d *demo) startBeating() {
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		t := time.NewTicker(d.o.t.BeatTimeout / 6)
		defer t.Stop()
		for k := 0; ; k++ {
			select {
			case <-d.bgCtx.Done():
				return
			case <-t.C:
			}
			for _, b := range d.beats {
				for _, n := range rotate(d.c.live(), k) {
					ctx, cancel := context.WithTimeout(d.bgCtx, time.Second)
					_, err := n.reg.HeartbeatInstance(ctx, b)
					cancel()
					if err == nil {
						break
					}
				}
			}
		}
	}()
}

func rotate[T any](s []T, k int) []T {
	if len(s) == 0 {
		return s
	}
	k %= len(s)
	return append(s[k:], s[:k]...)
}

// served returns the instances n serves for svc, by endpoint; nil when n
// does not answer.
func served(n *node, svc model.ServiceKey) map[string]servedInst {
	v, err := n.reg.Query(context.Background(), model.Query{Service: svc, IncludeDisabled: true})
	if err != nil {
		return nil
	}
	out := map[string]servedInst{}
	for i, in := range v.Instances {
		out[model.Endpoint(in.IP, in.Port)] = servedInst{in, v.RealHealthy(i)}
	}
	return out
}

type servedInst struct {
	model.Instance
	healthy bool
}

// ---- step 3 ----

func (d *demo) weighted() (string, error) {
	live := d.c.live()
	target := model.NewInstance(orders, "10.0.1.1", 8080)
	w := 0.25
	if err := live[1].reg.PatchInstance(d.ctx, model.InstancePatch{Key: target.Key(), Weight: &w}); err != nil {
		return "", err
	}
	d.say("%s: an operator patches 10.0.1.1 to weight 0.25 (the others weigh 1); patches are kept in Raft", live[1].id)
	took, err := d.until(5*time.Second, "every node serves the new weight", func() bool {
		for _, n := range d.c.live() {
			if served(n, orders)["10.0.1.1:8080"].Weight != w {
				return false
			}
		}
		return true
	})
	if err != nil {
		return "", err
	}
	d.say("every node applied it after %s", ms(took))
	const picks = 9000
	at := live[len(live)-1]
	hits := 0
	for range picks {
		in, err := at.reg.SelectOne(d.ctx, model.Query{Service: orders})
		if err != nil {
			return "", err
		}
		if in.IP == target.IP {
			hits++
		}
	}
	got, want := float64(hits)/picks, w/(w+float64(len(live)-1))
	if math.Abs(got-want) > 0.03 {
		return "", fmt.Errorf("10.0.1.1 got %.1f%% of the picks, want %.1f%%", 100*got, 100*want)
	}
	d.say("%s: %d picks, 10.0.1.1 got %d", at.id, picks, hits)
	return fmt.Sprintf("10.0.1.1 got %.1f%% of %d picks (expected %.1f%%)", 100*got, picks, 100*want), nil
}

// ---- steps 4 and 5 ----

// listener accepts TCP connections and closes them: what a TCP check needs.
type listener struct {
	l    net.Listener
	done chan struct{}
}

func listen(addr string) (*listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &listener{l: l, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	return s, nil
}

func (s *listener) port() int { return s.l.Addr().(*net.TCPAddr).Port }

func (s *listener) close() {
	_ = s.l.Close()
	<-s.done
}

// addDBInstance starts a listener and registers a persistent db instance at
// it through node n.
func (d *demo) addDBInstance(n *node) (model.Instance, error) {
	l, err := listen("127.0.0.1:0")
	if err != nil {
		return model.Instance{}, err
	}
	d.listeners[l.port()] = l
	d.dbPorts = append(d.dbPorts, l.port())
	in := model.NewInstance(database, "127.0.0.1", l.port())
	in.Ephemeral = false
	return in, n.reg.Register(d.ctx, in)
}

// dbHealth reports whether every running node serves the db instance at
// port with this health.
func (d *demo) dbHealth(port int, healthy bool) bool {
	for _, n := range d.c.live() {
		s, ok := served(n, database)[model.Endpoint("127.0.0.1", port)]
		if !ok || s.healthy != healthy {
			return false
		}
	}
	return true
}

func (d *demo) listenerStops() (string, error) {
	n := d.c.live()[0]
	def := model.Service{Key: database, Clusters: []model.Cluster{{
		Name: model.DefaultCluster, HealthCheck: model.HealthCheck{Type: model.CheckTCP},
	}}}
	if err := n.reg.CreateService(d.ctx, def); err != nil {
		return "", err
	}
	in, err := d.addDBInstance(n)
	if err != nil {
		return "", err
	}
	prober := n.reg.Owner(in.IP, in.Port)
	d.say("%s: the persistent service %s, checked by TCP, gets the instance %s through Raft; %s owns that address, so it probes it",
		n.id, database.Name, model.Endpoint(in.IP, in.Port), prober)
	if _, err := d.until(10*time.Second, "every node serves it healthy after a passing check", func() bool {
		p := d.c.node(d.c.index(prober))
		st, ok := p.reg.Internals().CheckStatus(in.Key())
		return ok && st.Checks > 0 && st.Healthy && d.dbHealth(in.Port, true)
	}); err != nil {
		return "", err
	}
	d.listeners[in.Port].close()
	d.say("its listener stops: connections are refused, a definite failure")
	took, err := d.until(10*time.Second, "every node serves it unhealthy", func() bool { return d.dbHealth(in.Port, false) })
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("unhealthy on every node %s after the listener stopped", ms(took)), nil
}

func (d *demo) listenerBack() (string, error) {
	port := d.dbPorts[0]
	l, err := listen(model.Endpoint("127.0.0.1", port))
	if err != nil {
		return "", err
	}
	d.listeners[port] = l
	d.say("the listener is back on port %d; three passing checks in a row turn the instance healthy", port)
	took, err := d.until(10*time.Second, "every node serves it healthy", func() bool { return d.dbHealth(port, true) })
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("healthy on every node %s after the listener came back", ms(took)), nil
}

// ---- step 6 ----

func (d *demo) crash() (string, error) {
	victim := d.c.leader()
	if victim == "" || victim == d.watchNode { // the leader moved onto the watchers' node: crash another
		for _, n := range d.c.live() {
			if n.id != d.watchNode {
				victim = n.id
				break
			}
		}
	}
	d.victim = d.c.index(victim)
	var survivors []*node
	for _, n := range d.c.live() {
		if n.id != victim {
			survivors = append(survivors, n)
		}
	}
	var moved []model.Instance
	for _, b := range d.beats {
		if survivors[0].reg.Owner(b.IP, b.Port) == victim {
			moved = append(moved, b)
		}
	}
	gone := d.sessionIP[victim] + ":8080"
	wasLeader := d.c.leader() == victim
	role := "a follower"
	if wasLeader {
		role = "the Raft leader"
	}
	d.say("%s (%s) crashes without a word: its session held orders %s; it owned the beats of %d inventory instances",
		victim, role, gone, len(moved))

	start := time.Now()
	d.c.crash(d.victim)
	var detected, elected, left, adopted time.Duration
	mark := func(at *time.Duration, cond bool, format string, args ...any) {
		if *at == 0 && cond {
			*at = time.Since(start)
			d.say("+%s  "+format, append([]any{ms(*at)}, args...)...)
		}
	}
	var lost error
	_, err := d.until(20*time.Second, "the survivors settle", func() bool {
		noVictim, sessionGone, owned := true, true, true
		for _, n := range survivors {
			if slices.ContainsFunc(n.reg.Internals().Replicator().Members(), func(m string) bool { return m == victim }) {
				noVictim = false
			}
			inv, ord := served(n, inventory), served(n, orders)
			if _, ok := ord[gone]; ok {
				sessionGone = false
			}
			for _, b := range d.beats { // a beaten instance never leaves
				if _, ok := inv[model.Endpoint(b.IP, b.Port)]; !ok && lost == nil {
					lost = fmt.Errorf("%s stopped serving the beaten instance %s", n.id, b.IP)
				}
			}
			for _, b := range moved {
				s, ok := inv[model.Endpoint(b.IP, b.Port)]
				if n.reg.Owner(b.IP, b.Port) == victim || !ok || !s.healthy {
					owned = false
				}
			}
		}
		leader := d.c.leader()
		mark(&detected, noVictim, "the survivors' memberships drop %s (failure detection)", victim)
		mark(&elected, leader != "" && leader != victim, "Raft leader: %s", leader)
		mark(&left, sessionGone, "orders %s left every survivor (orphaned session records expire)", gone)
		mark(&adopted, noVictim && owned, "its %d beat instances have new owners and stay healthy", len(moved))
		return lost != nil || (detected > 0 && elected > 0 && left > 0 && adopted > 0)
	})
	if err == nil {
		err = lost
	}
	if err != nil {
		return "", err
	}
	d.explain(survivors[0], model.InstanceKey{Service: orders, IP: d.sessionIP[victim], Port: 8080})
	leader := "stayed"
	if wasLeader {
		leader = "moved"
	}
	return fmt.Sprintf("detected %s, Raft leader %s at %s, session instance gone %s, %d beat instances moved, none lost",
		ms(detected), leader, ms(elected), ms(left), len(moved)), nil
}

// ---- steps 7 and 8 ----

func (d *demo) writeWhileDown() (string, error) {
	n := d.c.live()[0]
	start := time.Now()
	in, err := d.addDBInstance(n)
	if err != nil {
		return "", err
	}
	committed := time.Since(start)
	d.say("%s: a second db instance %s, committed by %d of %d replicas in %s",
		n.id, model.Endpoint(in.IP, in.Port), len(d.c.live()), len(d.c.specs), ms(committed))
	if _, err := d.until(10*time.Second, "every running node serves it", func() bool { return d.dbHealth(in.Port, true) }); err != nil {
		return "", err
	}
	return fmt.Sprintf("committed in %s without the crashed node", ms(committed)), nil
}

func (d *demo) restart() (string, error) {
	n, err := d.c.start(d.ctx, d.victim)
	if err != nil {
		return "", err
	}
	d.say("%s starts again from its directory: same addresses, Raft log and Badger on disk", n.id)
	// Until it is ready, it refuses to answer rather than serve a partial
	// list: every answer it gives must hold every orders instance.
	want := len(d.c.specs) - 1
	notReady := 0
	var bad error
	took, err := d.until(30*time.Second, "the restarted node is ready", func() bool {
		v, err := n.reg.Query(d.ctx, model.Query{Service: orders})
		switch {
		case errors.Is(err, registry.ErrNotReady):
			notReady++
		case err != nil:
			bad = err
		case len(v.Instances) != want:
			bad = fmt.Errorf("%s answered %d orders instances, want %d", n.id, len(v.Instances), want)
		}
		return bad != nil || n.reg.Ready()
	})
	if err == nil {
		err = bad
	}
	if err != nil {
		return "", err
	}
	d.say("+%s  ready: it answered ErrNotReady %d times while loading, never a partial list", ms(took), notReady)
	caught, err := d.until(20*time.Second, "the restarted node serves what the others serve", func() bool {
		if !d.c.settled() {
			return false
		}
		for _, other := range d.c.live() {
			for _, svc := range []model.ServiceKey{orders, payments, inventory, database} {
				if !sameKeys(served(n, svc), served(other, svc)) {
					return false
				}
			}
		}
		return d.dbHealth(d.dbPorts[1], true)
	})
	if err != nil {
		return "", err
	}
	d.say("+%s  it serves what the others serve, the db instance written while it was down included", ms(took+caught))
	caughtUp := "caught up at once"
	if caught >= time.Millisecond {
		caughtUp = "caught up " + ms(caught) + " later"
	}
	return fmt.Sprintf("ready %s after start (%d ErrNotReady answers, no partial list), %s", ms(took), notReady, caughtUp), nil
}

func sameKeys[V any](a, b map[string]V) bool {
	if a == nil || b == nil || len(a) != len(b) {
		return false
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			return false
		}
	}
	return true
}

// explain narrates what node n knows of the instance with key: its history
// from the node's journal (Registry.Explain).
func (d *demo) explain(n *node, key model.InstanceKey) {
	ex := n.reg.Explain(key)
	d.say("%s explains %s:%s (Registry.Explain; present now: %v):", n.id, key.IP, strconv.Itoa(key.Port), ex.Present)
	for _, e := range ex.Events {
		line := e.At.Format("15:04:05.000") + "  " + e.Kind.String()
		if e.Reason != "" {
			line += " (" + e.Reason + ")"
		}
		if e.Publisher != "" {
			line += ", published by session " + e.Publisher + " of " + e.Node
		}
		d.say("   %s", line)
	}
}

// ---- step 9 ----

// monitoring scrapes the demo's /metrics as Prometheus would, and checks
// that the figures tell the story the scenario played.
func (d *demo) monitoring() (string, error) {
	if d.metrics == nil {
		return "skipped (-metrics \"\")", nil
	}
	mfs, err := scrape(d.ctx, d.metrics.url())
	if err != nil {
		return "", err
	}
	get := func(name string, labels ...string) float64 {
		if err != nil {
			return 0
		}
		var v float64
		v, err = sample(mfs, name, labels...)
		return v
	}
	live := d.c.live()
	first := live[0].id
	instances := get("muster_registry_instances", "node", first)
	orphans := get("muster_distro_orphans_removed_total")
	syncs := get("muster_distro_syncs_sent_total")
	leaders := get("muster_raft_leader_changes_total")
	flips := get("muster_health_flips_total")
	writes := get("muster_registry_writes_total", "node", first)
	if err != nil {
		return "", err
	}
	d.say("%d metric families from %d nodes at %s", len(mfs), len(live), d.metrics.url())
	d.say("%s holds %.0f instances; its callers made %.0f writes", first, instances, writes)
	d.say("the nodes sent %.0f distro syncs, removed %.0f orphaned records, saw %.0f Raft leader changes and %.0f health check flips",
		syncs, orphans, leaders, flips)
	switch {
	case orphans < 1:
		return "", fmt.Errorf("no orphaned record counted after a node crashed")
	case instances < 1 || syncs < 1 || leaders < 1:
		return "", fmt.Errorf("implausible figures: instances %.0f, syncs %.0f, leader changes %.0f", instances, syncs, leaders)
	}
	return fmt.Sprintf("%.0f orphaned records removed, %.0f check flips, %.0f leader changes, as narrated", orphans, flips, leaders), nil
}
