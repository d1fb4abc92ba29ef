package main

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nacos-group/nacos-sdk-go/v2/model"
	"github.com/nacos-group/nacos-sdk-go/v2/vo"
)

// TestPersistentTCPCheck: a persistent instance's TCP check turns it
// unhealthy when its listener stops and healthy again when it is back, and
// a subscriber sees both.
func TestPersistentTCPCheck(t *testing.T) {
	s := startServer(t, nil)
	listen := func(addr string) net.Listener {
		t.Helper()
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_ = c.Close()
			}
		}()
		return l
	}
	steady := listen("127.0.0.1:0")
	defer steady.Close()
	flappy := listen("127.0.0.1:0")
	flappyAddr := flappy.Addr().String()
	port := func(l string) uint64 {
		_, p, _ := net.SplitHostPort(l)
		n, _ := strconv.ParseUint(p, 10, 64)
		return n
	}
	c := newClient(t, s.HTTPAddr())
	// Two instances, so that one unhealthy instance (1 of 2) stays below
	// the protection threshold and is served as unhealthy.
	for _, a := range []string{steady.Addr().String(), flappyAddr} {
		ok, err := c.RegisterInstance(vo.RegisterInstanceParam{ServiceName: "checked", Ip: "127.0.0.1", Port: port(a), Weight: 1,
			Enable: true, Healthy: true, Ephemeral: false})
		if err != nil || !ok {
			t.Fatalf("persistent register: %v %v", ok, err)
		}
	}
	health := make(chan bool, 64)
	if err := c.Subscribe(&vo.SubscribeParam{ServiceName: "checked", SubscribeCallback: func(hs []model.Instance, err error) {
		for _, h := range hs {
			if h.Port == port(flappyAddr) {
				health <- h.Healthy
			}
		}
	}}); err != nil {
		t.Fatal(err)
	}
	await := func(want bool) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case h := <-health:
				if h == want {
					return
				}
			case <-deadline:
				t.Fatalf("the subscriber never saw the instance healthy=%v", want)
			}
		}
	}
	await(true)
	_ = flappy.Close()
	await(false)
	for _, in := range served(t, s, "checked") {
		if in.Port == int(port(flappyAddr)) && in.Healthy {
			t.Fatalf("the server holds %+v as healthy", in)
		}
	}
	flappy = listen(flappyAddr)
	defer flappy.Close()
	await(true)
}
