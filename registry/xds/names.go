package xds

import (
	"fmt"
	"strings"

	"github.com/muster-io/muster/model"
)

// Name returns the xDS resource name of a service: the name a gRPC client
// dials as xds:///<name>, and the name of the service's Listener,
// RouteConfiguration, Cluster and ClusterLoadAssignment alike. The shortest
// form that names the service is used:
//
//	orders                  public namespace, DEFAULT_GROUP
//	payments@@orders        public namespace, group "payments"
//	dev@@payments@@orders   namespace "dev", group "payments"
//	dev@@DEFAULT_GROUP@@orders
//
// "@@" is Nacos's separator; a namespace or a group never holds '@' and a
// service name never holds "@@" (model.ServiceKey.Validate), so the form is
// unambiguous, whereas '/' may appear in a service name.
func Name(key model.ServiceKey) string {
	key = key.WithDefaults()
	switch {
	case key.Namespace != model.DefaultNamespace:
		return key.String()
	case key.Group != model.DefaultGroup:
		return key.GroupedName()
	default:
		return key.Name
	}
}

// ParseName returns the service that name stands for (see Name). Only the
// canonical form is accepted, so that one service has one set of resources:
// "DEFAULT_GROUP@@orders" is refused in favour of "orders". The error
// matches model.ErrInvalid and names the rule.
func ParseName(name string) (model.ServiceKey, error) {
	var key model.ServiceKey
	parts := strings.Split(name, model.GroupSeparator)
	switch len(parts) {
	case 1:
		key = model.ServiceKey{Name: parts[0]}
	case 2:
		key = model.ServiceKey{Group: parts[0], Name: parts[1]}
	case 3:
		key = model.ServiceKey{Namespace: parts[0], Group: parts[1], Name: parts[2]}
	default:
		return model.ServiceKey{}, fmt.Errorf("%w: xds resource name %q: at most namespace@@group@@service", model.ErrInvalid, name)
	}
	for _, p := range parts {
		if p == "" {
			return model.ServiceKey{}, fmt.Errorf("%w: xds resource name %q: an empty part", model.ErrInvalid, name)
		}
	}
	if err := key.Validate(); err != nil {
		return model.ServiceKey{}, fmt.Errorf("xds resource name %q: %w", name, err)
	}
	key = key.WithDefaults()
	if canon := Name(key); canon != name {
		return model.ServiceKey{}, fmt.Errorf("%w: xds resource name %q: not canonical, use %q", model.ErrInvalid, name, canon)
	}
	return key, nil
}
