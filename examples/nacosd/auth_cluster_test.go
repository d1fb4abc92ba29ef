package main

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	v1clients "github.com/nacos-group/nacos-sdk-go/clients"
	v1constant "github.com/nacos-group/nacos-sdk-go/common/constant"
	"github.com/nacos-group/nacos-sdk-go/v2/common/constant"
	"github.com/nacos-group/nacos-sdk-go/v2/model"
	"github.com/nacos-group/nacos-sdk-go/v2/vo"
	v1vo "github.com/nacos-group/nacos-sdk-go/vo"
)

// waitAdmin waits until the admin, created at start by every node of a
// cluster (one creation wins, through Raft), logs in through s and may
// manage users there. A loaded machine can take longer than login's
// 10 s to elect a Raft leader and commit the creation.
func waitAdmin(t *testing.T, s *Server) {
	t.Helper()
	start := time.Now()
	eventually(t, 60*time.Second, "the admin logs in and manages users", func() bool {
		resp, err := http.PostForm("http://"+s.HTTPAddr()+"/nacos/v1/auth/login", url.Values{"username": {"nacos"}, "password": {testAdminPassword}})
		if err != nil {
			return false
		}
		var m map[string]any
		err = jsonDecode(resp, &m)
		_ = resp.Body.Close()
		tok, _ := m["accessToken"].(string)
		if err != nil || resp.StatusCode != 200 || tok == "" {
			return false
		}
		st, _ := call(t, s, "GET", "/nacos/v1/auth/users", as(tok, nil))
		return st == 200
	})
	t.Logf("the admin was ready %v after the cluster", time.Since(start).Round(time.Millisecond))
}

// callRaft is call for a write that goes through Raft: while the cluster
// has no leader (elections on a loaded machine), it asks again; a retry
// answered "already exist" or "not found" had committed before, and
// counts as 200.
func callRaft(t *testing.T, s *Server, method, path string, form url.Values) (int, string) {
	t.Helper()
	var st int
	var body string
	retried := false
	eventually(t, 30*time.Second, method+" "+path+" with a Raft leader", func() bool {
		st, body = call(t, s, method, path, form)
		if st == http.StatusInternalServerError && strings.Contains(body, "no leader") {
			retried = true
			return false
		}
		if retried && st == http.StatusBadRequest && (strings.Contains(body, "already") || strings.Contains(body, "not found")) {
			st = http.StatusOK
		}
		return true
	})
	return st, body
}

// TestAuthCluster: authentication on a 3-node cluster whose nodes share
// one signing key. Users, roles and permissions made through n1 are
// stored in Raft, so every node knows them: a user made through n1 logs
// in through n2 and n3; a token issued by one node is accepted by the
// others; a read-only user reads through every node and is refused every
// write through every node (HTTP, gRPC, and the v2 SDK with its username
// and password); a user deleted or a permission revoked through one node
// stops working on the others. The real SDKs, configured with a username
// and password, work against nodes other than the one that made their
// user.
func TestAuthCluster(t *testing.T) {
	skipUnderRace(t)
	key := testKey(t)
	nodes := startCluster(t, 3, withAuth(key))
	n1 := nodes[0]

	// The users, made through n1 (tenants logs them in through n1).
	waitAdmin(t, n1)
	admin, aliceN1, _, readerN1 := tenants(t, n1)

	// Replicated users: each logs in through every node.
	tokens := map[string][]string{}
	for _, s := range nodes {
		for _, u := range [][2]string{{"alice", "a-pass"}, {"reader", "r-pass"}, {"bob", "b-pass"}} {
			tokens[u[0]] = append(tokens[u[0]], login(t, s.HTTPAddr(), u[0], u[1]))
		}
	}

	// A token from one node is accepted by every node: alice's token of
	// node i writes (a persistent instance, in Raft) through node j, and the admin's token of n1 lists the
	// users everywhere.
	for i := range nodes {
		for j, s := range nodes {
			form := url.Values{"serviceName": {"auth-x"}, "ip": {"10.5.0." + strconv.Itoa(1+i*3+j)}, "port": {"80"}, "ephemeral": {"false"}}
			if st, body := callRaft(t, s, "POST", "/nacos/v1/ns/instance", as(tokens["alice"][i], form)); st != 200 {
				t.Fatalf("alice's token from n%d refused by n%d: %d %s", i+1, j+1, st, body)
			}
		}
	}
	for j, s := range nodes {
		if st, body := call(t, s, "GET", "/nacos/v1/auth/users", as(admin, nil)); st != 200 {
			t.Fatalf("n1's admin token refused by n%d: %d %s", j+1, st, body)
		}
	}
	// A token signed with another key is refused by every node.
	foreign := newAuth(AuthConfig{Enabled: true, Key: testKey(t)}, nil, testLogger(t)).newToken("nacos")
	for j, s := range nodes {
		if st, _ := call(t, s, "GET", "/nacos/v1/auth/users", as(foreign, nil)); st != 403 {
			t.Fatalf("n%d accepts a token of another key: %d", j+1, st)
		}
	}

	// The read-only user: reads through every node, every write refused
	// through every node, whichever node issued its token.
	eventually(t, 10*time.Second, "auth-x replicates with its 9 instances", func() bool {
		for _, s := range nodes {
			if len(served(t, s, "auth-x")) != 9 {
				return false
			}
		}
		return true
	})
	for j, s := range nodes {
		tok := tokens["reader"][(j+1)%3] // issued by another node
		if st, body := call(t, s, "GET", "/nacos/v1/ns/instance/list", as(tok, url.Values{"serviceName": {"auth-x"}})); st != 200 {
			t.Fatalf("the reader cannot read through n%d: %d %s", j+1, st, body)
		}
		for _, w := range []struct{ method, path string }{
			{"POST", "/nacos/v1/ns/instance"}, {"PUT", "/nacos/v1/ns/instance"}, {"DELETE", "/nacos/v1/ns/instance"},
			{"POST", "/nacos/v1/ns/service"}, {"DELETE", "/nacos/v1/ns/service"},
		} {
			form := url.Values{"serviceName": {"auth-x"}, "ip": {"10.5.0.1"}, "port": {"80"}, "ephemeral": {"false"}, "weight": {"0"}}
			if st, body := call(t, s, w.method, w.path, as(tok, form)); st != 403 || jsonOf(t, body)["status"] != float64(403) {
				t.Errorf("the reader could %s %s through n%d: %d %s", w.method, w.path, j+1, st, body)
			}
		}
		wc := dialWire(t, s.GRPCAddr(), true)
		var r response
		if typ := wc.callWith(map[string]string{"accessToken": tok}, "InstanceRequest",
			map[string]any{"serviceName": "auth-x", "type": "registerInstance", "instance": inst("10.5.0.1", 80)}, &r); typ != "ErrorResponse" || r.ErrorCode != codeNoRight {
			t.Errorf("the reader registered over gRPC through n%d: %s %+v", j+1, typ, r)
		}
		// The v2 SDK with the reader's username and password, on this
		// node alone: it logs in and reads, and cannot register.
		c := newClientWith(t, []constant.ClientOption{constant.WithUsername("reader"), constant.WithPassword("r-pass")}, s.HTTPAddr())
		hs, err := c.SelectAllInstances(vo.SelectAllInstancesParam{ServiceName: "auth-x"})
		if err != nil || len(hs) != 9 {
			t.Fatalf("the reader's v2 SDK through n%d reads %d instances: %v", j+1, len(hs), err)
		}
		if ok, err := c.RegisterInstance(vo.RegisterInstanceParam{ServiceName: "auth-x", Ip: "10.5.1.1", Port: 80, Weight: 1, Enable: true, Healthy: true, Ephemeral: true}); err == nil && ok {
			t.Errorf("the reader's v2 SDK registered through n%d", j+1)
		}
		if ok, err := c.RegisterInstance(vo.RegisterInstanceParam{ServiceName: "auth-x", Ip: "10.5.1.1", Port: 80, Weight: 1, Enable: true, Healthy: true, Ephemeral: false}); err == nil && ok {
			t.Errorf("the reader's v2 SDK registered a persistent instance through n%d", j+1)
		}
	}
	for j, s := range nodes {
		if n := len(served(t, s, "auth-x")); n != 9 {
			t.Fatalf("n%d serves %d instances of auth-x after the reader's writes, want 9", j+1, n)
		}
	}

	// The SDKs as alice, whose user was made through n1: the v2 SDK
	// registers through n2 and subscribes through n3; the v1 SDK
	// registers through n3.
	pub := newClientWith(t, []constant.ClientOption{constant.WithUsername("alice"), constant.WithPassword("a-pass")}, nodes[1].HTTPAddr())
	sub := newClientWith(t, []constant.ClientOption{constant.WithUsername("alice"), constant.WithPassword("a-pass")}, nodes[2].HTTPAddr())
	pushed := make(chan int, 16)
	if err := sub.Subscribe(&vo.SubscribeParam{ServiceName: "auth-sub", SubscribeCallback: func(hs []model.Instance, err error) {
		pushed <- len(hs)
	}}); err != nil {
		t.Fatal(err)
	}
	dir := clientDir(t)
	v1, err := v1clients.NewNamingClient(v1vo.NacosClientParam{
		ClientConfig: &v1constant.ClientConfig{TimeoutMs: 3000, NotLoadCacheAtStart: true, LogDir: dir, CacheDir: dir, LogLevel: "error",
			Username: "alice", Password: "a-pass"},
		ServerConfigs: []v1constant.ServerConfig{*v1constant.NewServerConfig("127.0.0.1", httpPort(t, nodes[2].HTTPAddr()))},
	})
	if err != nil {
		t.Fatal(err)
	}
	register(t, pub, "auth-sub", "", "10.5.2.1", 80, 1)
	v1Register(t, v1, "auth-sub", "", "10.5.2.2", 80, 1, nil)
	deadline := time.After(10 * time.Second)
	for n := 0; n != 2; {
		select {
		case n = <-pushed:
		case <-deadline:
			t.Fatalf("the v2 subscriber through n3 saw %d instances, want alice's 2 (one through n2, one through n3)", n)
		}
	}

	// Changes through one node reach the others: the reader deleted and
	// alice's permission revoked through n2 (with n1's admin token), both
	// refused by n1 and n3 within the refresh.
	for _, c := range []struct{ method, path string }{{"DELETE", "/nacos/v1/auth/users"}, {"DELETE", "/nacos/v1/auth/permissions"}} {
		form := url.Values{"username": {"reader"}}
		if c.path == "/nacos/v1/auth/permissions" {
			form = url.Values{"role": {"team-a"}, "resource": {"public:*:*"}, "action": {"rw"}}
		}
		if st, body := callRaft(t, nodes[1], c.method, c.path, as(admin, form)); st != 200 {
			t.Fatalf("%s %s through n2: %d %s", c.method, c.path, st, body)
		}
	}
	for j, s := range nodes {
		eventually(t, 10*time.Second, "n"+strconv.Itoa(j+1)+" refuses the deleted reader and alice's revoked writes", func() bool {
			st1, _ := call(t, s, "GET", "/nacos/v1/ns/instance/list", as(readerN1, url.Values{"serviceName": {"auth-x"}}))
			st2, _ := call(t, s, "POST", "/nacos/v1/ns/instance", as(aliceN1, url.Values{"serviceName": {"auth-x"}, "ip": {"10.5.3.1"}, "port": {"80"}}))
			return st1 == 403 && st2 == 403
		})
		if st, _ := call(t, s, "POST", "/nacos/v1/auth/login", url.Values{"username": {"reader"}, "password": {"r-pass"}}); st != 403 {
			t.Fatalf("the deleted reader logs in through n%d: %d", j+1, st)
		}
	}
}

// TestAuthClusterFailover: the v2 SDK with alice's username and password
// knows the three nodes; the node it is connected to is killed. It
// reconnects to a survivor with the token the cluster issued it and
// registers there again (the survivors accept it: one key), so its
// instance is served once the dead node's records are dropped, and it
// still writes.
func TestAuthClusterFailover(t *testing.T) {
	skipUnderRace(t)
	nodes := startCluster(t, 3, withAuth(testKey(t)))
	waitAdmin(t, nodes[0])
	tenants(t, nodes[0])
	var addrs []string
	for _, s := range nodes {
		login(t, s.HTTPAddr(), "alice", "a-pass") // the users reached every node
		addrs = append(addrs, s.HTTPAddr())
	}
	c := newClientWith(t, []constant.ClientOption{constant.WithUsername("alice"), constant.WithPassword("a-pass")}, addrs...)
	register(t, c, "auth-ha", "", "10.5.4.1", 80, 1)
	victim := -1
	eventually(t, 10*time.Second, "the client's connection is found", func() bool {
		for i, s := range nodes {
			if len(s.api.snapshot()) == 1 {
				victim = i
				return true
			}
		}
		return false
	})
	nodes[victim].Kill()
	eventually(t, 30*time.Second, "the client reconnects to a survivor", func() bool {
		for i, s := range nodes {
			if i != victim && len(s.api.snapshot()) == 1 {
				return true
			}
		}
		return false
	})
	for i, s := range nodes {
		if i == victim {
			continue
		}
		waitRecordsDropped(t, s, nodes[victim].cfg.NodeID)
		eventually(t, 10*time.Second, "the re-registered instance on a survivor", func() bool { return len(served(t, s, "auth-ha")) == 1 })
	}
	register(t, c, "auth-ha-after", "", "10.5.4.2", 80, 1)
	if n := len(served(t, nodes[(victim+1)%3], "auth-ha-after")); n != 1 {
		t.Fatalf("a registration after the failover: %d instances", n)
	}
}
