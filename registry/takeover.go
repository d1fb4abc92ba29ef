package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/transport"
)

// Lease takeover. A beat lease is renewed only where it runs, on the owner:
// a light beat changes no record. So when a key comes back to a node after
// the membership views differed (a partition heals: its owner was cut off
// while the other side adopted the key and went on taking the client's
// beats), the returning owner's copy is as old as the last change it saw,
// and its lease as old as the last beat it took: without more, it would
// serve the instance unhealthy, or delete it, although the client never
// stopped beating. So the node that loses a key sends the key's new owner
// the leases it ran, each with the age of its last beat, and the new owner
// takes whichever last beat is newer, its own or the one handed over. The
// new owner then writes a new revision, as for any change, so the single
// writer rule holds; an instance deregistered on it within a lease period,
// or whose handed lease has lapsed, stays gone.

// kindLeases is the transport message kind of handed-over beat leases.
const kindLeases transport.Kind = 65

// maxHandedLeases bounds the leases in one message.
const maxHandedLeases = 1000

// leaseHandoff carries beat leases to the new owner of their keys. Tags are
// part of the wire format.
type leaseHandoff struct {
	Leases []handedLease `msgpack:"l"`
}

// handedLease is one beat lease: the instance, and how long ago its last
// beat was on the sender's clock (an age, not a time, so that clock skew
// between nodes does not matter).
type handedLease struct {
	Inst model.Instance `msgpack:"i"`
	Age  time.Duration  `msgpack:"a"`
}

// sendLeases hands leases over to their keys' new owners, in the
// background: a handover that does not arrive leaves the new owner with
// what it knew. The caller holds mu.
func (r *Registry) sendLeases(byOwner map[string][]handedLease) {
	for owner, leases := range byOwner {
		for len(leases) > 0 {
			n := min(len(leases), maxHandedLeases)
			body, err := model.Marshal(&leaseHandoff{Leases: leases[:n]})
			leases = leases[n:]
			if err != nil { // plain structs of validated values always encode
				r.log.Warn("encoding a lease handover", "err", err)
				continue
			}
			r.sends.add()
			r.goFunc(func() {
				defer r.sends.done()
				r.handLeases(owner, body)
			})
		}
	}
}

// handLeases sends one handover to owner. Membership views change on each
// node in its own time, so the new owner may not count this node as a
// member yet when the handover arrives (it answers ErrNotMember), its
// registry may not have installed its handler yet (ErrNoHandler), or the
// connection may not be up: all are retried, with a backoff in real time
// (the network's), until ForwardTimeout has passed.
func (r *Registry) handLeases(owner string, body []byte) {
	ctx, cancel := context.WithTimeout(r.runCtx, r.cfg.ForwardTimeout) // real time: the network's
	defer cancel()
	for backoff := 10 * time.Millisecond; ; backoff = min(2*backoff, 200*time.Millisecond) {
		out, err := r.trans.Request(ctx, owner, kindLeases, body)
		if err == nil {
			var resp fwdResponse
			if err = model.Unmarshal(out, &resp); err == nil {
				err = resp.err(owner)
			}
		}
		if err == nil {
			return
		}
		if !errors.Is(err, ErrNotMember) && !errors.Is(err, transport.ErrUnreachable) && !errors.Is(err, transport.ErrNoHandler) {
			r.log.Debug("handing beat leases over failed", "to", owner, "err", err)
			return
		}
		wait := time.NewTimer(backoff) // real time: paces retries over the network
		select {
		case <-wait.C:
		case <-ctx.Done():
			wait.Stop()
			r.log.Debug("handing beat leases over failed", "to", owner, "err", err)
			return
		}
	}
}

// serveLeases takes over the beat leases another node handed over.
func (r *Registry) serveLeases(_ context.Context, from string, body []byte) ([]byte, error) {
	var resp fwdResponse
	if err := r.takeLeases(from, body); err != nil {
		resp.Code, resp.Msg = codeOf(err), err.Error()
	}
	return model.Marshal(&resp)
}

// takeLeases serves one handover from node from: the leases whose keys
// this node owns go to the core (index.takeHandedLeases).
func (r *Registry) takeLeases(from string, body []byte) error {
	if !r.cluster || !r.isMember(from) {
		r.log.Warn("refusing beat leases from a non-member", "from", from)
		return fmt.Errorf("%w: %q may not hand beat leases to %s", ErrNotMember, from, r.cfg.NodeID)
	}
	var msg leaseHandoff
	if err := model.Unmarshal(body, &msg); err != nil {
		return err
	}
	leases := make([]takenLease, 0, len(msg.Leases))
	ages := make([]time.Duration, 0, len(msg.Leases))
	for _, l := range msg.Leases {
		inst := l.Inst.WithDefaults()
		if err := r.validInstance(&inst); err != nil || !inst.Ephemeral || l.Age < 0 {
			r.log.Warn("ignoring a malformed lease handover", "from", from, "err", err)
			continue
		}
		leases = append(leases, takenLease{inst: inst})
		ages = append(ages, l.Age)
	}
	if !r.replicator.Ready() {
		return nil // loading: the peers' records, when adopted, carry the leases
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state.Load() != stateRunning {
		return ErrClosed
	}
	now := r.now()
	owned := leases[:0]
	for i, l := range leases {
		if !r.ownsRecord(beatRecordKey(l.inst.IP, l.inst.Port)) {
			continue // moved on again: its owner's records will tell
		}
		l.last = now.Add(-ages[i])
		owned = append(owned, l)
	}
	r.core.takeHandedLeases(owned, now)
	r.carryOut()
	return nil
}

// pending counts background work, so that Settle can wait for it. Its zero
// value is ready to use.
type pending struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0; nil while n is 0
}

func (p *pending) add() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == 0 {
		p.idle = make(chan struct{})
	}
	p.n++
}

func (p *pending) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n--
	if p.n == 0 {
		close(p.idle)
		p.idle = nil
	}
}

// wait blocks until nothing is pending, ctx ends or stop is closed.
func (p *pending) wait(ctx context.Context, stop <-chan struct{}) error {
	p.mu.Lock()
	idle := p.idle
	p.mu.Unlock()
	if idle == nil {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-stop:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}
