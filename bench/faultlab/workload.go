package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// The workload: persistent workers (register, deregister, linearizable
// query of a small key space: porcupine checks it), one session worker per
// node (sessions that register and deregister ephemeral instances, read
// back on the same node), and beat clients (Nacos 1.x style instances kept
// alive by beats sent to any node, which end by deregistering or by
// crashing). Every key of an ephemeral instance is used once: a key seen
// after its removal is a resurrection, never a new registration.

const (
	opTimeout    = 4 * time.Second
	ephServices  = 4
	maxPerSess   = 8
	sessPerNode  = 2
	beatClients  = 6
	instanceBase = 200 // instance addresses: labNet.200…, data only (nothing dials them)
)

// uniqueKey returns a fresh instance address.
func (l *lab) uniqueKey() (ip string, port int) {
	c := l.keySeq.Add(1)
	return fmt.Sprintf("%s.%d", labNet, instanceBase+int(c/60000)%50), 1 + int(c%60000)
}

func (l *lab) now() int64 { return time.Since(l.t0).Nanoseconds() } // real time: the history's clock

// result classifies a call's outcome for the history: "ok", a definite
// answer (notfound), nothing happened ("" for unreachable, down,
// nosession, invalid), or "unknown".
func result(err error) string {
	switch errKind(err) {
	case "":
		return "ok"
	case "notfound":
		return "notfound"
	case "unreachable", "down", "nosession", "invalid":
		return ""
	}
	return "unknown"
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func (l *lab) pickNode(rng *rand.Rand) *labNode { return l.c.nodes[rng.IntN(len(l.c.nodes))] }

// persistWorker runs persistent operations until ctx ends.
func (l *lab) persistWorker(ctx context.Context, client int, rng *rand.Rand) {
	seq := 0
	for ctx.Err() == nil {
		n := l.pickNode(rng)
		svc := fmt.Sprintf("p%d", rng.IntN(l.space.Services))
		port := 1 + rng.IntN(l.space.Keys)
		op := POp{Client: client, Node: n.id, Service: svc}
		var err error
		op.Call = l.now()
		switch r := rng.IntN(10); {
		case r < 5:
			seq++
			op.Kind, op.Port, op.Val = "put", port, fmt.Sprintf("%d.%d", client, seq)
			err = n.api.call(ctx, opTimeout, "/persist/register", instReq{Service: svc, IP: l.space.IP, Port: port, Val: op.Val}, nil)
		case r < 7:
			op.Kind, op.Port = "del", port
			err = n.api.call(ctx, opTimeout, "/persist/deregister", instReq{Service: svc, IP: l.space.IP, Port: port}, nil)
		default:
			op.Kind = "read"
			var q queryResp
			err = n.api.call(ctx, opTimeout, "/query", queryReq{Service: svc, Linearizable: true}, &q)
			op.Read = q.Instances
		}
		op.Ret = l.now()
		if ctx.Err() != nil && err != nil {
			op.Result = "unknown" // cut short by the end of the run
		} else {
			op.Result = result(err)
		}
		op.Err = errText(err)
		l.count("persist "+op.Kind, op.Result)
		switch {
		case op.Result == "":
			pause(ctx, 50*time.Millisecond) // nothing happened: the node is down
			continue
		case op.Kind == "read" && op.Result != "ok":
			continue // a failed read tells nothing
		}
		l.rec.persist(op)
	}
}

// session is a session worker's view of one session.
type session struct {
	id, inc string
	keys    []string // registered (acknowledged or unknown), not deregistered
}

// sessionWorker opens sessions on node n and registers, deregisters and
// reads back ephemeral instances, until ctx ends.
func (l *lab) sessionWorker(ctx context.Context, n *labNode, rng *rand.Rand) {
	var sessions []*session
	for ctx.Err() == nil {
		pause(ctx, time.Duration(40+rng.IntN(120))*time.Millisecond)
		if ctx.Err() != nil {
			return
		}
		// Sessions of a dead incarnation are gone.
		live := sessions[:0]
		for _, s := range sessions {
			if !l.incDead(s.inc) {
				live = append(live, s)
			}
		}
		sessions = live
		r := rng.IntN(100)
		switch {
		case len(sessions) < sessPerNode:
			op := EOp{Kind: "sopen", Node: n.id, Call: l.now()}
			var sr sessionResp
			err := n.api.call(ctx, opTimeout, "/session/open", struct{}{}, &sr)
			op.Ret, op.Result, op.Err, op.Session, op.Inc = l.now(), result(err), errText(err), sr.ID, sr.Incarnation
			l.count("session open", op.Result)
			if op.Result == "ok" {
				l.rec.eph(op)
				sessions = append(sessions, &session{id: sr.ID, inc: sr.Incarnation})
			} else {
				pause(ctx, 100*time.Millisecond)
			}
		case r < 55:
			s := sessions[rng.IntN(len(sessions))]
			if len(s.keys) >= maxPerSess {
				continue
			}
			ip, port := l.uniqueKey()
			svc := fmt.Sprintf("e%d", rng.IntN(ephServices))
			key := ephKey(svc, ip, port)
			op := EOp{Kind: "sreg", Node: n.id, Inc: s.inc, Session: s.id, Key: key, Call: l.now()}
			err := n.api.call(ctx, opTimeout, "/session/register", instReq{Service: svc, IP: ip, Port: port, Session: s.id, Val: "s"}, nil)
			op.Ret, op.Result, op.Err = l.now(), result(err), errText(err)
			l.count("session register", op.Result)
			if op.Result != "" {
				l.rec.eph(op)
				s.keys = append(s.keys, key)
			}
		case r < 80:
			s := sessions[rng.IntN(len(sessions))]
			if len(s.keys) == 0 {
				continue
			}
			i := rng.IntN(len(s.keys))
			key := s.keys[i]
			svc, ip, port := splitKey(key)
			op := EOp{Kind: "sdereg", Node: n.id, Inc: s.inc, Session: s.id, Key: key, Call: l.now()}
			err := n.api.call(ctx, opTimeout, "/session/deregister", instReq{Service: svc, IP: ip, Port: port, Session: s.id}, nil)
			op.Ret, op.Result, op.Err = l.now(), result(err), errText(err)
			l.count("session deregister", op.Result)
			if op.Result != "" {
				l.rec.eph(op)
				s.keys = append(s.keys[:i], s.keys[i+1:]...)
			}
		case r < 84:
			i := rng.IntN(len(sessions))
			s := sessions[i]
			op := EOp{Kind: "sclose", Node: n.id, Inc: s.inc, Session: s.id, Call: l.now()}
			err := n.api.call(ctx, opTimeout, "/session/close", instReq{Session: s.id}, nil)
			op.Ret, op.Result, op.Err = l.now(), result(err), errText(err)
			l.count("session close", op.Result)
			if op.Result != "" {
				l.rec.eph(op)
				sessions = append(sessions[:i], sessions[i+1:]...)
			}
		default:
			svc := fmt.Sprintf("e%d", rng.IntN(ephServices))
			l.readEph(ctx, n, svc)
		}
	}
}

// readEph queries an ephemeral service on node n and records it.
func (l *lab) readEph(ctx context.Context, n *labNode, svc string) (ERead, bool) {
	rd := ERead{Node: n.id, Service: svc, Call: l.now()}
	var q queryResp
	err := n.api.call(ctx, opTimeout, "/query", queryReq{Service: svc}, &q)
	rd.Ret = l.now()
	l.count("ephemeral read", result(err))
	if err != nil {
		return rd, false
	}
	rd.Inc = q.Incarnation
	for _, in := range q.Instances {
		rd.Keys = append(rd.Keys, ephKey(svc, in.IP, in.Port))
	}
	l.rec.read(rd)
	return rd, true
}

// beatClient runs beat instances one after another until ctx ends: each
// beats for a while through a node (another one when a beat fails), then
// deregisters or crashes. stop ends the current instance's beats for good;
// the final phase keeps the beats going after the workload ends.
func (l *lab) beatClient(ctx, workload context.Context, rng *rand.Rand, liveKeys *sync.Map) {
	for ctx.Err() == nil {
		ip, port := l.uniqueKey()
		svc := fmt.Sprintf("e%d", rng.IntN(ephServices))
		key := ephKey(svc, ip, port)
		req := instReq{Service: svc, IP: ip, Port: port, Val: "b"}
		life := time.Duration(10+rng.IntN(30)) * time.Second
		born := time.Now() // real time
		n := l.pickNode(rng)
		first := true
		var last atomic.Int64
		liveKeys.Store(key, &last)
		for ctx.Err() == nil && (workload.Err() != nil || time.Since(born) < life) { // real time
			call := l.now()
			err := n.api.call(ctx, opTimeout, "/beat", req, nil)
			res := result(err)
			l.count("beat", res)
			if res == "ok" {
				last.Store(l.now())
				if first {
					l.rec.eph(EOp{Kind: "bbeat", Node: n.id, Key: key, Call: call, Ret: l.now(), Result: "ok"})
					first = false
				}
			} else {
				n = l.pickNode(rng)
			}
			pause(ctx, beatInterval)
		}
		if ctx.Err() != nil {
			return // the run is over: the key stays live
		}
		liveKeys.Delete(key)
		end := EOp{Kind: "bend", Key: key, Call: l.now(), Result: "crash"}
		if rng.IntN(2) == 0 {
			end.Result = "dereg"
			for try := 0; try < 5 && ctx.Err() == nil; try++ {
				op := EOp{Kind: "bdereg", Node: n.id, Key: key, Call: l.now()}
				err := n.api.call(ctx, opTimeout, "/beat/deregister", req, nil)
				op.Ret, op.Result, op.Err = l.now(), result(err), errText(err)
				l.count("beat deregister", op.Result)
				if op.Result != "" {
					l.rec.eph(op)
				}
				if op.Result == "ok" || op.Result == "notfound" {
					break
				}
				n = l.pickNode(rng)
				pause(ctx, 200*time.Millisecond)
			}
		}
		end.Ret = l.now()
		l.rec.eph(end)
	}
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d) // real time
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
