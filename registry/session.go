package registry

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/muster-io/muster/model"
)

// SessionOptions configures a session.
type SessionOptions struct {
	// TTL, when positive, ends the session unless KeepAlive is called at
	// least every TTL. Zero means the session lives until Close.
	TTL time.Duration
	// Labels describe the session for the host's operators: the client's
	// IP, SDK version, application name, as Nacos 2.x's connection labels
	// do. The registry keeps a copy, checks it by the rules and limits of
	// metadata (an invalid set fails OpenSession with an error matching
	// model.ErrInvalid, one past Limits.MaxMetadataEntries or
	// MaxMetadataSize with ErrLimit too, and field "session.labels"), and
	// shows it in Sessions and Session.Labels. Labels are local to this
	// node: they are not replicated, and mean nothing to the registry.
	Labels map[string]string
}

// Session publishes ephemeral instances on behalf of one connection the host
// manages (Nacos 2.x's gRPC client). Its instances live until the session
// ends: when the host closes it, when its keep-alive lapses, or when the
// registry closes. A session may publish any number of instances, several
// per service among them. Its methods are safe for concurrent use.
type Session struct {
	r      *Registry
	pub    *publisher
	ttl    time.Duration
	labels model.Metadata // immutable
	opened time.Time
	once   sync.Once
	done   chan struct{}
	px     pubExtra // pub's, in the same allocation
}

// OpenSession opens a session owned by this node. It fails with ErrLimit
// at Limits.MaxSessions, with an error matching model.ErrInvalid for
// invalid options, with ErrNotReady before Start (worth a retry) and with
// ErrClosed once the registry is closed. A session is served by this node
// alone: its writes are never forwarded, so they never fail with
// ErrUnavailable.
func (r *Registry) OpenSession(ctx context.Context, opts SessionOptions) (_ *Session, err error) {
	defer r.stats.op(OpSessionOpen, &err)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if opts.TTL < 0 {
		return nil, &model.ValidationError{Field: "session.ttl", Rule: "must not be negative", Value: opts.TTL.String()}
	}
	labels := model.NewMetadata(opts.Labels)
	if err := r.cfg.Limits.checkMetadata("session.labels", labels); err != nil {
		return nil, err
	}
	if err := labels.Validate("session.labels", r.cfg.Limits.model()); err != nil {
		return nil, err
	}
	s := &Session{r: r, ttl: opts.TTL, labels: labels, done: make(chan struct{})}
	s.pub = &publisher{kind: pubSession, x: &s.px}
	s.px.session = s

	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkWrite(); err != nil {
		return nil, err
	}
	if err := r.core.admitSession(); err != nil {
		return nil, err
	}
	s.pub.id = fmt.Sprintf("%s-%016x", r.cfg.NodeID, r.randUint64())
	for n := 1; r.core.hasSession(s.pub.id); n++ { // a random source may repeat itself
		s.pub.id = fmt.Sprintf("%s-%016x-%d", r.cfg.NodeID, r.randUint64(), n)
	}
	s.opened = r.now()
	r.core.openSession(s.pub, opts.TTL, r.leaseStart())
	r.carryOut()
	return s, nil
}

// ID returns the session's ID, unique within the registry.
func (s *Session) ID() string { return s.pub.id }

// Labels returns a copy of the labels the session was opened with (nil when
// it has none).
func (s *Session) Labels() map[string]string { return s.labels.Map() }

// Done is closed when the session ends.
func (s *Session) Done() <-chan struct{} { return s.done }

// Register publishes inst, which must be ephemeral, on the session.
// Registering a key the session already publishes replaces the instance.
// It fails with ErrSessionClosed once the session has ended (open a new
// one; retrying is of no use), with ErrClosed once the registry is closed,
// with ErrKindMismatch when the service is persistent, with ErrLimit past
// one of the Limits, and with an error matching model.ErrInvalid for an
// invalid instance.
func (s *Session) Register(ctx context.Context, inst model.Instance) (err error) {
	defer s.r.stats.op(OpSessionRegister, &err)
	if err := ctx.Err(); err != nil {
		return err
	}
	inst = inst.WithDefaults()
	if !inst.Ephemeral {
		return &model.ValidationError{Field: "instance.ephemeral", Rule: "must be true for a session's instances"}
	}
	// issue 15: the same instance again changes nothing. The lookup that
	// tells is kept for the publish (relocate checks it in O(1)).
	var loc instLoc
	if s.unchanged(&inst, &loc) {
		return nil
	}
	if err := s.r.validInstanceIn(&inst, loc.s != nil, loc.ipKey != 0); err != nil {
		return err
	}
	// whileOpen's section, without its closure: this is a hot path.
	r := s.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := s.checkOpen(); err != nil {
		return err
	}
	sv, i, found := r.relocate(&loc, &inst)
	_, err = r.core.publishAtKey(sv, i, found, s.pub, inst, true, nil, loc.ipKeyOf(&inst))
	if err == nil {
		r.core.pubChanged(s.pub)
	}
	r.carryOut() // once for the publication and the new revision
	return err
}

// ReplaceService makes insts the session's instances of service svc, all
// at once: the session's other instances of svc leave and insts are
// published in one step under the registry's lock, so readers and watchers
// see the old set or the new one, never a mix, and the change replicates as
// one. It is Nacos 2.x's rule that a connection has one publication per
// service (a second registration, or a BatchInstanceRequest, replaces the
// first). Every instance must be ephemeral and belong to svc; an empty
// insts removes the session's instances of svc. When an instance is
// invalid, or the service is persistent (ErrKindMismatch), nothing changes;
// when the new set would pass a limit (ErrLimit), the session keeps its
// instances (the instances that leave make room first, so a set of the
// same size always fits), though the service's revision may move. Its
// errors are Register's.
func (s *Session) ReplaceService(ctx context.Context, svc model.ServiceKey, insts []model.Instance) (err error) {
	defer s.r.stats.op(OpSessionRegister, &err)
	if err := ctx.Err(); err != nil {
		return err
	}
	svc = svc.WithDefaults()
	if err := svc.Validate(); err != nil {
		return err
	}
	next := make([]model.Instance, len(insts))
	for i, inst := range insts {
		inst = inst.WithDefaults()
		if !inst.Ephemeral {
			return &model.ValidationError{Field: "instance.ephemeral", Rule: "must be true for a session's instances"}
		}
		if inst.Service != svc {
			return &model.ValidationError{Field: "instance.service", Rule: "must be the replaced service " + svc.String(), Value: inst.Service.String()}
		}
		// svc, which inst.Service is, passed Validate above.
		if err := s.r.validInstanceIn(&inst, true, false); err != nil {
			return err
		}
		next[i] = inst
	}
	return s.whileOpen(func(r *Registry) error {
		err := r.core.replaceService(s.pub, svc, next, r.leaseStart())
		if err == nil {
			r.core.pubChanged(s.pub)
		}
		r.carryOut()
		return err
	})
}

// Instances returns the instances the session publishes, in no particular
// order (a copy: the caller may keep it).
func (s *Session) Instances() []model.Instance {
	r := s.r
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]model.Instance, 0, s.pub.insts.len())
	for _, pi := range s.pub.insts.all() {
		out = append(out, pi.inst.instance(pi.slot.svc))
	}
	return out
}

// Deregister removes the session's instance with key. Removing an instance
// the session does not publish is not an error. It fails with
// ErrSessionClosed once the session has ended, ErrClosed once the registry
// is closed, and an error matching model.ErrInvalid for an invalid key.
func (s *Session) Deregister(ctx context.Context, key model.InstanceKey) (err error) {
	defer s.r.stats.op(OpSessionDeregister, &err)
	if err := ctx.Err(); err != nil {
		return err
	}
	key = key.WithDefaults()
	if err := key.Validate(); err != nil {
		return err
	}
	return s.whileOpen(func(r *Registry) error {
		r.core.unpublishSession(s.pub, key, "deregistered", r.leaseStart())
		r.carryOut()
		return nil
	})
}

// KeepAlive renews the session's TTL. It fails with ErrSessionClosed once
// the session has ended.
func (s *Session) KeepAlive(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.whileOpen(func(r *Registry) error {
		if s.ttl > 0 {
			r.core.keepAlive(s.pub, r.now())
		}
		return nil
	})
}

// Close ends the session and removes all its instances at once: each
// affected service changes once. Closing a closed session is a no-op.
func (s *Session) Close() error {
	r := s.r
	r.mu.Lock()
	if !s.pub.closed && !s.pub.remote && r.state.Load() == stateRunning {
		r.core.endSession(s.pub, "session closed", r.leaseStart())
		r.carryOut()
	}
	r.mu.Unlock()
	s.end()
	return nil
}

// whileOpen runs f under the registry's lock if the session and the
// registry accept writes, and fails with ErrSessionClosed or the registry's
// error otherwise.
func (s *Session) whileOpen(f func(r *Registry) error) error {
	r := s.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := s.checkOpen(); err != nil {
		return err
	}
	return f(r)
}

// checkOpen fails with ErrSessionClosed or the registry's error unless the
// session and the registry accept writes. The caller holds mu.
func (s *Session) checkOpen() error {
	if err := s.r.checkWrite(); err != nil {
		return err
	}
	if s.pub.closed || s.pub.remote {
		return fmt.Errorf("%w: %s", ErrSessionClosed, s.pub.id)
	}
	return nil
}

func (s *Session) end() { s.once.Do(func() { close(s.done) }) }

// SessionInfo describes one session in Sessions.
type SessionInfo struct {
	ID string `json:"id"`
	// Labels is a copy of SessionOptions.Labels (nil when none).
	Labels map[string]string `json:"labels,omitempty"`
	// Instances counts the instances the session publishes.
	Instances int `json:"instances"`
	// Opened is when OpenSession returned, on the registry's clock.
	Opened time.Time `json:"opened"`
}

// Sessions lists the sessions open on this node, oldest first (ties by
// ID). Sessions of other nodes, whose instances are replicated here, are
// not listed: a session is its node's, as a connection is in Nacos. A
// session leaves the list once it has ended (closed, or its keep-alive
// lapsed). It costs a walk of this node's sessions under the registry's
// read lock. It fails with ErrClosed once the registry is closed.
func (r *Registry) Sessions(ctx context.Context) ([]SessionInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r.mu.RLock()
	if r.state.Load() == stateClosed {
		r.mu.RUnlock()
		return nil, ErrClosed
	}
	out := make([]SessionInfo, 0, r.core.sessionCount())
	for p := range r.core.allSessions() {
		if p.closed || p.session() == nil {
			continue
		}
		s := p.session()
		out = append(out, SessionInfo{ID: p.id, Labels: s.labels.Map(), Instances: p.insts.len(), Opened: s.opened})
	}
	r.mu.RUnlock()
	slices.SortFunc(out, func(a, b SessionInfo) int {
		if c := a.Opened.Compare(b.Opened); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}
