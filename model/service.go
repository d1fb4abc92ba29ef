package model

import (
	"slices"
	"strings"
)

// CheckType is how the registry checks the health of a cluster's persistent
// instances.
type CheckType string

// Check types. The empty CheckType means CheckTCP, Nacos's default.
const (
	CheckNone  CheckType = "NONE"  // never probed; health is set by hand
	CheckTCP   CheckType = "TCP"   // connect to the check port
	CheckHTTP  CheckType = "HTTP"  // GET a path, expect given status codes
	CheckMySQL CheckType = "MYSQL" // run a command; by default only a writable primary is healthy
)

// DefaultMySQLCommand is the MySQL check's default command: with it, only a
// primary whose read_only is OFF is healthy.
const DefaultMySQLCommand = "show global variables where variable_name='read_only'"

// HealthCheck configures the active health check of a cluster. Ephemeral
// instances ignore it: their health follows their beats or sessions.
type HealthCheck struct {
	// Type of check; empty means CheckTCP.
	Type CheckType `msgpack:"type,omitempty" json:"type,omitempty"`
	// Port to check; 0 means the instance's own port.
	Port int `msgpack:"port,omitempty" json:"port,omitempty"`
	// Path and Headers of the HTTP check.
	Path    string   `msgpack:"path,omitempty" json:"path,omitempty"`
	Headers Metadata `msgpack:"headers,omitempty" json:"headers,omitempty"`
	// ExpectedCodes are the HTTP statuses that count as healthy; empty
	// means 200 only.
	ExpectedCodes []int `msgpack:"codes,omitempty" json:"expectedCodes,omitempty"`
	// User, Password and Command of the MySQL check; an empty Command means
	// DefaultMySQLCommand.
	User     string `msgpack:"user,omitempty" json:"user,omitempty"`
	Password string `msgpack:"password,omitempty" json:"-"`
	Command  string `msgpack:"cmd,omitempty" json:"command,omitempty"`
}

// EffectiveType returns Type, or CheckTCP when Type is empty.
func (h HealthCheck) EffectiveType() CheckType {
	if h.Type == "" {
		return CheckTCP
	}
	return h.Type
}

// Cluster is the stored configuration of one cluster of a service.
type Cluster struct {
	Name        string      `msgpack:"name" json:"name"`
	HealthCheck HealthCheck `msgpack:"check" json:"healthCheck"`
	Metadata    Metadata    `msgpack:"md,omitempty" json:"metadata,omitempty"`
}

// Service is the stored definition of a service.
type Service struct {
	Key ServiceKey `msgpack:"key" json:"key"`
	// Ephemeral services hold ephemeral instances, persistent services
	// persistent ones; the kind never changes.
	Ephemeral bool `msgpack:"ephemeral" json:"ephemeral"`
	// ProtectThreshold in [0, 1]: when the healthy share of a query's
	// instances is at or below it, the query returns every instance (see
	// ServiceView.Protected).
	ProtectThreshold float64 `msgpack:"protect,omitempty" json:"protectThreshold"`
	// Metadata is free-form.
	Metadata Metadata `msgpack:"md,omitempty" json:"metadata,omitempty"`
	// Clusters holds the clusters that have a stored configuration, sorted
	// by name. A cluster without one uses the default TCP check.
	Clusters []Cluster `msgpack:"clusters,omitempty" json:"clusters,omitempty"`
}

// Cluster returns the configuration of the named cluster, or the default
// (TCP check on the instance port) when none is stored.
func (s *Service) Cluster(name string) Cluster {
	if name == "" {
		name = DefaultCluster
	}
	i, ok := slices.BinarySearchFunc(s.Clusters, name, func(c Cluster, n string) int {
		return strings.Compare(c.Name, n)
	})
	if ok {
		return s.Clusters[i]
	}
	return Cluster{Name: name}
}

// Equal reports whether s and o hold the same definition.
func (s *Service) Equal(o *Service) bool {
	return s.Key == o.Key && s.Ephemeral == o.Ephemeral && s.ProtectThreshold == o.ProtectThreshold &&
		s.Metadata.Equal(o.Metadata) && slices.EqualFunc(s.Clusters, o.Clusters, func(a, b Cluster) bool {
		return a.Name == b.Name && a.Metadata.Equal(b.Metadata) && a.HealthCheck.equal(&b.HealthCheck)
	})
}

func (h *HealthCheck) equal(o *HealthCheck) bool {
	return h.Type == o.Type && h.Port == o.Port && h.Path == o.Path && h.Headers.Equal(o.Headers) &&
		slices.Equal(h.ExpectedCodes, o.ExpectedCodes) && h.User == o.User && h.Password == o.Password &&
		h.Command == o.Command
}

// Clone returns a deep copy of s, which shares no slice with it.
func (s Service) Clone() Service {
	if s.Clusters != nil {
		s.Clusters = slices.Clone(s.Clusters)
		for i := range s.Clusters {
			s.Clusters[i].HealthCheck.ExpectedCodes = slices.Clone(s.Clusters[i].HealthCheck.ExpectedCodes)
		}
	}
	return s
}

// Redacted returns a deep copy of s without the health checks' passwords,
// the form views carry to every reader.
func (s Service) Redacted() Service {
	s = s.Clone()
	for i := range s.Clusters {
		s.Clusters[i].HealthCheck.Password = ""
	}
	return s
}

// WithDefaults returns s with its key's empty names replaced by defaults and
// its clusters sorted by name, the form the registry stores. The result
// shares no slice with s.
func (s Service) WithDefaults() Service {
	s = s.Clone()
	s.Key = s.Key.WithDefaults()
	if len(s.Clusters) > 0 {
		for i := range s.Clusters {
			if s.Clusters[i].Name == "" {
				s.Clusters[i].Name = DefaultCluster
			}
		}
		slices.SortStableFunc(s.Clusters, func(a, b Cluster) int {
			return strings.Compare(a.Name, b.Name)
		})
	}
	return s
}
