package model

import (
	"encoding/binary"
	"math"
	"reflect"
)

// UnmarshalCommands decodes a msgpack array of Commands (a batch, as a
// Raft entry carries it) exactly as UnmarshalWith(b, &cmds, o) does: the
// same checks (the bounded walk against the destination type, with o),
// the same errors, the same result. Only the decoding differs: a batch in
// the form Marshal writes (maps with the known keys, each once; strings,
// integers, float64s and bools in the codes msgpack writes for them) is
// decoded by hand, several times faster than by reflection and with fewer
// allocations; anything else the walk accepts is decoded by msgpack.
// Like Unmarshal it is safe on untrusted input.
func UnmarshalCommands(b []byte, o DecodeOptions) ([]Command, error) {
	p, err := planFor(commandsType)
	if err != nil {
		return nil, err
	}
	if err := walkPlan(p, b, o); err != nil {
		return nil, err
	}
	d := cmdDecoder{b: b}
	if cmds, ok := d.commands(); ok && d.off == len(b) {
		return cmds, nil
	}
	var cmds []Command
	if err := decodeInto(b, &cmds); err != nil {
		return nil, err
	}
	return cmds, nil
}

var commandsType = reflect.TypeFor[[]Command]()

// cmdDecoder reads the canonical encoding of Commands. Every method
// returns ok = false on anything outside that form (the caller then
// decodes with msgpack); it checks every length against the input, so it
// is safe on any bytes, and it allocates no more than msgpack would for
// the same value (which the walk bounded).
type cmdDecoder struct {
	b   []byte
	off int
}

func (d *cmdDecoder) collection(fix, b16, b32 byte, perItem int) (int, bool) {
	if d.off >= len(d.b) {
		return 0, false
	}
	c := d.b[d.off]
	n, h := 0, 1
	switch {
	case c&0xf0 == fix:
		n = int(c & 0x0f)
	case c == b16 && d.off+3 <= len(d.b):
		n, h = int(binary.BigEndian.Uint16(d.b[d.off+1:])), 3
	case c == b32 && d.off+5 <= len(d.b):
		n, h = int(binary.BigEndian.Uint32(d.b[d.off+1:])), 5
	default:
		return 0, false
	}
	d.off += h
	if n < 0 || n > (len(d.b)-d.off)/perItem {
		return 0, false
	}
	return n, true
}

func (d *cmdDecoder) mapLen() (int, bool)   { return d.collection(0x80, 0xde, 0xdf, 2) }
func (d *cmdDecoder) arrayLen() (int, bool) { return d.collection(0x90, 0xdc, 0xdd, 1) }

// raw returns the bytes of a str value without copying them.
func (d *cmdDecoder) raw() ([]byte, bool) {
	if d.off >= len(d.b) {
		return nil, false
	}
	c := d.b[d.off]
	n, h := 0, 1
	switch {
	case c >= 0xa0 && c <= 0xbf:
		n = int(c & 0x1f)
	case c == 0xd9 && d.off+2 <= len(d.b):
		n, h = int(d.b[d.off+1]), 2
	case c == 0xda && d.off+3 <= len(d.b):
		n, h = int(binary.BigEndian.Uint16(d.b[d.off+1:])), 3
	case c == 0xdb && d.off+5 <= len(d.b):
		n, h = int(binary.BigEndian.Uint32(d.b[d.off+1:])), 5
	default:
		return nil, false
	}
	if n < 0 || n > len(d.b)-d.off-h {
		return nil, false
	}
	s := d.b[d.off+h : d.off+h+n]
	d.off += h + n
	return s, true
}

func (d *cmdDecoder) str() (string, bool) {
	b, ok := d.raw()
	if !ok {
		return "", false
	}
	switch string(b) { // the defaults every normalized key holds: no copy
	case "":
		return "", true
	case DefaultNamespace:
		return DefaultNamespace, true
	case DefaultGroup:
		return DefaultGroup, true
	case DefaultCluster:
		return DefaultCluster, true
	}
	return string(b), true
}

func (d *cmdDecoder) int() (int64, bool) {
	if d.off >= len(d.b) {
		return 0, false
	}
	b := d.b[d.off:]
	c := b[0]
	switch {
	case c <= 0x7f:
		d.off++
		return int64(c), true
	case c >= 0xe0:
		d.off++
		return int64(int8(c)), true
	}
	var size int
	switch c {
	case 0xcc, 0xd0:
		size = 1
	case 0xcd, 0xd1:
		size = 2
	case 0xce, 0xd2:
		size = 4
	case 0xcf, 0xd3:
		size = 8
	}
	if size == 0 || len(b) < 1+size {
		return 0, false
	}
	d.off += 1 + size
	switch c {
	case 0xcc:
		return int64(b[1]), true
	case 0xcd:
		return int64(binary.BigEndian.Uint16(b[1:])), true
	case 0xce:
		return int64(binary.BigEndian.Uint32(b[1:])), true
	case 0xcf:
		u := binary.BigEndian.Uint64(b[1:])
		return int64(u), u <= math.MaxInt64
	case 0xd0:
		return int64(int8(b[1])), true
	case 0xd1:
		return int64(int16(binary.BigEndian.Uint16(b[1:]))), true
	case 0xd2:
		return int64(int32(binary.BigEndian.Uint32(b[1:]))), true
	}
	return int64(binary.BigEndian.Uint64(b[1:])), true
}

func (d *cmdDecoder) float() (float64, bool) {
	if d.off+9 > len(d.b) || d.b[d.off] != 0xcb {
		return 0, false
	}
	f := math.Float64frombits(binary.BigEndian.Uint64(d.b[d.off+1:]))
	d.off += 9
	return f, true
}

func (d *cmdDecoder) bool() (bool, bool) {
	if d.off >= len(d.b) {
		return false, false
	}
	switch d.b[d.off] {
	case 0xc2:
		d.off++
		return false, true
	case 0xc3:
		d.off++
		return true, true
	}
	return false, false
}

// fields reads a map of known keys, each at most once: field returns the
// index (below 64) of a key (its bytes, which it must not keep), or -1 for
// an unknown one; value decodes it.
func (d *cmdDecoder) fields(field func([]byte) int, value func(int) bool) bool {
	n, ok := d.mapLen()
	if !ok {
		return false
	}
	var seen uint64
	for range n {
		k, ok := d.raw()
		if !ok {
			return false
		}
		f := field(k)
		if f < 0 || seen&(1<<f) != 0 {
			return false
		}
		seen |= 1 << f
		if !value(f) {
			return false
		}
	}
	return true
}

func (d *cmdDecoder) commands() ([]Command, bool) {
	n, ok := d.arrayLen()
	if !ok {
		return nil, false
	}
	cmds := make([]Command, n)
	for i := range cmds {
		if !d.command(&cmds[i]) {
			return nil, false
		}
	}
	return cmds, true
}

func (d *cmdDecoder) command(c *Command) bool {
	return d.fields(func(k []byte) int {
		switch string(k) {
		case "op":
			return 0
		case "svc":
			return 1
		case "up":
			return 2
		case "skey":
			return 3
		case "inst":
			return 4
		case "key":
			return 5
		case "patch":
			return 6
		case "healthy":
			return 7
		}
		return -1
	}, func(f int) bool {
		var ok bool
		switch f {
		case 0:
			var op int64
			op, ok = d.int()
			ok = ok && op >= 0 && op <= math.MaxUint8
			c.Op = Op(op)
		case 1:
			ok = d.service(&c.Service)
		case 2:
			c.Upsert, ok = d.bool()
		case 3:
			ok = d.serviceKey(&c.SvcKey)
		case 4:
			ok = d.instance(&c.Instance)
		case 5:
			ok = d.instanceKey(&c.Key)
		case 6:
			ok = d.patch(&c.Patch)
		case 7:
			c.Healthy, ok = d.bool()
		}
		return ok
	})
}

func (d *cmdDecoder) serviceKey(k *ServiceKey) bool {
	return d.fields(func(s []byte) int {
		switch string(s) {
		case "ns":
			return 0
		case "group":
			return 1
		case "name":
			return 2
		}
		return -1
	}, func(f int) bool {
		var ok bool
		switch f {
		case 0:
			k.Namespace, ok = d.str()
		case 1:
			k.Group, ok = d.str()
		case 2:
			k.Name, ok = d.str()
		}
		return ok
	})
}

func (d *cmdDecoder) port(p *int) bool {
	n, ok := d.int()
	*p = int(n)
	return ok
}

func (d *cmdDecoder) instanceKey(k *InstanceKey) bool {
	return d.fields(func(s []byte) int {
		switch string(s) {
		case "svc":
			return 0
		case "cluster":
			return 1
		case "ip":
			return 2
		case "port":
			return 3
		}
		return -1
	}, func(f int) bool {
		var ok bool
		switch f {
		case 0:
			ok = d.serviceKey(&k.Service)
		case 1:
			k.Cluster, ok = d.str()
		case 2:
			k.IP, ok = d.str()
		case 3:
			ok = d.port(&k.Port)
		}
		return ok
	})
}

func (d *cmdDecoder) instance(in *Instance) bool {
	return d.fields(func(s []byte) int {
		switch string(s) {
		case "id":
			return 0
		case "svc":
			return 1
		case "cluster":
			return 2
		case "ip":
			return 3
		case "port":
			return 4
		case "weight":
			return 5
		case "healthy":
			return 6
		case "enabled":
			return 7
		case "ephemeral":
			return 8
		case "md":
			return 9
		}
		return -1
	}, func(f int) bool {
		var ok bool
		switch f {
		case 0:
			in.ID, ok = d.str()
		case 1:
			ok = d.serviceKey(&in.Service)
		case 2:
			in.Cluster, ok = d.str()
		case 3:
			in.IP, ok = d.str()
		case 4:
			ok = d.port(&in.Port)
		case 5:
			in.Weight, ok = d.float()
		case 6:
			in.Healthy, ok = d.bool()
		case 7:
			in.Enabled, ok = d.bool()
		case 8:
			in.Ephemeral, ok = d.bool()
		case 9:
			ok = d.metadata(&in.Metadata)
		}
		return ok
	})
}

func (d *cmdDecoder) patch(p *InstancePatch) bool {
	return d.fields(func(s []byte) int {
		switch string(s) {
		case "key":
			return 0
		case "weight":
			return 1
		case "enabled":
			return 2
		case "md":
			return 3
		}
		return -1
	}, func(f int) bool {
		var ok bool
		switch f {
		case 0:
			ok = d.instanceKey(&p.Key)
		case 1:
			var w float64
			w, ok = d.float()
			p.Weight = &w
		case 2:
			var e bool
			e, ok = d.bool()
			p.Enabled = &e
		case 3:
			ok = d.metadata(&p.Metadata)
		}
		return ok
	})
}

// metadata reads what Metadata.EncodeMsgpack writes, as DecodeMsgpack does.
func (d *cmdDecoder) metadata(m *Metadata) bool {
	n, ok := d.mapLen()
	if !ok {
		return false
	}
	if n == 0 {
		*m = Metadata{}
		return true
	}
	kv := make([]string, 2*n)
	for i := range kv {
		if kv[i], ok = d.str(); !ok {
			return false
		}
	}
	*m = Metadata{kv: sortPairs(kv)}
	return true
}

func (d *cmdDecoder) service(s *Service) bool {
	return d.fields(func(k []byte) int {
		switch string(k) {
		case "key":
			return 0
		case "ephemeral":
			return 1
		case "protect":
			return 2
		case "md":
			return 3
		case "clusters":
			return 4
		}
		return -1
	}, func(f int) bool {
		var ok bool
		switch f {
		case 0:
			ok = d.serviceKey(&s.Key)
		case 1:
			s.Ephemeral, ok = d.bool()
		case 2:
			s.ProtectThreshold, ok = d.float()
		case 3:
			ok = d.metadata(&s.Metadata)
		case 4:
			var n int
			if n, ok = d.arrayLen(); !ok {
				return false
			}
			s.Clusters = make([]Cluster, n) // empty, not nil, as msgpack makes it
			for i := range s.Clusters {
				if !d.cluster(&s.Clusters[i]) {
					return false
				}
			}
		}
		return ok
	})
}

func (d *cmdDecoder) cluster(c *Cluster) bool {
	return d.fields(func(k []byte) int {
		switch string(k) {
		case "name":
			return 0
		case "check":
			return 1
		case "md":
			return 2
		}
		return -1
	}, func(f int) bool {
		var ok bool
		switch f {
		case 0:
			c.Name, ok = d.str()
		case 1:
			ok = d.healthCheck(&c.HealthCheck)
		case 2:
			ok = d.metadata(&c.Metadata)
		}
		return ok
	})
}

func (d *cmdDecoder) healthCheck(h *HealthCheck) bool {
	return d.fields(func(k []byte) int {
		switch string(k) {
		case "type":
			return 0
		case "port":
			return 1
		case "path":
			return 2
		case "headers":
			return 3
		case "codes":
			return 4
		case "user":
			return 5
		case "password":
			return 6
		case "cmd":
			return 7
		}
		return -1
	}, func(f int) bool {
		var ok bool
		switch f {
		case 0:
			var t string
			t, ok = d.str()
			h.Type = CheckType(t)
		case 1:
			ok = d.port(&h.Port)
		case 2:
			h.Path, ok = d.str()
		case 3:
			ok = d.metadata(&h.Headers)
		case 4:
			var n int
			if n, ok = d.arrayLen(); !ok {
				return false
			}
			h.ExpectedCodes = make([]int, n) // empty, not nil, as msgpack makes it
			for i := range h.ExpectedCodes {
				if !d.port(&h.ExpectedCodes[i]) {
					return false
				}
			}
		case 5:
			h.User, ok = d.str()
		case 6:
			h.Password, ok = d.str()
		case 7:
			h.Command, ok = d.str()
		}
		return ok
	})
}
