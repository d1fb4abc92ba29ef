package registry

import (
	"fmt"
	"strconv"

	"github.com/muster-io/muster/distro"
	"github.com/muster-io/muster/model"
)

// Limits bound what the registry holds, so that the clients of the host
// that embeds it cannot exhaust its memory. Each count limit is a cap: a
// write that would go past it fails with an error matching ErrLimit that
// names the limit and its value, and changes nothing; a write that only
// replaces what is held (a re-registration, a beat) is never refused. A
// zero field means its default (DefaultLimits); a negative one is invalid.
//
// The defaults are meant never to be reached by a real deployment by
// accident. What one unit of each costs in memory, at typical sizes and at
// the largest names and metadata the rules allow, is measured by
// BenchmarkLimitCosts and listed in docs/security.md; at the defaults the
// worst case is dominated by MaxInstances: lower it on a smaller host.
//
// In a cluster, every node must be configured with the same limits: a
// replicated publisher is refused whole by a node whose per-publisher caps
// are smaller than its owner's. The counts are checked where a write is
// taken, against this node's index, which holds the whole cluster's data;
// records and Raft commands of other nodes are applied whole even when they
// take a count past its cap (writes accepted on two nodes at once), so that
// every node holds the same data. A cap can then be passed by what the
// other nodes accept concurrently, never more. One exception: a beat
// record of an ip:port this node owns and publishes, written by another
// node while their membership views differed, is merged only up to
// MaxInstancesPerEndpoint; the rest is logged and dropped, and its clients
// register again (and are refused) as after any lost instance.
type Limits struct {
	// MaxMetadataSize caps the sum of key and value lengths, in characters,
	// of one metadata set (instance, service, cluster or patch), as Nacos
	// does; default 1024 (model.DefaultMaxMetadataSize). At most
	// HardMaxMetadataSize. A character is up to 4 bytes, so one set holds
	// at most 4 × MaxMetadataSize bytes of text.
	MaxMetadataSize int
	// MaxMetadataEntries caps the number of entries of one metadata set;
	// default 64, at most HardMaxMetadataEntries. Each entry costs two
	// to ten bytes of encoding over its text (Metadata holds the pairs'
	// msgpack encoding).
	MaxMetadataEntries int

	// MaxSessions caps the sessions open on this node (default 100,000;
	// a session's labels add up to one metadata set's worth). Sessions of
	// other nodes, replicated here, count on their own node.
	MaxSessions int
	// MaxInstancesPerSession caps the instances one session publishes
	// (default 1,000). It also bounds a replicated session record: one from
	// a peer with more is refused at decoding, before its instances are
	// built.
	MaxInstancesPerSession int
	// MaxInstancesPerEndpoint caps the beat instances one ip:port
	// publishes, over all its services and clusters (default 1,000), and
	// bounds a replicated beat record likewise.
	MaxInstancesPerEndpoint int
	// MaxInstancesPerService caps the instances of one service, ephemeral
	// or persistent (default 10,000).
	MaxInstancesPerService int
	// MaxInstances caps the instances the registry holds in all (default
	// 1,000,000).
	MaxInstances int
	// MaxServices caps the services the registry holds in all, defined or
	// implicit (default 200,000).
	MaxServices int
	// MaxServicesPerNamespace caps the services of one namespace (default
	// 100,000).
	MaxServicesPerNamespace int
	// MaxNamespaces caps the namespaces that hold services (default
	// 1,000).
	MaxNamespaces int
	// MaxWatchers caps the open watchers of this node, of Watch and
	// WatchServices together (default 100,000). Watchers of one query
	// share their views: a host that serves many subscribers of one
	// service can give them one watcher.
	MaxWatchers int
}

// Hard ceilings of the metadata limits, which Validate enforces: one
// metadata set can never hold more than 256 KiB of text.
const (
	HardMaxMetadataSize    = 64 << 10
	HardMaxMetadataEntries = 4096
)

// DefaultLimits returns the default limits.
func DefaultLimits() Limits {
	return Limits{
		MaxMetadataSize:         model.DefaultMaxMetadataSize,
		MaxMetadataEntries:      64,
		MaxSessions:             100_000,
		MaxInstancesPerSession:  1_000,
		MaxInstancesPerEndpoint: 1_000,
		MaxInstancesPerService:  10_000,
		MaxInstances:            1_000_000,
		MaxServices:             200_000,
		MaxServicesPerNamespace: 100_000,
		MaxNamespaces:           1_000,
		MaxWatchers:             100_000,
	}
}

// fields lists the limits by name, with their defaults and hard ceilings,
// for Validate and withDefaults.
func (l *Limits) fields() []struct {
	name string
	v    *int
	def  int
	hard int // 0: none
} {
	d := DefaultLimits()
	return []struct {
		name string
		v    *int
		def  int
		hard int
	}{
		{"MaxMetadataSize", &l.MaxMetadataSize, d.MaxMetadataSize, HardMaxMetadataSize},
		{"MaxMetadataEntries", &l.MaxMetadataEntries, d.MaxMetadataEntries, HardMaxMetadataEntries},
		{"MaxSessions", &l.MaxSessions, d.MaxSessions, 0},
		{"MaxInstancesPerSession", &l.MaxInstancesPerSession, d.MaxInstancesPerSession, 0},
		{"MaxInstancesPerEndpoint", &l.MaxInstancesPerEndpoint, d.MaxInstancesPerEndpoint, 0},
		{"MaxInstancesPerService", &l.MaxInstancesPerService, d.MaxInstancesPerService, 0},
		{"MaxInstances", &l.MaxInstances, d.MaxInstances, 0},
		{"MaxServices", &l.MaxServices, d.MaxServices, 0},
		{"MaxServicesPerNamespace", &l.MaxServicesPerNamespace, d.MaxServicesPerNamespace, 0},
		{"MaxNamespaces", &l.MaxNamespaces, d.MaxNamespaces, 0},
		{"MaxWatchers", &l.MaxWatchers, d.MaxWatchers, 0},
	}
}

// validate reports every invalid limit.
func (l Limits) validate() []error {
	var errs []error
	for _, f := range l.fields() {
		switch {
		case *f.v < 0:
			errs = append(errs, fmt.Errorf("Limits.%s must not be negative (got %d)", f.name, *f.v))
		case f.hard > 0 && *f.v > f.hard:
			errs = append(errs, fmt.Errorf("Limits.%s must be at most %d (got %d)", f.name, f.hard, *f.v))
		}
	}
	return errs
}

// withDefaults returns l with every zero field set to its default.
func (l Limits) withDefaults() Limits {
	for _, f := range l.fields() {
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	return l
}

// model returns the validation limits of model values.
func (l Limits) model() model.Limits { return model.Limits{MaxMetadataSize: l.MaxMetadataSize} }

// limitError is a breach of the limit name of value n.
func limitError(name string, n int, format string, args ...any) error {
	return fmt.Errorf("%w: %s (%d): %s", ErrLimit, name, n, fmt.Sprintf(format, args...))
}

// quotas counts what the limits bound. It is guarded by Registry.mu.
type quotas struct {
	nsServices map[string]int // services per namespace; no entry for none
	instances  int            // slots in the index
	watchers   int            // open watchers
}

// checkMetadata checks a metadata set against the metadata limits. The
// error matches both ErrLimit and model.ErrInvalid, and names the field.
func (l *Limits) checkMetadata(field string, m model.Metadata) error {
	if n := m.Len(); n > l.MaxMetadataEntries {
		return fmt.Errorf("%w: %w", limitError("MaxMetadataEntries", l.MaxMetadataEntries, "%s has %d entries", field, n),
			&model.ValidationError{Field: field, Rule: "must have at most " + strconv.Itoa(l.MaxMetadataEntries) + " entries", Value: strconv.Itoa(n) + " entries"})
	}
	if n := metadataSize(m, l.MaxMetadataSize); n > l.MaxMetadataSize {
		return fmt.Errorf("%w: %w", limitError("MaxMetadataSize", l.MaxMetadataSize, "%s has %d characters", field, n),
			&model.ValidationError{Field: field, Rule: "keys and values must total at most " + strconv.Itoa(l.MaxMetadataSize) + " characters", Value: strconv.Itoa(n) + " characters"})
	}
	return nil
}

// metadataSize returns m.Size(), or its length in bytes when that is at
// most max: characters never outnumber bytes, so the count that the
// model's validation makes anyway is not made twice on the write path.
func metadataSize(m model.Metadata, max int) int {
	n := m.ByteSize()
	if n <= max {
		return n
	}
	return m.Size()
}

// validInstance checks inst, which has its defaults, against the rules and
// the metadata limits.
func (r *Registry) validInstance(inst *model.Instance) error {
	return r.validInstanceIn(inst, false, false)
}

// validInstanceIn is validInstance knowing whether inst's service key is
// one that the index holds or held: such a key passed validation when its
// service entered the index (validity is a function of the key alone, under
// the rules of the node that checked it: see model's ValidateInService), so
// only the instance's own fields are checked.
//
// ipv4 says that inst.IP has an ipOrder key (a lookup in the index
// computed it): a plain IPv4 address, which the model's rules accept, so
// they do not parse it again (FuzzIPOrder holds the two to each other).
//
// The error is checkMetadata's if it has one, the model's otherwise; but
// when the metadata has no more entries than the limit (the header says,
// at once), the model's rules run first: they cap the metadata's size in
// characters by the same limit (Limits.model), so when they pass, so does
// checkMetadata's size rule. The common registration then walks its
// metadata once, not twice (FuzzValidInstanceIn holds it to the order).
func (r *Registry) validInstanceIn(inst *model.Instance, heldService, ipv4 bool) error {
	l := &r.cfg.Limits
	if inst.Metadata.Len() > l.MaxMetadataEntries || l.MaxMetadataSize <= 0 {
		if err := l.checkMetadata("instance.metadata", inst.Metadata); err != nil {
			return err
		}
		return r.validInstanceRules(inst, heldService, ipv4)
	}
	err := r.validInstanceRules(inst, heldService, ipv4)
	if err == nil {
		return nil
	}
	if lerr := l.checkMetadata("instance.metadata", inst.Metadata); lerr != nil {
		return lerr
	}
	return err
}

// validInstanceRules checks inst against the model's rules (see
// validInstanceIn).
func (r *Registry) validInstanceRules(inst *model.Instance, heldService, ipv4 bool) error {
	if heldService {
		return inst.ValidateInServiceIPv4(r.cfg.Limits.model(), ipv4)
	}
	return inst.Validate(r.cfg.Limits.model())
}

// validService checks def, which has its defaults, against the rules and
// the metadata limits.
func (r *Registry) validService(def *model.Service) error {
	if err := r.cfg.Limits.checkMetadata("service.metadata", def.Metadata); err != nil {
		return err
	}
	for i := range def.Clusters {
		if err := r.cfg.Limits.checkMetadata("service.clusters["+strconv.Itoa(i)+"].metadata", def.Clusters[i].Metadata); err != nil {
			return err
		}
	}
	return def.Validate(r.cfg.Limits.model())
}

// validPatch checks p, whose key has its defaults, against the rules and
// the metadata limits.
func (r *Registry) validPatch(p *model.InstancePatch) error {
	if err := r.cfg.Limits.checkMetadata("patch.metadata", p.Metadata); err != nil {
		return err
	}
	return p.Validate(r.cfg.Limits.model())
}

// admitService reports whether a new service key may be created. The
// caller holds mu and has found no service of key.
func (ix *index) admitService(key model.ServiceKey) error {
	if n := len(ix.services); n >= ix.lim.MaxServices {
		return limitError("MaxServices", ix.lim.MaxServices, "service %s would be one more", key)
	}
	n, ok := ix.quota.nsServices[key.Namespace]
	if !ok && len(ix.quota.nsServices) >= ix.lim.MaxNamespaces {
		return limitError("MaxNamespaces", ix.lim.MaxNamespaces, "namespace %s would be one more", key.Namespace)
	}
	if n >= ix.lim.MaxServicesPerNamespace {
		return limitError("MaxServicesPerNamespace", ix.lim.MaxServicesPerNamespace, "namespace %s is full; service %s refused", key.Namespace, key)
	}
	return nil
}

// admitInstance reports whether the instance key may be added to the
// index, creating its service if need be.
func (ix *index) admitInstance(s *service, key model.ServiceKey, cluster, ip string, port int) error {
	if s != nil {
		if _, ok := s.findSlot(cluster, ip, port); ok {
			return nil // already held
		}
	}
	return ix.admitSlot(s, key)
}

// admitSlot reports whether a new instance may be added to s (nil: a new
// service of key).
func (ix *index) admitSlot(s *service, key model.ServiceKey) error {
	if s != nil && len(s.slots) >= ix.lim.MaxInstancesPerService {
		return limitError("MaxInstancesPerService", ix.lim.MaxInstancesPerService, "service %s is full", key)
	}
	if ix.quota.instances >= ix.lim.MaxInstances {
		return limitError("MaxInstances", ix.lim.MaxInstances, "the registry is full")
	}
	if s == nil {
		return ix.admitService(key)
	}
	return nil
}

// admitPublication reports whether pub may publish inst, which is valid
// and has its defaults: replacing what it publishes under inst's key is
// always allowed; a new publication must fit (see admitNew). The caller
// holds mu.
func (ix *index) admitPublication(pub *publisher, inst *model.Instance) error {
	s := ix.services[inst.Service]
	found := false
	if s != nil {
		var i int
		if i, found = s.findSlot(inst.Cluster, inst.IP, inst.Port); found && s.slots[i].publication(pub) != nil {
			return nil
		}
	}
	return ix.admitNew(pub, s, found, inst)
}

// admitNew reports whether a new publication of inst by pub (nil: a beat
// publisher still to be created) fits in the publisher's cap and, when it
// adds an instance (slotHeld false), in the service's, the registry's and,
// for a new service (s nil), the namespaces'.
func (ix *index) admitNew(pub *publisher, s *service, slotHeld bool, inst *model.Instance) error {
	n := 0
	if pub != nil {
		n = pub.insts.len()
	}
	beat := pub == nil || pub.kind == pubBeat
	if max, name := ix.pubCap(beat); n >= max {
		what := "endpoint " + model.Endpoint(inst.IP, inst.Port)
		if !beat {
			what = "session " + pub.pubID()
		}
		return limitError(name, max, "%s publishes %d instances", what, n)
	}
	if slotHeld {
		return nil
	}
	return ix.admitSlot(s, inst.Service)
}

// pubCap returns the per-publisher cap of beat or session publishers and
// its name.
func (ix *index) pubCap(beat bool) (int, string) {
	if beat {
		return ix.lim.MaxInstancesPerEndpoint, "MaxInstancesPerEndpoint"
	}
	return ix.lim.MaxInstancesPerSession, "MaxInstancesPerSession"
}

// admitCommand checks a command of persistent data against the limits:
// what would create a service or an instance must fit.
func (ix *index) admitCommand(cmd *model.Command) error {
	switch cmd.Op {
	case model.OpCreateService, model.OpUpdateService:
		if ix.services[cmd.Service.Key] == nil {
			return ix.admitService(cmd.Service.Key)
		}
	case model.OpPutInstance:
		in := &cmd.Instance
		return ix.admitInstance(ix.services[in.Service], in.Service, in.Cluster, in.IP, in.Port)
	case model.OpPatchInstance:
		// Patches merge: the merged metadata must fit too.
		if old := ix.patches[cmd.Patch.Key]; old != nil {
			merged := old.Merge(cmd.Patch)
			return ix.lim.checkMetadata("patch.metadata", merged.Metadata)
		}
	}
	return nil
}

// decodeInstances decodes a publisher record's payload from a peer, whose
// instance list holds at most max: a longer one is refused from its
// declared length, before any instance is decoded. The decode is
// model.UnmarshalInstanceList, so it allocates at most a small multiple of
// the payload and refuses a nil instance.
func decodeInstances(payload []byte, max int, name string) ([]model.Instance, error) {
	return decodeInstancesWith(model.UnmarshalInstanceList, payload, max, name)
}

// decodeInstancesWith is decodeInstances with unmarshal for
// model.UnmarshalInstanceList (or its Shared form).
func decodeInstancesWith(unmarshal func([]byte, int) (model.InstanceList, int, error), payload []byte, max int, name string) ([]model.Instance, error) {
	pl, n, err := unmarshal(payload, max)
	if n > max {
		return nil, limitError(name, max, "a record of %d instances", n)
	}
	return pl.Instances, err
}

// payloadCap returns the instance cap of a record of kind and its name.
func (r *Registry) payloadCap(kind distro.Kind) (int, string) {
	return r.core.pubCap(kind != distro.KindSession)
}
