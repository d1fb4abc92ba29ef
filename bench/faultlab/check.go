package main

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// failure is one broken property.
type failure struct {
	Check  string `json:"check"`
	Detail string `json:"detail"`
}

// checkResult is what the checkers found in a history.
type checkResult struct {
	Failures []failure
	// Lin is porcupine's verdict on the persistent operations: "ok",
	// "illegal" or "unknown" (it timed out).
	Lin     string
	LinInfo porcupine.LinearizationInfo
	Reasons map[string]int // removal reasons seen in the journals
}

func (r *checkResult) fail(check, format string, args ...any) {
	r.Failures = append(r.Failures, failure{check, fmt.Sprintf(format, args...)})
}

// ---- persistent data: linearizability ----

// linOp is porcupine's input: one operation on one persistent key.
type linOp struct {
	Key    string
	Kind   string // put, del, read
	Val    string // put: the value; read: the value seen ("" absent)
	Result string // ok, notfound, unknown
}

// linModel is a register per key (partitioned by key): a value, or "" for
// an absent instance. A put of unknown outcome may take effect at any time
// after its call (porcupine: a return at infinity); a deregister likewise
// (it is idempotent: removing an absent instance succeeds).
var linModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := op.Input.(linOp).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		s, in := state.(string), input.(linOp)
		switch in.Kind {
		case "put":
			return true, in.Val
		case "del":
			// Deregistering an absent instance is not an error: ok either way.
			return true, ""
		case "read":
			return s == in.Val, s
		}
		return false, s
	},
	Equal: func(a, b any) bool { return a == b },
	DescribeOperation: func(input, output any) string {
		in := input.(linOp)
		switch in.Kind {
		case "put":
			return fmt.Sprintf("put(%s)=%s", in.Val, in.Result)
		case "del":
			return "del()=" + in.Result
		}
		if in.Val == "" {
			return "read()=absent"
		}
		return "read()=" + in.Val
	},
	DescribeState: func(state any) string {
		if state.(string) == "" {
			return "absent"
		}
		return state.(string)
	},
}

// linOps turns the persistent history into porcupine's operations: a read
// of a service becomes a read of each of its keys.
func linOps(h *History) []porcupine.Operation {
	var ops []porcupine.Operation
	for _, op := range h.Persist {
		ret := op.Ret
		if op.Result == "unknown" {
			ret = math.MaxInt64 / 2
		}
		switch op.Kind {
		case "put", "del":
			ops = append(ops, porcupine.Operation{ClientId: op.Client, Call: op.Call, Return: ret,
				Input: linOp{Key: fmt.Sprintf("%s/%d", op.Service, op.Port), Kind: op.Kind, Val: op.Val, Result: op.Result}})
		case "read":
			seen := map[int]string{}
			for _, in := range op.Read {
				seen[in.Port] = in.Val
			}
			for port := 1; port <= h.Keys.Keys; port++ {
				ops = append(ops, porcupine.Operation{ClientId: op.Client, Call: op.Call, Return: ret,
					Input: linOp{Key: fmt.Sprintf("%s/%d", op.Service, port), Kind: "read", Val: seen[port], Result: "ok"}})
			}
		}
	}
	return ops
}

// ---- ephemeral data ----

// incDead reports whether incarnation inc died, by the history's "sdead"
// events that started before before.
func incDeadIn(dead []EOp, inc string, before int64) bool {
	for _, d := range dead {
		if d.Call > before {
			continue
		}
		if d.Inc == inc || (strings.HasSuffix(d.Inc, "/") && strings.HasPrefix(inc, d.Inc)) {
			return true
		}
	}
	return false
}

// ephState is each ephemeral key's fate by the end of the history.
type ephState struct {
	expected map[string]bool // must be on every node
	gone     map[string]bool // must be on none
	unknown  map[string]bool // may be either, the same on every node
	why      map[string]string
}

func ephFates(h *History) ephState {
	st := ephState{expected: map[string]bool{}, gone: map[string]bool{}, unknown: map[string]bool{}, why: map[string]string{}}
	var dead []EOp
	sessInc := map[string]string{}
	closed := map[string]string{} // session → close result
	for _, op := range h.Eph {
		switch op.Kind {
		case "sdead":
			dead = append(dead, op)
		case "sopen":
			sessInc[op.Session] = op.Inc
		case "sclose":
			closed[op.Session] = op.Result
		}
	}
	live := map[string]bool{}
	if h.Final != nil {
		for _, k := range h.Final.Live {
			live[k] = true
		}
	}
	set := func(k, fate, why string) {
		delete(st.expected, k)
		delete(st.gone, k)
		delete(st.unknown, k)
		switch fate {
		case "expected":
			st.expected[k] = true
		case "gone":
			st.gone[k] = true
		default:
			st.unknown[k] = true
		}
		st.why[k] = why
	}
	for _, op := range h.Eph {
		switch op.Kind {
		case "sreg":
			inc := sessInc[op.Session]
			switch {
			case incDeadIn(dead, inc, math.MaxInt64):
				set(op.Key, "gone", "its session died with node "+op.Node+" ("+inc+")")
			case closed[op.Session] == "ok":
				set(op.Key, "gone", "its session was closed")
			case closed[op.Session] != "":
				set(op.Key, "unknown", "its session's close is of unknown outcome")
			case op.Result == "ok":
				set(op.Key, "expected", "registered in live session "+op.Session+" on "+op.Node)
			default:
				set(op.Key, "unknown", "its registration is of unknown outcome")
			}
		case "sdereg":
			if st.gone[op.Key] {
				continue
			}
			if op.Result == "ok" || op.Result == "notfound" {
				set(op.Key, "gone", "deregistered by its session")
			} else {
				set(op.Key, "unknown", "its deregistration is of unknown outcome")
			}
		case "bbeat":
			if live[op.Key] {
				set(op.Key, "expected", "its beat client beats on")
			} else {
				set(op.Key, "unknown", "its beat client did not beat after the heal")
			}
		case "bend":
			set(op.Key, "gone", "its beat client stopped beating ("+op.Result+")")
		}
	}
	return st
}

// check runs every checker over h.
func check(h *History, linTimeout time.Duration) *checkResult {
	r := &checkResult{Reasons: map[string]int{}}

	// Node processes that exited unasked. A node may stop on a full disk
	// (it is started again on the freed disk); anything else is a crash.
	for _, e := range h.Exits {
		if e.During == "diskfull" {
			continue
		}
		r.fail("node crashed", "%s exited at %v (%s) during %q; log tail:\n%s", e.Node, ns(e.At), e.Err, e.During, e.Tail)
	}
	for _, e := range h.Ready {
		r.fail("not ready", "%s not ready %v after the heal of %s", e.Node, ns(e.After), e.Fault)
	}

	// Persistent operations: linearizable.
	res, info := porcupine.CheckOperationsVerbose(linModel, linOps(h), linTimeout)
	r.LinInfo = info
	switch res {
	case porcupine.Ok:
		r.Lin = "ok"
	case porcupine.Illegal:
		r.Lin = "illegal"
		r.fail("linearizability", "the persistent operations are not linearizable (see the visualization)")
	default:
		r.Lin = "unknown"
	}

	// Same-node checks on the ephemeral reads: a session's acknowledged
	// instance is in every later read on its node (same incarnation) until
	// it is deregistered or its session ends; an acknowledged
	// deregistration is never undone there.
	type ack struct {
		key, inc    string
		ret, ending int64 // acknowledged at ret; deregistration or close began at ending
	}
	var dead []EOp
	ending := map[string]int64{}  // key → when its deregistration began
	sessEnd := map[string]int64{} // session → when its close began
	for _, op := range h.Eph {
		switch op.Kind {
		case "sdead":
			dead = append(dead, op)
		case "sdereg":
			if _, ok := ending[op.Key]; !ok {
				ending[op.Key] = op.Call
			}
		case "sclose":
			sessEnd[op.Session] = op.Call
		}
	}
	bySvc := map[string][]ack{}
	var removed []ack
	for _, op := range h.Eph {
		svc, _, _ := splitKey(op.Key)
		switch {
		case op.Kind == "sreg" && op.Result == "ok":
			end := int64(math.MaxInt64)
			if t, ok := ending[op.Key]; ok {
				end = t
			}
			if t, ok := sessEnd[op.Session]; ok && t < end {
				end = t
			}
			bySvc[svc] = append(bySvc[svc], ack{op.Key, op.Inc, op.Ret, end})
		case op.Kind == "sdereg" && (op.Result == "ok" || op.Result == "notfound"):
			removed = append(removed, ack{key: op.Key, inc: op.Inc, ret: op.Ret})
		}
	}
	lost, back := 0, 0
	for _, rd := range h.Reads {
		have := map[string]bool{}
		for _, k := range rd.Keys {
			have[k] = true
		}
		for _, a := range bySvc[rd.Service] {
			if a.inc == rd.Inc && a.ret < rd.Call && rd.Ret < a.ending && !incDeadIn(dead, a.inc, rd.Ret) && !have[a.key] {
				lost++
				if lost <= 5 {
					r.fail("acknowledged registration lost", "%s (acknowledged at %v) missing from a read on its own node %s at %v–%v", a.key, ns(a.ret), rd.Node, ns(rd.Call), ns(rd.Ret))
				}
			}
		}
		for _, a := range removed {
			if svc, _, _ := splitKey(a.key); svc == rd.Service && a.inc == rd.Inc && a.ret < rd.Call && have[a.key] {
				back++
				if back <= 5 {
					r.fail("deregistered instance back", "%s (deregistered at %v) in a read on its own node %s at %v–%v", a.key, ns(a.ret), rd.Node, ns(rd.Call), ns(rd.Ret))
				}
			}
		}
	}
	if lost > 5 || back > 5 {
		r.fail("same-node reads", "%d lost and %d resurrected instances in all (the first five of each are listed)", lost, back)
	}

	f := h.Final
	if f == nil {
		r.fail("final", "the run did not reach its final check")
		return r
	}
	for _, id := range f.NotReady {
		r.fail("not ready", "%s not ready at the end", id)
	}

	// Convergence after the last heal: every node holds every expected
	// key, none that is gone, and all the same set.
	st := ephFates(h)
	if !f.Converged {
		r.fail("convergence", "ephemeral data not converged on every node within %v of the last heal", ns(h.Bounds.ConvergeNs))
	}
	views := map[string]map[string]bool{}
	for node, bySvc := range f.Views {
		views[node] = map[string]bool{}
		for _, keys := range bySvc {
			for _, k := range keys {
				views[node][k] = true
			}
		}
	}
	nLost, nBack, nDiff := 0, 0, 0
	for _, node := range sortedKeys(views) {
		v := views[node]
		for k := range st.expected {
			if !v[k] {
				nLost++
				if nLost <= 5 {
					r.fail("acknowledged registration lost", "%s missing on %s at the end (%s)", k, node, st.why[k])
				}
			}
		}
		for k := range v {
			if st.gone[k] {
				nBack++
				if nBack <= 5 {
					r.fail("removed instance present", "%s present on %s at the end (%s)", k, node, st.why[k])
				}
			}
		}
		for other, ov := range views {
			if other <= node {
				continue
			}
			for k := range st.unknown {
				if v[k] != ov[k] {
					nDiff++
					if nDiff <= 5 {
						r.fail("convergence", "%s on %s: %v, on %s: %v (%s)", k, node, v[k], other, ov[k], st.why[k])
					}
				}
			}
		}
	}
	if nLost > 5 || nBack > 5 || nDiff > 5 {
		r.fail("final views", "%d lost, %d present that should be gone, %d differing in all", nLost, nBack, nDiff)
	}

	// Persistent data: the same on every node.
	var ref map[string]string
	var refNode string
	for _, node := range sortedKeys(f.Persist) {
		p := f.Persist[node]
		if ref == nil {
			ref, refNode = p, node
			continue
		}
		if !sameMap(ref, p) {
			r.fail("persistent convergence", "%s and %s hold different persistent data: %v / %v", refNode, node, ref, p)
		}
	}

	// The journal explains every removal: on each node that recorded a
	// key's registration, a key that is gone has a later removal with a
	// reason; a key that is expected has none after its last registration.
	for key, byNode := range f.Explain {
		for node, ex := range byNode {
			lastReg, lastRem := -1, -1
			for i, e := range ex.Events {
				switch e.Kind {
				case "registered":
					lastReg = i
				case "removed":
					lastRem = i
					reason := e.Reason
					if i := strings.IndexByte(reason, ':'); i > 0 {
						reason = reason[:i]
					}
					r.Reasons[reason]++
					if e.Reason == "" {
						r.fail("journal", "%s on %s: a removal without a reason", key, node)
					}
				}
			}
			switch {
			case st.gone[key] && ex.Present:
				// reported above as present
			case st.gone[key] && lastReg >= 0 && lastRem < lastReg:
				r.fail("journal", "%s on %s: gone (%s), and the journal records no removal after its registration: %v", key, node, st.why[key], ex.Events)
			case st.expected[key] && ex.Present && lastRem > lastReg:
				r.fail("journal", "%s on %s: present, but the journal's last word is a removal: %v", key, node, ex.Events)
			}
		}
	}
	return r
}

func sameMap(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func ns(n int64) time.Duration { return time.Duration(n).Round(time.Millisecond) }
