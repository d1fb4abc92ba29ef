package registry_test

import (
	"crypto/sha256"
	"encoding/base64"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/muster-io/muster/distro"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
	"github.com/muster-io/muster/transport"
)

// instRecordKey is the record key of a session's instance (delta.go's
// format), for a test that forges one.
func instRecordKey(sid string, in model.Instance) string {
	in = in.WithDefaults()
	b := []byte(in.Service.Namespace + "\x00" + in.Service.Group + "\x00" + in.Service.Name + "\x00" + in.Cluster + "\x00" + in.IP + "\x00" + strconv.Itoa(in.Port))
	s := sha256.Sum256(b)
	enc := base64.NewEncoding("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._").WithPadding(base64.NoPadding)
	return "s/" + sid + "/" + enc.EncodeToString(s[:12])
}

// A member that writes an instance record of another node's session (a
// bug, or an attack) is refused everywhere: the session stays open on its
// node, and every node goes on serving all of its instances. (Before, its
// owner closed the session quietly and the peers kept its other instances
// for good.)
func TestForeignSessionRecordRefused(t *testing.T) {
	c := registrytest.NewCluster(t, clusterOpts())
	a, b := c.Node(0), c.Node(1)
	sess, err := a.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	i1, i2 := inst("ghost", 1), inst("ghost", 2)
	mustRegister(t, sess, i1, i2)
	c.Settle()
	c.Partition([]int{0}, []int{1, 2})
	c.Settle()
	body, err := model.Marshal(&struct {
		Instances []model.Instance `msgpack:"i"`
	}{Instances: []model.Instance{i1.WithDefaults()}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Replicator().Put(distro.KindSession, instRecordKey(sess.ID(), i1), body); err != nil {
		t.Fatalf("the forged put: %v", err)
	}
	c.Heal()
	c.Settle()
	c.Advance(30 * time.Second)
	select {
	case <-sess.Done():
		t.Fatal("the session was ended by another node's record")
	default:
	}
	want := []string{i1.IP, i2.IP}
	for _, n := range c.Nodes() {
		if got := ipsOn(t, n, "ghost"); !slices.Equal(got, want) {
			t.Errorf("%s serves %v, want %v", n.ID, got, want)
		}
	}
}

// registry.Distro's func can build replicators for several registries (a
// restart in the same process): it never writes into the config it was
// given.
func TestDistroFuncReuse(t *testing.T) {
	net := &transport.MemNetwork{}
	tr, err := net.Node("a")
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	dc := distro.DefaultConfig()
	dc.Transport, dc.Membership = tr, distro.NewStatic(distro.Member{ID: "a"})
	f := registry.Distro(dc)
	for i := range 2 {
		cfg := registry.DefaultConfig()
		cfg.HealthChecks, cfg.NodeID, cfg.Replicator, cfg.Transport = nil, "a", f, tr
		r, err := registry.New(cfg)
		if err != nil {
			t.Fatalf("New #%d with the same ReplicatorFunc: %v", i+1, err)
		}
		r.Close()
	}
}

func TestHistoryEventsBounded(t *testing.T) {
	cfg := registry.DefaultConfig()
	cfg.HistoryEvents = registry.MaxHistoryEvents + 1
	if _, err := registry.New(cfg); err == nil {
		t.Fatal("a journal over MaxHistoryEvents was accepted")
	}
}
