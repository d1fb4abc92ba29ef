// Command nacosd is a Nacos-compatible naming server built on Muster: the
// Nacos 2.x gRPC protocol and the 1.x HTTP OpenAPI, served from a Muster
// registry, standalone or as a cluster. See README.md.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "nacosd:", err)
		os.Exit(2)
	}
}

// parseFlags turns the command line into a Config.
func parseFlags(args []string, out io.Writer) (Config, slog.Level, error) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("nacosd", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&cfg.HTTPAddr, "addr", cfg.HTTPAddr, "HTTP (Nacos 1.x OpenAPI) address; gRPC listens on its port + 1000")
	fs.StringVar(&cfg.DataDir, "data", "", "directory of the persistent data: persistent instances, service definitions, users (default $HOME/nacosd/data/<node-id>, or .../standalone)")
	memory := fs.Bool("memory", false, "keep the persistent data in memory only: a restart loses persistent instances, service definitions and users")
	fs.StringVar(&cfg.NodeID, "node-id", "", "this node's ID in a cluster (one of the peers)")
	peers := fs.String("peers", "", "cluster members as id=host:port,... (HTTP addresses; this node included)")
	peersFile := fs.String("cluster-conf", "", "file listing the cluster members, one id=host:port a line (# comments)")
	secretFile := fs.String("secret-file", "", "file holding the node-to-node secret (required in a cluster; ≥ 16 bytes)")
	fs.IntVar(&cfg.MaxSubscriptions, "max-subscriptions", cfg.MaxSubscriptions, "cap on the subscriptions (gRPC and UDP) of all clients")
	fs.IntVar(&cfg.UDPSubsPerIP, "udp-subs-per-ip", cfg.UDPSubsPerIP, "cap on the UDP (Nacos 1.x) subscriptions from one source IP")
	fs.BoolVar(&cfg.Auth.Enabled, "auth", false, "authenticate and authorize clients (Nacos's nacos.core.auth.enabled)")
	keyFile := fs.String("auth-key-file", "", "file holding the token signing key, base64, ≥ 32 bytes decoded (Nacos's token.secret.key)")
	fs.DurationVar(&cfg.Auth.TokenTTL, "auth-token-ttl", defaultTokenTTL, "how long a token is valid (Nacos's token.expire.seconds)")
	adminFile := fs.String("admin-password-file", "", "file holding the password of the admin user \"nacos\", created at start if missing")
	fs.BoolVar(&cfg.Open, "open", false, "serve clients without authentication on a non-loopback address: anyone reaching the ports may read and change every namespace")
	fs.IntVar(&cfg.Limits.ConnsPerIP, "max-conns-per-ip", cfg.Limits.ConnsPerIP, "cap on the gRPC connections from one source IP (0: none)")
	fs.IntVar(&cfg.Limits.SubsPerConn, "max-subs-per-conn", cfg.Limits.SubsPerConn, "cap on the subscriptions of one gRPC connection (0: none)")
	fs.IntVar(&cfg.Limits.InstancesPerConn, "max-instances-per-conn", cfg.Limits.InstancesPerConn, "cap on the ephemeral instances of one gRPC connection (0: none)")
	fs.IntVar(&cfg.Limits.InstancesPerIP, "max-instances-per-ip", cfg.Limits.InstancesPerIP, "cap on the ephemeral instances of all gRPC connections from one source IP (0: none)")
	fs.Float64Var(&cfg.Limits.RequestsPerSec, "max-requests-per-sec", cfg.Limits.RequestsPerSec, "cap on the requests a second of one gRPC connection and of one HTTP source IP, bursts of 5 s allowed (0: none)")
	fs.StringVar(&cfg.TLS.CertFile, "tls-cert", "", "serve the client ports (HTTP and gRPC) over TLS with this certificate (PEM; re-read when it changes)")
	fs.StringVar(&cfg.TLS.KeyFile, "tls-key", "", "the key of -tls-cert (PEM)")
	fs.StringVar(&cfg.TLS.ClientCAFile, "tls-client-ca", "", "with -tls-cert: serve only clients with a certificate signed by these CAs (PEM)")
	withConsole := fs.Bool("console", true, "serve the web console at /nacos/ (beyond loopback it needs -auth)")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprintln(out, "usage: nacosd [flags]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, 0, err
	}
	if fs.NArg() > 0 {
		return cfg, 0, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		return cfg, 0, fmt.Errorf("-log-level: %w", err)
	}
	var list []string
	if *peers != "" {
		list = append(list, strings.Split(*peers, ",")...)
	}
	if *peersFile != "" {
		b, err := os.ReadFile(*peersFile)
		if err != nil {
			return cfg, 0, fmt.Errorf("-cluster-conf: %w", err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			line, _, _ := strings.Cut(sc.Text(), "#")
			if line = strings.TrimSpace(line); line != "" {
				list = append(list, line)
			}
		}
	}
	for _, p := range list {
		id, addr, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok {
			return cfg, 0, fmt.Errorf("peer %q: want id=host:port", p)
		}
		cfg.Peers = append(cfg.Peers, Peer{ID: id, Addr: addr})
	}
	if *secretFile != "" {
		b, err := os.ReadFile(*secretFile)
		if err != nil {
			return cfg, 0, fmt.Errorf("-secret-file: %w", err)
		}
		cfg.Secret = bytes.TrimSpace(b)
	}
	if *keyFile != "" {
		b, err := os.ReadFile(*keyFile)
		if err != nil {
			return cfg, 0, fmt.Errorf("-auth-key-file: %w", err)
		}
		if cfg.Auth.Key, err = DecodeAuthKey(string(b)); err != nil {
			return cfg, 0, fmt.Errorf("-auth-key-file: %w", err)
		}
	}
	if *adminFile != "" {
		b, err := os.ReadFile(*adminFile)
		if err != nil {
			return cfg, 0, fmt.Errorf("-admin-password-file: %w", err)
		}
		cfg.Auth.AdminPassword = strings.TrimRight(string(b), "\r\n")
	}
	if !cfg.Auth.Enabled && (*keyFile != "" || *adminFile != "") {
		return cfg, 0, errors.New("-auth-key-file and -admin-password-file need -auth")
	}
	if len(cfg.Peers) == 0 && (cfg.NodeID != "" || *secretFile != "") {
		return cfg, 0, errors.New("-node-id and -secret-file need -peers or -cluster-conf")
	}
	cfg.NoConsole = !*withConsole
	if err := dataDir(&cfg, *memory); err != nil {
		return cfg, 0, err
	}
	return cfg, lv, cfg.Validate()
}

// dataDir applies -data and -memory: durable by default, in
// $HOME/nacosd/data/<node-id> (standalone: .../standalone), as Nacos keeps
// its data under its home's data/.
func dataDir(cfg *Config, memory bool) error {
	switch {
	case memory && cfg.DataDir != "":
		return errors.New("-data and -memory exclude each other")
	case memory, cfg.DataDir != "":
		return nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return fmt.Errorf("no directory for the persistent data: %w; give one (-data DIR), or keep it in memory (-memory)", err)
	}
	id := cfg.NodeID
	if id == "" {
		id = "standalone"
	}
	if id != filepath.Base(id) || id == "." || id == ".." {
		return fmt.Errorf("-node-id %q cannot name the default data directory; give one (-data DIR)", id)
	}
	cfg.DataDir = filepath.Join(home, "nacosd", "data", id)
	return nil
}

func run(args []string, out io.Writer) error {
	cfg, lv, err := parseFlags(args, out)
	if err != nil {
		return err
	}
	cfg.Logger = slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: lv}))
	s, err := NewServer(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := s.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	stop()
	cfg.Logger.Info("signal received; shutting down (clients are told to reconnect elsewhere)")
	return s.Close()
}
