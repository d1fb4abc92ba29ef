package registry

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/muster-io/muster/internal/testutil"
	"github.com/muster-io/muster/model"
)

// sign returns -1, 0 or 1 as c is negative, zero or positive.
func sign(c int) int {
	switch {
	case c < 0:
		return -1
	case c > 0:
		return 1
	}
	return 0
}

// cmpKeys compares two ipOrder keys as strings.Compare compares strings.
func cmpKeys(a, b uint32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestIPOrderAgreesWithStrings: two plain IPv4 addresses compare by their
// ipOrder keys exactly as their strings compare, which is what lets
// findSlot search keys and keep the view's order.
func TestIPOrderAgreesWithStrings(t *testing.T) {
	testutil.Seeds(t, 0, 1, func(t *testing.T, seed uint64) {
		var ips []string
		// Every octet in every position, against a few others: the ranks.
		for v := range 256 {
			o := strconv.Itoa(v)
			ips = append(ips, o+".1.1.1", "1."+o+".1.1", "1.1."+o+".1", "1.1.1."+o, "10."+o+".0.1")
		}
		rng := rand.New(rand.NewPCG(seed, 0))
		octet := func() string {
			switch rng.IntN(4) {
			case 0:
				return strconv.Itoa(rng.IntN(10))
			case 1:
				return strconv.Itoa(10 + rng.IntN(90))
			default:
				return strconv.Itoa(100 + rng.IntN(156))
			}
		}
		for range 2000 {
			ips = append(ips, octet()+"."+octet()+"."+octet()+"."+octet())
		}
		for i, a := range ips {
			ka := ipOrder(a)
			if (ka == 0) != (a == "0.0.0.0") {
				t.Fatalf("ipOrder(%q) = %#x", a, ka)
			}
			if ka == 0 {
				continue
			}
			for _, b := range ips[max(0, i-300) : i+1] {
				kb := ipOrder(b)
				if kb == 0 {
					continue
				}
				if got, want := cmpKeys(ka, kb), sign(strings.Compare(a, b)); got != want {
					t.Fatalf("%q vs %q: keys %#x, %#x compare %d, strings %d", a, b, ka, kb, got, want)
				}
			}
		}
	})
}

// TestIPOrderOnlyCanonical: only a canonical dotted quad has a key (any
// other form would give two strings one key), and 0.0.0.0 has none.
func TestIPOrderOnlyCanonical(t *testing.T) {
	for _, ip := range []string{
		"", "1.2.3", "1.2.3.4.5", "01.2.3.4", "1.02.3.4", "1.2.3.04", "1.2.3.00", "256.1.1.1", "1.2.3.256",
		"1.2.3.4 ", " 1.2.3.4", "1..2.3", "1.2.3.", ".1.2.3", "1.2.3.4.", "1.2.3.1000", "::1", "::ffff:1.2.3.4",
		"a.b.c.d", "host.local", "1.2.3.-4", "1.2.3.+4", "0.0.0.0", "1111.1.1.1", "1.2.3.4x", "1.2.3.4/8",
	} {
		if k := ipOrder(ip); k != 0 {
			t.Errorf("ipOrder(%q) = %#x, want 0", ip, k)
		}
	}
	for _, ip := range []string{"1.1.1.1", "0.0.0.1", "255.255.255.255", "10.0.0.1", "192.168.100.20", "100.10.1.0"} {
		if ipOrder(ip) == 0 {
			t.Errorf("ipOrder(%q) = 0", ip)
		}
	}
}

// FuzzIPOrder: a string with a key is a valid, specified IPv4 address in
// its canonical form, and its key is that of the address's octets.
func FuzzIPOrder(f *testing.F) {
	for _, s := range []string{"1.2.3.4", "10.0.0.1", "255.255.255.255", "01.2.3.4", "0.0.0.0", "1.2.3.4.5", "::1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k := ipOrder(s)
		if k == 0 {
			if a, err := netip.ParseAddr(s); err == nil && a.Is4() && a.String() == s && !a.IsUnspecified() {
				t.Fatalf("canonical %q has no key", s)
			}
			return
		}
		a, err := netip.ParseAddr(s)
		if err != nil || !a.Is4() || a.String() != s || a.IsUnspecified() {
			t.Fatalf("ipOrder(%q) = %#x, but it is not a canonical IPv4 address (%v)", s, k, err)
		}
		if err := model.NewInstance(model.ServiceKey{Name: "s"}, s, 1).WithDefaults().Validate(model.Limits{}); err != nil {
			t.Fatalf("%q has a key, but the model refuses it: %v", s, err)
		}
		b := a.As4()
		want := uint32(octetRank[b[0]])<<24 | uint32(octetRank[b[1]])<<16 | uint32(octetRank[b[2]])<<8 | uint32(octetRank[b[3]])
		if k != want {
			t.Fatalf("ipOrder(%q) = %#x, want %#x", s, k, want)
		}
	})
}

// TestFindSlotKeys: a service's slots under random insertions and
// deletions, of IPv4 addresses, IPv6 ones and host names, in one cluster or
// several: findSlot (keyed while one cluster holds every slot) and
// findSlotOf answer as a search that compares strings does, and the keys
// stay in step with the slots.
func TestFindSlotKeys(t *testing.T) {
	testutil.Seeds(t, 0, 1, func(t *testing.T, seed uint64) {
		rng := rand.New(rand.NewPCG(seed, 1))
		hosts := func() string {
			switch rng.IntN(8) {
			case 0:
				return fmt.Sprintf("fd00::%x", rng.IntN(50))
			case 1:
				return fmt.Sprintf("host-%d.local", rng.IntN(50))
			default:
				return fmt.Sprintf("10.%d.%d.%d", rng.IntN(3), rng.IntN(12), rng.IntN(256))
			}
		}
		few := func() string { // few IPs: slots of one IP on several ports
			if rng.IntN(6) == 0 {
				return fmt.Sprintf("fd00::%x", rng.IntN(4))
			}
			return fmt.Sprintf("10.0.0.%d", rng.IntN(12))
		}
		for round := range 40 {
			ips := hosts
			if round%4 == 3 {
				ips = few
			}
			clusters := []string{model.DefaultCluster, "a", "zz"}[:1+round%3]
			s := &service{key: model.ServiceKey{Name: "svc"}.WithDefaults(), ephemeral: true}
			naive := func(cluster, ip string, port int) (int, bool) {
				i, found := slices.BinarySearchFunc(s.slots, 0, func(sl *slot, _ int) int {
					return compareSlot(sl.current(), cluster, ip, 0, port)
				})
				return i, found
			}
			for step := range 600 {
				cluster, ip, port := clusters[rng.IntN(len(clusters))], ips(), 1+rng.IntN(3)
				i, found := s.findSlot(cluster, ip, port)
				if wi, wfound := naive(cluster, ip, port); i != wi || found != wfound {
					t.Fatalf("round %d step %d: findSlot(%s, %s, %d) = %d, %v; want %d, %v", round, step, cluster, ip, port, i, found, wi, wfound)
				}
				if !found && rng.IntN(3) > 0 {
					inst := model.NewInstance(s.key, ip, port)
					inst.Cluster = cluster
					b := new(slotBlock)
					sl, pi := b.init(s, &publisher{kind: pubSession, id: "p"}, &inst, ipOrder(ip))
					s.insertSlot(i, sl, pi.inst)
				} else if found {
					sl := s.slots[i]
					last := sl.current()
					if j, ok := s.findSlotOf(sl, last); j != i || !ok {
						t.Fatalf("round %d step %d: findSlotOf = %d, %v; want %d", round, step, j, ok, i)
					}
					sl.head = nil // dead, as dropSlotIfDead finds it
					if j, ok := s.findSlotOf(sl, last); j != i || !ok {
						t.Fatalf("round %d step %d: findSlotOf of a dead slot = %d, %v; want %d", round, step, j, ok, i)
					}
					s.deleteSlot(i, last)
				}
				otherCl := 0
				for j, sl := range s.slots {
					if s.keys[j] != slotKey(sl.current()) {
						t.Fatalf("round %d step %d: key %d out of step", round, step, j)
					}
					if sl.current().cluster != s.cl {
						otherCl++
					}
					if j > 0 && compareSlot(s.slots[j-1].current(), sl.current().cluster, sl.current().ip, 0, int(sl.current().port)) >= 0 {
						t.Fatalf("round %d step %d: slots %d, %d out of order", round, step, j-1, j)
					}
				}
				if len(s.keys) != len(s.slots) || otherCl != s.otherCl {
					t.Fatalf("round %d step %d: %d keys, %d slots, %d of other clusters counted %d", round, step, len(s.keys), len(s.slots), otherCl, s.otherCl)
				}
			}
		}
	})
}

// A service whose first slot was of another cluster than the rest gets
// the keyed search back once that cluster's slots are gone: cl names the
// remaining cluster and no slot counts as of another.
func TestFindSlotKeysAfterFirstClusterLeaves(t *testing.T) {
	s := &service{key: model.ServiceKey{Name: "svc"}.WithDefaults(), ephemeral: true}
	add := func(cluster, ip string) {
		t.Helper()
		i, found := s.findSlot(cluster, ip, 80)
		if found {
			t.Fatalf("%s %s already there", cluster, ip)
		}
		inst := model.NewInstance(s.key, ip, 80)
		inst.Cluster = cluster
		sl, pi := new(slotBlock).init(s, &publisher{kind: pubSession, id: "p"}, &inst, ipOrder(ip))
		s.insertSlot(i, sl, pi.inst)
	}
	add("canary", "10.0.0.1")
	for n := range 20 {
		add(model.DefaultCluster, fmt.Sprintf("10.1.0.%d", n))
	}
	add("zz", "10.2.0.1")
	if s.cl != "canary" || s.otherCl != 21 {
		t.Fatalf("cl %q, %d of others; want canary, 21", s.cl, s.otherCl)
	}
	remove := func(cluster, ip string) {
		t.Helper()
		i, found := s.findSlot(cluster, ip, 80)
		if !found {
			t.Fatalf("%s %s not found", cluster, ip)
		}
		last := s.slots[i].current()
		s.slots[i].head = nil // dead, as dropSlotIfDead finds it
		s.deleteSlot(i, last)
	}
	remove("canary", "10.0.0.1")
	if s.cl != "canary" || s.otherCl != 21 { // two clusters left: no one cl
		t.Fatalf("cl %q, %d of others; want canary, 21 while two clusters are left", s.cl, s.otherCl)
	}
	remove("zz", "10.2.0.1")
	if s.cl != model.DefaultCluster || s.otherCl != 0 {
		t.Fatalf("cl %q, %d of others; want %s, 0", s.cl, s.otherCl, model.DefaultCluster)
	}
	for n := range 20 {
		ip := fmt.Sprintf("10.1.0.%d", n)
		if i, found := s.findSlot(model.DefaultCluster, ip, 80); !found || s.slots[i].current().ip != ip {
			t.Fatalf("%s: %d, %v", ip, i, found)
		}
	}
}
