package transport

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/url"
	"testing"

	"github.com/muster-io/muster/model"
)

func FuzzFrame(f *testing.F) {
	for _, h := range []header{
		{flags: flagRequest, kind: 1, id: 1, timeout: 5_000_000},
		{flags: flagOneWay, kind: 0xffff},
		{flags: flagResponse, id: 1 << 40},
		{flags: flagResponse | flagError, id: 3, code: codeRemote},
		{flags: flagGoAway},
		{flags: flagPing},
		{flags: flagPong, id: 2},
	} {
		f.Add(encodeFrame(h, []byte("body"))[4:])
	}
	f.Add([]byte{0x95, 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1, 2, 3})
	f.Add([]byte{0x9f, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, p []byte) {
		const limit = 64
		h, body, err := decodeFrame(p, limit)
		if err != nil {
			return
		}
		if len(body) > limit {
			t.Fatalf("accepted a body of %d bytes", len(body))
		}
		// What was accepted re-encodes to a frame that decodes the same.
		again, body2, err := decodeFrame(encodeFrame(h, body)[4:], limit)
		if err != nil || again != h || !bytes.Equal(body, body2) {
			t.Fatalf("round trip: %+v %q -> %+v %q %v", h, body, again, body2, err)
		}
	})
}

func FuzzHello(f *testing.F) {
	for _, h := range []hello{
		{Magic: helloMagic, Version: helloVersion, Node: "a", To: "b", Nonce: make([]byte, nonceLen)},
		{Proof: make([]byte, 32)},
		{Status: statusDuplicate},
	} {
		b, err := model.Marshal(&h)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0x81, 0xa1, 'c', 0xc4, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseHello(b)
		if err != nil {
			return
		}
		_ = checkOpening(h)
		_ = verifyProof([]byte("0123456789abcdef"), h.Proof, "client", h.Nonce, h.Nonce, h.Node, h.To)
		// The framed form reads back the same.
		var buf bytes.Buffer
		if err := writeHello(&buf, h); err != nil {
			t.Fatal(err)
		}
		again, err := readHello(&buf)
		if err != nil || again.Node != h.Node || again.To != h.To || !bytes.Equal(again.Nonce, h.Nonce) || !bytes.Equal(again.Proof, h.Proof) || again.Status != h.Status {
			t.Fatalf("round trip: %+v -> %+v %v", h, again, err)
		}
	})
}

// FuzzConnStream feeds arbitrary bytes to a connection's reader, past the
// handshake, with handlers installed: it must never panic and must end
// cleanly when the stream does.
func FuzzConnStream(f *testing.F) {
	f.Add(encodeFrame(header{flags: flagRequest, kind: 1, id: 1, timeout: 1000}, []byte("x")))
	f.Add(append(encodeFrame(header{flags: flagOneWay, kind: 2}, nil), encodeFrame(header{flags: flagGoAway}, nil)...))
	f.Add(encodeFrame(header{flags: flagResponse | flagError, id: 9, code: codeBusy}, []byte("busy")))
	f.Add(append(encodeFrame(header{flags: flagPing}, nil), encodeFrame(header{flags: flagPong}, nil)...))
	f.Add(append(binary.BigEndian.AppendUint32(nil, 100_000), 0x95, flagOneWay, 1, 0, 0, 0)) // declares more than it sends
	f.Add([]byte{0, 0, 0, 1, 0x95})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := DefaultTCPConfig()
		cfg.NodeID = "a"
		cfg.Secret = testSecret
		cfg.MaxFrameSize = 256
		tr, err := NewTCP(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		tr.Handle(1, echo)
		tr.Handle(2, func(context.Context, string, []byte) ([]byte, error) { return nil, errors.New("no") })
		local, remote := net.Pipe()
		c := tr.newConn(local, "z", "z", protoVersion)
		if !tr.installInbound(context.Background(), c) {
			t.Fatal("not installed")
		}
		c.start()
		drained := make(chan struct{})
		go func() {
			defer close(drained)
			_, _ = io.Copy(io.Discard, remote)
		}()
		_, _ = remote.Write(data) // fails once the reader gives up
		_ = remote.Close()
		<-drained
		_ = tr.Close()
	})
}

// FuzzVerifyPeerID: the default identity check accepts a node ID only if
// the certificate names it exactly, and never panics.
func FuzzVerifyPeerID(f *testing.F) {
	f.Add("n1", "n1", "n1.example", "spiffe://muster/n1")
	f.Add("n2", "n1", "", "")
	f.Add("", "", "", "")
	f.Add("spiffe://muster/n1", "x", "y", "spiffe://muster/n1")
	f.Fuzz(func(t *testing.T, node, cn, dns, uri string) {
		cert := &x509.Certificate{DNSNames: []string{dns}}
		cert.Subject.CommonName = cn
		if u, err := url.Parse(uri); err == nil {
			cert.URIs = []*url.URL{u}
		}
		err := DefaultVerifyPeerID(node, cert)
		named := node == cn || node == dns || (len(cert.URIs) == 1 && cert.URIs[0].String() == node)
		if (err == nil) != named {
			t.Fatalf("node %q, cn %q, dns %q, uri %q: %v", node, cn, dns, uri, err)
		}
		if err != nil && !errors.Is(err, ErrIdentity) {
			t.Fatalf("error does not wrap ErrIdentity: %v", err)
		}
	})
}
