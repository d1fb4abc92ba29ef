package transport

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/muster-io/muster/model"
)

// Handshake wire format: each message is a 4-byte big-endian length and a
// msgpack map (a hello), at most maxHelloLen bytes.
//
// Versions. Every opening hello carries Version 1 ("v"): version-1 nodes
// refuse any other value, so it stays 1 for as long as they must be able
// to connect. The highest protocol version a node speaks travels in Max
// ("x"), a field version-1 nodes skip; a hello without it is from a
// version-1 node. A connection runs the lower of both sides' versions:
//
//   - 1: frames of type request, response, one-way and go-away only; no
//     ping or pong (a version-1 node closes a connection on a frame type it
//     does not know) and so no idle deadline.
//   - 2: ping and pong, the idle deadline, and the takeover probe that
//     demands a pong (see TCP.installInbound).
const (
	helloMagic   = "muster-transport"
	helloVersion = 1 // the Version every opening hello carries
	protoVersion = 2 // the highest protocol version this build speaks, sent in Max
	nonceLen     = 32
	maxHelloLen  = 4096
	maxNodeIDLen = 255
)

// Handshake status sent by the server in its final message.
const (
	statusOK        = 0 // connection accepted
	statusDuplicate = 1 // a preferred connection between the pair already exists; use it
)

// hello is every handshake message; each step fills the fields it needs.
//
//  1. client → server: Magic, Version, Max, Node (client), To (expected server), Nonce
//  2. server → client: Magic, Version, Max, Node (server), Nonce, Proof (server proof)
//  3. client → server: Proof (client proof)
//  4. server → client: Status
//
// Proofs are HMAC-SHA256 under the shared secret of both nonces and both
// IDs, with a different label per direction; without a secret they are
// empty. The secret itself is never sent.
type hello struct {
	Magic   string `msgpack:"m,omitempty"`
	Version uint8  `msgpack:"v,omitempty"`
	Max     uint8  `msgpack:"x,omitempty"` // highest protocol version spoken; absent: 1
	Node    string `msgpack:"n,omitempty"`
	To      string `msgpack:"t,omitempty"`
	Nonce   []byte `msgpack:"c,omitempty"`
	Proof   []byte `msgpack:"p,omitempty"`
	Status  uint8  `msgpack:"s,omitempty"`
}

// writeHello sends one handshake message.
func writeHello(w io.Writer, h hello) error {
	b, err := model.Marshal(&h)
	if err != nil {
		return err
	}
	out := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(b)), uint32(len(b)))
	_, err = w.Write(append(out, b...))
	return err
}

// readHello reads one handshake message.
func readHello(r io.Reader) (hello, error) {
	var lb [4]byte
	if _, err := io.ReadFull(r, lb[:]); err != nil {
		return hello{}, err
	}
	n := binary.BigEndian.Uint32(lb[:])
	if n == 0 || n > maxHelloLen {
		return hello{}, refuse(RefuseProtocol, fmt.Errorf("%w: handshake message of %d bytes", ErrHandshake, n))
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return hello{}, err
	}
	return parseHello(b)
}

// parseHello decodes an untrusted handshake message.
func parseHello(b []byte) (hello, error) {
	h, err := parseHello1(b)
	if err != nil {
		return hello{}, refuse(RefuseProtocol, err)
	}
	return h, nil
}

func parseHello1(b []byte) (hello, error) {
	var h hello
	if err := model.Unmarshal(b, &h); err != nil {
		return hello{}, fmt.Errorf("%w: %w", ErrHandshake, err)
	}
	if len(h.Node) > maxNodeIDLen || len(h.To) > maxNodeIDLen {
		return hello{}, fmt.Errorf("%w: node ID longer than %d bytes", ErrHandshake, maxNodeIDLen)
	}
	if h.Nonce != nil && len(h.Nonce) != nonceLen {
		return hello{}, fmt.Errorf("%w: nonce of %d bytes, want %d", ErrHandshake, len(h.Nonce), nonceLen)
	}
	if h.Proof != nil && len(h.Proof) != sha256.Size {
		return hello{}, fmt.Errorf("%w: proof of %d bytes, want %d", ErrHandshake, len(h.Proof), sha256.Size)
	}
	return h, nil
}

// checkOpening validates the first message of a handshake (either side's).
func checkOpening(h hello) error {
	if err := checkOpening1(h); err != nil {
		return refuse(RefuseProtocol, err)
	}
	return nil
}

func checkOpening1(h hello) error {
	switch {
	case h.Magic != helloMagic:
		return fmt.Errorf("%w: not a muster transport peer", ErrHandshake)
	case h.Version != helloVersion:
		return fmt.Errorf("%w: protocol version %d, want %d", ErrHandshake, h.Version, helloVersion)
	case h.Node == "":
		return fmt.Errorf("%w: empty node ID", ErrHandshake)
	case len(h.Nonce) != nonceLen:
		return fmt.Errorf("%w: missing nonce", ErrHandshake)
	}
	return nil
}

// negotiate returns the protocol version of a connection whose peer sent
// the opening hello h (checked by checkOpening).
func negotiate(h hello) uint8 {
	return min(protoVersion, max(h.Version, h.Max))
}

// proof computes the HMAC one side sends: label names the direction.
func proof(secret []byte, label string, clientNonce, serverNonce []byte, client, server string) []byte {
	m := hmac.New(sha256.New, secret)
	for _, f := range [][]byte{[]byte(helloMagic), []byte(label), clientNonce, serverNonce, []byte(client), []byte(server)} {
		var l [4]byte
		binary.BigEndian.PutUint32(l[:], uint32(len(f)))
		m.Write(l[:])
		m.Write(f)
	}
	return m.Sum(nil)
}

// verifyProof checks got against the expected proof in constant time. With
// no secret it requires an empty proof, so that a peer configured with a
// secret and one without refuse each other.
func verifyProof(secret, got []byte, label string, clientNonce, serverNonce []byte, client, server string) error {
	if len(secret) == 0 {
		if len(got) != 0 {
			return refuse(RefuseSecret, fmt.Errorf("%w: peer sent a proof but no secret is configured", ErrHandshake))
		}
		return nil
	}
	if !hmac.Equal(got, proof(secret, label, clientNonce, serverNonce, client, server)) {
		return refuse(RefuseSecret, fmt.Errorf("%w: wrong or missing shared secret", ErrHandshake))
	}
	return nil
}
