package registry

import (
	"strconv"
	"strings"
	"time"

	"github.com/muster-io/muster/health"
	"github.com/muster-io/muster/model"
)

// EventKind says what happened to an instance (see Event).
type EventKind uint8

// Event kinds.
const (
	// EventRegistered: the instance appeared in this node's index, published
	// by Publisher (owned by Node) or stored through the persistent store.
	EventRegistered EventKind = iota + 1
	// EventUpdated: its data changed (weight, enabled, metadata) by a new
	// registration from Publisher.
	EventUpdated
	// EventUnhealthy and EventHealthy: its health flipped. Reason says why:
	// "beat missed", "beat resumed", "check: <type>: <detail>", "manual".
	EventUnhealthy
	EventHealthy
	// EventPatched and EventPatchRemoved: an operator's override (weight,
	// enabled, metadata) was applied to it, or removed (Reason "expired"
	// when its countdown ran out after the instance had gone).
	EventPatched
	EventPatchRemoved
	// EventDamped: its active health check flapped, and further flips are
	// held back for a while.
	EventDamped
	// EventRemoved: it left the index. Reason is one of "deregistered",
	// "session closed", "session expired", "lease expired" (no beat for the
	// delete timeout), "replaced" (its session replaced its instances),
	// "write undone" (a session's write refused midway was rolled back),
	// "deleted" (the persistent store removed it), and on the nodes that
	// hold a replica: "removed by its owner" (the owner node's own event
	// says why), "orphaned: its owner node left" (the orphan timeout ran
	// out), "taken over by another node".
	EventRemoved
)

var eventNames = [...]string{"", "registered", "updated", "unhealthy", "healthy", "patched",
	"patch removed", "damped", "removed"}

// MarshalText encodes k by its name ("registered"), so that an Event in
// JSON reads as it logs.
func (k EventKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

func (k EventKind) String() string {
	if int(k) < len(eventNames) && k != 0 {
		return eventNames[k]
	}
	return "EventKind(" + strconv.Itoa(int(k)) + ")"
}

// Event is one entry of an instance's history on this node (see
// Registry.Explain).
type Event struct {
	// Seq orders the events of this registry: it grows by one per event
	// recorded, for every instance.
	Seq uint64 `json:"seq"`
	// At is when this node saw it, on the registry's clock.
	At   time.Time         `json:"at"`
	Key  model.InstanceKey `json:"key"`
	Kind EventKind         `json:"kind"`
	// Publisher is the ID of the publisher whose change it was (a session
	// ID, or ip:port for a beat instance); empty for persistent instances
	// and for changes the node made itself (health checks, expiries).
	Publisher string `json:"publisher"`
	// Node is the node where the change was made: the publisher's owner
	// for a replicated change, this node for its own.
	Node string `json:"node"`
	// Reason says why, for the kinds whose documentation lists reasons.
	Reason string `json:"reason"`

	beat bool // Publisher is the key's ip:port, filled in when read
}

// String formats e on one line for logs and narrations.
func (e Event) String() string {
	s := e.At.UTC().Format("15:04:05.000") + " " + e.Key.String() + " " + e.Kind.String()
	if e.Reason != "" {
		s += " (" + e.Reason + ")"
	}
	if e.Publisher != "" {
		s += " by " + e.Publisher
	}
	if e.Node != "" {
		s += " on " + e.Node
	}
	return s
}

// journal is a ring of the latest events of every instance: recording one
// costs a copy into the ring (the strings are shared with the index, never
// copied), with no allocation and no map, so the write paths pay almost
// nothing; Explain scans the ring, which is fine for an operator's call.
// An instance's events stay until the ring has turned over, which bounds
// the window in which the history of an instance that has gone can be read.
// The zero journal records nothing. Its user serialises access (the
// registry's mu).
type journal struct {
	ring []Event
	seq  uint64 // events recorded so far
}

// newJournal returns a journal of at least size events (rounded up to a
// power of two, so that the ring is indexed by a mask).
func newJournal(size int) journal {
	n := 1
	for n < size {
		n <<= 1
	}
	return journal{ring: make([]Event, n)}
}

// add records e, stamping its Seq.
func (j *journal) add(e Event) {
	if len(j.ring) == 0 {
		return
	}
	j.seq++
	e.Seq = j.seq
	j.ring[j.seq&uint64(len(j.ring)-1)] = e
}

// find returns the events of key still in the ring, oldest first, at most
// limit of them (the newest; limit ≤ 0 means all).
func (j *journal) find(key model.InstanceKey, limit int) []Event {
	n := uint64(len(j.ring))
	if n == 0 || j.seq == 0 {
		return nil
	}
	first := uint64(1)
	if j.seq > n {
		first = j.seq - n + 1
	}
	var out []Event
	for s := j.seq; s >= first; s-- {
		e := &j.ring[s&(n-1)]
		if e.Key == key {
			out = append(out, *e)
			if e.beat {
				out[len(out)-1].Publisher = model.Endpoint(key.IP, key.Port)
			}
			if limit > 0 && len(out) == limit {
				break
			}
		}
	}
	for i, k := 0, len(out)-1; i < k; i, k = i+1, k-1 {
		out[i], out[k] = out[k], out[i]
	}
	return out
}

// note records an event of key, a change by pub (nil for the persistent
// store's and this node's own), if the journal is on. The caller holds mu.
func (r *Registry) note(key model.InstanceKey, kind EventKind, pub *publisher, why string) {
	r.noteBy(key, kind, pub, pub != nil && pub.remote, why)
}

// noteBy is note of an event of pub as it was when the event happened:
// remote, a replica, whose node is its owner.
func (r *Registry) noteBy(key model.InstanceKey, kind EventKind, pub *publisher, remote bool, why string) {
	if len(r.journal.ring) == 0 {
		return
	}
	// The key's cluster and IP are the instance's strings, which may be
	// windows on a whole record (shareIn, decodeInstRecord): an event,
	// kept until the ring wraps, keeps copies of its own.
	key.Cluster, key.IP = cloneCluster(key.Cluster), strings.Clone(key.IP)
	e := Event{At: r.now(), Key: key, Kind: kind, Reason: why}
	if pub != nil {
		// A beat publisher's ID is its ip:port, the key's: built when read,
		// as the index builds it only when needed (see publisher.pubID).
		e.Publisher, e.Node, e.beat = pub.id, r.cfg.NodeID, pub.kind == pubBeat
		if remote {
			e.Node = pub.owner()
		}
	}
	r.journal.add(e)
}

// Explanation is what a node knows of one instance (see Explain).
type Explanation struct {
	Key model.InstanceKey `json:"key"`
	// Present reports whether the index holds the instance now; Instance
	// is it as published (before an operator's patch), and Publishers the
	// IDs of the publishers that publish it ("" for the persistent store).
	Present    bool           `json:"present"`
	Instance   model.Instance `json:"instance"`
	Publishers []string       `json:"publishers,omitempty"`
	// Check is the active health check's status, when the instance is
	// checked on this node (its owner): the last result, and damping.
	Check *health.Status `json:"check,omitempty"`
	// Events are the instance's events still in this node's journal,
	// oldest first (the journal holds the latest Config.HistoryEvents events
	// of every instance, so an instance gone for long has none).
	Events []Event `json:"events,omitempty"`
}

// Explain tells what this node knows of the instance with key: whether it
// is held and by whom, its health check, and its history on this node
// (registered and updated by which publisher of which node, beats missed
// and resumed, health flips, patches, and why it was removed: deregistered,
// lease or session expired, session closed, replaced, removed by its owner
// node, deleted from the store). It also works for instances that are
// gone, while their events are in the journal. It scans the journal: an
// operator's call, not a hot path.
func (r *Registry) Explain(key model.InstanceKey) Explanation {
	key = key.WithDefaults()
	out := Explanation{Key: key}
	r.mu.RLock()
	if s, sl := r.core.lookup(key); sl != nil && sl.live() {
		out.Present = true
		out.Instance = sl.current().instance(s)
		if sl.pers() != nil {
			out.Publishers = append(out.Publishers, "")
		}
		for _, pi := range sl.pubs() {
			out.Publishers = append(out.Publishers, pi.pub.peekID())
		}
	}
	out.Events = r.journal.find(key, 0)
	r.mu.RUnlock()
	if st, ok := r.checkStatus(key); ok {
		out.Check = &st
	}
	return out
}

// cloneCluster returns a copy of cluster, or the constant default cluster
// name when it is that (nearly always: no allocation).
func cloneCluster(cluster string) string {
	if cluster == model.DefaultCluster {
		return model.DefaultCluster
	}
	return strings.Clone(cluster)
}
