package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/transport"
)

// Forwarding. A beat publisher is owned by the rendezvous-hash owner of its
// ip:port; a register, beat or deregister that reaches another node is sent
// to the owner over the transport and answered from there. When the owner's
// view of the membership differs from ours (ownership is moving), it
// answers "not owner" and we ask again after a short back-off, a bounded
// number of times. An owner that cannot be reached fails the call at once
// with ErrUnavailable (unless the membership has meanwhile named another
// owner): waiting would not help before the membership declares it dead,
// and the client retries, as Nacos clients do. Only current members may
// forward: the owner refuses any other sender (ErrNotMember), and a member
// it does not know yet retries as when ownership moves.
//
// The names of the paths: each beat write of the API (Register, Heartbeat,
// HeartbeatInstance, Deregister) goes through beatWrite, which serves it
// here with serveOwned when this node owns its ip:port and sends it to the
// owner with forward otherwise. On the owner, serveForward is the
// transport's handler (only members), acceptForwarded checks that this
// node owns the write, and serveOwned runs the operation's XOwned
// (registerOwned, heartbeatOwned, heartbeatInstanceOwned, deregisterOwned):
// X on the owner, this node; a function named ...Locked is the part of it
// that runs under mu.

// kindForward is the transport message kind of forwarded beat writes.
const kindForward transport.Kind = 64

type fwdOp uint8

const (
	fwdRegister fwdOp = iota + 1
	fwdHeartbeat
	fwdHeartbeatInstance
	fwdDeregister
)

// fwdRequest is a forwarded write. Tags are part of the wire format.
type fwdRequest struct {
	Op   fwdOp             `msgpack:"op"`
	Inst model.Instance    `msgpack:"inst,omitempty"`
	Key  model.InstanceKey `msgpack:"key,omitempty"`
}

type fwdCode uint8

const (
	codeOK fwdCode = iota
	codeNotOwner
	codeNotFound
	codeKindMismatch
	codeInvalid
	codeNotReady
	codeClosed
	codeOther
	codeLimit
	codeNotMember
	codeSessionInstance
)

// fwdResponse answers a forwarded write.
type fwdResponse struct {
	Code     fwdCode       `msgpack:"c"`
	Msg      string        `msgpack:"m,omitempty"`
	Interval time.Duration `msgpack:"iv,omitempty"`
	// Registered is BeatResult.Registered (HeartbeatInstance); absent,
	// hence false, from owners that predate it.
	Registered bool `msgpack:"rg,omitempty"`
}

// errNotOwner is the handler's answer when this node does not own the key.
var errNotOwner = errors.New("registry: not the owner")

// codeOf maps an error to its wire code.
func codeOf(err error) fwdCode {
	switch {
	case err == nil:
		return codeOK
	case errors.Is(err, errNotOwner):
		return codeNotOwner
	case errors.Is(err, ErrNotFound):
		return codeNotFound
	case errors.Is(err, ErrKindMismatch):
		return codeKindMismatch
	case errors.Is(err, model.ErrInvalid):
		return codeInvalid
	case errors.Is(err, ErrNotReady):
		return codeNotReady
	case errors.Is(err, ErrClosed):
		return codeClosed
	case errors.Is(err, ErrLimit):
		return codeLimit
	case errors.Is(err, ErrNotMember):
		return codeNotMember
	case errors.Is(err, ErrSessionInstance):
		return codeSessionInstance
	}
	return codeOther
}

// err returns the error a response stands for, matching the same sentinel
// as on the owner.
func (resp *fwdResponse) err(owner string) error {
	var base error
	switch resp.Code {
	case codeOK:
		return nil
	case codeNotOwner:
		base = errNotOwner
	case codeNotFound:
		base = ErrNotFound
	case codeKindMismatch:
		base = ErrKindMismatch
	case codeInvalid:
		base = model.ErrInvalid
	case codeNotReady:
		base = ErrNotReady
	case codeClosed:
		base = ErrUnavailable
	case codeLimit:
		base = ErrLimit
	case codeNotMember:
		base = ErrNotMember
	case codeSessionInstance:
		base = ErrSessionInstance
	default:
		return fmt.Errorf("registry: owner %s: %s", owner, resp.Msg)
	}
	return fmt.Errorf("%w (owner %s: %s)", base, owner, resp.Msg)
}

// Owner returns the node that owns the beats of instances at ip:port in this
// node's current view of the membership: it runs their leases, and beat
// writes sent elsewhere are forwarded to it. With active health checks and
// Raft it is also the node that probes persistent instances at ip:port (with
// Raft but no Distro the Raft leader probes; without Raft each node probes
// the persistent instances it holds). Without Distro it is this node.
func (r *Registry) Owner(ip string, port int) string {
	owner, _ := r.beatOwner(ip, port)
	return owner
}

// beatOwner returns the owner of the beat publisher of ip:port and whether
// it is this node.
func (r *Registry) beatOwner(ip string, port int) (string, bool) {
	if !r.cluster {
		return r.cfg.NodeID, true
	}
	owner := r.replicator.Owner(beatRecordKey(ip, port))
	return owner, owner == r.cfg.NodeID
}

// endpoint returns the ip:port whose owner serves req.
func (req *fwdRequest) endpoint() (string, int) {
	if req.Op == fwdRegister || req.Op == fwdHeartbeatInstance {
		return req.Inst.IP, req.Inst.Port
	}
	return req.Key.IP, req.Key.Port
}

// beatWrite is the one way a beat write (register, beat, deregister) is
// carried out: on this node when it owns the write's ip:port (always, when
// standalone), else forwarded to the owner, which serves it with serveOwned.
func (r *Registry) beatWrite(ctx context.Context, req *fwdRequest) (BeatResult, error) {
	if !r.cluster {
		return r.serveOwned(ctx, req)
	}
	return r.forward(ctx, req)
}

// serveOwned carries out a beat write on its owner, this node: the one
// table from forwarded operations to what they do.
func (r *Registry) serveOwned(ctx context.Context, req *fwdRequest) (BeatResult, error) {
	switch req.Op {
	case fwdRegister:
		return BeatResult{}, r.registerOwned(ctx, req.Inst, nil)
	case fwdHeartbeat:
		iv, err := r.heartbeatOwned(ctx, req.Key)
		return BeatResult{Interval: iv}, err
	case fwdHeartbeatInstance:
		return r.heartbeatInstanceOwned(ctx, req.Inst)
	case fwdDeregister:
		return BeatResult{}, r.deregisterOwned(ctx, req.Key)
	}
	return BeatResult{}, &model.ValidationError{Field: "forward.op", Rule: "must be a known operation", Value: fmt.Sprint(req.Op)}
}

// forward carries out req on the owner of its ip:port: sent there,
// retrying while ownership is moving, or served here if this node turns
// out to own it.
func (r *Registry) forward(ctx context.Context, req *fwdRequest) (BeatResult, error) {
	if req.Op == fwdHeartbeat {
		// Checked before it travels (a forward costs far more than the
		// check); locally, only a miss is checked (see heartbeatOwned).
		if err := req.Key.WithDefaults().Validate(); err != nil {
			return BeatResult{}, err
		}
	}
	ip, port := req.endpoint()
	var body []byte
	backoff := r.cfg.ForwardBackoff
	for attempt := 1; ; attempt++ {
		owner, mine := r.beatOwner(ip, port)
		if mine {
			return r.serveOwned(ctx, req)
		}
		if body == nil {
			var err error
			if body, err = r.encodeForward(req); err != nil {
				return BeatResult{}, err
			}
		}
		var resp fwdResponse
		r.stats.forwarded.Add(1)
		// A real-time bound: the network does not follow the registry's clock,
		// and a peer that went silent must not hold the caller for ever.
		rctx, cancel := context.WithTimeout(ctx, r.cfg.ForwardTimeout)
		out, err := r.trans.Request(rctx, owner, kindForward, body)
		if err != nil && ctx.Err() == nil && rctx.Err() != nil {
			err = fmt.Errorf("%w: no answer within %v: %w", transport.ErrUnreachable, r.cfg.ForwardTimeout, err)
		}
		cancel()
		if err == nil {
			if err = model.Unmarshal(out, &resp); err == nil {
				err = resp.err(owner)
			}
		}
		// An owner whose registry has closed (its handler is gone, its
		// transport not yet) is as good as unreachable. An owner that does
		// not count this node as a member yet (it has just joined) is a
		// membership view that differs too: retry.
		if errors.Is(err, transport.ErrNoHandler) {
			err = fmt.Errorf("%w: %w", transport.ErrUnreachable, err)
		}
		if err == nil || !errors.Is(err, errNotOwner) && !errors.Is(err, ErrNotMember) && !errors.Is(err, transport.ErrUnreachable) {
			return BeatResult{Interval: resp.Interval, Registered: resp.Registered}, err
		}
		r.stats.forwardFailures.Add(1)
		if attempt >= r.cfg.ForwardAttempts {
			return BeatResult{}, fmt.Errorf("%w: forwarding to %s: %w", ErrUnavailable, owner, err)
		}
		if errors.Is(err, transport.ErrUnreachable) {
			// Until the membership declares the owner dead, waiting does not
			// help: ask the new owner at once if there is one, and let the
			// client retry otherwise.
			if next, _ := r.beatOwner(ip, port); next != owner {
				continue
			}
			return BeatResult{}, fmt.Errorf("%w: forwarding to %s: %w", ErrUnavailable, owner, err)
		}
		r.log.Debug("forward failed; retrying", "owner", owner, "attempt", attempt, "err", err)
		select {
		case <-r.clock.After(backoff):
		case <-ctx.Done():
			return BeatResult{}, ctx.Err()
		case <-r.stop:
			return BeatResult{}, ErrClosed
		}
		backoff *= 2
	}
}

// encodeForward encodes a forwarded write. It takes a copy of req, which
// escapes to the encoder, so that only a forwarded write puts its request
// on the heap.
func (r *Registry) encodeForward(req *fwdRequest) ([]byte, error) {
	c := *req
	return model.Marshal(&c)
}

// serveForward handles a write forwarded by another node. Only a current
// member may forward: from is the peer's node ID as the transport
// authenticated it, and a node outside the membership (a rogue transport
// peer, or a member that has left) is refused before its body is read.
func (r *Registry) serveForward(ctx context.Context, from string, body []byte) ([]byte, error) {
	var req fwdRequest
	var resp fwdResponse
	var err error
	if !r.isMember(from) {
		r.log.Warn("refusing a forwarded write from a non-member", "from", from)
		err = fmt.Errorf("%w: %q may not forward writes to %s", ErrNotMember, from, r.cfg.NodeID)
	} else if err = model.Unmarshal(body, &req); err == nil {
		r.stats.served.Add(1)
		var res BeatResult
		res, err = r.acceptForwarded(ctx, &req)
		resp.Interval, resp.Registered = res.Interval, res.Registered
	}
	resp.Code = codeOf(err)
	if err != nil {
		resp.Msg = err.Error()
	}
	return model.Marshal(&resp)
}

// acceptForwarded serves one forwarded write, if this node owns its key. A
// peer's register is checked as Register checks its caller's instance;
// the other operations check what they are given themselves.
func (r *Registry) acceptForwarded(ctx context.Context, req *fwdRequest) (BeatResult, error) {
	if _, mine := r.beatOwner(req.endpoint()); !mine {
		return BeatResult{}, errNotOwner
	}
	if req.Op == fwdRegister {
		req.Inst = req.Inst.WithDefaults()
		if !req.Inst.Ephemeral {
			return BeatResult{}, &model.ValidationError{Field: "instance.ephemeral", Rule: "must be true for a beat instance"}
		}
		if err := r.validInstance(&req.Inst); err != nil {
			return BeatResult{}, err
		}
	}
	return r.serveOwned(ctx, req)
}

// isMember reports whether node is a current member of the cluster, other
// than this node, in the replicator's view (the one ownership follows).
func (r *Registry) isMember(node string) bool {
	return node != r.cfg.NodeID && slices.Contains(r.replicator.Members(), node)
}
