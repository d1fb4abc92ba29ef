package registry_test

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/registrytest"
)

// A persistent instance in a TCP-checked cluster goes unhealthy when its
// listener closes and healthy again when it reopens; a watcher sees both.
func TestActiveCheckFlipsPersistentInstance(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().(*net.TCPAddr)
	go acceptAll(l)

	cfg := registry.DefaultConfig() // active checks on
	reg := registrytest.New(t, registrytest.Options{Config: &cfg})
	in := model.NewInstance(svcKey("db"), "127.0.0.1", addr.Port)
	in.Ephemeral = false
	mustRegister(t, reg, in)
	w, err := reg.Watch(ctx, model.Query{Service: svcKey("db")})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	next := func() *model.ServiceView {
		t.Helper()
		u, err := w.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return u.View
	}
	if v := next(); len(v.Instances) != 1 || !v.Instances[0].Healthy {
		t.Fatalf("first view: %v", v.Instances)
	}

	healthy := func() bool {
		v, _ := reg.Query(ctx, model.Query{Service: svcKey("db")})
		return len(v.Instances) == 1 && v.RealHealthy(0)
	}
	reg.Advance(0)
	if !healthy() {
		t.Fatal("unhealthy while its listener accepts")
	}

	// The listener closes: connections are refused, a definite failure,
	// so the next check flips it.
	l.Close()
	for i := 0; healthy(); i++ {
		if i > 10 {
			t.Fatal("still healthy 10 checks after the listener closed")
		}
		reg.Advance(7 * time.Second)
	}
	if v := next(); v.RealHealthy(0) {
		t.Fatalf("the watcher did not see the instance go unhealthy")
	}

	// It reopens on the same port: healthy after 3 good checks.
	l2, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(addr.Port)))
	if err != nil {
		t.Skipf("port %d taken meanwhile: %v", addr.Port, err)
	}
	defer l2.Close()
	go acceptAll(l2)
	for i := 0; !healthy(); i++ {
		if i > 10 {
			t.Fatal("still unhealthy 10 checks after the listener reopened")
		}
		reg.Advance(7 * time.Second)
	}
	for {
		if v := next(); v.RealHealthy(0) {
			break
		}
	}
}

func acceptAll(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}
