package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "github.com/nacos-group/nacos-sdk-go/v2/api/grpc"
	"github.com/nacos-group/nacos-sdk-go/v2/clients"
	"github.com/nacos-group/nacos-sdk-go/v2/clients/naming_client"
	"github.com/nacos-group/nacos-sdk-go/v2/common/constant"
	"github.com/nacos-group/nacos-sdk-go/v2/vo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// testPKI is a CA with a server certificate for 127.0.0.1 and a client
// certificate, as PEM files.
type testPKI struct {
	dir                                      string
	caFile, certFile, keyFile                string
	clientCert, clientKey                    string
	ca                                       *x509.Certificate
	caKey                                    *ecdsa.PrivateKey
	serverPool                               *x509.CertPool
	otherClientCert, otherClientKey, otherCA string // of another CA
}

func writePEM(t testing.TB, file, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// newCA makes a self-signed CA.
func newCA(t testing.TB, name string) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	return ca, key, der
}

// issue writes a certificate signed by ca and its key.
func issue(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, serial int64, name string, usage x509.ExtKeyUsage, certFile, keyFile string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, certFile, "CERTIFICATE", der)
	kb, _ := x509.MarshalECPrivateKey(key)
	writePEM(t, keyFile, "EC PRIVATE KEY", kb)
}

func newPKI(t testing.TB) *testPKI {
	t.Helper()
	dir := t.TempDir()
	p := &testPKI{dir: dir, caFile: filepath.Join(dir, "ca.pem"), certFile: filepath.Join(dir, "server.pem"), keyFile: filepath.Join(dir, "server.key"),
		clientCert: filepath.Join(dir, "client.pem"), clientKey: filepath.Join(dir, "client.key"),
		otherClientCert: filepath.Join(dir, "other.pem"), otherClientKey: filepath.Join(dir, "other.key"), otherCA: filepath.Join(dir, "other-ca.pem")}
	var der []byte
	p.ca, p.caKey, der = newCA(t, "nacosd test CA")
	writePEM(t, p.caFile, "CERTIFICATE", der)
	issue(t, p.ca, p.caKey, 2, "nacosd", x509.ExtKeyUsageServerAuth, p.certFile, p.keyFile)
	issue(t, p.ca, p.caKey, 3, "client", x509.ExtKeyUsageClientAuth, p.clientCert, p.clientKey)
	other, otherKey, otherDER := newCA(t, "another CA")
	writePEM(t, p.otherCA, "CERTIFICATE", otherDER)
	issue(t, other, otherKey, 2, "intruder", x509.ExtKeyUsageClientAuth, p.otherClientCert, p.otherClientKey)
	p.serverPool = x509.NewCertPool()
	p.serverPool.AddCert(p.ca)
	return p
}

// newTLSClient is a nacos-sdk-go v2 client of a TLS server, with its
// TLS settings (the gRPC port) and the https scheme (the HTTP port).
func newTLSClient(t testing.TB, addr string, tc constant.TLSConfig, opts ...constant.ClientOption) naming_client.INamingClient {
	t.Helper()
	skipUnderRace(t)
	dir := clientDir(t)
	cc := constant.NewClientConfig(append([]constant.ClientOption{
		constant.WithTimeoutMs(3000), constant.WithNotLoadCacheAtStart(true),
		constant.WithLogDir(dir), constant.WithCacheDir(dir), constant.WithLogLevel("error"),
		constant.WithTLS(tc),
	}, opts...)...)
	sc := []constant.ServerConfig{*constant.NewServerConfig("127.0.0.1", httpPort(t, addr), constant.WithScheme("https"))}
	c, err := clients.NewNamingClient(vo.NacosClientParam{ClientConfig: cc, ServerConfigs: sc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseClient)
	return c
}

// TestTLSClients: with -tls-cert and -tls-key, nacos-sdk-go v2 configured
// with its TLS settings (the CA to trust) registers an ephemeral instance
// (gRPC over TLS), a persistent one (HTTPS) and reads them; a plaintext
// gRPC client and a plaintext HTTP request are refused.
func TestTLSClients(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, func(c *Config) { c.TLS = TLSConfig{CertFile: p.certFile, KeyFile: p.keyFile} })
	c := newTLSClient(t, s.HTTPAddr(), constant.TLSConfig{Enable: true, Appointed: true, CaFile: p.caFile})
	register(t, c, "tls-shop", "", "10.50.0.1", 80, 1)
	if ok, err := c.RegisterInstance(vo.RegisterInstanceParam{ServiceName: "tls-db", Ip: "10.50.0.2", Port: 5432, Weight: 1, Enable: true, Healthy: true, Ephemeral: false}); err != nil || !ok {
		t.Fatalf("persistent register over HTTPS: %v %v", ok, err)
	}
	for _, svc := range []string{"tls-shop", "tls-db"} {
		hs, err := c.SelectAllInstances(vo.SelectAllInstancesParam{ServiceName: svc})
		if err != nil || len(hs) != 1 {
			t.Fatalf("select %s over TLS: %v %v", svc, hs, err)
		}
	}
	assertPlaintextRefused(t, s)
}

// assertPlaintextRefused checks that a TLS server refuses plaintext on
// both ports.
func assertPlaintextRefused(t *testing.T, s *Server) {
	t.Helper()
	resp, err := http.Get("http://" + s.HTTPAddr() + "/nacos/v1/ns/instance/list?serviceName=tls-shop")
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatalf("plaintext HTTP served: %s", b)
		}
	}
	cc, err := grpc.Dial(s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if err := wireCheck(cc); err == nil {
		t.Fatal("a plaintext gRPC client was answered")
	}
}

// TestMutualTLS: with -tls-client-ca, the SDK with a client certificate
// of that CA is served over gRPC and HTTPS; a TLS client without a
// certificate, or with one of another CA, is refused on both ports.
func TestMutualTLS(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, func(c *Config) {
		c.TLS = TLSConfig{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.caFile}
	})
	c := newTLSClient(t, s.HTTPAddr(), constant.TLSConfig{Enable: true, Appointed: true, CaFile: p.caFile, CertFile: p.clientCert, KeyFile: p.clientKey})
	register(t, c, "mtls-shop", "", "10.51.0.1", 80, 1)
	if ok, err := c.RegisterInstance(vo.RegisterInstanceParam{ServiceName: "mtls-db", Ip: "10.51.0.2", Port: 5432, Weight: 1, Enable: true, Healthy: true, Ephemeral: false}); err != nil || !ok {
		t.Fatalf("persistent register over mutual TLS: %v %v", ok, err)
	}
	other, err := tls.LoadX509KeyPair(p.otherClientCert, p.otherClientKey)
	if err != nil {
		t.Fatal(err)
	}
	for name, cert := range map[string]*tls.Certificate{"no client certificate": nil, "another CA's certificate": &other} {
		tc := &tls.Config{RootCAs: p.serverPool}
		if cert != nil { // sent whatever CAs the server asks for
			tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
		}
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
		if resp, err := hc.Get("https://" + s.HTTPAddr() + "/nacos/v1/ns/instance/list?serviceName=mtls-shop"); err == nil {
			_ = resp.Body.Close()
			t.Fatalf("HTTPS with %s: answered %d", name, resp.StatusCode)
		}
		cc, err := grpc.Dial(s.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(tc)))
		if err != nil {
			t.Fatal(err)
		}
		if err := wireCheck(cc); err == nil {
			t.Fatalf("gRPC with %s was answered", name)
		}
		_ = cc.Close()
	}
	if n := len(served(t, s, "mtls-shop")); n != 1 {
		t.Fatalf("mtls-shop holds %d", n)
	}
}

// wireCheck sends a ServerCheckRequest.
func wireCheck(cc *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := pb.NewRequestClient(cc).Request(ctx, wirePayload("ServerCheckRequest", map[string]any{}))
	return err
}

// TestTLSFlags: the flags set the files; a key without a certificate, or
// files that do not load, are refused at start.
func TestTLSFlags(t *testing.T) {
	p := newPKI(t)
	cfg, _, err := parseFlags([]string{"-memory", "-tls-cert", p.certFile, "-tls-key", p.keyFile, "-tls-client-ca", p.caFile}, io.Discard)
	if err != nil || cfg.TLS != (TLSConfig{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.caFile}) {
		t.Fatalf("%+v %v", cfg.TLS, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-tls-key", p.keyFile}, "go together"},
		{[]string{"-tls-client-ca", p.caFile}, "go together"},
		{[]string{"-tls-cert", p.certFile, "-tls-key", p.caFile}, "-tls-cert/-tls-key"},
		{[]string{"-tls-cert", p.certFile, "-tls-key", p.keyFile, "-tls-client-ca", p.keyFile}, "-tls-client-ca"},
	} {
		if _, _, err := parseFlags(append([]string{"-memory"}, c.args...), io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.args, err, c.want)
		}
	}
}

// TestTLSReload: a renewed certificate is served without a restart.
func TestTLSReload(t *testing.T) {
	p := newPKI(t)
	r := &certReloader{cfg: TLSConfig{CertFile: p.certFile, KeyFile: p.keyFile}, log: func(string, ...any) {}}
	first, err := r.get(nil)
	if err != nil {
		t.Fatal(err)
	}
	issue(t, p.ca, p.caKey, 9, "renewed", x509.ExtKeyUsageServerAuth, p.certFile, p.keyFile)
	later := time.Now().Add(time.Minute)
	_ = os.Chtimes(p.certFile, later, later)
	_ = os.Chtimes(p.keyFile, later, later)
	r.checkedAt = time.Time{} // the next handshake checks the files
	second, err := r.get(nil)
	if err != nil || second == first {
		t.Fatalf("not reloaded: %v", err)
	}
	if leaf, _ := x509.ParseCertificate(second.Certificate[0]); leaf.Subject.CommonName != "renewed" {
		t.Fatalf("serving %s", leaf.Subject.CommonName)
	}
	// A broken pair keeps the last good one.
	_ = os.WriteFile(p.keyFile, []byte("garbage"), 0o600)
	_ = os.Chtimes(p.keyFile, later.Add(time.Minute), later.Add(time.Minute))
	r.checkedAt = time.Time{}
	if third, err := r.get(nil); err != nil || third != second {
		t.Fatalf("a broken pair: %v", err)
	}
}
