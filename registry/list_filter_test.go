package registry_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
)

// TestListServicesNameFilter: NameContains and GroupContains keep the
// services whose name and group contain them (case-sensitive), within the
// namespace and group asked for; Total and pages count what matches.
func TestListServicesNameFilter(t *testing.T) {
	r := newReg(t)
	var want []string // "group/name" of the services whose name contains "pay"
	for i := range 30 {
		group := []string{"DEFAULT_GROUP", "billing", "ops"}[i%3]
		name := fmt.Sprintf("svc-%02d", i)
		if i%2 == 0 {
			name = fmt.Sprintf("pay-%02d", i)
			want = append(want, group+"/"+name)
		}
		mustRegister(t, r, model.NewInstance(model.ServiceKey{Group: group, Name: name}, "10.1.1.1", 80))
	}
	// Case-sensitive, and other namespaces stay out.
	mustRegister(t, r, model.NewInstance(model.ServiceKey{Name: "PAY-x"}, "10.1.1.1", 80))
	mustRegister(t, r, model.NewInstance(model.ServiceKey{Namespace: "other", Name: "pay-other"}, "10.1.1.1", 80))
	slices.Sort(want)

	names := func(l registry.ServiceList) []string {
		var out []string
		for _, s := range l.Services {
			out = append(out, s.Key.Group+"/"+s.Key.Name)
		}
		return out
	}
	list := func(o registry.ListOptions) registry.ServiceList {
		t.Helper()
		l, err := r.ListServices(ctx, o)
		if err != nil {
			t.Fatalf("ListServices(%+v): %v", o, err)
		}
		return l
	}

	// Every page of 4, put together, is the whole match, in order.
	var got []string
	for page := 1; page <= 5; page++ {
		l := list(registry.ListOptions{NameContains: "pay", Page: page, PageSize: 4})
		if l.Total != len(want) {
			t.Fatalf("page %d: Total = %d, want %d", page, l.Total, len(want))
		}
		if n := len(l.Services); page < 4 && n != 4 || page == 4 && n != 3 || page == 5 && n != 0 {
			t.Fatalf("page %d has %d services", page, n)
		}
		got = append(got, names(l)...)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("pages = %v\nwant    %v", got, want)
	}

	if l := list(registry.ListOptions{NameContains: "pay", Group: "billing"}); l.Total != 5 {
		t.Fatalf("pay in group billing: %v", names(l))
	}
	if l := list(registry.ListOptions{NameContains: "pay-1", GroupContains: "ill"}); !slices.Equal(names(l), []string{"billing/pay-10", "billing/pay-16"}) {
		t.Fatalf("pay-1 in groups containing ill: %v", names(l))
	}
	if l := list(registry.ListOptions{GroupContains: "DEFAULT"}); l.Total != 11 {
		t.Fatalf("groups containing DEFAULT: Total %d, %v", l.Total, names(l))
	}
	if l := list(registry.ListOptions{NameContains: "PAY"}); !slices.Equal(names(l), []string{"DEFAULT_GROUP/PAY-x"}) {
		t.Fatalf("PAY: %v", names(l))
	}
	if l := list(registry.ListOptions{NameContains: "nothing"}); l.Total != 0 || len(l.Services) != 0 {
		t.Fatalf("nothing: %+v", l)
	}
	if l := list(registry.ListOptions{Namespace: "other", NameContains: "pay"}); !slices.Equal(names(l), []string{"DEFAULT_GROUP/pay-other"}) {
		t.Fatalf("namespace other: %v", names(l))
	}
}
