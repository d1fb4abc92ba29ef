package registry

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/muster-io/muster/model"
)

// CreateService stores a service definition. The service's kind is
// def.Ephemeral. A service that exists only because instances were
// registered into it can be given a definition of its kind; one that
// already has a definition fails with ErrServiceExists, one past
// Limits.MaxServices or MaxServicesPerNamespace with ErrLimit.
//
// Like every write of persistent data (CreateService, UpdateService,
// DeleteService, PatchInstance, RemovePatch, SetHealth) it fails with an
// error matching model.ErrInvalid for invalid input, ErrClosed once the
// registry is closed, and, worth a retry (Retryable), ErrNotReady before
// Start and ErrNoLeader when the store has no quorum. A call returns once
// its change is visible on this node.
func (r *Registry) CreateService(ctx context.Context, def model.Service) error {
	def = def.WithDefaults()
	if err := r.validService(&def); err != nil {
		return err
	}
	return r.store.Apply(ctx, model.Command{Op: model.OpCreateService, Service: def}, model.Origin{})
}

// UpdateService replaces a service's definition (threshold, metadata,
// clusters). The kind cannot change (ErrKindMismatch). Watchers see the new
// definition at once. Its other errors are CreateService's.
func (r *Registry) UpdateService(ctx context.Context, def model.Service) error {
	def = def.WithDefaults()
	if err := r.validService(&def); err != nil {
		return err
	}
	return r.store.Apply(ctx, model.Command{Op: model.OpUpdateService, Service: def}, model.Origin{})
}

// DeleteService removes a service. It fails with ErrServiceNotEmpty while
// the service has instances, and with ErrNotFound when there is no such
// service; its other errors are CreateService's.
func (r *Registry) DeleteService(ctx context.Context, key model.ServiceKey) error {
	key = key.WithDefaults()
	if err := key.Validate(); err != nil {
		return err
	}
	return r.store.Apply(ctx, model.Command{Op: model.OpDeleteService, SvcKey: key}, model.Origin{})
}

// GetService returns a copy of a service's definition: the stored one, or
// for a service that exists only through its instances, the defaults with
// its kind. It fails with ErrNotFound when there is no such service. Unlike
// the definition in views, it includes the MySQL checks' passwords. Like
// every read it fails with ErrNotReady (worth a retry) before the registry
// serves, with ErrClosed once it is closed, and with an error matching
// model.ErrInvalid for an invalid key.
func (r *Registry) GetService(ctx context.Context, key model.ServiceKey) (model.Service, error) {
	if err := ctx.Err(); err != nil {
		return model.Service{}, err
	}
	key = key.WithDefaults()
	if err := key.Validate(); err != nil {
		return model.Service{}, err
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if err := r.checkRead(); err != nil {
		return model.Service{}, err
	}
	s := r.core.service(&key)
	if s == nil {
		return model.Service{}, fmt.Errorf("%w: service %s", ErrNotFound, key)
	}
	return s.definition().Clone(), nil
}

// ListOptions selects a page of services.
type ListOptions struct {
	// Namespace to list; empty means the default namespace.
	Namespace string
	// Group to list; empty means every group.
	Group string
	// NameContains, when set, keeps only the services whose name contains
	// it: a case-sensitive substring match, as Nacos's catalog applies its
	// serviceNameParam. GroupContains does the same with group names
	// (Nacos's groupNameParam). Paging and Total apply to what matches.
	NameContains  string
	GroupContains string
	// Page is 1-based; 0 means 1.
	Page int
	// PageSize is the number of services per page; 0 means 100.
	PageSize int
}

// ServiceSummary describes one service in a list.
type ServiceSummary struct {
	Key       model.ServiceKey `json:"key"`
	Ephemeral bool             `json:"ephemeral"`
	// Defined is true when the service has a stored definition.
	Defined bool `json:"defined"`
	// Instances counts the service's instances (enabled or not).
	Instances int `json:"instances"`
}

// ServiceList is one page of services.
type ServiceList struct {
	Services []ServiceSummary `json:"services"` // sorted by group, then name
	Total    int              `json:"total"`    // services matching the options, on all pages
}

// ListServices returns a page of the services of a namespace, sorted by
// group and name, optionally filtered by group and by substrings of the
// name and the group (see ListOptions). It fails as GetService does.
func (r *Registry) ListServices(ctx context.Context, opts ListOptions) (ServiceList, error) {
	if err := ctx.Err(); err != nil {
		return ServiceList{}, err
	}
	ns := model.ServiceKey{Namespace: opts.Namespace, Group: opts.Group, Name: "x"}
	if opts.Group == "" {
		ns.Group = model.DefaultGroup // validate the namespace alone
	}
	if err := ns.Validate(); err != nil {
		return ServiceList{}, err
	}
	ns = ns.WithDefaults()
	if opts.Page < 0 || opts.PageSize < 0 {
		return ServiceList{}, &model.ValidationError{Field: "list.page", Rule: "page and page size must not be negative"}
	}
	page, size := max(opts.Page, 1), opts.PageSize
	if size == 0 {
		size = 100
	}

	r.mu.RLock()
	if err := r.checkRead(); err != nil {
		r.mu.RUnlock()
		return ServiceList{}, err
	}
	var all []ServiceSummary
	for key, s := range r.core.allServices() {
		if key.Namespace != ns.Namespace || (opts.Group != "" && key.Group != opts.Group) ||
			!strings.Contains(key.Name, opts.NameContains) || !strings.Contains(key.Group, opts.GroupContains) {
			continue
		}
		all = append(all, ServiceSummary{Key: key, Ephemeral: s.ephemeral, Defined: s.def != nil, Instances: len(s.slots)})
	}
	r.mu.RUnlock()

	slices.SortFunc(all, func(a, b ServiceSummary) int { return a.Key.Compare(b.Key) })
	out := ServiceList{Total: len(all)}
	if page-1 <= (len(all)-1)/size { // no overflow: (page-1)*size < len(all)
		from := (page - 1) * size
		out.Services = all[from:min(from+size, len(all))]
	}
	return out, nil
}

// PatchInstance lays an operator's override over an instance: weight,
// enabled flag and metadata entries. The patch is stored apart from what the
// publisher registered, wins when the instance is read, survives
// re-registration, and is dropped PatchTTL after its instance is gone.
// Patches merge: a later patch changes only the fields it sets. The
// instance must exist (ErrNotFound); its other errors are CreateService's.
func (r *Registry) PatchInstance(ctx context.Context, p model.InstancePatch) error {
	p.Key = p.Key.WithDefaults()
	if err := r.validPatch(&p); err != nil {
		return err
	}
	return r.store.Apply(ctx, model.Command{Op: model.OpPatchInstance, Patch: p}, model.Origin{})
}

// RemovePatch drops the override of an instance, if any. Its errors are
// CreateService's.
func (r *Registry) RemovePatch(ctx context.Context, key model.InstanceKey) error {
	key = key.WithDefaults()
	if err := key.Validate(); err != nil {
		return err
	}
	return r.store.Apply(ctx, model.Command{Op: model.OpRemovePatch, Key: key}, model.Origin{})
}

// SetHealth sets the health of a persistent instance by hand. It is allowed
// only when the instance's cluster has a health check of type NONE
// (ErrHealthChecked otherwise); ephemeral instances follow their beats or
// sessions (ErrKindMismatch). An instance the registry does not hold
// fails with ErrNotFound; the other errors are CreateService's.
func (r *Registry) SetHealth(ctx context.Context, key model.InstanceKey, healthy bool) error {
	key = key.WithDefaults()
	if err := key.Validate(); err != nil {
		return err
	}
	return r.store.Apply(ctx, model.Command{Op: model.OpSetHealth, Key: key, Healthy: healthy}, model.Origin{})
}
