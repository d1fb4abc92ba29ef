package model

import (
	"encoding/binary"
	"math"
)

// AppendMsgpack appends the msgpack encoding of in to b and returns the
// extended slice: byte for byte what Marshal(in) writes (the form stored
// for a persistent instance), without reflection.
func (in *Instance) AppendMsgpack(b []byte) []byte {
	n := 7 // svc, ip, port, weight, healthy, enabled, ephemeral
	if in.ID != "" {
		n++
	}
	if in.Cluster != "" {
		n++
	}
	if in.Metadata.Len() > 0 {
		n++
	}
	b = append(b, 0x80|byte(n))
	if in.ID != "" {
		b = appendStr(appendStr(b, "id"), in.ID)
	}
	b = in.Service.appendMsgpack(appendStr(b, "svc"))
	if in.Cluster != "" {
		b = appendStr(appendStr(b, "cluster"), in.Cluster)
	}
	b = appendStr(appendStr(b, "ip"), in.IP)
	b = appendInt(appendStr(b, "port"), int64(in.Port))
	b = append(appendStr(b, "weight"), 0xcb)
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(in.Weight))
	b = appendBool(appendStr(b, "healthy"), in.Healthy)
	b = appendBool(appendStr(b, "enabled"), in.Enabled)
	b = appendBool(appendStr(b, "ephemeral"), in.Ephemeral)
	if in.Metadata.Len() > 0 {
		b = in.Metadata.appendMsgpack(appendStr(b, "md"))
	}
	return b
}

func (k *ServiceKey) appendMsgpack(b []byte) []byte {
	n := 1
	if k.Namespace != "" {
		n++
	}
	if k.Group != "" {
		n++
	}
	b = append(b, 0x80|byte(n))
	if k.Namespace != "" {
		b = appendStr(appendStr(b, "ns"), k.Namespace)
	}
	if k.Group != "" {
		b = appendStr(appendStr(b, "group"), k.Group)
	}
	return appendStr(appendStr(b, "name"), k.Name)
}

// appendMsgpack is EncodeMsgpack appending to b.
func (m Metadata) appendMsgpack(b []byte) []byte {
	switch n := m.Len(); {
	case n < 16:
		b = append(b, 0x80|byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, 0xde), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xdf), uint32(n))
	}
	for _, s := range m.kv {
		b = appendStr(b, s)
	}
	return b
}

// appendStr appends s as msgpack writes a string.
func appendStr(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n <= math.MaxUint8:
		b = append(b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n))
	}
	return append(b, s...)
}

// appendInt appends n as msgpack writes an int (in the fewest bytes).
func appendInt(b []byte, n int64) []byte {
	if n >= 0 {
		switch u := uint64(n); {
		case u <= 0x7f:
			return append(b, byte(u))
		case u <= math.MaxUint8:
			return append(b, 0xcc, byte(u))
		case u <= math.MaxUint16:
			return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(u))
		case u <= math.MaxUint32:
			return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(u))
		default:
			return binary.BigEndian.AppendUint64(append(b, 0xcf), u)
		}
	}
	switch {
	case n >= -32:
		return append(b, byte(n))
	case n >= math.MinInt8:
		return append(b, 0xd0, byte(n))
	case n >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, 0xd1), uint16(n))
	case n >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, 0xd2), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(n))
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 0xc3)
	}
	return append(b, 0xc2)
}
