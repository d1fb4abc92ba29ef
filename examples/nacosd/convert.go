package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
)

// The JSON shapes of Nacos's naming data, as both the 2.x gRPC bodies and
// the 1.x HTTP answers carry them.

// nInstance is Nacos's Instance.
type nInstance struct {
	InstanceID                string            `json:"instanceId"`
	IP                        string            `json:"ip"`
	Port                      int               `json:"port"`
	Weight                    float64           `json:"weight"`
	Healthy                   bool              `json:"healthy"`
	Enabled                   bool              `json:"enabled"`
	Ephemeral                 bool              `json:"ephemeral"`
	ClusterName               string            `json:"clusterName"`
	ServiceName               string            `json:"serviceName"`
	Metadata                  map[string]string `json:"metadata"`
	InstanceHeartBeatInterval int64             `json:"instanceHeartBeatInterval"`
	IPDeleteTimeout           int64             `json:"ipDeleteTimeout"`
	InstanceHeartBeatTimeOut  int64             `json:"instanceHeartBeatTimeOut"`
}

// nServiceInfo is Nacos's ServiceInfo: what a query, a subscription and a
// push carry.
type nServiceInfo struct {
	Name                     string      `json:"name"`
	GroupName                string      `json:"groupName"`
	Clusters                 string      `json:"clusters"`
	CacheMillis              int64       `json:"cacheMillis"`
	Hosts                    []nInstance `json:"hosts"`
	LastRefTime              int64       `json:"lastRefTime"`
	Checksum                 string      `json:"checksum"`
	AllIPs                   bool        `json:"allIPs"`
	ReachProtectionThreshold bool        `json:"reachProtectionThreshold"`
	Valid                    bool        `json:"valid"`
}

// namespaceOf maps Nacos's namespace IDs to Muster's: "" is the default
// namespace, "public" (what the 2.x clients send for "").
func namespaceOf(ns string) string {
	if ns == "" {
		return model.DefaultNamespace
	}
	return ns
}

// splitGrouped splits "group@@name" (a grouped service name) into its
// parts; a plain name takes group (or the default group when empty).
func splitGrouped(name, group string) (string, string) {
	if g, n, ok := strings.Cut(name, "@@"); ok {
		return g, n
	}
	if group == "" {
		group = model.DefaultGroup
	}
	return group, name
}

// checkGrouped refuses a grouped service name ("g@@name") whose group is
// not the group given beside it, as Nacos refuses "@@" in a service name of
// a given group: "x@@bad" in DEFAULT_GROUP is not silently re-grouped
// under "x". The 1.x SDKs send both, consistently. A grouped name holds
// one "@@": nacos-sdk-go v2 sends "x@@bad" of DEFAULT_GROUP as
// "DEFAULT_GROUP@@x@@bad", refused as Nacos refuses it.
func checkGrouped(name, group string) error {
	g, rest, ok := strings.Cut(name, "@@")
	if ok && strings.Contains(rest, "@@") {
		return fmt.Errorf("%w: parameter serviceName: %q holds \"@@\" more than once: "+
			"Param 'serviceName' is illegal, illegal characters should not appear in the param", model.ErrInvalid, clip(name))
	}
	if !ok || group == "" || g == group {
		return nil
	}
	return fmt.Errorf("%w: parameter serviceName: %q holds \"@@\" but its group is given apart (%q): "+
		"Param 'serviceName' is illegal, illegal characters should not appear in the param", model.ErrInvalid, clip(name), clip(group))
}

// serviceKey builds a service key from Nacos's namespace, group and
// (possibly grouped) service name.
func serviceKey(ns, group, name string) model.ServiceKey {
	g, n := splitGrouped(name, group)
	return model.ServiceKey{Namespace: namespaceOf(ns), Group: g, Name: n}
}

// toModel converts a Nacos instance of service svc. Nacos's zero cluster is
// DEFAULT.
func toModel(svc model.ServiceKey, in nInstance) model.Instance {
	inst := model.NewInstance(svc, in.IP, in.Port)
	if in.ClusterName != "" {
		inst.Cluster = in.ClusterName
	}
	inst.Weight = in.Weight
	inst.Healthy = in.Healthy
	inst.Enabled = in.Enabled
	inst.Ephemeral = in.Ephemeral
	if len(in.Metadata) > 0 {
		inst.Metadata = model.NewMetadata(in.Metadata)
	}
	return inst
}

// fromModel converts an instance for a Nacos client; healthy is the health
// served.
func fromModel(inst model.Instance, healthy bool) nInstance {
	k := inst.Key()
	bt := inst.BeatTimings()
	md := inst.Metadata.Map()
	if md == nil {
		md = map[string]string{}
	}
	id := inst.InstanceID()
	return nInstance{
		InstanceID:                id,
		IP:                        inst.IP,
		Port:                      inst.Port,
		Weight:                    inst.Weight,
		Healthy:                   healthy,
		Enabled:                   inst.Enabled,
		Ephemeral:                 inst.Ephemeral,
		ClusterName:               k.Cluster,
		ServiceName:               k.Service.GroupedName(),
		Metadata:                  md,
		InstanceHeartBeatInterval: bt.Interval.Milliseconds(),
		IPDeleteTimeout:           bt.Delete.Milliseconds(),
		InstanceHeartBeatTimeOut:  bt.Unhealthy.Milliseconds(),
	}
}

// refClock hands out lastRefTime values: milliseconds of wall time that
// strictly increase, as the clients drop a push whose lastRefTime is not
// newer than what they hold.
type refClock struct{ last atomic.Int64 }

func (c *refClock) next() int64 {
	for {
		now := time.Now().UnixMilli()
		prev := c.last.Load()
		if now <= prev {
			now = prev + 1
		}
		if c.last.CompareAndSwap(prev, now) {
			return now
		}
	}
}

// serviceInfo converts a view for a client that asked for name, group and
// clusters (echoed verbatim: they form the client's cache key).
func serviceInfo(v *model.ServiceView, name, group, clusters string, ref int64) nServiceInfo {
	si := nServiceInfo{
		Name:        name,
		GroupName:   group,
		Clusters:    clusters,
		CacheMillis: 10000,
		Hosts:       make([]nInstance, 0, len(v.Instances)),
		LastRefTime: ref,
		Checksum:    strconv.FormatUint(v.Revision, 10),
		Valid:       true,

		ReachProtectionThreshold: v.Protected,
	}
	for _, inst := range v.Instances {
		si.Hosts = append(si.Hosts, fromModel(inst, inst.Healthy))
	}
	return si
}

// splitClusters parses Nacos's comma-separated cluster list.
func splitClusters(s string) []string {
	var out []string
	for _, c := range strings.Split(s, ",") {
		if c = strings.TrimSpace(c); c != "" {
			out = append(out, c)
		}
	}
	return out
}

// Nacos's error codes (com.alibaba.nacos.api.exception.NacosException and
// the remote module's ResponseCode).
const (
	codeOK           = 200
	codeInvalidParam = 400
	codeNoRight      = 403
	codeNotFound     = 404
	codeConflict     = 409
	codeServerError  = 500
	codeUnregister   = 301 // the connection is not registered: the client switches server
	codeNotReady     = 302 // 3xx makes a client retry later
	codeNoHandler    = 302 // no handler for the request type
	codeFail         = 500 // resultCode of a failed response
)

// errCode maps a registry error to Nacos's error code and a message.
func errCode(err error) (int, string) {
	var lim *errLimit
	switch {
	case errors.As(err, &lim), errors.Is(err, registry.ErrLimit):
		return codeOverThreshold, err.Error()
	case errors.Is(err, model.ErrInvalid):
		return codeInvalidParam, err.Error()
	case errors.Is(err, registry.ErrKindMismatch):
		return codeInvalidParam, err.Error()
	case errors.Is(err, registry.ErrNotFound):
		return codeNotFound, err.Error()
	case errors.Is(err, registry.ErrServiceExists):
		return codeConflict, err.Error()
	case errors.Is(err, registry.ErrServiceNotEmpty):
		return codeInvalidParam, err.Error()
	case errors.Is(err, registry.ErrNotReady):
		return codeNotReady, err.Error()
	case errors.Is(err, registry.ErrHealthChecked):
		return codeInvalidParam, err.Error()
	case errors.Is(err, ErrUnauthenticated), errors.Is(err, ErrForbidden):
		_, msg, _ := strings.Cut(err.Error(), ": ")
		return codeNoRight, msg
	default:
		return codeServerError, err.Error()
	}
}

// checkPort gives Nacos's answer for the ports Muster refuses, with a
// clearer message.
func checkPort(p int) error {
	if p < 1 || p > 65535 {
		return fmt.Errorf("%w: instance.port: must be 1–65535 (nacosd refuses port 0, which Nacos accepts): %d", model.ErrInvalid, p)
	}
	return nil
}
