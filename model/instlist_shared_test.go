package model

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
	"unsafe"

	"github.com/muster-io/muster/internal/testutil"
)

// within reports whether s's bytes are b's (s is a window on b).
func within(s string, b []byte) bool {
	p, base := uintptr(unsafe.Pointer(unsafe.StringData(s))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p >= base && p+uintptr(len(s)) <= base+uintptr(len(b))
}

// TestUnmarshalInstanceListShared: the Shared form decodes what
// UnmarshalInstanceList decodes, every string it read a window on the
// input (but for the normalized defaults, which are the constants), and
// refuses what it refuses.
func TestUnmarshalInstanceListShared(t *testing.T) {
	testutil.Seeds(t, 0, 1, func(t *testing.T, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 3))
		for range 300 {
			l := randomInstanceList(r)
			b := l.AppendMsgpack(nil)
			want, _, err := UnmarshalInstanceList(b, len(l.Instances))
			if err != nil {
				t.Fatal(err)
			}
			got, n, err := UnmarshalInstanceListShared(b, len(l.Instances))
			if err != nil || n != len(l.Instances) || !reflect.DeepEqual(got, want) {
				t.Fatalf("Shared: %d instances, %v\n%+v\nwant %+v", n, err, got, want)
			}
			shared := func(s string) bool {
				switch s {
				case "", DefaultNamespace, DefaultGroup, DefaultCluster:
					return true
				}
				return within(s, b)
			}
			for _, in := range got.Instances {
				strs := []string{in.ID, in.Service.Namespace, in.Service.Group, in.Service.Name, in.Cluster, in.IP}
				for k, v := range in.Metadata.All() {
					strs = append(strs, k, v)
				}
				for _, s := range strs {
					if !shared(s) {
						t.Fatalf("%q is a copy, not a window on the input", s)
					}
				}
			}
			if len(l.Instances) > 0 {
				if _, n, err := UnmarshalInstanceListShared(b, len(l.Instances)-1); !errors.Is(err, ErrTooLarge) || n != len(l.Instances) {
					t.Fatalf("a list past the cap: %d, %v", n, err)
				}
				if _, _, err := UnmarshalInstanceListShared(b[:len(b)-1], len(l.Instances)); err == nil {
					t.Fatal("a truncated list decoded")
				}
			}
		}
	})
}
