package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
	"unsafe"

	"github.com/muster-io/muster/health"
	"github.com/muster-io/muster/model"
)

// A publisher is the unit of ephemeral data (Nacos 2.x's "client"): a
// session, or the beat publisher of one ip:port. Only its owner changes it.
type publisher struct {
	id     string // see pubID
	insts  pubList
	next   *publisher // beat publishers: the next one on the same IP
	x      *pubExtra  // nil for a beat publisher made here, the most common kind
	port   uint16     // beat publishers
	kind   pubKind
	closed bool
	remote bool // owned by another node: a replica (see replicate.go)
}

// pubList is a publisher's list of publications. Standalone, most
// publishers are beat publishers of one ip:port with one, paid per
// instance (beatBlock). So one publication is held inline, and a list of
// more goes out of line: 16 bytes where a slice and an array of one took
// 32. A list stays out of line once it had two (a session's from its
// second instance on): 24 bytes and the array more, for as long as it
// lives. A slot's publications are held alike but in 8 bytes: the list
// out of line goes in the slot's extra (see slot).
type pubList struct {
	one  *pubInst    // the only publication, while many is nil
	many *[]*pubInst // the publications, once there have been two
}

// all returns the publications. The slice may be a window on the list
// itself (its one inline publication): a caller must not keep it across a
// change of the list. In particular, an add or insert that takes the list
// out of line clears the inline publication, which a slice would have kept.
func (l *pubList) all() []*pubInst {
	if l.many != nil {
		return *l.many
	}
	if l.one == nil {
		return nil
	}
	return unsafe.Slice(&l.one, 1)
}

// len returns the number of publications.
func (l *pubList) len() int {
	if l.many != nil {
		return len(*l.many)
	}
	if l.one == nil {
		return 0
	}
	return 1
}

// first returns the first publication, or nil.
func (l *pubList) first() *pubInst {
	if l.many != nil {
		if len(*l.many) == 0 {
			return nil
		}
		return (*l.many)[0]
	}
	return l.one
}

// add appends pi. (A publisher's list has no order; a slot's, which is
// sorted, is the slot's own: insertPub.)
func (l *pubList) add(pi *pubInst) {
	switch {
	case l.many != nil:
		*l.many = append(*l.many, pi)
	case l.one == nil:
		l.one = pi
	default:
		many := []*pubInst{l.one, pi}
		l.one, l.many = nil, &many
	}
}

// remove removes pi, if present, keeping the others' order.
func (l *pubList) remove(pi *pubInst) {
	if l.many == nil {
		if l.one == pi {
			l.one = nil
		}
		return
	}
	if i := slices.Index(*l.many, pi); i >= 0 {
		*l.many = slices.Delete(*l.many, i, i+1)
	}
}

// keep sets the list to kept, the publications of all() that stay, in
// all()'s storage (a filter in place); the rest of that storage is
// cleared so that it keeps nothing alive.
func (l *pubList) keep(kept []*pubInst) {
	if l.many == nil {
		if len(kept) == 0 {
			l.one = nil
		}
		return
	}
	clear((*l.many)[len(kept):])
	*l.many = kept
}

// pubExtra is what a session's publisher, or another node's (a replica),
// has and a beat publisher made here has not. Out of line it keeps a beat
// publisher's block (beatBlock) in a smaller size class: standalone, every
// beat instance has a publisher of its own (TestBeatBlockSizeClass). A
// replica promoted to this node's own keeps its pubExtra, and the name of
// its last owner: the journal's entries of the adoption name it.
type pubExtra struct {
	session *Session   // session publishers
	owner   string     // the node of a remote publisher, for the journal
	repl    *replState // sessions in a cluster: per-instance replication (delta.go)
}

// extra returns p's pubExtra, making it if need be.
func (p *publisher) extra() *pubExtra {
	if p.x == nil {
		p.x = new(pubExtra)
	}
	return p.x
}

// session returns the Session of a session publisher, nil for others and
// once a replica took its place.
func (p *publisher) session() *Session {
	if p.x == nil {
		return nil
	}
	return p.x.session
}

// owner returns the node of a remote publisher: "" for a local one that
// never was remote, the last owner's for one promoted.
func (p *publisher) owner() string {
	if p.x == nil {
		return ""
	}
	return p.x.owner
}

// repl returns p's per-instance replication state, or nil.
func (p *publisher) repl() *replState {
	if p.x == nil {
		return nil
	}
	return p.x.repl
}

// pubID returns the publisher's ID: the session ID, or "ip:port" for a beat
// publisher (its record key is a prefix and the ID: recordKey). A beat
// publisher builds it on first use: most never need it, and a million of
// them would hold a million strings.
func (p *publisher) pubID() string {
	if p.id == "" && p.kind == pubBeat && p.insts.len() > 0 {
		p.id = p.peekID()
	}
	return p.id
}

// peekID is pubID without caching it, for readers that hold mu only for
// reading.
func (p *publisher) peekID() string {
	if p.id == "" && p.kind == pubBeat && p.insts.len() > 0 {
		i := p.insts.first().inst
		return model.Endpoint(i.ip, int(i.port))
	}
	return p.id
}

type pubKind uint8

const (
	pubBeat pubKind = iota + 1
	pubSession
)

// pubInst is one instance published by one publisher. Its address is stable
// for the life of the publication, so it keys the beat lease, which it
// holds: a beat publication's lease is its own 16 bytes, not a pointer to
// them (a session's or a replica's publication has none, and the room goes
// unused). The interval handed back to a beat is not here but in the
// lease's Timeouts, interned by the lease set (index.beatInterval).
type pubInst struct {
	pub   *publisher
	slot  *slot
	inst  *rec         // replaced on change
	lease health.Lease // a beat publication's lease (index.beatLeases); zero for others
}

// setInst makes next pi's instance, and empties the one it replaces
// (rec.retire), which nothing holds any longer but, perhaps, the block pi
// was born in.
func (pi *pubInst) setInst(next *rec) {
	if old := pi.inst; old != next {
		pi.inst = next
		old.retire()
	}
}

// release makes pi, a session's publication that no slot lists any longer,
// let go of its instance and its publisher (see effects.released). Nothing
// reads it afterwards: its publisher's list and its slot's no longer hold
// it, and a session's publication has no lease.
func (pi *pubInst) release() {
	pi.inst.retire()
	pi.pub = nil
}

// Lease returns pi's lease state (health.Holder).
func (pi *pubInst) Lease(bool) *health.Lease { return &pi.lease }

// publication returns pub's publication in sl, or nil.
func (sl *slot) publication(pub *publisher) *pubInst {
	for _, pi := range sl.pubs() {
		if pi.pub == pub {
			return pi
		}
	}
	return nil
}

// Register registers inst. An ephemeral instance is published by the beat
// publisher of its ip:port and must then be kept alive with Heartbeat (use a
// Session for connection-bound instances). A persistent one
// (Ephemeral=false) goes to the persistent store and stays until
// Deregister; its health is then the business of health checks or SetHealth.
//
// Registering an instance the registry holds replaces it; an ephemeral
// re-registration also renews its lease. It fails with ErrKindMismatch when
// the service is of the other kind, with an error matching
// model.ErrInvalid when inst is invalid, with ErrLimit past one of the
// Limits, and with ErrClosed once the registry is closed. Worth a retry
// (Retryable): ErrNotReady before Start or, in a cluster, while this node
// is still loading its peers' records (for an ephemeral instance it owns),
// ErrUnavailable when the ephemeral instance's owner is another node that
// could not be reached, and ErrNoLeader for a persistent instance when the
// store has no quorum.
func (r *Registry) Register(ctx context.Context, inst model.Instance) (err error) {
	defer r.stats.op(OpRegister, &err)
	if err := ctx.Err(); err != nil {
		return err
	}
	inst = inst.WithDefaults()
	var loc beatLoc // the beat publisher's and the key's lookups, kept for the registration
	if inst.Ephemeral && !r.cluster && r.renewUnchangedBeat(&inst, &loc) {
		return nil // issue 15: the same instance again only renews its lease (delta.go)
	}
	if err := r.validInstanceIn(&inst, loc.at.s != nil, loc.at.ipKey != 0); err != nil {
		return err
	}
	if !inst.Ephemeral {
		return r.store.Apply(ctx, model.Command{Op: model.OpPutInstance, Instance: inst}, model.Origin{})
	}
	if !r.cluster {
		return r.registerOwned(ctx, inst, &loc) // beatWrite's route standalone, without its request
	}
	_, err = r.beatWrite(ctx, &fwdRequest{Op: fwdRegister, Inst: inst})
	return err
}

// checkBeatWrite reports whether this node takes beat writes: in cluster
// mode, only once it has loaded its peers' records. Before that it may not
// know the publisher of an ip:port it owns (its previous run's record, held
// by the peers), and a write would give it a second, conflicting history.
func (r *Registry) checkBeatWrite() error {
	if r.cluster && !r.replicator.Ready() { // standalone: solo, always ready
		return fmt.Errorf("%w: loading the cluster's records", ErrNotReady)
	}
	return nil
}

// registerOwned is Register of a beat instance on its owner, this node.
// inst is valid, ephemeral and has its defaults; loc, if not nil, is a
// lookup of its beat publisher made earlier (see beatLoc).
func (r *Registry) registerOwned(ctx context.Context, inst model.Instance, loc *beatLoc) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := r.checkBeatWrite(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkWrite(); err != nil {
		return err
	}
	_, err := r.registerBeat(r.core.beatPubAt(loc, inst.IP, inst.Port), &inst, loc)
	return err
}

// registerOwnedLocked publishes inst through the beat publisher of its
// ip:port and (re)starts its lease. The caller holds mu.
func (r *Registry) registerOwnedLocked(inst model.Instance) (*pubInst, error) {
	return r.registerBeat(r.core.beatPub(inst.IP, inst.Port), &inst, nil)
}

// registerBeat is registerOwnedLocked with the beat publisher of inst's
// ip:port looked up already: pub, or nil when there is none. inst is only
// read. loc, if not nil, is the lookup that found pub, with the lookup of
// inst's key, made earlier (beatLoc and instLoc say when they still hold).
func (r *Registry) registerBeat(pub *publisher, inst *model.Instance, loc *beatLoc) (*pubInst, error) {
	if pi := r.renewIfUnchanged(pub, inst); pi != nil {
		return pi, nil // issue 15: the same instance again only renews its lease
	}
	if pub == nil && r.cluster {
		// A copy of another node's publisher: this node owns it now.
		if rp := r.core.remotePub(beatRecordKey(inst.IP, inst.Port)); rp != nil {
			// Checked first: a refused write leaves the copy as it is.
			if err := r.core.admitPublication(rp, inst); err != nil {
				return nil, err
			}
			r.core.promote(rp, r.now())
			r.carryOut()
			pub = rp
		}
	}
	var at slotAt
	keyLoc := &instLoc{} // not made: relocate looks the key up
	if loc != nil {
		keyLoc = &loc.at
	}
	at.s, at.i, at.found = r.relocate(keyLoc, inst)
	at.ipKey = keyLoc.ipKeyOf(inst)
	fresh := pub == nil
	var blk *slotBlock
	if fresh {
		pub, blk = newBeatPub(inst.Port)
		if r.cluster {
			// A replicated publisher needs its key after its last instance
			// has gone (for the tombstone); a standalone one saves the string.
			pub.id = model.Endpoint(inst.IP, inst.Port)
		}
	}
	pi, err := r.core.publishBeat(pub, loc, at, inst, fresh, blk, r.now())
	r.carryOut() // once for the publication, the new revision and the lease
	return pi, err
}

// Heartbeat renews the lease of the beat instance with key and returns the
// interval to beat at (the preserved.heart.beat.interval metadata, default
// 5 s). A beat makes an unhealthy instance healthy again. It fails with
// ErrNotFound when the registry does not hold the instance (it expired, or
// was never registered): the publisher registers it again, or beats with
// HeartbeatInstance, which does that itself. An invalid key (an IP that does
// not parse, a port out of range) fails with an error matching
// model.ErrInvalid that names the field, and a closed registry with
// ErrClosed. Worth a retry (Retryable): ErrNotReady before Start or while
// this node is still loading its peers' records, and ErrUnavailable when
// the instance's owner is another node that could not be reached.
func (r *Registry) Heartbeat(ctx context.Context, key model.InstanceKey) (time.Duration, error) {
	if !r.cluster {
		// beatWrite's route standalone, without building its request (240
		// bytes on the stack, a tenth of a standalone beat's cost).
		iv, err := r.heartbeatOwned(ctx, key)
		if err != nil {
			r.stats.fail(OpHeartbeat, err)
		}
		return iv, err
	}
	res, err := r.beatWrite(ctx, &fwdRequest{Op: fwdHeartbeat, Key: key})
	if err != nil {
		r.stats.fail(OpHeartbeat, err) // the calls count where they are served (heartbeatOwned)
	}
	return res.Interval, err
}

// heartbeatOwned is Heartbeat on the owner, this node.
func (r *Registry) heartbeatOwned(ctx context.Context, instKey model.InstanceKey) (time.Duration, error) {
	if err := r.checkBeatWrite(); err != nil {
		return 0, err
	}
	svc := instKey.Service.WithDefaults()
	cluster := instKey.Cluster
	if cluster == "" {
		cluster = model.DefaultCluster
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.beatsServed++
	if err := r.checkWrite(); err != nil {
		return 0, err
	}
	pi := r.core.beatPubInst(instKey.IP, instKey.Port, cluster, svc)
	if pi == nil && r.cluster {
		// A copy of another node's publisher that this node owns now, its
		// adoption still on the way: take it over here.
		if rp := r.core.remotePub(beatRecordKey(instKey.IP, instKey.Port)); rp != nil {
			r.core.promote(rp, r.now())
			r.carryOut()
			pi = r.core.beatPubInst(instKey.IP, instKey.Port, cluster, svc)
		}
	}
	if pi == nil {
		// Only a valid instKey is ever found, so it is checked on a miss alone
		// (the hot path stays a lookup): an invalid one is ErrInvalid naming
		// the field, not ErrNotFound, since no beat can ever find it.
		if err := instKey.WithDefaults().Validate(); err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("%w: beat instance %s", ErrNotFound, instKey.WithDefaults())
	}
	r.touchBeat(pi)
	return r.core.beatInterval(pi), nil
}

// BeatResult is HeartbeatInstance's answer.
type BeatResult struct {
	// Interval is the interval to beat at (the
	// preserved.heart.beat.interval metadata, default 5 s).
	Interval time.Duration `json:"interval"`
	// Registered is true when the registry did not hold the instance and
	// the beat registered it again (it had expired, was deregistered, or
	// was never registered); false when the beat renewed a lease. In a
	// cluster it is the owner's answer; an owner older than this field
	// always answers false.
	Registered bool `json:"registered"`
}

// HeartbeatInstance is a heartbeat that carries its instance, as Nacos 1.x
// beats do: it renews the lease like Heartbeat, and when the registry no
// longer holds the instance, it registers inst and says so in
// BeatResult.Registered. A beat that registers is a write like Register:
// it fails with ErrKindMismatch for a persistent instance, with an error
// matching model.ErrInvalid for an invalid one, and with ErrLimit past a
// limit; a beat that renews a lease is never refused by the limits. It
// fails with ErrClosed once the registry is closed, and with ErrNotReady
// or ErrUnavailable as Heartbeat does (worth a retry).
func (r *Registry) HeartbeatInstance(ctx context.Context, inst model.Instance) (BeatResult, error) {
	res, err := r.beatWrite(ctx, &fwdRequest{Op: fwdHeartbeatInstance, Inst: inst})
	if err != nil {
		r.stats.fail(OpHeartbeat, err)
	}
	return res, err
}

// heartbeatInstanceOwned is HeartbeatInstance on the owner, this node.
func (r *Registry) heartbeatInstanceOwned(ctx context.Context, inst model.Instance) (BeatResult, error) {
	if err := r.checkBeatWrite(); err != nil {
		return BeatResult{}, err
	}
	inst = inst.WithDefaults()
	r.mu.Lock()
	r.beatsServed++
	if err := r.checkWrite(); err != nil {
		r.mu.Unlock()
		return BeatResult{}, err
	}
	if pi := r.core.beatPubInst(inst.IP, inst.Port, inst.Cluster, inst.Service); pi != nil {
		r.touchBeat(pi)
		interval := r.core.beatInterval(pi)
		r.mu.Unlock()
		return BeatResult{Interval: interval}, nil
	}
	r.mu.Unlock()

	if err := ctx.Err(); err != nil {
		return BeatResult{}, err
	}
	if !inst.Ephemeral {
		return BeatResult{}, fmt.Errorf("%w: heartbeats keep ephemeral instances alive; %s is persistent", ErrKindMismatch, inst.Key())
	}
	if err := r.validInstance(&inst); err != nil {
		return BeatResult{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkWrite(); err != nil {
		return BeatResult{}, err
	}
	// Another beat may have registered it while the lock was released: then
	// this one replaces it, and did not register it.
	held := r.core.beatPubInst(inst.IP, inst.Port, inst.Cluster, inst.Service) != nil
	pi, err := r.registerOwnedLocked(inst)
	if err != nil {
		return BeatResult{}, err
	}
	return BeatResult{Interval: r.core.beatInterval(pi), Registered: !held}, nil
}

// touchBeat renews pi's lease, and makes the instance healthy again if it
// was not (index.touchBeat). The caller holds mu.
func (r *Registry) touchBeat(pi *pubInst) {
	if r.core.touchBeat(pi, r.now()) {
		r.carryOut()
	}
}

// Deregister removes the instance with key: a persistent instance from the
// store, an ephemeral one from its beat publisher (session instances are
// removed through their session). Removing an instance that is not there is
// not an error; removing one that only sessions publish fails with
// ErrSessionInstance and changes nothing. An invalid key fails with an
// error matching model.ErrInvalid, a closed registry with ErrClosed. Worth
// a retry (Retryable): ErrNotReady and ErrUnavailable as for Register, and
// ErrNoLeader for a persistent instance.
func (r *Registry) Deregister(ctx context.Context, key model.InstanceKey) (err error) {
	defer r.stats.op(OpDeregister, &err)
	if err := ctx.Err(); err != nil {
		return err
	}
	key = key.WithDefaults()
	if err := key.Validate(); err != nil {
		return err
	}
	r.mu.RLock()
	if err := r.checkWrite(); err != nil {
		r.mu.RUnlock()
		return err
	}
	s := r.core.service(&key.Service)
	ephemeral := s != nil && s.ephemeral
	r.mu.RUnlock()
	if s == nil {
		// Unknown here. Standalone, there is nothing to do; in a cluster this
		// node may lag (a sync on its way, a load under way), so the removal
		// goes where the instance would be: the Raft store, and the owner of
		// its ip:port. Both are idempotent.
		var errs []error
		if r.sharedCP {
			errs = append(errs, r.store.Apply(ctx, model.Command{Op: model.OpDeleteInstance, Key: key}, model.Origin{}))
		}
		if r.cluster {
			_, err := r.beatWrite(ctx, &fwdRequest{Op: fwdDeregister, Key: key})
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
	if !ephemeral {
		return r.store.Apply(ctx, model.Command{Op: model.OpDeleteInstance, Key: key}, model.Origin{})
	}
	_, err = r.beatWrite(ctx, &fwdRequest{Op: fwdDeregister, Key: key})
	return err
}

// deregisterOwned is Deregister of a beat instance on its owner, this
// node.
func (r *Registry) deregisterOwned(ctx context.Context, instKey model.InstanceKey) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := r.checkBeatWrite(); err != nil {
		return err
	}
	instKey = instKey.WithDefaults()
	if err := instKey.Validate(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkWrite(); err != nil {
		return err
	}
	pi := r.core.beatPubInst(instKey.IP, instKey.Port, instKey.Cluster, instKey.Service)
	r.core.deregisterBeat(instKey, pi, r.leaseStart())
	r.carryOut()
	if pi != nil {
		return nil
	}
	if _, sl := r.core.lookup(instKey); sl != nil && sl.head != nil {
		// Only sessions publish it: Deregister, which removes what beats
		// keep alive, cannot remove it, and says so.
		return fmt.Errorf("%w: %s: Deregister removes beat and persistent instances; remove it with Session.Deregister or by closing its session", ErrSessionInstance, instKey)
	}
	return nil
}
