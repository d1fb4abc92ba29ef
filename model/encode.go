package model

import (
	"encoding/binary"
	"math"
	"slices"
)

// AppendMsgpack appends the msgpack encoding of in to b and returns the
// extended slice: byte for byte what Marshal(in) writes (the form stored
// for a persistent instance), without reflection. It grows b once, to
// what the encoding may need, so a nil b costs one allocation.
func (in *Instance) AppendMsgpack(b []byte) []byte {
	b = slices.Grow(b, in.encodedLenBound())
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

// encodedLenBound bounds the length of in's encoding: the map headers,
// the field names, the fixed-size values (an integer takes at most 9
// bytes, a float 9, a bool 1), and each string with the longest header (5).
func (in *Instance) encodedLenBound() int {
	const names = len("id") + len("svc") + len("ns") + len("group") + len("name") + len("cluster") + len("ip") +
		len("port") + len("weight") + len("healthy") + len("enabled") + len("ephemeral") + len("md")
	const fixed = 2 + 13 + names + 9 + 9 + 3 // map headers, name headers, port, weight, bools
	k := &in.Service
	return fixed + 6*5 + len(in.ID) + len(k.Namespace) + len(k.Group) + len(k.Name) + len(in.Cluster) + len(in.IP) + len(in.Metadata.p) + 1
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

// appendMsgpack is EncodeMsgpack appending to b: m's encoding itself.
func (m Metadata) appendMsgpack(b []byte) []byte {
	if m.p == "" {
		return append(b, 0x80)
	}
	return append(b, m.p...)
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

// AppendMsgpack appends the msgpack encoding of c to b and returns the
// extended slice: byte for byte what msgpack writes for c (Marshal; the
// Raft log's form), without reflection.
func (c *Command) AppendMsgpack(b []byte) []byte {
	n := 6 // op, svc, skey, inst, key, patch: structs are never omitted
	if c.Upsert {
		n++
	}
	if c.Healthy {
		n++
	}
	b = append(b, 0x80|byte(n))
	b = append(appendStr(b, "op"), 0xcc, byte(c.Op))
	b = c.Service.appendMsgpack(appendStr(b, "svc"))
	if c.Upsert {
		b = appendBool(appendStr(b, "up"), true)
	}
	b = c.SvcKey.appendMsgpack(appendStr(b, "skey"))
	b = c.Instance.AppendMsgpack(appendStr(b, "inst"))
	b = c.Key.appendMsgpack(appendStr(b, "key"))
	b = c.Patch.appendMsgpack(appendStr(b, "patch"))
	if c.Healthy {
		b = appendBool(appendStr(b, "healthy"), true)
	}
	return b
}

func (k *InstanceKey) appendMsgpack(b []byte) []byte {
	n := 3
	if k.Cluster != "" {
		n++
	}
	b = append(b, 0x80|byte(n))
	b = k.Service.appendMsgpack(appendStr(b, "svc"))
	if k.Cluster != "" {
		b = appendStr(appendStr(b, "cluster"), k.Cluster)
	}
	b = appendStr(appendStr(b, "ip"), k.IP)
	return appendInt(appendStr(b, "port"), int64(k.Port))
}

func (p *InstancePatch) appendMsgpack(b []byte) []byte {
	n := 1
	if p.Weight != nil {
		n++
	}
	if p.Enabled != nil {
		n++
	}
	if p.Metadata.Len() > 0 {
		n++
	}
	b = append(b, 0x80|byte(n))
	b = p.Key.appendMsgpack(appendStr(b, "key"))
	if p.Weight != nil {
		b = appendFloat(appendStr(b, "weight"), *p.Weight)
	}
	if p.Enabled != nil {
		b = appendBool(appendStr(b, "enabled"), *p.Enabled)
	}
	if p.Metadata.Len() > 0 {
		b = p.Metadata.appendMsgpack(appendStr(b, "md"))
	}
	return b
}

func (s *Service) appendMsgpack(b []byte) []byte {
	n := 2
	if s.ProtectThreshold != 0 {
		n++
	}
	if s.Metadata.Len() > 0 {
		n++
	}
	if len(s.Clusters) > 0 {
		n++
	}
	b = append(b, 0x80|byte(n))
	b = s.Key.appendMsgpack(appendStr(b, "key"))
	b = appendBool(appendStr(b, "ephemeral"), s.Ephemeral)
	if s.ProtectThreshold != 0 {
		b = appendFloat(appendStr(b, "protect"), s.ProtectThreshold)
	}
	if s.Metadata.Len() > 0 {
		b = s.Metadata.appendMsgpack(appendStr(b, "md"))
	}
	if len(s.Clusters) > 0 {
		b = appendArrayLen(appendStr(b, "clusters"), len(s.Clusters))
		for i := range s.Clusters {
			b = s.Clusters[i].appendMsgpack(b)
		}
	}
	return b
}

func (c *Cluster) appendMsgpack(b []byte) []byte {
	n := 2
	if c.Metadata.Len() > 0 {
		n++
	}
	b = append(b, 0x80|byte(n))
	b = appendStr(appendStr(b, "name"), c.Name)
	b = c.HealthCheck.appendMsgpack(appendStr(b, "check"))
	if c.Metadata.Len() > 0 {
		b = c.Metadata.appendMsgpack(appendStr(b, "md"))
	}
	return b
}

func (h *HealthCheck) appendMsgpack(b []byte) []byte {
	n := 0
	for _, set := range [...]bool{h.Type != "", h.Port != 0, h.Path != "", h.Headers.Len() > 0,
		len(h.ExpectedCodes) > 0, h.User != "", h.Password != "", h.Command != ""} {
		if set {
			n++
		}
	}
	b = append(b, 0x80|byte(n))
	if h.Type != "" {
		b = appendStr(appendStr(b, "type"), string(h.Type))
	}
	if h.Port != 0 {
		b = appendInt(appendStr(b, "port"), int64(h.Port))
	}
	if h.Path != "" {
		b = appendStr(appendStr(b, "path"), h.Path)
	}
	if h.Headers.Len() > 0 {
		b = h.Headers.appendMsgpack(appendStr(b, "headers"))
	}
	if len(h.ExpectedCodes) > 0 {
		b = appendArrayLen(appendStr(b, "codes"), len(h.ExpectedCodes))
		for _, code := range h.ExpectedCodes {
			b = appendInt(b, int64(code))
		}
	}
	if h.User != "" {
		b = appendStr(appendStr(b, "user"), h.User)
	}
	if h.Password != "" {
		b = appendStr(appendStr(b, "password"), h.Password)
	}
	if h.Command != "" {
		b = appendStr(appendStr(b, "cmd"), h.Command)
	}
	return b
}

func appendFloat(b []byte, f float64) []byte {
	return binary.BigEndian.AppendUint64(append(b, 0xcb), math.Float64bits(f))
}

func appendArrayLen(b []byte, n int) []byte { return appendCollectionLen(b, n, 0x90, 0xdc, 0xdd) }

// appendCollectionLen appends the header of an array or a map of n
// elements: fix | n under 16, else the 16- or 32-bit form.
func appendCollectionLen(b []byte, n int, fix, b16, b32 byte) []byte {
	switch {
	case n < 16:
		return append(b, fix|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, b16), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, b32), uint32(n))
}
