package model

import (
	"strconv"
	"time"
)

// Preserved metadata keys (Nacos's PreservedMetadataKeys). The three timing
// keys override the beat timings of one instance; values are milliseconds.
const (
	MetaHeartBeatInterval = "preserved.heart.beat.interval"
	MetaHeartBeatTimeout  = "preserved.heart.beat.timeout"
	MetaIPDeleteTimeout   = "preserved.ip.delete.timeout"
	MetaRegisterSource    = "preserved.register.source"
	MetaIDGenerator       = "preserved.instance.id.generator"
)

// preservedPrefix starts every preserved metadata key.
const preservedPrefix = "preserved."

// Nacos's beat timings, used when an instance's metadata does not override
// them.
const (
	DefaultHeartBeatInterval = 5 * time.Second
	DefaultHeartBeatTimeout  = 15 * time.Second
	DefaultIPDeleteTimeout   = 30 * time.Second
)

// Weight bounds and default.
const (
	DefaultWeight = 1.0
	MaxWeight     = 10000.0
)

// Instance is one endpoint of a service.
//
// The Go zero value of the flags is not Nacos's default (weight 1, enabled,
// healthy, ephemeral): start from NewInstance, or set them. The registry
// stores what it is given.
type Instance struct {
	// ID is the publisher-supplied instance ID, or empty; see InstanceID.
	ID string `msgpack:"id,omitempty" json:"id,omitempty"`
	// Service is the service the instance belongs to.
	Service ServiceKey `msgpack:"svc" json:"service"`
	// Cluster is the cluster within the service; empty means DefaultCluster.
	Cluster string `msgpack:"cluster,omitempty" json:"cluster,omitempty"`
	// IP is an IPv4 or IPv6 address, or a DNS name.
	IP string `msgpack:"ip" json:"ip"`
	// Port is 1–65535.
	Port int `msgpack:"port" json:"port"`
	// Weight is 0–10000; 0 means "never selected".
	Weight float64 `msgpack:"weight" json:"weight"`
	// Healthy is the health the registry serves (see ServiceView for the
	// real health under protection).
	Healthy bool `msgpack:"healthy" json:"healthy"`
	// Enabled is false for instances taken out of traffic; queries leave
	// them out unless asked.
	Enabled bool `msgpack:"enabled" json:"enabled"`
	// Ephemeral instances live while their publisher does; persistent ones
	// are stored (Raft) until deregistered.
	Ephemeral bool `msgpack:"ephemeral" json:"ephemeral"`
	// Metadata is free-form; the preserved.* keys have meanings of their own.
	Metadata Metadata `msgpack:"md,omitempty" json:"metadata"`
}

// NewInstance returns an instance of service at ip:port with Nacos's
// defaults: cluster DEFAULT, weight 1, enabled, healthy, ephemeral.
func NewInstance(service ServiceKey, ip string, port int) Instance {
	return Instance{
		Service:   service,
		Cluster:   DefaultCluster,
		IP:        ip,
		Port:      port,
		Weight:    DefaultWeight,
		Healthy:   true,
		Enabled:   true,
		Ephemeral: true,
	}
}

// Key returns the instance's key.
func (i Instance) Key() InstanceKey {
	return InstanceKey{Service: i.Service, Cluster: i.Cluster, IP: i.IP, Port: i.Port}
}

// WithDefaults returns i with empty namespace, group and cluster replaced by
// their defaults. It leaves Weight and the flags alone.
func (i Instance) WithDefaults() Instance {
	i.Service = i.Service.WithDefaults()
	if i.Cluster == "" {
		i.Cluster = DefaultCluster
	}
	return i
}

// InstanceID returns ID, or Nacos's default "ip#port#cluster#group@@service"
// when ID is empty.
func (i Instance) InstanceID() string {
	if i.ID != "" {
		return i.ID
	}
	return i.Key().DefaultID()
}

// Equal reports whether i and o are the same in every field.
func (i Instance) Equal(o Instance) bool {
	return i.ID == o.ID && i.Service == o.Service && i.Cluster == o.Cluster &&
		i.IP == o.IP && i.Port == o.Port && i.Weight == o.Weight &&
		i.Healthy == o.Healthy && i.Enabled == o.Enabled &&
		i.Ephemeral == o.Ephemeral && i.Metadata.Equal(o.Metadata)
}

// BeatTimings are the beat interval and the two lease thresholds of an
// ephemeral instance kept alive by heartbeats.
type BeatTimings struct {
	Interval  time.Duration // how often the publisher should beat
	Unhealthy time.Duration // unhealthy after this long without a beat
	Delete    time.Duration // deleted after this long without a beat
}

// BeatTimings returns the instance's beat timings: the Nacos defaults (5 s,
// 15 s, 30 s) overridden by the preserved metadata keys. Values that do not
// parse are ignored here; Validate rejects them.
func (i Instance) BeatTimings() BeatTimings {
	if !i.Metadata.hasPrefix(preservedPrefix) {
		return BeatTimings{DefaultHeartBeatInterval, DefaultHeartBeatTimeout, DefaultIPDeleteTimeout}
	}
	return BeatTimings{
		Interval:  metaMillis(i.Metadata, MetaHeartBeatInterval, DefaultHeartBeatInterval),
		Unhealthy: metaMillis(i.Metadata, MetaHeartBeatTimeout, DefaultHeartBeatTimeout),
		Delete:    metaMillis(i.Metadata, MetaIPDeleteTimeout, DefaultIPDeleteTimeout),
	}
}

func metaMillis(m Metadata, key string, def time.Duration) time.Duration {
	s, ok := m.Get(key)
	if !ok {
		return def
	}
	ms, err := parseMillis(s)
	if err != nil {
		return def
	}
	return ms
}

// maxTimingMillis caps the preserved timings at one day: larger values are
// almost certainly mistakes and would keep dead instances around.
const maxTimingMillis = 24 * 60 * 60 * 1000

func parseMillis(s string) (time.Duration, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > maxTimingMillis {
		return 0, strconv.ErrRange
	}
	return time.Duration(n) * time.Millisecond, nil
}

// InstancePatch is an operator's override of an instance's weight, enabled
// flag and metadata (Nacos's instance metadata). It is stored apart from what
// the publisher registered and wins when the instance is read. Nil fields
// leave the registered value alone; Metadata entries are laid over the
// registered ones.
type InstancePatch struct {
	Key      InstanceKey `msgpack:"key" json:"key"`
	Weight   *float64    `msgpack:"weight,omitempty" json:"weight,omitempty"`
	Enabled  *bool       `msgpack:"enabled,omitempty" json:"enabled,omitempty"`
	Metadata Metadata    `msgpack:"md,omitempty" json:"metadata,omitempty"`
}

// Apply returns inst with the patch laid over it.
func (p *InstancePatch) Apply(inst Instance) Instance {
	if p.Weight != nil {
		inst.Weight = *p.Weight
	}
	if p.Enabled != nil {
		inst.Enabled = *p.Enabled
	}
	inst.Metadata = inst.Metadata.Merge(p.Metadata)
	return inst
}

// Merge returns p with newer laid over it: newer's set fields win. The
// result shares no pointers with p or newer.
func (p InstancePatch) Merge(newer InstancePatch) InstancePatch {
	if newer.Weight != nil {
		p.Weight = newer.Weight
	}
	if newer.Enabled != nil {
		p.Enabled = newer.Enabled
	}
	p.Weight = clonePtr(p.Weight)
	p.Enabled = clonePtr(p.Enabled)
	p.Metadata = p.Metadata.Merge(newer.Metadata)
	return p
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// Empty reports whether the patch changes nothing.
func (p *InstancePatch) Empty() bool {
	return p.Weight == nil && p.Enabled == nil && p.Metadata.Len() == 0
}
