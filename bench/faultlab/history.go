package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
)

// A History is everything a run observed, and all the checkers read: the
// checks are functions of it alone, so a saved history (written on failure)
// is checked again exactly, with -replay. Times are nanoseconds since the
// run began, on the driver's monotonic clock.
type History struct {
	Nodes   []string `json:"nodes"`
	Seed    uint64   `json:"seed"`
	Started string   `json:"started"` // wall clock, for the reader

	Persist []POp        `json:"persist"`
	Eph     []EOp        `json:"eph"`
	Reads   []ERead      `json:"reads"`
	Faults  []FaultRec   `json:"faults"`
	Exits   []ExitRec    `json:"exits"`
	Ready   []ReadyRec   `json:"ready"`
	Final   *Final       `json:"final,omitempty"`
	Notes   []string     `json:"notes,omitempty"`
	Bounds  Bounds       `json:"bounds"`
	Keys    PersistSpace `json:"keys"`
}

// Bounds are the stated bounds the run was checked against.
type Bounds struct {
	ConvergeNs int64 `json:"convergeNs"` // ephemeral data converged on every node after the last heal
	ReadyNs    int64 `json:"readyNs"`    // every node ready (and a Raft leader) after a heal
}

// PersistSpace is the persistent key space: services p0… with ports 1…Keys
// on one address.
type PersistSpace struct {
	Services int    `json:"services"`
	Keys     int    `json:"keys"`
	IP       string `json:"ip"`
}

// POp is one persistent operation: "put" (register with value Val), "del"
// (deregister) or "read" (a linearizable query of Service). Result is
// "ok", "notfound" (a deregister of an absent instance) or "unknown" (an
// error or timeout: it may have happened, at any time after Call).
type POp struct {
	Client  int    `json:"c"`
	Kind    string `json:"k"`
	Node    string `json:"n"`
	Service string `json:"s"`
	Port    int    `json:"p,omitempty"`
	Val     string `json:"v,omitempty"`
	Call    int64  `json:"call"`
	Ret     int64  `json:"ret"`
	Result  string `json:"r"`
	Err     string `json:"err,omitempty"`
	Read    []inst `json:"read,omitempty"`
}

// EOp is one ephemeral operation or event. Kinds: "sopen" (a session
// opened on Node in incarnation Inc), "sreg"/"sdereg" (a session's
// instance Key), "sclose", "sdead" (every session of incarnation Inc died:
// a SIGKILL, a power loss, a crash; an Inc ending in "/" names a whole
// process), "bbeat" (a beat client's first successful beat of Key),
// "bdereg" (its deregistration), "bend" (the client stopped beating, and
// deregistered or crashed).
type EOp struct {
	Kind    string `json:"k"`
	Node    string `json:"n,omitempty"`
	Inc     string `json:"inc,omitempty"`
	Session string `json:"sid,omitempty"`
	Key     string `json:"key,omitempty"` // service|ip:port
	Call    int64  `json:"call"`
	Ret     int64  `json:"ret"`
	Result  string `json:"r"`
	Err     string `json:"err,omitempty"`
}

// ERead is a query of an ephemeral service on one node.
type ERead struct {
	Node    string   `json:"n"`
	Inc     string   `json:"inc"`
	Service string   `json:"s"`
	Call    int64    `json:"call"`
	Ret     int64    `json:"ret"`
	Keys    []string `json:"keys"`
}

// FaultRec is one injected fault.
type FaultRec struct {
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
	Start  int64  `json:"start"`
	Heal   int64  `json:"heal"`
	// Recovered is how long after the heal every node was ready with a
	// Raft leader (-1: not within the bound).
	Recovered int64 `json:"recovered"`
}

// ExitRec is a node process that exited without the lab ending it.
type ExitRec struct {
	Node   string `json:"node"`
	At     int64  `json:"at"`
	Err    string `json:"err"`
	During string `json:"during,omitempty"` // the fault in progress
	Tail   string `json:"tail,omitempty"`
}

// ReadyRec records a node not ready within the bound after a heal.
type ReadyRec struct {
	Node  string `json:"node"`
	Fault string `json:"fault"`
	After int64  `json:"after"`
	Ready bool   `json:"ready"`
}

// Final is what the lab saw once the last fault had healed and the clients
// had stopped (the beat clients go on beating).
type Final struct {
	HealedAt  int64 `json:"healedAt"`
	Converged bool  `json:"converged"`
	// ConvergedAt is when every node first held the expected ephemeral
	// set (0 if never, within the bound).
	ConvergedAt int64 `json:"convergedAt"`
	// Live are the beat keys whose clients still beat at the end (and had
	// a successful beat after the heal).
	Live []string `json:"live"`
	// Views are each node's ephemeral instances per service, last seen.
	Views map[string]map[string][]string `json:"views"`
	// Persist are each node's persistent instances (key → value), read
	// without the read index after convergence.
	Persist map[string]map[string]string `json:"persist"`
	// Explain are the event journals of the checked keys, per node.
	Explain map[string]map[string]explainResp `json:"explain"`
	// NotReady lists nodes not ready at the end.
	NotReady []string `json:"notReady,omitempty"`
}

// recorder appends to a History from many goroutines.
type recorder struct {
	mu sync.Mutex
	h  History
}

func (r *recorder) persist(op POp) {
	r.mu.Lock()
	r.h.Persist = append(r.h.Persist, op)
	r.mu.Unlock()
}

func (r *recorder) eph(op EOp) {
	r.mu.Lock()
	r.h.Eph = append(r.h.Eph, op)
	r.mu.Unlock()
}

func (r *recorder) read(rd ERead) {
	r.mu.Lock()
	r.h.Reads = append(r.h.Reads, rd)
	r.mu.Unlock()
}

func (r *recorder) fault(f FaultRec) {
	r.mu.Lock()
	r.h.Faults = append(r.h.Faults, f)
	r.mu.Unlock()
}

func (r *recorder) exit(e ExitRec) {
	r.mu.Lock()
	r.h.Exits = append(r.h.Exits, e)
	r.mu.Unlock()
}

func (r *recorder) ready(e ReadyRec) {
	r.mu.Lock()
	r.h.Ready = append(r.h.Ready, e)
	r.mu.Unlock()
}

func (r *recorder) note(format string, args ...any) {
	r.mu.Lock()
	r.h.Notes = append(r.h.Notes, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

// snapshot returns a copy of the history so far, its slices sorted by
// call time.
func (r *recorder) snapshot() *History {
	r.mu.Lock()
	h := r.h
	h.Persist = append([]POp(nil), r.h.Persist...)
	h.Eph = append([]EOp(nil), r.h.Eph...)
	h.Reads = append([]ERead(nil), r.h.Reads...)
	h.Faults = append([]FaultRec(nil), r.h.Faults...)
	h.Exits = append([]ExitRec(nil), r.h.Exits...)
	h.Ready = append([]ReadyRec(nil), r.h.Ready...)
	r.mu.Unlock()
	sort.SliceStable(h.Persist, func(i, j int) bool { return h.Persist[i].Call < h.Persist[j].Call })
	sort.SliceStable(h.Eph, func(i, j int) bool { return h.Eph[i].Call < h.Eph[j].Call })
	sort.SliceStable(h.Reads, func(i, j int) bool { return h.Reads[i].Call < h.Reads[j].Call })
	return &h
}

func writeHistory(path string, h *History) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

func readHistory(path string) (*History, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	h := &History{}
	if err := json.Unmarshal(b, h); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return h, nil
}

// ephKey is the history's name of an ephemeral instance.
func ephKey(service, ip string, port int) string { return fmt.Sprintf("%s|%s:%d", service, ip, port) }

// splitKey is ephKey's inverse.
func splitKey(k string) (service, ip string, port int) {
	svc, ep, _ := strings.Cut(k, "|")
	i := strings.LastIndexByte(ep, ':')
	if i < 0 {
		return svc, ep, 0
	}
	fmt.Sscanf(ep[i+1:], "%d", &port)
	return svc, ep[:i], port
}
