package registry

import (
	"context"
	"errors"
	"fmt"

	"github.com/muster-io/muster/distro"
	"github.com/muster-io/muster/internal/cfgerr"
)

// Replicator carries this node's publisher records (sessions and beat
// publishers) to the other nodes of a cluster and installs theirs here,
// through the distro.Store the registry hands to its constructor
// (ReplicatorFunc). *distro.Replicator implements it; Distro builds one.
//
// Every method may be called concurrently with every other, and the
// registry calls some of them with its lock held: none may call back into
// the registry's distro.Store while it runs (they return before the
// record reaches the Store). Those marked "does not block" must not wait
// on the network.
type Replicator interface {
	// Start starts replication: handlers, the membership subscription,
	// and loading the peers' records in the background. Called once, by
	// Registry.Start.
	Start(ctx context.Context) error
	// Ready reports whether the load from the peers is done. It does not
	// block.
	Ready() bool
	// WaitReady blocks until the load is done, ctx ends, or the
	// replicator closes.
	WaitReady(ctx context.Context) error
	// Owner returns the node ID of the live member that owns the record
	// key recordKey (rendezvous hashing; a beat record's key names its
	// ip:port). It does not block.
	Owner(recordKey string) string
	// Members returns the IDs of the live members, this node included. It
	// does not block.
	Members() []string
	// Put stores a new revision of a record this node owns, to be sent to
	// every peer; Delete stores its tombstone. They do not block: sending
	// is the replicator's business. Both fail when this node does not own
	// key.
	Put(kind distro.Kind, key string, payload []byte) (distro.Record, error)
	Delete(key string) (distro.Record, error)
	// Write makes each change as Put or Delete would, together, so that a
	// peer gets them in one message. It returns nil when every change was
	// written, else each change's error (nil for those written). It never
	// blocks on the network.
	Write(changes []distro.Change) []error
	// Flush blocks until every change put so far has been sent to every
	// reachable peer, or ctx ends.
	Flush(ctx context.Context) error
	// Close stops replication and waits for its goroutines. Called once,
	// by Registry.Close, after the registry's own goroutines stopped.
	Close() error
}

// ReplicatorFunc builds the registry's Replicator; New calls it once.
// records is how the replicator reaches the registry: it installs the
// peers' records through it (see distro.Store for its contract).
type ReplicatorFunc func(env Env, records distro.Store) (Replicator, error)

// Distro returns a ReplicatorFunc that runs a distro.Replicator configured
// by cfg. cfg must set Transport and Membership; it must leave NodeID and
// Store unset (the registry's own are used), and a nil Clock, Logger or
// Rand means the registry's (Env). The transport and the membership stay
// the caller's: close them after the registry.
func Distro(cfg distro.Config) ReplicatorFunc {
	return func(env Env, records distro.Store) (Replicator, error) {
		var errs []error
		if cfg.NodeID != "" {
			errs = append(errs, fmt.Errorf("Distro: NodeID must be empty: the registry's NodeID (%q) is used", env.NodeID))
		}
		if cfg.Store != nil {
			errs = append(errs, errors.New("Distro: Store must be nil: the registry is the store"))
		}
		if cfg.Transport == nil {
			errs = append(errs, errors.New("Distro: Transport must be set"))
		}
		if cfg.Membership == nil {
			errs = append(errs, errors.New("Distro: Membership must be set"))
		}
		if err := cfgerr.Join(ErrInvalidConfig, errs...); err != nil {
			return nil, err
		}
		c := cfg // the caller's value stays as given: the func may run again (a new registry)
		c.NodeID, c.Store = env.NodeID, records
		if c.Clock == nil {
			c.Clock = env.Clock
		}
		if c.Logger == nil {
			c.Logger = env.Logger
		}
		if c.Rand == nil {
			c.Rand = env.Rand
		}
		d, err := distro.New(c)
		if err != nil {
			return nil, err
		}
		return d, nil
	}
}

// solo is the replicator of a standalone registry: this node is the only
// member and owns every key, and nothing is sent anywhere.
type solo struct{ id string }

func (s solo) Start(context.Context) error     { return nil }
func (s solo) Ready() bool                     { return true }
func (s solo) WaitReady(context.Context) error { return nil }
func (s solo) Owner(string) string             { return s.id }
func (s solo) Members() []string               { return []string{s.id} }
func (s solo) Flush(context.Context) error     { return nil }
func (s solo) Close() error                    { return nil }
func (s solo) Put(distro.Kind, string, []byte) (distro.Record, error) {
	return distro.Record{}, nil
}
func (s solo) Delete(string) (distro.Record, error) { return distro.Record{}, nil }
func (s solo) Write([]distro.Change) []error        { return nil }
