package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"
)

// The faults, one at a time, as etcd's robustness tests inject failpoints:
// the cluster is healthy (every node ready, a Raft leader) before each one,
// and the lab waits for it to be healthy again after the heal.
var faultKinds = []string{"isolate", "partition", "asymmetric", "kill", "stall", "diskfull", "powerloss"}

// fault is one injected fault: inject starts it and returns heal.
type fault struct {
	kind, detail string
	heal         func(ctx context.Context) error
}

func (l *lab) others(id string) (ips []string) {
	for _, n := range l.c.nodes {
		if n.id != id {
			ips = append(ips, n.ip)
		}
	}
	return ips
}

func (l *lab) node(id string) *labNode {
	for _, n := range l.c.nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

// inject starts a fault of kind.
func (l *lab) inject(ctx context.Context, kind string, rng *rand.Rand) (*fault, error) {
	nodes := l.c.nodes
	victim := nodes[rng.IntN(len(nodes))]
	switch kind {
	case "isolate":
		if err := l.c.net.link(victim.id, false); err != nil {
			return nil, err
		}
		return &fault{kind, victim.id + " link down", func(context.Context) error { return l.c.net.link(victim.id, true) }}, nil

	case "partition":
		perm := rng.Perm(len(nodes))
		small := (len(nodes) - 1) / 2 // 1 of 3, 2 of 5
		side := map[string]bool{}
		for _, i := range perm[:small] {
			side[nodes[i].id] = true
		}
		var a, b []string
		var aIPs, bIPs []string
		for _, n := range nodes {
			if side[n.id] {
				a, aIPs = append(a, n.id), append(aIPs, n.ip)
			} else {
				b, bIPs = append(b, n.id), append(bIPs, n.ip)
			}
		}
		for _, n := range nodes {
			far := aIPs
			if side[n.id] {
				far = bIPs
			}
			if err := l.c.net.block(n.id, far, far); err != nil {
				return nil, err
			}
		}
		return &fault{kind, fmt.Sprintf("%v | %v", a, b), func(context.Context) error {
			for _, n := range nodes {
				l.c.net.unblock(n.id)
			}
			return nil
		}}, nil

	case "asymmetric":
		// The victim hears nobody but is heard, or is heard by nobody but
		// hears: one direction of each of its links drops.
		dir, in, out := "receives nothing", l.others(victim.id), []string(nil)
		if rng.IntN(2) == 0 {
			dir, in, out = "sends nothing", nil, l.others(victim.id)
		}
		if err := l.c.net.block(victim.id, in, out); err != nil {
			return nil, err
		}
		return &fault{kind, victim.id + " " + dir, func(context.Context) error { l.c.net.unblock(victim.id); return nil }}, nil

	case "kill":
		var pool []*labNode
		for _, n := range nodes {
			if !n.strict {
				pool = append(pool, n)
			}
		}
		v := pool[rng.IntN(len(pool))]
		pid := v.pid()
		if err := v.kill(ctx); err != nil {
			return nil, err
		}
		l.incDied(v.id, fmt.Sprintf("%d/", pid))
		return &fault{kind, v.id + " SIGKILL", func(context.Context) error { return l.c.start(v) }}, nil

	case "stall":
		if err := victim.signal(syscall.SIGSTOP); err != nil {
			return nil, err
		}
		return &fault{kind, victim.id + " SIGSTOP", func(context.Context) error { return victim.signal(syscall.SIGCONT) }}, nil

	case "diskfull":
		var v *labNode
		for _, n := range nodes {
			if n.tmpfs != "" {
				v = n
			}
		}
		wrote, err := v.fill()
		if err != nil {
			return nil, err
		}
		return &fault{kind, fmt.Sprintf("%s data dir full (%d MiB filler)", v.id, wrote>>20), func(ctx context.Context) error {
			err := v.unfill()
			if !v.running() {
				// It exited while its disk was full: start it again on
				// the freed disk.
				return errors.Join(err, l.c.start(v))
			}
			return err
		}}, nil

	case "powerloss":
		var v *labNode
		for _, n := range nodes {
			if n.strict {
				v = n
			}
		}
		var sr sessionResp
		path := "/powerloss"
		if rng.IntN(4) != 0 {
			path += fmt.Sprintf("?mode=fsync&skip=%d", rng.IntN(20))
		}
		if err := v.api.call(ctx, 2*opTimeout, path, struct{}{}, &sr); err != nil {
			return nil, err
		}
		l.incDied(v.id, sr.Incarnation)
		return &fault{kind, v.id + " power loss", func(context.Context) error { return nil }}, nil
	}
	return nil, fmt.Errorf("unknown fault %q", kind)
}

func (n *labNode) pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.cmd.Process == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// schedule injects faults, round-robin over kinds in a shuffled order,
// until ctx ends.
func (l *lab) schedule(ctx context.Context, kinds []string, rng *rand.Rand) {
	var order []string
	for ctx.Err() == nil {
		if len(order) == 0 {
			order = append([]string(nil), kinds...)
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		kind := order[0]
		order = order[1:]
		pause(ctx, time.Duration(500+rng.IntN(1500))*time.Millisecond)
		if ctx.Err() != nil {
			return
		}
		rec := FaultRec{Kind: kind, Start: l.now()}
		l.setFault(kind)
		f, err := l.inject(ctx, kind, rng)
		if err != nil {
			l.rec.note("inject %s: %v", kind, err)
			l.setFault("")
			l.fail("inject", fmt.Sprintf("%s: %v", kind, err))
			continue
		}
		rec.Detail = f.detail
		hold := time.Duration(2000+rng.IntN(3000)) * time.Millisecond
		if kind == "stall" {
			hold += time.Second // well past the failure detector (about 1 s with Fast timings)
		}
		if kind == "powerloss" {
			hold = 0
		}
		// The hold ends early if the run does: heal either way.
		pause(ctx, hold)
		hctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := f.heal(hctx); err != nil {
			l.fail("heal", fmt.Sprintf("%s: %v", f.detail, err))
		}
		cancel()
		rec.Heal = l.now()
		l.setFault("")
		l.logf("fault %-10s %-48s held %v", kind, f.detail, time.Duration(rec.Heal-rec.Start).Round(time.Millisecond))
		rec.Recovered = l.waitHealthy(context.Background(), kind+": "+f.detail)
		if kind == "powerloss" {
			rec.Detail += l.powerLossDetail()
		}
		l.rec.fault(rec)
	}
}

// waitHealthy waits until every node is ready and knows a Raft leader,
// within the bound (then records every node that is not) and then for up to
// 3 bounds more; it returns how long it took, or -1.
func (l *lab) waitHealthy(ctx context.Context, what string) int64 {
	start := l.now()
	bound := start + l.bounds.ReadyNs
	reported := false
	for {
		var bad []string
		for _, n := range l.c.nodes {
			var rr readyResp
			err := n.api.call(ctx, time.Second, "/ready", struct{}{}, &rr)
			if err != nil || !rr.Ready || !rr.HasLeader {
				bad = append(bad, n.id)
			}
		}
		now := l.now()
		if len(bad) == 0 {
			return now - start
		}
		if now > bound && !reported {
			reported = true
			for _, id := range bad {
				l.rec.ready(ReadyRec{Node: id, Fault: what, After: now - start})
				l.fail("not ready", fmt.Sprintf("%s not ready (with a Raft leader) %v after the heal of %s", id, time.Duration(now-start).Round(time.Millisecond), what))
			}
		}
		if now > start+4*l.bounds.ReadyNs || ctx.Err() != nil {
			return -1
		}
		time.Sleep(200 * time.Millisecond) // real time: polling a real cluster
	}
}

// powerLossDetail describes the last power loss of the strict-FS node and
// how its replica came back.
func (l *lab) powerLossDetail() string {
	for _, n := range l.c.nodes {
		if !n.strict {
			continue
		}
		var rr readyResp
		if err := n.api.call(context.Background(), time.Second, "/ready", struct{}{}, &rr); err != nil || rr.LastPowerLoss == nil {
			return ""
		}
		pl := rr.LastPowerLoss
		role := "follower"
		if pl.WasLeader {
			role = "leader"
		}
		d := fmt.Sprintf(": %s; a %s at applied %d, log %d, %d commit-index writes held back so far; %d of %d KiB of the Raft log's files survived; restarted at applied %d, log %d",
			pl.Mode, role, pl.Applied, pl.LastIndex, pl.Deferred, pl.BytesAfter>>10, pl.BytesBefore>>10, rr.Applied, rr.LastIndex)
		l.logf("powerloss%s", d)
		return d
	}
	return ""
}
