package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/muster-io/muster/registry/console"
)

// consoleServer serves the web console (registry/console) over the running
// nodes while the demo runs: the first running node is the one it reads and
// writes through, the others add their views to the cluster page and the
// timelines. It has no authentication, so it listens on loopback only.
type consoleServer struct {
	c   *console.Console
	l   net.Listener
	srv *http.Server
}

func serveConsole(c *cluster, addr string) (*consoleServer, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("-console %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("-console %q: the demo's console has no authentication and serves on a loopback address only", addr)
	}
	cfg := console.DefaultConfig()
	cfg.Nodes = func() []console.Node {
		var out []console.Node
		for _, n := range c.live() {
			out = append(out, console.Node{Registry: n.reg, Raft: n.n.Raft()})
		}
		return out
	}
	cfg.SampleInterval = 500 * time.Millisecond
	con, err := console.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := con.Start(context.Background()); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		_ = con.Close()
		return nil, err
	}
	s := &consoleServer{c: con, l: l, srv: &http.Server{Handler: con, ReadHeaderTimeout: 5 * time.Second}}
	go func() { _ = s.srv.Serve(l) }()
	return s, nil
}

func (s *consoleServer) url() string { return "http://" + s.l.Addr().String() + "/" }

func (s *consoleServer) close() {
	_ = s.c.Close() // ends the event streams, which Shutdown would wait for
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
}
