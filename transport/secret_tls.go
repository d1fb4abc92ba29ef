package transport

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// secretTLSName is the subject of the certificate derived from the
// Secret. Clients send no server name (TLS 1.3 encrypts certificates).
const secretTLSName = "muster-transport-secret"

// secretTLS returns the TLS configuration that encrypts a connection
// authenticated by the shared secret, when no TLS is configured: TLS 1.3,
// both sides presenting a self-signed certificate of the Ed25519 key that
// HKDF-SHA256 derives from the secret, and each refusing a peer whose
// certificate holds another public key. TLS 1.3's CertificateVerify proves
// that the peer holds the private key, so only holders of the secret
// complete the handshake, and the keys of the session are ephemeral
// (X25519): a secret that leaks later does not decrypt recorded traffic.
// The certificate itself carries no identity; the handshake inside the
// TLS session proves the secret again and names the nodes.
func secretTLS(secret []byte) (*tls.Config, error) {
	seed, err := hkdf.Key(sha256.New, secret, []byte(helloMagic), "cluster key v1", ed25519.SeedSize)
	if err != nil {
		return nil, fmt.Errorf("transport: derive the link key: %w", err)
	}
	key := ed25519.NewKeyFromSeed(seed)
	pub := key.Public().(ed25519.PublicKey)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: secretTLSName},
		NotBefore:             time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:              time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		DNSNames:              []string{secretTLSName},
	}
	// Ed25519 signs deterministically: no randomness is read.
	der, err := x509.CreateCertificate(nil, tmpl, tmpl, pub, key)
	if err != nil {
		return nil, fmt.Errorf("transport: link certificate: %w", err)
	}
	verify := func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return fmt.Errorf("%w: peer presented no certificate", errSecretKey)
		}
		cert, err := x509.ParseCertificate(raw[0])
		if err != nil {
			return fmt.Errorf("%w: %w", errSecretKey, err)
		}
		if k, ok := cert.PublicKey.(ed25519.PublicKey); !ok || !bytes.Equal(k, pub) {
			return errSecretKey
		}
		return nil
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		// The chain is checked by VerifyPeerCertificate, against the
		// derived key: there is no CA.
		InsecureSkipVerify:     true,
		ClientAuth:             tls.RequireAnyClientCert,
		VerifyPeerCertificate:  verify,
		SessionTicketsDisabled: true, // every session proves the key anew
	}, nil
}

// errSecretKey: the peer's TLS certificate is not the one derived from
// the shared secret (it does not hold the secret).
var errSecretKey = errors.New("transport: peer's link certificate is not derived from the shared secret")
