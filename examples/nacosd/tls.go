package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// TLS on the client ports (issue 28 item 3): the HTTP OpenAPI and the gRPC
// port serve TLS 1.2 or later with one certificate; with a client CA,
// only clients presenting a certificate it signed are served (mutual TLS).
// The UDP pushes to 1.x clients stay plain (the 1.x clients know no
// other); the node-to-node transport has its own secret.
//
// The certificate and key are read again when their files change (checked
// at most every certCheckEvery, on a handshake), so a renewed certificate
// is served without a restart; a pair that no longer loads keeps the last
// good one, and is logged.

// TLSConfig configures TLS on the client ports.
type TLSConfig struct {
	// CertFile and KeyFile are the server's certificate (PEM, the chain
	// first to last) and key. Both or neither.
	CertFile, KeyFile string
	// ClientCAFile, when set, holds the CA certificates (PEM) that sign the
	// clients' certificates: a client without one is refused at the
	// handshake.
	ClientCAFile string
}

// Enabled reports whether TLS is on.
func (c *TLSConfig) Enabled() bool { return c.CertFile != "" }

// Validate checks that the files are given together and load.
func (c *TLSConfig) Validate() error {
	switch {
	case c.CertFile == "" && c.KeyFile == "" && c.ClientCAFile == "":
		return nil
	case c.CertFile == "" || c.KeyFile == "":
		return errors.New("-tls-cert and -tls-key go together")
	}
	if _, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile); err != nil {
		return fmt.Errorf("-tls-cert/-tls-key: %w", err)
	}
	if c.ClientCAFile != "" {
		if _, err := loadCAs(c.ClientCAFile); err != nil {
			return fmt.Errorf("-tls-client-ca: %w", err)
		}
	}
	return nil
}

func loadCAs(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, nil
}

// certCheckEvery spaces the checks of the certificate files.
const certCheckEvery = 10 * time.Second

// certReloader serves the certificate pair, read again when its files
// change.
type certReloader struct {
	cfg TLSConfig
	log func(msg string, args ...any)

	mu        sync.Mutex
	cert      *tls.Certificate
	certMod   time.Time
	keyMod    time.Time
	checkedAt time.Time
}

func modTime(file string) time.Time {
	fi, err := os.Stat(file)
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
}

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now() // real time
	if r.cert != nil && now.Sub(r.checkedAt) < certCheckEvery {
		return r.cert, nil
	}
	r.checkedAt = now
	cm, km := modTime(r.cfg.CertFile), modTime(r.cfg.KeyFile)
	if r.cert != nil && cm.Equal(r.certMod) && km.Equal(r.keyMod) {
		return r.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(r.cfg.CertFile, r.cfg.KeyFile)
	if err != nil {
		if r.cert == nil {
			return nil, err
		}
		r.log("the TLS certificate files changed but do not load; serving the last good pair", "err", err)
		r.certMod, r.keyMod = cm, km // not again until they change
		return r.cert, nil
	}
	if r.cert != nil {
		r.log("TLS certificate reloaded", "cert", r.cfg.CertFile)
	}
	r.cert, r.certMod, r.keyMod = &cert, cm, km
	return r.cert, nil
}

// serverTLS returns the TLS configuration of the client ports, or nil
// when TLS is off.
func (s *Server) serverTLS() (*tls.Config, error) {
	c := s.cfg.TLS
	if !c.Enabled() {
		return nil, nil
	}
	r := &certReloader{cfg: c, log: s.log.Warn}
	if _, err := r.get(nil); err != nil {
		return nil, fmt.Errorf("-tls-cert/-tls-key: %w", err)
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.get}
	if c.ClientCAFile != "" {
		pool, err := loadCAs(c.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("-tls-client-ca: %w", err)
		}
		tc.ClientCAs, tc.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return tc, nil
}
