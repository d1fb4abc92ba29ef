package registry

import (
	"fmt"
	"testing"
	"time"

	"github.com/muster-io/muster/health"
)

// TestBeatLeaseSet: numbers are handed out densely and the last freed
// first, an expiry frees its number before the caller hears of it, a
// publication without a number has no lease, and check finds a number
// that names the wrong publication.
func TestBeatLeaseSet(t *testing.T) {
	var b beatLeaseSet
	t0 := time.Unix(1000, 0)
	to := health.Timeouts{Unhealthy: 15 * time.Second, Expire: 30 * time.Second}
	pis := make([]*pubInst, 5)
	for i := range pis {
		pis[i] = &pubInst{}
		if err := b.Put(pis[i], t0, to); err != nil {
			t.Fatal(err)
		}
		if pis[i].lease != uint32(i+1) {
			t.Fatalf("publication %d got number %d, want %d", i, pis[i].lease, i+1)
		}
	}
	if err := b.Put(&pubInst{}, t0, health.Timeouts{}); err == nil || b.Len() != 5 || len(b.byNum) != 6 {
		t.Fatalf("invalid timeouts: err %v, %d leases, %d numbers", err, b.Len(), len(b.byNum)-1)
	}
	b.Remove(pis[1])
	b.Remove(pis[3])
	if pis[1].lease != 0 || b.Remove(pis[1]) {
		t.Fatal("a removed lease's number was kept")
	}
	if _, ok := b.Get(pis[3]); ok {
		t.Fatal("a removed lease is still there")
	}
	fresh := &pubInst{}
	_ = b.Put(fresh, t0, to)
	if fresh.lease != 4 {
		t.Fatalf("new lease got number %d, want 4 (the last freed)", fresh.lease)
	}
	if found, _ := b.Touch(&pubInst{}, t0); found {
		t.Fatal("a publication without a number was touched")
	}
	var bad []string
	b.check(func(f string, args ...any) { bad = append(bad, fmt.Sprintf(f, args...)) })
	if len(bad) > 0 {
		t.Fatalf("check: %v", bad)
	}

	// Touch one, let the rest expire: each expired publication has lost
	// its number when fn sees it.
	if found, _ := b.Touch(pis[0], t0.Add(20*time.Second)); !found {
		t.Fatal("touch missed")
	}
	var expired []*pubInst
	b.ExpireAt(t0.Add(31*time.Second), func(pi *pubInst, ev health.Event, _ time.Time) {
		if ev == health.EventExpired {
			if pi.lease != 0 {
				t.Errorf("expired publication still numbered %d", pi.lease)
			}
			expired = append(expired, pi)
		}
	})
	if len(expired) != 3 || b.Len() != 1 || pis[0].lease == 0 {
		t.Fatalf("%d expired, %d left, kept one numbered %d", len(expired), b.Len(), pis[0].lease)
	}
	bad = nil
	b.check(func(f string, args ...any) { bad = append(bad, fmt.Sprintf(f, args...)) })
	if len(bad) > 0 {
		t.Fatalf("check after expiry: %v", bad)
	}
	pis[0].lease = 2 // corrupt: the number names another slot
	bad = nil
	b.check(func(f string, args ...any) { bad = append(bad, fmt.Sprintf(f, args...)) })
	if len(bad) == 0 {
		t.Fatal("check missed a number naming the wrong publication")
	}
}
