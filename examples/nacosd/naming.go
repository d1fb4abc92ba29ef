package main

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/muster-io/muster/model"
	pb "github.com/nacos-group/nacos-sdk-go/v2/api/grpc"
)

// Service names holding "@@" over gRPC (issue 28 item 4).
//
// The 2.x protocol gives the group apart (groupName), so a serviceName
// holding "@@" can only be a mistake, and Nacos refuses it. Refusing it is
// not enough with nacos-sdk-go v2: before it sends a registration or a
// subscription it caches it for its redo under groupName+"@@"+serviceName
// (and "@@"+clusters), and on every (re)connection it splits that key at
// every "@@" and sends part 0 as the group, part 1 as the service name and,
// for a subscription, part 2 as the clusters. A refused "x@@bad" of
// DEFAULT_GROUP thus comes back, on the next connection, as service "x" of
// DEFAULT_GROUP with the same instance, or subscribed with clusters "bad",
// and would be registered there.
//
// nacosd remembers, per source IP, what each refused name would be cut to,
// and refuses exactly those redos (the cut service with one of the refused
// instances' ip:port, or subscribed with the cut clusters), with a message
// saying why, for ambiguousTTL after the refusal. A legitimate client of the
// cut service from that IP with another instance, or other clusters, is
// served.

const (
	// ambiguousTTL is how long a refused name's redo is refused.
	ambiguousTTL = 10 * time.Minute
	// maxAmbiguousPerIP and maxAmbiguousIPs bound the memory: past them,
	// the oldest entries of an IP, or every IP's, are forgotten.
	maxAmbiguousPerIP = 16
	maxAmbiguousIPs   = 4096
	// maxAmbiguousInsts bounds the instances remembered per entry.
	maxAmbiguousInsts = 16
)

// ambiguousNames is the memory of refused grouped names.
type ambiguousNames struct {
	mu   sync.Mutex
	byIP map[netip.Addr]map[model.ServiceKey]*ambiguous
}

// ambiguous is what one refused name would be cut to by the SDK's redo.
type ambiguous struct {
	orig     string              // the refused service name
	clusters string              // the clusters a subscription's redo sends
	insts    map[string]struct{} // ip:port of the refused instances
	until    time.Time
}

// cutName returns what nacos-sdk-go v2's redo makes of serviceName
// (holding "@@") of group: the service of that group it names, and the
// clusters of a subscription's redo.
func cutName(ns, group, serviceName string) (model.ServiceKey, string) {
	parts := strings.Split(serviceName, model.GroupSeparator)
	clusters := ""
	if len(parts) > 1 {
		clusters = parts[1]
	}
	return model.ServiceKey{Namespace: namespaceOf(ns), Group: group, Name: parts[0]}, clusters
}

// requestInsts returns the ip:port of the instances a request registers.
func requestInsts(typ string, req *nRequest) []string {
	var out []string
	switch {
	case typ == "InstanceRequest" && req.Type == "registerInstance":
		out = append(out, fmt.Sprintf("%s:%d", req.Instance.IP, req.Instance.Port))
	case typ == "BatchInstanceRequest" && req.Type == "batchRegisterInstance":
		for _, in := range req.Instances {
			out = append(out, fmt.Sprintf("%s:%d", in.IP, in.Port))
		}
	}
	return out
}

// checkServiceName refuses a naming request of connection c whose
// serviceName holds "@@", and the SDK's redo of one refused from c's source
// IP (see above). It returns the refusal, or nil.
func (c *conn) checkServiceName(typ string, req *nRequest) *pb.Payload {
	group := req.GroupName
	if group == "" {
		group = model.DefaultGroup
	}
	names := &c.g.s.names
	ip := sourceIP(c.addr)
	now := time.Now()
	if strings.Contains(req.ServiceName, model.GroupSeparator) {
		key, clusters := cutName(req.Namespace, group, req.ServiceName)
		names.remember(ip, key, req.ServiceName, clusters, requestInsts(typ, req), now)
		return errorPayload(req.RequestID, codeInvalidParam, fmt.Sprintf(
			"Param 'serviceName' is illegal, illegal characters should not appear in the param: %q holds \"@@\" (the group goes in groupName)", clip(req.ServiceName)))
	}
	key := model.ServiceKey{Namespace: namespaceOf(req.Namespace), Group: group, Name: req.ServiceName}
	orig, ok := names.redo(ip, key, typ, req, now)
	if !ok {
		return nil
	}
	c.g.s.limits.hit("ambiguous_name", c.addr)
	return errorPayload(req.RequestID, codeInvalidParam, fmt.Sprintf(
		"Param 'serviceName' is illegal: the service name %q was refused to this client; nacos-sdk-go v2 sends it again "+
			"(its redo cuts %s@@%s at every \"@@\") as service %q of group %q, which is refused too: "+
			"use a name without \"@@\", give the group in groupName, and restart the client (its redo keeps the refused name)",
		clip(orig), clip(group), clip(orig), clip(req.ServiceName), clip(group)))
}

func (a *ambiguousNames) remember(ip netip.Addr, key model.ServiceKey, orig, clusters string, insts []string, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.byIP == nil {
		a.byIP = map[netip.Addr]map[model.ServiceKey]*ambiguous{}
	}
	m := a.byIP[ip]
	if m == nil {
		if len(a.byIP) >= maxAmbiguousIPs {
			clear(a.byIP)
		}
		m = map[model.ServiceKey]*ambiguous{}
		a.byIP[ip] = m
	}
	e := m[key]
	if e == nil {
		if len(m) >= maxAmbiguousPerIP {
			var oldest model.ServiceKey
			for k, v := range m {
				if m[oldest] == nil || v.until.Before(m[oldest].until) {
					oldest = k
				}
			}
			delete(m, oldest)
		}
		e = &ambiguous{insts: map[string]struct{}{}}
		m[key] = e
	}
	e.orig, e.clusters, e.until = orig, clusters, now.Add(ambiguousTTL)
	for _, in := range insts {
		if len(e.insts) < maxAmbiguousInsts {
			e.insts[in] = struct{}{}
		}
	}
}

// redo reports whether a request of service key from ip is the SDK's redo
// of a refused name, and that name.
func (a *ambiguousNames) redo(ip netip.Addr, key model.ServiceKey, typ string, req *nRequest, now time.Time) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.byIP[ip][key]
	if e == nil {
		return "", false
	}
	if now.After(e.until) {
		delete(a.byIP[ip], key)
		return "", false
	}
	if typ == "SubscribeServiceRequest" {
		return e.orig, req.Subscribe && req.Clusters == e.clusters && e.clusters != ""
	}
	for _, in := range requestInsts(typ, req) {
		if _, ok := e.insts[in]; ok {
			return e.orig, true
		}
	}
	return "", false
}
