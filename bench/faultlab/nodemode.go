package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lni/vfs"
	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/node"
)

// nodeSpec is what the driver hands a node process (a JSON file, mode
// 0600: it holds the cluster's credentials).
type nodeSpec struct {
	ID         string            `json:"id"`
	IP         string            `json:"ip"`
	Dir        string            `json:"dir"`
	Socket     string            `json:"socket"`
	Seeds      []string          `json:"seeds"`
	Members    map[uint64]string `json:"members"`
	Deployment uint64            `json:"deployment"`
	Secret     []byte            `json:"secret"`
	GossipKey  []byte            `json:"gossipKey"`
	// StrictFS keeps the Raft log on a strict in-memory file system, for
	// the power-loss fault (POST /powerloss). The process must then never
	// be killed: its Raft log lives in its memory (a power loss keeps what
	// was synced on disk for the next process, see crash).
	StrictFS bool   `json:"strictFS"`
	LogLevel string `json:"logLevel"`
}

const (
	transportPort = 7001
	gossipPort    = 7946
)

// nodeProc is the node mode: one node.Node and the API the driver calls.
type nodeProc struct {
	spec nodeSpec
	log  *slog.Logger
	fs   *vfs.MemFS // the Raft log's, with StrictFS
	trap *syncTrap  // the power loss's trap, on fs

	mu       sync.Mutex
	n        *node.Node // nil once a power loss took it out
	epoch    int        // power losses begun in this process (at most one)
	sessions map[string]*registry.Session
	lastLoss *powerLossInfo
}

// runNode is the node mode's main: it returns when the process is told to
// stop (SIGTERM, SIGINT) or its node fails to start.
func runNode(args []string) error {
	if len(args) != 1 {
		return errors.New("usage: faultlab node SPEC.json")
	}
	data, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	p := &nodeProc{sessions: map[string]*registry.Session{}}
	if err := json.Unmarshal(data, &p.spec); err != nil {
		return fmt.Errorf("%s: %w", args[0], err)
	}
	level := slog.LevelWarn
	_ = level.UnmarshalText([]byte(p.spec.LogLevel))
	p.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if p.spec.StrictFS {
		p.fs = vfs.NewStrictMem()
		p.trap = &syncTrap{}
		if err := p.restoreRaftLog(); err != nil {
			return fmt.Errorf("restoring the Raft log of the last power loss: %w", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := p.start(ctx); err != nil {
		return err
	}
	_ = os.Remove(p.spec.Socket)
	ln, err := net.Listen("unix", p.spec.Socket)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: p.mux(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	<-ctx.Done()
	_ = srv.Close()
	p.mu.Lock()
	n := p.n
	p.mu.Unlock()
	if n != nil {
		return n.Close()
	}
	return nil
}

func (p *nodeProc) config() node.Config {
	s := p.spec
	cfg := node.DefaultConfig()
	cfg.NodeID, cfg.Dir = s.ID, s.Dir
	cfg.TransportAddr = net.JoinHostPort(s.IP, strconv.Itoa(transportPort))
	cfg.GossipAddr = net.JoinHostPort(s.IP, strconv.Itoa(gossipPort))
	cfg.Seeds = s.Seeds
	cfg.Secret, cfg.GossipKey = s.Secret, s.GossipKey
	cfg.RaftMembers, cfg.DeploymentID = s.Members, s.Deployment
	cfg.Timings = node.Fast()
	// No active health checks: they would dial the instances' addresses,
	// which are data here, not hosts.
	cfg.Registry.HealthChecks = nil
	cfg.Logger = p.log
	if p.fs != nil {
		cfg.RaftFS = vfs.Wrap(p.fs, p.trap)
	}
	return cfg
}

func (p *nodeProc) start(ctx context.Context) error {
	n, err := node.Start(ctx, p.config())
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.n = n
	p.mu.Unlock()
	return nil
}

// cut begins a power loss: the node is taken out of the API, its sessions
// die with it, and the incarnation that dies is returned.
func (p *nodeProc) cut() (*node.Node, string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, inc := p.n, p.incarnation()
	if n == nil {
		return nil, "", &apiError{Kind: "down", Err: "node restarting"}
	}
	p.n = nil
	p.epoch++
	clear(p.sessions) // nothing is handed over: they die with the node
	return n, inc, nil
}

// powerLossExit is the exit code of a node process that lost its power:
// the driver starts it again (see lab.nodeExited).
const powerLossExit = 75

// crash ends a power loss that loseSyncs began: the file system is frozen
// and the network cut, so the node can neither write nor tell anyone
// anything more. It drops every write of the Raft log that was not synced,
// keeps the rest in a directory beside the data (restoreRaftLog loads it
// into the next process's strict file system) and exits the process at
// once, as the power cut would: nothing is closed, Badger recovers from
// its own files as after a SIGKILL.
func (p *nodeProc) crash(n *node.Node, info *powerLossInfo) error {
	stats := make(chan struct{})
	go func() { // Stats may read the frozen file system: then it never returns
		defer close(stats)
		if rn := n.Raft(); rn != nil {
			st := rn.Stats()
			info.WasLeader, info.Applied, info.LastIndex, info.Deferred = st.IsLeader, st.Applied, st.LastIndex, st.CommitWritesDeferred
		}
	}()
	select {
	case <-stats:
	case <-time.After(time.Second): // real time
		info = &powerLossInfo{Mode: info.Mode, Skip: info.Skip}
	}
	info.BytesBefore = fsBytes(p.fs, "/")
	p.fs.ResetToSyncedState()
	info.BytesAfter = fsBytes(p.fs, "/")
	dir := p.dumpDir()
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := dumpFS(p.fs, "/", filepath.Join(dir, "fs")); err != nil {
		return err
	}
	data, err := json.Marshal(info)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "info.json"), data, 0o600); err != nil {
		return err
	}
	p.log.Warn("faultlab: power loss: unsynced Raft log writes dropped; the process exits", "mode", info.Mode, "bytes_before", info.BytesBefore, "bytes_after", info.BytesAfter)
	os.Exit(powerLossExit)
	return nil
}

// dumpDir holds the synced Raft log of a power-lost process until the next
// one loads it.
func (p *nodeProc) dumpDir() string { return filepath.Join(filepath.Dir(p.spec.Dir), "powerloss") }

// restoreRaftLog loads the Raft log a power loss left (crash) into the
// strict file system, synced, and lifts the network cut; without one it
// does nothing.
func (p *nodeProc) restoreRaftLog() error {
	dir := p.dumpDir()
	data, err := os.ReadFile(filepath.Join(dir, "info.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	info := &powerLossInfo{}
	if err := json.Unmarshal(data, info); err != nil {
		return err
	}
	if err := loadFS(filepath.Join(dir, "fs"), p.fs, "/"); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p.lastLoss = info
	return uncutNetwork()
}

// dumpFS copies the tree at from in fs to the directory to.
func dumpFS(fs vfs.FS, from, to string) error {
	if err := os.MkdirAll(to, 0o700); err != nil {
		return err
	}
	names, err := fs.List(from)
	if err != nil {
		return err
	}
	for _, name := range names {
		path := fs.PathJoin(from, name)
		st, err := fs.Stat(path)
		if err != nil {
			return err
		}
		if st.IsDir() {
			if err := dumpFS(fs, path, filepath.Join(to, name)); err != nil {
				return err
			}
			continue
		}
		f, err := fs.Open(path)
		if err != nil {
			return err
		}
		data, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(to, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// loadFS copies the directory from into fs at to, every file and
// directory synced.
func loadFS(from string, fs vfs.FS, to string) error {
	if err := fs.MkdirAll(to, 0o700); err != nil {
		return err
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	for _, e := range entries {
		path := fs.PathJoin(to, e.Name())
		if e.IsDir() {
			if err := loadFS(filepath.Join(from, e.Name()), fs, path); err != nil {
				return err
			}
			continue
		}
		data, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			return err
		}
		f, err := fs.Create(path)
		if err != nil {
			return err
		}
		_, err = f.Write(data)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	d, err := fs.OpenDir(to)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// loseSyncs is the power loss's instant: the network is cut first (no
// message leaves after it), then syncs stop counting. mode "fsync" waits
// for the trap to spring on a sync of the Raft log's WAL, after skip
// others (at most 3 s, then it cuts at once: an idle log).
func (p *nodeProc) loseSyncs(mode string, skip int64) (string, error) {
	if mode != "fsync" {
		if err := cutNetwork(); err != nil {
			return "", err
		}
		p.fs.SetIgnoreSyncs(true)
		p.trap.freeze()
		return "instant", nil
	}
	sprung := make(chan struct{})
	var cutErr error
	p.trap.arm(skip, func() {
		cutErr = cutNetwork()
		p.fs.SetIgnoreSyncs(true)
		p.trap.freeze()
		close(sprung)
	})
	select {
	case <-sprung:
		return "fsync", cutErr
	case <-time.After(3 * time.Second): // real time
	}
	p.trap.disarm()
	p.trap.mu.Lock() // a spring under way ends first
	defer p.trap.mu.Unlock()
	select {
	case <-sprung:
		return "fsync", cutErr
	default:
	}
	if err := cutNetwork(); err != nil {
		return "", err
	}
	p.fs.SetIgnoreSyncs(true)
	p.trap.freeze()
	return "instant (no WAL sync within 3 s)", nil
}

// cutNetwork drops every packet in and out of this node's namespace (an
// nftables table of its own, apart from the driver's).
func cutNetwork() error {
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader("table inet faultlab_power {\n" +
		"  chain input { type filter hook input priority -10; policy drop; }\n" +
		"  chain output { type filter hook output priority -10; policy drop; }\n}\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft: %w: %s", err, out)
	}
	return nil
}

func uncutNetwork() error {
	if out, err := exec.Command("nft", "delete", "table", "inet", "faultlab_power").CombinedOutput(); err != nil {
		return fmt.Errorf("nft: %w: %s", err, out)
	}
	return nil
}

// fsBytes is the size of every file under dir in fs.
func fsBytes(fs vfs.FS, dir string) int64 {
	names, err := fs.List(dir)
	if err != nil {
		return 0
	}
	var total int64
	for _, name := range names {
		path := fs.PathJoin(dir, name)
		st, err := fs.Stat(path)
		if err != nil {
			continue
		}
		if st.IsDir() {
			total += fsBytes(fs, path)
		} else {
			total += st.Size()
		}
	}
	return total
}

// incarnation names this run of the node: the process and its in-process
// restarts. A session lives and dies with one incarnation. Callers hold
// p.mu.
func (p *nodeProc) incarnation() string { return fmt.Sprintf("%d/%d", os.Getpid(), p.epoch) }

func (p *nodeProc) current() (*node.Node, string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == nil {
		return nil, "", &apiError{Kind: "down", Err: "node restarting"}
	}
	return p.n, p.incarnation(), nil
}

func svcKey(name string) model.ServiceKey { return model.ServiceKey{Name: name} }

func (r instReq) key() model.InstanceKey {
	return model.InstanceKey{Service: svcKey(r.Service), IP: r.IP, Port: r.Port}
}

// beat timings of the lab's beat instances: a beat every 500 ms, unhealthy
// after 3 s without one, deleted after 6 s.
const (
	beatInterval = 500 * time.Millisecond
	beatDelete   = 6 * time.Second
)

func (r instReq) instance(ephemeral bool) model.Instance {
	in := model.NewInstance(svcKey(r.Service), r.IP, r.Port)
	in.Ephemeral = ephemeral
	md := map[string]string{"v": r.Val}
	if ephemeral && r.Session == "" {
		md[model.MetaHeartBeatInterval] = strconv.Itoa(int(beatInterval.Milliseconds()))
		md[model.MetaHeartBeatTimeout] = "3000"
		md[model.MetaIPDeleteTimeout] = strconv.Itoa(int(beatDelete.Milliseconds()))
	}
	in.Metadata = model.NewMetadata(md)
	return in
}

func (p *nodeProc) mux() *http.ServeMux {
	m := http.NewServeMux()
	handle := func(path string, f func(ctx context.Context, n *node.Node, inc string, body []byte) (any, error)) {
		m.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			n, inc, err := p.current()
			var out any
			if err == nil {
				out, err = f(r.Context(), n, inc, body)
			}
			w.Header().Set("Content-Type", "application/json")
			if err != nil {
				ae := &apiError{}
				if !errors.As(err, &ae) {
					ae = &apiError{Kind: classify(err), Err: err.Error()}
				}
				w.WriteHeader(http.StatusConflict)
				_ = json.NewEncoder(w).Encode(ae)
				return
			}
			_ = json.NewEncoder(w).Encode(out)
		})
	}
	decode := func(body []byte, v any) error {
		if err := json.Unmarshal(body, v); err != nil {
			return &apiError{Kind: "invalid", Err: err.Error()}
		}
		return nil
	}
	handle("/ready", func(ctx context.Context, n *node.Node, inc string, _ []byte) (any, error) {
		out := readyResp{Ready: n.Ready(), Incarnation: inc}
		if rn := n.Raft(); rn != nil {
			info := rn.Info()
			out.HasLeader, out.Applied, out.Term, out.Leader = info.HasLeader, info.Applied, info.Term, info.LeaderID
			out.LastIndex = rn.Stats().LastIndex
		}
		p.mu.Lock()
		out.LastPowerLoss = p.lastLoss
		p.mu.Unlock()
		return out, nil
	})
	handle("/persist/register", func(ctx context.Context, n *node.Node, inc string, body []byte) (any, error) {
		var r instReq
		if err := decode(body, &r); err != nil {
			return nil, err
		}
		return struct{}{}, n.Registry().Register(ctx, r.instance(false))
	})
	handle("/persist/deregister", func(ctx context.Context, n *node.Node, inc string, body []byte) (any, error) {
		var r instReq
		if err := decode(body, &r); err != nil {
			return nil, err
		}
		return struct{}{}, n.Registry().Deregister(ctx, r.key())
	})
	handle("/query", func(ctx context.Context, n *node.Node, inc string, body []byte) (any, error) {
		var r queryReq
		if err := decode(body, &r); err != nil {
			return nil, err
		}
		v, err := n.Registry().Query(ctx, model.Query{Service: svcKey(r.Service), Linearizable: r.Linearizable, IncludeDisabled: true})
		if err != nil {
			if errors.Is(err, model.ErrNotFound) {
				return queryResp{Incarnation: inc}, nil // no such service: no instance
			}
			return nil, err
		}
		out := queryResp{Incarnation: inc, Instances: make([]inst, 0, len(v.Instances))}
		for _, in := range v.Instances {
			out.Instances = append(out.Instances, inst{IP: in.IP, Port: in.Port, Val: metaV(in.Metadata)})
		}
		return out, nil
	})
	handle("/session/open", func(ctx context.Context, n *node.Node, inc string, _ []byte) (any, error) {
		s, err := n.Registry().OpenSession(ctx, registry.SessionOptions{})
		if err != nil {
			return nil, err
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.incarnation() != inc { // a power loss came first: the session died with its node
			_ = s.Close()
			return nil, &apiError{Kind: "down", Err: "node restarting"}
		}
		p.sessions[s.ID()] = s
		return sessionResp{ID: s.ID(), Incarnation: inc}, nil
	})
	session := func(id string) (*registry.Session, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		s := p.sessions[id]
		if s == nil {
			return nil, &apiError{Kind: "nosession", Err: "no session " + id}
		}
		return s, nil
	}
	handle("/session/register", func(ctx context.Context, n *node.Node, inc string, body []byte) (any, error) {
		var r instReq
		if err := decode(body, &r); err != nil {
			return nil, err
		}
		s, err := session(r.Session)
		if err != nil {
			return nil, err
		}
		return struct{}{}, s.Register(ctx, r.instance(true))
	})
	handle("/session/deregister", func(ctx context.Context, n *node.Node, inc string, body []byte) (any, error) {
		var r instReq
		if err := decode(body, &r); err != nil {
			return nil, err
		}
		s, err := session(r.Session)
		if err != nil {
			return nil, err
		}
		return struct{}{}, s.Deregister(ctx, r.key())
	})
	handle("/session/close", func(ctx context.Context, n *node.Node, inc string, body []byte) (any, error) {
		var r instReq
		if err := decode(body, &r); err != nil {
			return nil, err
		}
		s, err := session(r.Session)
		if err != nil {
			return nil, err
		}
		p.mu.Lock()
		delete(p.sessions, r.Session)
		p.mu.Unlock()
		return struct{}{}, s.Close()
	})
	handle("/beat", func(ctx context.Context, n *node.Node, inc string, body []byte) (any, error) {
		var r instReq
		if err := decode(body, &r); err != nil {
			return nil, err
		}
		_, err := n.Registry().HeartbeatInstance(ctx, r.instance(true))
		return struct{}{}, err
	})
	handle("/beat/deregister", func(ctx context.Context, n *node.Node, inc string, body []byte) (any, error) {
		var r instReq
		if err := decode(body, &r); err != nil {
			return nil, err
		}
		return struct{}{}, n.Registry().Deregister(ctx, r.key())
	})
	handle("/explain", func(ctx context.Context, n *node.Node, inc string, body []byte) (any, error) {
		var r instReq
		if err := decode(body, &r); err != nil {
			return nil, err
		}
		ex := n.Registry().Explain(r.key())
		out := explainResp{Present: ex.Present, Events: make([]event, 0, len(ex.Events))}
		for _, e := range ex.Events {
			out.Events = append(out.Events, event{Kind: e.Kind.String(), Reason: e.Reason, Node: e.Node, Publisher: e.Publisher})
		}
		return out, nil
	})
	m.HandleFunc("/powerloss", func(w http.ResponseWriter, r *http.Request) {
		// Lose the power (at once, or at a WAL sync), take the node out of
		// the API, answer with the incarnation that died, then keep what
		// was synced and exit (crash): the driver starts the process
		// again and waits for it to be ready.
		fail := func(err error) {
			w.WriteHeader(http.StatusConflict)
			_ = json.NewEncoder(w).Encode(&apiError{Kind: "other", Err: err.Error()})
		}
		if p.trap == nil {
			fail(errors.New("not a strict-FS node"))
			return
		}
		skip, _ := strconv.ParseInt(r.URL.Query().Get("skip"), 10, 64)
		mode, err := p.loseSyncs(r.URL.Query().Get("mode"), skip)
		if err != nil {
			fail(err)
			return
		}
		n, inc, err := p.cut()
		if err != nil {
			fail(err)
			return
		}
		// The whole answer goes out before the crash can end the process:
		// the server writes a response when the handler returns, which the
		// crash could beat (the driver then saw EOF instead of the
		// incarnation, and failed the run's check "inject").
		body, _ := json.Marshal(sessionResp{Incarnation: inc})
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		go func() {
			if err := p.crash(n, &powerLossInfo{Mode: mode, Skip: skip}); err != nil {
				p.log.Error("faultlab: power loss: keeping the synced Raft log failed", "err", err)
				os.Exit(3)
			}
		}()
	})
	return m
}

// classify maps a registry error to an API error kind.
func classify(err error) string {
	switch {
	case errors.Is(err, model.ErrNotFound):
		return "notfound"
	case errors.Is(err, model.ErrInvalid):
		return "invalid"
	case errors.Is(err, registry.ErrNotReady):
		return "notready"
	}
	return "other"
}

func metaV(m model.Metadata) string {
	v, _ := m.Get("v")
	return v
}
