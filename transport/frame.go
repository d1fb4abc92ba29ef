package transport

import (
	"encoding/binary"
	"fmt"
)

// Frame flags (header field 0). Exactly one of request, response, one-way,
// go-away, ping and pong is set; error qualifies a response. A ping is
// answered at once by a pong; both only show that the connection is alive
// (see TCPConfig.IdleTimeout).
const (
	flagRequest  = 1 << 0
	flagResponse = 1 << 1
	flagOneWay   = 1 << 2
	flagError    = 1 << 3
	flagGoAway   = 1 << 4
	flagPing     = 1 << 5
	flagPong     = 1 << 6
)

// Error codes of an error response (header field 4); the body holds the text.
const (
	codeRemote    = 1 // the handler returned an error: *RemoteError
	codeNoHandler = 2 // ErrNoHandler
	codeTooLarge  = 3 // the response exceeded the responder's MaxFrameSize: ErrTooLarge
	codeBusy      = 4 // MaxInflight handlers were running: ErrBusy
)

// maxHeaderLen bounds the encoded header: a fixarray of five uint64s.
const maxHeaderLen = 1 + 5*9

// header is the msgpack array [flags, kind, id, timeout µs, code] that
// starts every frame after the length prefix. Decoders accept more than
// five elements (later versions may add fields) if they are unsigned
// integers, and ignore them.
type header struct {
	flags   uint64
	kind    Kind
	id      uint64
	timeout uint64 // remaining ctx time of a request in microseconds; 0: none
	code    uint64
}

// appendFrame appends the length prefix, header and body of one frame.
func appendFrame(b []byte, h header, body []byte) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0, 0x95)
	b = appendUint(b, h.flags)
	b = appendUint(b, uint64(h.kind))
	b = appendUint(b, h.id)
	b = appendUint(b, h.timeout)
	b = appendUint(b, h.code)
	b = append(b, body...)
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	return b
}

// encodeFrame returns a new frame holding h and body.
func encodeFrame(h header, body []byte) []byte {
	return appendFrame(make([]byte, 0, 4+maxHeaderLen+len(body)), h, body)
}

// appendUint appends v in msgpack's shortest unsigned encoding.
func appendUint(b []byte, v uint64) []byte {
	switch {
	case v <= 0x7f:
		return append(b, byte(v))
	case v <= 0xff:
		return append(b, 0xcc, byte(v))
	case v <= 0xffff:
		return append(b, 0xcd, byte(v>>8), byte(v))
	case v <= 0xffffffff:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
}

// readUint decodes one msgpack unsigned integer (or non-negative fixint)
// at the start of b and returns it with its length.
func readUint(b []byte) (uint64, int, error) {
	if len(b) == 0 {
		return 0, 0, fmt.Errorf("%w: header truncated", ErrMalformed)
	}
	c := b[0]
	need := 0
	switch {
	case c <= 0x7f:
		return uint64(c), 1, nil
	case c == 0xcc:
		need = 1
	case c == 0xcd:
		need = 2
	case c == 0xce:
		need = 4
	case c == 0xcf:
		need = 8
	default:
		return 0, 0, fmt.Errorf("%w: header field is not an unsigned integer (0x%02x)", ErrMalformed, c)
	}
	if len(b) < 1+need {
		return 0, 0, fmt.Errorf("%w: header truncated", ErrMalformed)
	}
	var v uint64
	for _, x := range b[1 : 1+need] {
		v = v<<8 | uint64(x)
	}
	return v, 1 + need, nil
}

// decodeFrame parses the payload of one frame (what follows the length
// prefix) into its header and body. The body aliases p. It checks
// everything a receiver relies on: the header shape, one known frame type,
// a non-zero kind for requests and one-way messages, and a body no longer
// than maxBody.
func decodeFrame(p []byte, maxBody int) (header, []byte, error) {
	var h header
	if len(p) == 0 {
		return h, nil, fmt.Errorf("%w: empty frame", ErrMalformed)
	}
	c := p[0]
	if c < 0x95 || c > 0x9f {
		return h, nil, fmt.Errorf("%w: header is not an array of 5 to 15 fields (0x%02x)", ErrMalformed, c)
	}
	n := int(c & 0x0f)
	off := 1
	var f [5]uint64
	for i := range n {
		v, l, err := readUint(p[off:])
		if err != nil {
			return h, nil, err
		}
		off += l
		if i < len(f) {
			f[i] = v
		}
	}
	h = header{flags: f[0], id: f[2], timeout: f[3], code: f[4]}
	if f[1] > 0xffff {
		return h, nil, fmt.Errorf("%w: kind %d out of range", ErrMalformed, f[1])
	}
	h.kind = Kind(f[1])
	body := p[off:]
	if len(body) > maxBody {
		return h, nil, fmt.Errorf("%w: body of %d bytes, limit %d", ErrTooLarge, len(body), maxBody)
	}
	switch h.flags {
	case flagRequest, flagOneWay:
		if h.kind == 0 {
			return h, nil, fmt.Errorf("%w: kind 0", ErrMalformed)
		}
	case flagResponse, flagGoAway, flagPing, flagPong:
	case flagResponse | flagError:
		if h.code < codeRemote || h.code > codeBusy {
			return h, nil, fmt.Errorf("%w: unknown error code %d", ErrMalformed, h.code)
		}
	default:
		return h, nil, fmt.Errorf("%w: bad flags 0x%x", ErrMalformed, h.flags)
	}
	return h, body, nil
}
