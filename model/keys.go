package model

import (
	"cmp"
	"strconv"
	"strings"
)

// Nacos's defaults for names left empty.
const (
	DefaultNamespace = "public"
	DefaultGroup     = "DEFAULT_GROUP"
	DefaultCluster   = "DEFAULT"
)

// GroupSeparator joins a group and a service name into a grouped name
// ("group@@service"), as Nacos does.
const GroupSeparator = "@@"

// ServiceKey names a service: Namespace → Group → Name. Empty Namespace and
// Group mean DefaultNamespace and DefaultGroup (see WithDefaults).
type ServiceKey struct {
	Namespace string `msgpack:"ns,omitempty" json:"namespace,omitempty"`
	Group     string `msgpack:"group,omitempty" json:"group,omitempty"`
	Name      string `msgpack:"name" json:"name"`
}

// WithDefaults returns k with empty Namespace and Group replaced by the
// defaults.
func (k ServiceKey) WithDefaults() ServiceKey {
	if k.Namespace == "" {
		k.Namespace = DefaultNamespace
	}
	if k.Group == "" {
		k.Group = DefaultGroup
	}
	return k
}

// GroupedName returns "group@@name" (Nacos's grouped service name).
func (k ServiceKey) GroupedName() string {
	return GroupedName(k.WithDefaults().Group, k.Name)
}

// String returns "namespace@@group@@name", Nacos's full service key.
func (k ServiceKey) String() string {
	k = k.WithDefaults()
	return k.Namespace + GroupSeparator + k.Group + GroupSeparator + k.Name
}

// Compare orders keys by namespace, group, then name.
func (k ServiceKey) Compare(o ServiceKey) int {
	if c := strings.Compare(k.Namespace, o.Namespace); c != 0 {
		return c
	}
	if c := strings.Compare(k.Group, o.Group); c != 0 {
		return c
	}
	return strings.Compare(k.Name, o.Name)
}

// GroupedName joins group and name as "group@@name".
func GroupedName(group, name string) string {
	return group + GroupSeparator + name
}

// ParseGroupedName parses a grouped name ("group@@service", Nacos's
// serviceName parameter) into a ServiceKey in the default namespace (set
// Namespace on the result for another). A name without "@@" belongs to
// DefaultGroup, as in Nacos. A grouped name with an empty group or name is
// rejected with an error matching ErrInvalid.
func ParseGroupedName(s string) (ServiceKey, error) {
	g, n, found := strings.Cut(s, GroupSeparator)
	if !found {
		if s == "" {
			return ServiceKey{}, invalid("service.name", "must not be empty", "")
		}
		return ServiceKey{Group: DefaultGroup, Name: s}, nil
	}
	if g == "" {
		return ServiceKey{}, invalid("service.group", "must not be empty in a grouped name", s)
	}
	if n == "" {
		return ServiceKey{}, invalid("service.name", "must not be empty in a grouped name", s)
	}
	return ServiceKey{Group: g, Name: n}, nil
}

// InstanceKey identifies an instance within the registry: its service, its
// cluster and its ip:port. An empty Cluster means DefaultCluster.
type InstanceKey struct {
	Service ServiceKey `msgpack:"svc" json:"service"`
	Cluster string     `msgpack:"cluster,omitempty" json:"cluster,omitempty"`
	IP      string     `msgpack:"ip" json:"ip"`
	Port    int        `msgpack:"port" json:"port"`
}

// WithDefaults returns k with every empty name replaced by its default.
func (k InstanceKey) WithDefaults() InstanceKey {
	k.Service = k.Service.WithDefaults()
	if k.Cluster == "" {
		k.Cluster = DefaultCluster
	}
	return k
}

// Endpoint returns "ip:port" (with brackets around an IPv6 address).
func (k InstanceKey) Endpoint() string {
	return Endpoint(k.IP, k.Port)
}

// DefaultID returns the instance ID Nacos generates when the publisher gives
// none: "ip#port#cluster#group@@service".
func (k InstanceKey) DefaultID() string {
	k = k.WithDefaults()
	return k.IP + "#" + strconv.Itoa(k.Port) + "#" + k.Cluster + "#" + k.Service.GroupedName()
}

// String returns a readable form of the key, for logs and errors.
func (k InstanceKey) String() string {
	k = k.WithDefaults()
	return k.Service.String() + "/" + k.Cluster + "/" + k.Endpoint()
}

// Compare orders keys by service, cluster, IP (as text), then port. Instances
// in a ServiceView are in this order.
func (k InstanceKey) Compare(o InstanceKey) int {
	if c := k.Service.Compare(o.Service); c != 0 {
		return c
	}
	return compareInService(k.Cluster, k.IP, k.Port, o.Cluster, o.IP, o.Port)
}

func compareInService(c1, ip1 string, p1 int, c2, ip2 string, p2 int) int {
	if c := strings.Compare(c1, c2); c != 0 {
		return c
	}
	if c := strings.Compare(ip1, ip2); c != 0 {
		return c
	}
	return cmp.Compare(p1, p2)
}

// Endpoint formats ip and port as "ip:port", bracketing IPv6 addresses.
func Endpoint(ip string, port int) string {
	if strings.IndexByte(ip, ':') >= 0 {
		return "[" + ip + "]:" + strconv.Itoa(port)
	}
	return ip + ":" + strconv.Itoa(port)
}
