package transport

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"slices"
)

// DefaultVerifyPeerID is the default [TCPConfig.VerifyPeerID]: it accepts
// cert for node if node equals the certificate's subject common name, one
// of its DNS names (SAN) or one of its URIs (SAN, compared as the whole
// string, e.g. "spiffe://cluster/n1" for that node ID). Issue each node a
// certificate naming its own ID only: a certificate that names several IDs
// can claim any of them.
func DefaultVerifyPeerID(node string, cert *x509.Certificate) error {
	if cert == nil {
		return fmt.Errorf("%w: no certificate", ErrIdentity)
	}
	if cert.Subject.CommonName == node || slices.Contains(cert.DNSNames, node) {
		return nil
	}
	for _, u := range cert.URIs {
		if u != nil && u.String() == node {
			return nil
		}
	}
	return fmt.Errorf("%w: node %q is not the certificate's common name %q nor one of its DNS names %q or URIs",
		ErrIdentity, node, cert.Subject.CommonName, cert.DNSNames)
}

// checkPeerIdentity binds the node ID a peer claims to its verified
// certificate, over the configured TLS (TCPConfig.TLS, not the Secret's).
// Without a verified certificate the peer is accepted only if the config
// says the Secret alone may identify peers (SecretIdentity) or Insecure is
// set.
func (t *TCP) checkPeerIdentity(tc *tls.Conn, node string) error {
	st := tc.ConnectionState()
	if len(st.VerifiedChains) == 0 || len(st.VerifiedChains[0]) == 0 {
		if (len(t.cfg.Secret) > 0 && t.cfg.SecretIdentity) || t.cfg.Insecure {
			return nil
		}
		return fmt.Errorf("%w: %w: peer %q presented no verified certificate (set SecretIdentity to accept such peers on the Secret alone)", ErrHandshake, ErrIdentity, node)
	}
	verify := t.cfg.VerifyPeerID
	if verify == nil {
		verify = DefaultVerifyPeerID
	}
	if err := verify(node, st.VerifiedChains[0][0]); err != nil {
		return fmt.Errorf("%w: %w: peer claims %q: %w", ErrHandshake, ErrIdentity, node, err)
	}
	return nil
}

// certIdentity reports whether every accepted peer's node ID is bound to
// its verified certificate: TLS without SecretIdentity or Insecure, under
// which checkPeerIdentity refuses a peer without one.
func (c TCPConfig) certIdentity() bool {
	return c.TLS != nil && !c.SecretIdentity && !c.Insecure
}

// pathByDial reports whether this node's calls go only over connections it
// dialled (see TCP.pathByDial): whenever peers' node IDs are not bound to
// certificates, unless Insecure without Resolve lets the connections peers
// dialled carry them.
func (c TCPConfig) pathByDial() bool {
	return !c.certIdentity() && (c.Resolve != nil || !c.Insecure)
}
