package registry

import (
	"strconv"
	"time"

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
	// delete timeout), "orphaned" (its owner node left and the orphan
	// timeout ran out), "replaced" (its session replaced its instances),
	// "repaired" (a verify round found the owner no longer holds it),
	// "deleted" (the persistent store removed it).
	EventRemoved
)

var eventNames = [...]string{"", "registered", "updated", "unhealthy", "healthy", "patched",
	"patch removed", "damped", "removed"}

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
	Seq uint64
	// At is when this node saw it, on the registry's clock.
	At   time.Time
	Key  model.InstanceKey
	Kind EventKind
	// Publisher is the ID of the publisher whose change it was (a session
	// ID, or ip:port for a beat instance); empty for persistent instances
	// and for changes the node made itself (health checks, expiries).
	Publisher string
	// Node is the node where the change was made: the publisher's owner
	// for a replicated change, this node for its own.
	Node string
	// Reason says why, for the kinds whose documentation lists reasons.
	Reason string
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

func newJournal(size int) journal { return journal{ring: make([]Event, size)} }

// add records e, stamping its Seq.
func (j *journal) add(e Event) {
	if len(j.ring) == 0 {
		return
	}
	j.seq++
	e.Seq = j.seq
	j.ring[j.seq%uint64(len(j.ring))] = e
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
		e := &j.ring[s%n]
		if e.Key == key {
			out = append(out, *e)
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
