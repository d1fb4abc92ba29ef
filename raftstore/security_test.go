package raftstore

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
	sm "github.com/lni/dragonboat/v4/statemachine"
	"github.com/muster-io/muster/transport"
)

// musterTCPCluster starts replicas r1, r2, r3 with Raft over Muster's TCP
// transport on loopback, with the test secret.
func musterTCPCluster(t *testing.T) (*cluster, *tcpNet, map[string]transport.Transport) {
	t.Helper()
	net := newTCPNet(t)
	trs := map[string]transport.Transport{}
	for _, id := range []string{"r1", "r2", "r3"} {
		trs[id] = net.add(id, testSecret)
	}
	c := newClusterAt(t, map[uint64]string{1: "r1", 2: "r2", 3: "r3"}, func(cfg *Config) {
		cfg.Transport = trs[cfg.RaftAddress]
		cfg.Insecure = false
		// Elections come and go under the race detector beside other
		// packages' tests: a write waits one out rather than failing.
		cfg.ProposeTimeout = 10 * time.Second
	})
	return c, net, trs
}

// raftBatch is a batch as replica `from` on node src would send it to
// replica 1 of shard 1.
func raftBatch(src string, from uint64, typ pb.MessageType) pb.MessageBatch {
	return pb.MessageBatch{DeploymentId: testDeployment, BinVer: raftio.TransportBinVersion, SourceAddress: src,
		Requests: []pb.Message{{Type: typ, ShardID: 1, From: from, To: 1}}}
}

// raftChunk is the first chunk of a snapshot as replica `from` would
// stream it to replica 1 of shard 1.
func raftChunk(from uint64) pb.Chunk {
	return pb.Chunk{DeploymentId: testDeployment, BinVer: raftio.TransportBinVersion, ShardID: 1, ReplicaID: 1,
		From: from, Index: 900, Term: 3, Filepath: snapshotFilename(900), Data: []byte("not a snapshot"), ChunkSize: 14,
		Membership: pb.Membership{Addresses: map[uint64]string{1: "r1", 2: "r2", 3: "r3"}}}
}

func mustMarshal(t testing.TB, v interface{ Marshal() ([]byte, error) }) []byte {
	t.Helper()
	b, err := v.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Every malformed or misaddressed Raft batch and snapshot chunk that
// reaches a node over Muster's TCP transport (a member's connection or
// another holder of the secret) is dropped and counted under its rule, the
// sender is told, and the cluster keeps serving. Before the inbound checks
// the first of these (To = 0) made Dragonboat panic and the process exit.
func TestInboundAttacksOverTCP(t *testing.T) {
	c, net, trs := musterTCPCluster(t)
	evil := net.add("evil", testSecret) // holds the secret, is no member
	member := trs["r2"]                 // a member's own authenticated connection

	batch := func(mut func(*pb.MessageBatch)) []byte {
		b := raftBatch("r2", 2, pb.Heartbeat)
		mut(&b)
		return mustMarshal(t, &b)
	}
	chunk := func(mut func(*pb.Chunk)) []byte {
		ch := raftChunk(2)
		mut(&ch)
		return mustMarshal(t, &ch)
	}
	evilBatch := raftBatch("evil", 2, pb.RequestVote)
	evilChunk := raftChunk(2)
	msgs := transport.Kind(KindRaftMessages)
	chunks := transport.Kind(KindRaftChunk)
	for _, a := range []struct {
		name string
		from transport.Transport
		kind transport.Kind
		body []byte
		rule func(InboundStats) uint64
	}{
		{"to=0", member, msgs, batch(func(b *pb.MessageBatch) { b.Requests[0].To = 0 }), func(s InboundStats) uint64 { return s.Target }},
		{"to a replica on another node", member, msgs, batch(func(b *pb.MessageBatch) { b.Requests[0].To = 3 }), func(s InboundStats) uint64 { return s.Target }},
		{"to a replica of nobody", member, msgs, batch(func(b *pb.MessageBatch) { b.Requests[0].To = 77 }), func(s InboundStats) uint64 { return s.Target }},
		{"a shard not hosted here", member, msgs, batch(func(b *pb.MessageBatch) { b.Requests[0].ShardID = 99 }), func(s InboundStats) uint64 { return s.Shard }},
		{"one bad message among good ones", member, msgs, batch(func(b *pb.MessageBatch) {
			b.Requests = append(b.Requests, b.Requests[0], pb.Message{Type: pb.Heartbeat, ShardID: 1, From: 2})
		}), func(s InboundStats) uint64 { return s.Target }},
		{"from 0", member, msgs, batch(func(b *pb.MessageBatch) { b.Requests[0].From = 0 }), func(s InboundStats) uint64 { return s.Sender }},
		{"from itself", member, msgs, batch(func(b *pb.MessageBatch) { b.Requests[0].From = 1 }), func(s InboundStats) uint64 { return s.Sender }},
		{"from a non-member", member, msgs, batch(func(b *pb.MessageBatch) { b.Requests[0].From = 9 }), func(s InboundStats) uint64 { return s.Sender }},
		{"a member as another member's replica", member, msgs, batch(func(b *pb.MessageBatch) { b.Requests[0].From = 3 }), func(s InboundStats) uint64 { return s.Peer }},
		{"a member naming another source", member, msgs, batch(func(b *pb.MessageBatch) { b.SourceAddress = "r3" }), func(s InboundStats) uint64 { return s.Peer }},
		{"a non-member claiming replica 2", evil, msgs, mustMarshal(t, &evilBatch), func(s InboundStats) uint64 { return s.Peer }},
		{"a non-member naming r2 as source", evil, msgs, batch(func(*pb.MessageBatch) {}), func(s InboundStats) uint64 { return s.Peer }},
		{"another deployment", member, msgs, batch(func(b *pb.MessageBatch) { b.DeploymentId++ }), func(s InboundStats) uint64 { return s.Deployment }},
		{"another binary version", member, msgs, batch(func(b *pb.MessageBatch) { b.BinVer++ }), func(s InboundStats) uint64 { return s.Deployment }},
		{"a local message type", member, msgs, batch(func(b *pb.MessageBatch) { b.Requests[0].Type = pb.Election }), func(s InboundStats) uint64 { return s.Type }},
		{"an unknown message type", member, msgs, batch(func(b *pb.MessageBatch) { b.Requests[0].Type = 200 }), func(s InboundStats) uint64 { return s.Type }},
		{"InstallSnapshot naming a file", member, msgs, batch(func(b *pb.MessageBatch) {
			b.Requests[0].Type = pb.InstallSnapshot
			b.Requests[0].Snapshot = pb.Snapshot{Index: 900, Term: 3, Filepath: "/etc/passwd"}
		}), func(s InboundStats) uint64 { return s.Type }},
		{"no messages", member, msgs, batch(func(b *pb.MessageBatch) { b.Requests = nil }), func(s InboundStats) uint64 { return s.Malformed }},
		{"garbage", member, msgs, []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 1, 2, 3}, func(s InboundStats) uint64 { return s.Malformed }},

		{"chunk: path outside the snapshot dir", member, chunks, chunk(func(c *pb.Chunk) { c.Filepath = "../../../../badger/MANIFEST" }), func(s InboundStats) uint64 { return s.Chunk }},
		{"chunk: absolute path", member, chunks, chunk(func(c *pb.Chunk) { c.Filepath = "/tmp/x" }), func(s InboundStats) uint64 { return s.Chunk }},
		{"chunk: dot-dot name", member, chunks, chunk(func(c *pb.Chunk) { c.Filepath = ".." }), func(s InboundStats) uint64 { return s.Chunk }},
		{"chunk: external file", member, chunks, chunk(func(c *pb.Chunk) {
			c.HasFileInfo = true
			c.FileInfo = pb.SnapshotFile{Filepath: "/etc/passwd", FileId: 1}
		}), func(s InboundStats) uint64 { return s.Chunk }},
		{"chunk: poison count", member, chunks, chunk(func(c *pb.Chunk) { c.ChunkCount = pb.PoisonChunkCount }), func(s InboundStats) uint64 { return s.Chunk }},
		{"chunk: id past its count", member, chunks, chunk(func(c *pb.Chunk) { c.ChunkId, c.FileChunkId, c.ChunkCount = 5, 5, 2 }), func(s InboundStats) uint64 { return s.Chunk }},
		{"chunk: index 0", member, chunks, chunk(func(c *pb.Chunk) { c.Index, c.Filepath = 0, snapshotFilename(0) }), func(s InboundStats) uint64 { return s.Chunk }},
		{"chunk: size not its data's", member, chunks, chunk(func(c *pb.Chunk) { c.ChunkSize = 1 << 40 }), func(s InboundStats) uint64 { return s.Chunk }},
		{"chunk: a file size", member, chunks, chunk(func(c *pb.Chunk) { c.FileSize = 1 << 40 }), func(s InboundStats) uint64 { return s.Chunk }},
		{"chunk: on-disk index past the index", member, chunks, chunk(func(c *pb.Chunk) { c.OnDiskIndex = 901 }), func(s InboundStats) uint64 { return s.Chunk }},
		{"chunk: membership moving a replica", member, chunks, chunk(func(c *pb.Chunk) { c.Membership.Addresses[3] = "evil" }), func(s InboundStats) uint64 { return s.Chunk }},
		{"chunk: to another replica", member, chunks, chunk(func(c *pb.Chunk) { c.ReplicaID = 0 }), func(s InboundStats) uint64 { return s.Target }},
		{"chunk: a shard not hosted here", member, chunks, chunk(func(c *pb.Chunk) { c.ShardID = 99 }), func(s InboundStats) uint64 { return s.Shard }},
		{"chunk: another deployment", member, chunks, chunk(func(c *pb.Chunk) { c.DeploymentId = 1 }), func(s InboundStats) uint64 { return s.Deployment }},
		{"chunk: from a non-member", member, chunks, chunk(func(c *pb.Chunk) { c.From = 9 }), func(s InboundStats) uint64 { return s.Sender }},
		{"chunk: a non-member claiming replica 2", evil, chunks, mustMarshal(t, &evilChunk), func(s InboundStats) uint64 { return s.Peer }},
		{"chunk: garbage", member, chunks, []byte{0xff, 0xff, 0xff}, func(s InboundStats) uint64 { return s.Malformed }},
	} {
		n1 := c.nodes[1]
		before := n1.InboundStats()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, err := a.from.Request(ctx, "r1", a.kind, a.body)
		cancel()
		var re *transport.RemoteError
		if !errors.As(err, &re) {
			t.Errorf("%s: the sender got %v, want the refusal", a.name, err)
		}
		after := n1.InboundStats()
		if a.rule(after) <= a.rule(before) || after.Dropped <= before.Dropped {
			t.Errorf("%s: not counted under its rule: before %+v, after %+v", a.name, before, after)
		}
	}
	// The cluster still serves, and real traffic still passes.
	before := c.nodes[1].InboundStats()
	for p := range 20 {
		mustPropose(t, c.nodes[uint64(p%3+1)], Command{Op: OpPutInstance, Instance: persistent("svc", "10.0.0.1", p+1)})
	}
	if st := c.converged(c.waitLeader()); len(st.Instances) != 20 {
		t.Fatalf("%d instances after the attacks, want 20", len(st.Instances))
	}
	if after := c.nodes[1].InboundStats(); after.Batches <= before.Batches || after.Dropped != before.Dropped {
		t.Fatalf("real traffic after the attacks: before %+v, after %+v", before, after)
	}
}

// testCA is a certificate authority for the tests.
type testCA struct {
	cert *x509.Certificate
	der  []byte
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t testing.TB, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, der: der, key: key, pool: pool}
}

// issue returns a certificate for 127.0.0.1 (server and client use) whose
// common name is cn, and its key.
func (ca *testCA) issue(t testing.TB, cn string) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}

// mutualTLS is a transport's mutual TLS with a certificate of ca for cn.
func (ca *testCA) mutualTLS(t testing.TB, cn string) *tls.Config {
	der, key := ca.issue(t, cn)
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		RootCAs:      ca.pool, ClientCAs: ca.pool, ClientAuth: tls.RequireAndVerifyClientCert,
		MinVersion: tls.VersionTLS13,
	}
}

// testTLS writes a CA and one certificate for 127.0.0.1 (server and client
// use) into dir.
func testTLS(t testing.TB, dir string) *TLSFiles {
	t.Helper()
	ca := newTestCA(t, "raftstore test CA")
	leafDER, key := ca.issue(t, "member")
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	files := &TLSFiles{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem")}
	for path, block := range map[string]*pem.Block{
		files.CAFile:   {Type: "CERTIFICATE", Bytes: ca.der},
		files.CertFile: {Type: "CERTIFICATE", Bytes: leafDER},
		files.KeyFile:  {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return files
}

// rogueSM is the rogue NodeHost's state machine: it holds nothing.
type rogueSM struct{}

func (rogueSM) Update(e sm.Entry) (sm.Result, error) { return sm.Result{}, nil }
func (rogueSM) Lookup(any) (any, error)              { return nil, nil }
func (rogueSM) SaveSnapshot(_ io.Writer, _ sm.ISnapshotFileCollection, _ <-chan struct{}) error {
	return nil
}
func (rogueSM) RecoverFromSnapshot(_ io.Reader, _ []sm.SnapshotFile, _ <-chan struct{}) error {
	return nil
}
func (rogueSM) Close() error { return nil }

// rogueEvents counts the connections the rogue NodeHost made.
type rogueEvents struct {
	nodeEvents
	mu   sync.Mutex
	seen map[string]int
}

func (e *rogueEvents) ConnectionEstablished(i raftio.ConnectionInfo) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seen[i.Address]++
}

func (e *rogueEvents) dialed(addr string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.seen[addr] > 0
}

// startRogue starts a Dragonboat NodeHost at its own address, in the
// cluster's deployment, claiming replica 2 of shard 1 with members at
// members (its own address for 2): plain TCP, or Dragonboat's mutual TLS
// with files. It campaigns at once and sends its vote requests to the
// members.
func startRogue(t testing.TB, members map[uint64]string, files *TLSFiles) (*dragonboat.NodeHost, *rogueEvents) {
	t.Helper()
	setDragonboatLogger()
	ev := &rogueEvents{nodeEvents: nodeEvents{}, seen: map[string]int{}}
	logdb := config.GetTinyMemLogDBConfig()
	logdb.Shards = 1
	nhc := config.NodeHostConfig{
		DeploymentID: testDeployment, NodeHostDir: t.TempDir(), RTTMillisecond: 10, RaftAddress: members[2],
		SystemEventListener: ev,
		Expert:              config.ExpertConfig{LogDB: logdb, Engine: config.EngineConfig{ExecShards: 1, CommitShards: 1, ApplyShards: 1, SnapshotShards: 1, CloseShards: 1}},
	}
	if files != nil {
		nhc.MutualTLS, nhc.CAFile, nhc.CertFile, nhc.KeyFile = true, files.CAFile, files.CertFile, files.KeyFile
	}
	nh, err := dragonboat.NewNodeHost(nhc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nh.Close)
	targets := map[uint64]dragonboat.Target{}
	for id, a := range members {
		targets[id] = a
	}
	create := func(uint64, uint64) sm.IStateMachine { return rogueSM{} }
	if err := nh.StartReplica(targets, false, create, config.Config{ReplicaID: 2, ShardID: 1, ElectionRTT: 5, HeartbeatRTT: 1}); err != nil {
		t.Fatal(err)
	}
	return nh, ev
}

// rogueAttack runs the rogue NodeHost (with Dragonboat's mutual TLS from
// files, if not nil) against c (members 1 and 3 at addrs[1] and addrs[3])
// until it has dialed both, then checks that the cluster serves writes and
// kept its members.
func rogueAttack(t *testing.T, c *cluster, addr1, addr3 string, files *TLSFiles) {
	_, ev := startRogue(t, map[uint64]string{1: addr1, 2: freePort(t), 3: addr3}, files)
	c.eventually(20*time.Second, "the rogue to dial both members", func() bool { return ev.dialed(addr1) && ev.dialed(addr3) })
	for p := range 30 {
		mustPropose(t, c.nodes[uint64(p%3+1)], Command{Op: OpPutInstance, Instance: persistent("svc", "10.0.0.1", p+1)})
	}
	leader := c.waitLeader()
	if st := c.converged(leader); len(st.Instances) != 30 {
		t.Fatalf("%d instances, want 30", len(st.Instances))
	}
	for id, n := range c.nodes {
		if m := n.Info().Members; m[2] != c.cfgs[2].RaftAddress {
			t.Fatalf("node %d: replica 2 is %q, want %q", id, m[2], c.cfgs[2].RaftAddress)
		}
	}
}

// A rogue NodeHost in the cluster's deployment, claiming replica 2 from
// its own address, without credentials, cannot crash (or join) a cluster
// at a secure configuration: an unauthenticated Raft peer. Insecure, the
// same attack makes the members panic with "inconsistent target"
// (TestRogueNodeHostCrashesInsecure shows it in a child process).
func TestRogueNodeHost(t *testing.T) {
	t.Run("dragonboat-mutual-tls", func(t *testing.T) {
		files := testTLS(t, t.TempDir())
		c := newCluster(t, 3, func(cfg *Config) { cfg.Insecure, cfg.TLS, cfg.TLSAnyReplica = false, files, true })
		rogueAttack(t, c, c.cfgs[1].RaftAddress, c.cfgs[3].RaftAddress, nil)
	})
	t.Run("muster-tcp-secret", func(t *testing.T) {
		c, net, _ := musterTCPCluster(t)
		rogueAttack(t, c, net.addr("r1"), net.addr("r3"), nil)
		if s := c.nodes[1].InboundStats(); s.Batches == 0 {
			t.Fatalf("no Raft traffic over the transport: %+v", s)
		}
	})
	t.Run("muster-tcp-mutual-tls", func(t *testing.T) {
		c, net, _ := musterMTLSCluster(t, newTestCA(t, "cluster CA"))
		rogueAttack(t, c, net.addr("r1"), net.addr("r3"), nil)
	})
}

const rogueChildEnv = "RAFTSTORE_ROGUE_CHILD"

// rogueCrashes runs the test that calls it again in a child process, where
// attack runs (rogueChildEnv set), and asserts that the attack crashed the
// members: the child exits with Dragonboat's "inconsistent target" panic.
func rogueCrashes(t *testing.T, attack func(t *testing.T)) {
	if os.Getenv(rogueChildEnv) != "" {
		attack(t)
		fmt.Println("the cluster survived")
		return
	}
	if testing.Short() {
		t.Skip("starts a child process with a cluster")
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), rogueChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "inconsistent target") {
		t.Fatalf("the rogue NodeHost did not crash the cluster (err %v):\n%s", err, out)
	}
}

// The attack of TestRogueNodeHost is real: against a cluster on
// Dragonboat's TCP transport with Insecure set (what was the default) the
// members panic and the process exits. Run in a child process.
func TestRogueNodeHostCrashesInsecure(t *testing.T) {
	rogueCrashes(t, func(t *testing.T) {
		c := newCluster(t, 3, nil) // Insecure
		rogueAttack(t, c, c.cfgs[1].RaftAddress, c.cfgs[3].RaftAddress, nil)
	})
}

// Why Validate refuses Config.TLS unless TLSAnyReplica (issue 26): on
// Dragonboat's own TCP transport with its mutual TLS, a process holding a
// certificate from the cluster's CA (here a member's: the credentials of
// node A) claims replica 2 from its own address, and the members panic:
// Dragonboat binds no replica ID to a certificate. Over Config.Transport
// the same credentials cannot act as another replica
// (TestReplicaBoundToCertificate). Run in a child process.
func TestRogueCertHolderCrashesDragonboatTLS(t *testing.T) {
	rogueCrashes(t, func(t *testing.T) {
		files := testTLS(t, t.TempDir())
		c := newCluster(t, 3, func(cfg *Config) { cfg.Insecure, cfg.TLS, cfg.TLSAnyReplica = false, files, true })
		rogueAttack(t, c, c.cfgs[1].RaftAddress, c.cfgs[3].RaftAddress, files)
	})
}

// musterMTLSCluster starts replicas r1, r2, r3 with Raft over Muster's TCP
// transport with mutual TLS, each node's certificate from ca naming its
// node ID, and no Secret.
func musterMTLSCluster(t *testing.T, ca *testCA) (*cluster, *tcpNet, map[string]transport.Transport) {
	t.Helper()
	net := newTCPNet(t)
	trs := map[string]transport.Transport{}
	for _, id := range []string{"r1", "r2", "r3"} {
		trs[id] = net.addWith(id, func(cfg *transport.TCPConfig) { cfg.TLS = ca.mutualTLS(t, id) })
	}
	c := newClusterAt(t, map[uint64]string{1: "r1", 2: "r2", 3: "r3"}, func(cfg *Config) {
		cfg.Transport = trs[cfg.RaftAddress]
		cfg.Insecure = false
		cfg.ProposeTimeout = 10 * time.Second
	})
	return c, net, trs
}

// Attack (issue 26, Raft): over Config.Transport with mutual TLS, a Raft
// replica is bound to the node its certificate names. A process with
// valid credentials for node r3 claims to be replica 2 (r2's): its
// messages and snapshot chunks from replica 2 are dropped (InboundStats.
// Peer), and a transport presenting r3's certificate as node r2 is refused
// at the handshake, as is one with a certificate of another CA, before any
// Raft message reaches Dragonboat. The cluster keeps serving.
func TestReplicaBoundToCertificate(t *testing.T) {
	ca := newTestCA(t, "cluster CA")
	c, net, trs := musterMTLSCluster(t, ca)
	n1 := c.nodes[1]
	r3 := trs["r3"] // node r3's own authenticated connection: valid credentials for r3
	msgs, chunks := transport.Kind(KindRaftMessages), transport.Kind(KindRaftChunk)
	asR2 := raftBatch("r2", 2, pb.RequestVote)
	asR2.Requests[0].Term = 1 << 20 // a vote that would depose the leader
	fromR3 := raftBatch("r3", 2, pb.Heartbeat)
	chunk2 := raftChunk(2)
	for _, a := range []struct {
		name string
		kind transport.Kind
		body []byte
	}{
		{"replica 2's vote request, source r2", msgs, mustMarshal(t, &asR2)},
		{"replica 2's heartbeat, source r3", msgs, mustMarshal(t, &fromR3)},
		{"replica 2's snapshot chunk", chunks, mustMarshal(t, &chunk2)},
	} {
		before := n1.InboundStats()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, err := r3.Request(ctx, "r1", a.kind, a.body)
		cancel()
		var re *transport.RemoteError
		if !errors.As(err, &re) {
			t.Errorf("%s: the sender got %v, want the refusal", a.name, err)
		}
		if after := n1.InboundStats(); after.Peer <= before.Peer || after.Dropped <= before.Dropped {
			t.Errorf("%s: not dropped as another node's replica: before %+v, after %+v", a.name, before, after)
		}
	}
	// r3's certificate presented as node r2, and a certificate of another
	// CA as r2: refused by the transport, no Raft message reaches r1.
	rogueCA := newTestCA(t, "rogue CA")
	r1 := trs["r1"].(*transport.TCP)
	for _, a := range []struct {
		name   string
		tls    *tls.Config
		reason transport.RefuseReason
	}{
		{"r3's certificate", ca.mutualTLS(t, "r3"), transport.RefuseIdentity},
		{"another CA's", rogueCA.mutualTLS(t, "r2"), transport.RefuseTLS},
	} {
		name := a.name
		cfg := transport.DefaultTCPConfig()
		cfg.NodeID, cfg.TLS = "r2", a.tls
		cfg.TLS.RootCAs = ca.pool // it trusts the cluster (the cluster need not trust it)
		cfg.Resolve = func(string) (string, error) { return net.addr("r1"), nil }
		imp, err := transport.NewTCP(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := imp.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		refused := r1.Stats().RefusedBy[a.reason]
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, err = imp.Request(ctx, "r1", msgs, mustMarshal(t, &asR2))
		cancel()
		_ = imp.Close()
		var re *transport.RemoteError
		if err == nil || errors.As(err, &re) {
			t.Errorf("%s as r2: %v, want a refused handshake (no Raft handler ran)", name, err)
		}
		c.eventually(5*time.Second, name+" as r2 refused by r1's transport", func() bool { return r1.Stats().RefusedBy[a.reason] > refused })
	}
	for p := range 10 {
		mustPropose(t, c.nodes[uint64(p%3+1)], Command{Op: OpPutInstance, Instance: persistent("svc", "10.0.0.1", p+1)})
	}
	if st := c.converged(c.waitLeader()); len(st.Instances) != 10 {
		t.Fatalf("%d instances after the attacks, want 10", len(st.Instances))
	}
}

// Validate refuses Dragonboat's TCP transport without TLS unless Insecure,
// its TLS (which binds no replica to a certificate) unless TLSAnyReplica,
// TLS with Transport, and a missing DeploymentID, naming the field.
func TestConfigSecurity(t *testing.T) {
	base := DefaultConfig()
	base.ReplicaID, base.Dir, base.RaftAddress = 1, t.TempDir(), "127.0.0.1:7100"
	base.InitialMembers = map[uint64]string{1: "127.0.0.1:7100"}
	check := func(name string, mut func(*Config), field string) {
		t.Helper()
		cfg := base
		mut(&cfg)
		err := cfg.Validate()
		if field == "" {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			return
		}
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v, want an ErrInvalidConfig naming %s", name, err, field)
		}
	}
	check("defaults", func(*Config) {}, "DeploymentID")
	base.DeploymentID = 42
	check("no TLS, no Transport", func(*Config) {}, "TLS")
	check("insecure", func(c *Config) { c.Insecure = true }, "")
	check("TLS, replicas unbound", func(c *Config) { c.TLS = &TLSFiles{CAFile: "ca", CertFile: "c", KeyFile: "k"} }, "TLSAnyReplica")
	check("TLS with TLSAnyReplica", func(c *Config) {
		c.TLS, c.TLSAnyReplica = &TLSFiles{CAFile: "ca", CertFile: "c", KeyFile: "k"}, true
	}, "")
	check("TLSAnyReplica without TLS", func(c *Config) { c.Insecure, c.TLSAnyReplica = true, true }, "TLSAnyReplica")
	check("TLS without a key", func(c *Config) { c.TLS = &TLSFiles{CAFile: "ca", CertFile: "c"} }, "TLS")
	var mem transport.MemNetwork
	tr, err := mem.Node("n1")
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	muster := func(c *Config) {
		c.Transport, c.RaftAddress, c.InitialMembers = tr, "", map[uint64]string{1: "n1"}
	}
	check("Transport", muster, "")
	check("Transport and TLS", func(c *Config) { muster(c); c.TLS = &TLSFiles{CAFile: "ca", CertFile: "c", KeyFile: "k"} }, "TLS")
}

// Attack (issue 26, Raft): while a starting replica does not know the
// shard's membership yet, a member (r2) sends as another initial member's
// replica (3, r3's). Dragonboat already holds replica 3's address from the
// initial members and panics ("inconsistent target") if a batch names
// another source for it; go test ./... under load crashed the package
// once this way (TestInboundAttacksOverTCP's "a member as another
// member's replica" before r1's membership was read). The guard pins the
// replicas Dragonboat starts with to their nodes: refused; the real r3
// passes, and a replica not among them is still pinned to its first
// sender.
func TestGuardPinsStartMembers(t *testing.T) {
	g := newGuard(testDeployment, 1, 1) // no NodeHost: the membership is unknown
	if m := g.members(); m != nil {
		t.Fatalf("membership known without a NodeHost: %v", m)
	}
	g.expect(map[uint64]string{1: "r1", 2: "r2", 3: "r3"})
	if err := g.checkSender(3, "r2"); err == nil || g.counts[dropPeer].Load() != 1 {
		t.Fatalf("r2 as replica 3 before the membership is known: %v, want a Peer drop", err)
	}
	for id, node := range map[uint64]string{2: "r2", 3: "r3"} {
		if err := g.checkSender(id, node); err != nil {
			t.Fatalf("replica %d from %s: %v", id, node, err)
		}
	}
	if err := g.checkSender(4, "r4"); err != nil {
		t.Fatalf("a replica not started with, first heard from r4: %v", err)
	}
	if err := g.checkSender(4, "r2"); err == nil {
		t.Fatal("replica 4 from r2 after r4 sent as it")
	}
}

// A joining replica knows no members until its leader's first message: a
// member that sends first as the leader's replica would otherwise be bound
// to that ID, and the real leader's traffic refused. With JoinMembers the
// claim is refused, and the real leader is heard.
func TestGuardJoinerRefusesPosedLeader(t *testing.T) {
	g := newGuard(testDeployment, 1, 4) // replica 4, joining
	g.expect(map[uint64]string{1: "r1", 2: "r2", 3: "r3"})
	if err := g.checkSender(1, "r3"); err == nil || g.counts[dropPeer].Load() != 1 {
		t.Fatalf("r3 as the leader's replica 1 to a joiner: %v, want a Peer drop", err)
	}
	if err := g.checkSender(1, "r1"); err != nil {
		t.Fatalf("the real leader r1 to the joiner: %v", err)
	}
	cfg := testConfig(t, t.TempDir(), 4, freePort(t))
	cfg.JoinMembers = map[uint64]string{1: "r1"}
	if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "JoinMembers") {
		t.Fatalf("JoinMembers without Join: %v, want ErrInvalidConfig naming JoinMembers", err)
	}
}

// A replica's NoOP, its answer to a leader message of a lower term,
// reaches Raft through the inbound checks and carries its term: the stale
// leader steps down. With CheckQuorum and PreVote that is the only way
// back for a replica that became a candidate at a higher term while the
// others kept their leader (they ignore its votes, it ignores the
// leader's messages). The guard used to drop NoOP as a local type, and
// such a replica stayed out, alive and behind; here a member sends the
// NoOP as Raft would, at the leader's term + 5.
func TestStaleLeaderHearsHigherTerm(t *testing.T) {
	c, _, trs := musterTCPCluster(t)
	leader := c.waitLeader()
	follower := leader%3 + 1
	term := c.nodes[leader].Stats().Term
	before := c.nodes[leader].InboundStats()
	b := raftBatch(fmt.Sprintf("r%d", follower), follower, pb.NoOP)
	b.Requests[0].To, b.Requests[0].Term = leader, term+5
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	_, err := trs[fmt.Sprintf("r%d", follower)].Request(ctx, fmt.Sprintf("r%d", leader), KindRaftMessages, mustMarshal(t, &b))
	cancel()
	if err != nil {
		t.Fatalf("the NoOP of replica %d to the leader: %v (inbound %+v)", follower, err, c.nodes[leader].InboundStats())
	}
	if after := c.nodes[leader].InboundStats(); after.Dropped != before.Dropped {
		t.Fatalf("the NoOP was dropped: before %+v, after %+v", before, after)
	}
	c.eventually(10*time.Second, "the leader to take the higher term", func() bool {
		return c.nodes[leader].Stats().Term >= term+5
	})
	// A new leader at the higher term, and the cluster serves.
	for p := range 5 {
		mustPropose(t, c.nodes[uint64(p%3+1)], Command{Op: OpPutInstance, Instance: persistent("noop", "10.0.0.2", p+1)})
	}
	if st := c.converged(c.waitLeader()); len(st.Instances) != 5 {
		t.Fatalf("%d instances after the new election, want 5", len(st.Instances))
	}
}
