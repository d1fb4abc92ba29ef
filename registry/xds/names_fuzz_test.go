package xds_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry/xds"
)

// nameSeeds are resource names a client may send: canonical forms, the
// non-canonical spellings of the defaults, separators out of place, and
// characters no part accepts.
var nameSeeds = []string{
	"orders", "payments@@orders", "dev@@payments@@orders", "dev@@DEFAULT_GROUP@@orders",
	"DEFAULT_GROUP@@orders", "public@@DEFAULT_GROUP@@orders", "public@@g@@orders",
	"", "@@", "@@@@", "a@@", "@@a", "a@@@@b", "a@@b@@c@@d", "a@@@b", "a@b", "@orders", "orders@",
	"g@@orders/v1", "bad ns@@g@@x", "/etc/passwd", "*", "xdstp://authority/envoy.config.listener.v3.Listener/orders",
	"dev@@g@@", "ns@@.@@x", "ns@@..@@x", "\x00", "ü@@x", strings.Repeat("a", 600), strings.Repeat("@@a", 100),
}

// FuzzParseName: ParseName never panics; it accepts a name exactly when the
// name is the canonical Name of a valid service, and its errors match
// model.ErrInvalid.
func FuzzParseName(f *testing.F) {
	for _, s := range nameSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		key, err := xds.ParseName(name)
		if err != nil {
			if !errors.Is(err, model.ErrInvalid) {
				t.Fatalf("ParseName(%q): %v does not match model.ErrInvalid", name, err)
			}
			if key != (model.ServiceKey{}) {
				t.Fatalf("ParseName(%q) failed (%v) but returned %+v", name, err, key)
			}
			return
		}
		if err := key.Validate(); err != nil {
			t.Fatalf("ParseName(%q) = %+v, an invalid key: %v", name, key, err)
		}
		if key != key.WithDefaults() {
			t.Fatalf("ParseName(%q) = %+v, not with its defaults", name, key)
		}
		if got := xds.Name(key); got != name {
			t.Fatalf("ParseName(%q) = %+v, whose Name is %q", name, key, got)
		}
	})
}

// FuzzNameRoundTrip: every valid service has a name that ParseName takes
// back to it, and two services never share a name.
func FuzzNameRoundTrip(f *testing.F) {
	f.Add("", "", "orders")
	f.Add("dev", "payments", "orders")
	f.Add(model.DefaultNamespace, model.DefaultGroup, "orders")
	f.Add("", "g", "@orders")
	f.Add("", "g", "orders@")
	f.Add("dev", "", "a@b/c")
	f.Add("", "", "a@@b")
	f.Add("x", "y", "")
	f.Fuzz(func(t *testing.T, ns, group, name string) {
		key := model.ServiceKey{Namespace: ns, Group: group, Name: name}
		if key.Validate() != nil {
			return
		}
		n := xds.Name(key)
		back, err := xds.ParseName(n)
		if err != nil {
			t.Fatalf("Name(%+v) = %q, which ParseName refuses: %v", key, n, err)
		}
		if back != key.WithDefaults() {
			t.Fatalf("Name(%+v) = %q, which ParseName reads as %+v", key, n, back)
		}
	})
}
