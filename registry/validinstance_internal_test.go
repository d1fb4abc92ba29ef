package registry

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/muster-io/muster/model"
)

// refValidInstanceIn is validInstanceIn as it was before the model's rules
// ran first (issue 30, item 1): the metadata limits, then the model.
func refValidInstanceIn(l *Limits, inst *model.Instance, heldService, ipv4 bool) error {
	if err := l.checkMetadata("instance.metadata", inst.Metadata); err != nil {
		return err
	}
	if heldService {
		return inst.ValidateInServiceIPv4(l.model(), ipv4)
	}
	return inst.Validate(l.model())
}

// FuzzValidInstanceIn: validInstanceIn returns the error the limits and
// then the model's rules returned, for every instance and limits: the same
// text, matching the same sentinels.
func FuzzValidInstanceIn(f *testing.F) {
	f.Add("orders", "", "10.0.0.1", 8080, "version", "1.4.2", 3, 1024, 64)
	f.Add("orders", "bad cluster", "10.0.0.1", 8080, "k", strings.Repeat("x", 40), 0, 16, 64)
	f.Add("orders", "c", "10.0.0.1", 0, "k", "v", 70, 1024, 64)
	f.Add("a@@b", "", "::1", 80, "k", "ü\x00", 2, 3, 1)
	f.Add("orders", "", "host.example", 80, "preserved.heart.beat.interval", "x", 0, 1024, 64)
	f.Add("orders", "", "10.0.0.1", 80, "", "v", 0, 0, 0)
	f.Add("orders", "", "10.0.0.1", 80, "k", "v", 5, -1, 2)
	f.Add("orders", "", "10.0.0.1", 8080, "k", "v", 70, 1024, 64) // valid but for the entry count
	f.Add("orders", "", "10.0.0.1", 8080, "k", "v", 0, 0, 8)      // no size limit set
	f.Add("orders", "", "10.0.0.1", 8080, "k", "v", 0, -1, 8)
	f.Fuzz(func(t *testing.T, name, cluster, ip string, port int, mk, mv string, extra, maxSize, maxEntries int) {
		pairs := map[string]string{mk: mv}
		for i := range extra % 80 {
			pairs[fmt.Sprint("k", i)] = "v"
		}
		inst := model.Instance{
			Service: model.ServiceKey{Name: name}, Cluster: cluster, IP: ip, Port: port,
			Weight: 1, Healthy: true, Enabled: true, Ephemeral: true, Metadata: model.NewMetadata(pairs),
		}.WithDefaults()
		r := &Registry{}
		r.cfg.Limits = Limits{MaxMetadataSize: maxSize % 4096, MaxMetadataEntries: maxEntries % 128}
		ipv4 := ipOrder(inst.IP) != 0
		for _, held := range []bool{false, true} {
			if held && inst.Service.Validate() != nil {
				continue // validInstanceIn's contract: a held key passed Validate
			}
			got := r.validInstanceIn(&inst, held, ipv4 && held)
			want := refValidInstanceIn(&r.cfg.Limits, &inst, held, ipv4 && held)
			if fmt.Sprint(got) != fmt.Sprint(want) || errors.Is(got, ErrLimit) != errors.Is(want, ErrLimit) ||
				errors.Is(got, model.ErrInvalid) != errors.Is(want, model.ErrInvalid) {
				t.Fatalf("validInstanceIn(%+v, held %v) = %v, want %v", inst, held, got, want)
			}
		}
	})
}
