package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.uber.org/zap"
)

// etcdCluster is n embedded etcd members in this process, on loopback, each
// with an in-process client (v3client: direct calls into the server, no
// gRPC sockets), as an embedder of etcd would talk to it. Peer traffic
// between members is real TCP on 127.0.0.1; fsync is on (etcd's default).
type etcdCluster struct {
	members []*embed.Etcd
	clients []*clientv3.Client
}

// etcdTick is the Raft heartbeat tick of the members and etcdElection
// their election timeout, scaled down for loopback as Muster's node.Fast
// timings are (a 10 ms Dragonboat tick, elections after about 10 ticks);
// the election timeout is kept at 25 ticks so that a loaded 2-core machine
// does not flap leaders.
const (
	etcdTick     = 10
	etcdElection = 250
)

// startEtcd starts an n-member cluster with data under dir and waits until
// every member is ready (a leader elected, the member joined).
func startEtcd(ctx context.Context, n int, dir string) (*etcdCluster, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ { // a free port may be taken between picking and binding it
		c, err := tryStartEtcd(ctx, n, filepath.Join(dir, fmt.Sprintf("try%d", attempt)))
		if err == nil {
			return c, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func tryStartEtcd(ctx context.Context, n int, dir string) (*etcdCluster, error) {
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	peer := func(i int) url.URL { return url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i])} }
	client := func(i int) url.URL { return url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])} }
	var initial []string
	for i := range n {
		u := peer(i)
		initial = append(initial, fmt.Sprintf("e%d=%s", i+1, u.String()))
	}
	c := &etcdCluster{}
	for i := range n {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("e%d", i+1)
		cfg.Dir = filepath.Join(dir, cfg.Name)
		cfg.ListenPeerUrls = []url.URL{peer(i)}
		cfg.AdvertisePeerUrls = []url.URL{peer(i)}
		cfg.ListenClientUrls = []url.URL{client(i)}
		cfg.AdvertiseClientUrls = []url.URL{client(i)}
		cfg.InitialCluster = strings.Join(initial, ",")
		cfg.InitialClusterToken = "muster-bench"
		cfg.TickMs, cfg.ElectionMs = etcdTick, etcdElection
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		cfg.LogLevel = "error"
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("etcd member %d: %w", i+1, err)
		}
		c.members = append(c.members, e)
	}
	for i, e := range c.members {
		select {
		case <-e.Server.ReadyNotify():
		case err := <-e.Err():
			c.Close()
			return nil, fmt.Errorf("etcd member %d: %w", i+1, err)
		case <-time.After(30 * time.Second): // real time
			c.Close()
			return nil, fmt.Errorf("etcd member %d: not ready within 30 s", i+1)
		case <-ctx.Done():
			c.Close()
			return nil, ctx.Err()
		}
		c.clients = append(c.clients, v3client.New(e.Server))
	}
	return c, nil
}

// Close closes the clients and the members.
func (c *etcdCluster) Close() {
	for _, cl := range c.clients {
		_ = cl.Close()
	}
	for _, e := range c.members {
		e.Close()
	}
}

// leader returns the index of the member that leads, or 0.
func (c *etcdCluster) leader() int {
	for i, e := range c.members {
		if e.Server.Leader() == e.Server.MemberID() {
			return i
		}
	}
	return 0
}

// freePorts returns n distinct free TCP ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
