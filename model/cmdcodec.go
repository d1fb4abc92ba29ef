package model

import (
	"encoding/binary"
	"math"
	"reflect"
	"slices"
	"unsafe"
)

// UnmarshalCommands decodes a msgpack array of Commands (a batch, as a
// Raft entry carries it) exactly as UnmarshalWith(b, &cmds, o) does: the
// same checks (the bounded walk against the destination type, with o),
// the same errors, the same result. Only the decoding differs: a batch in
// the form Marshal writes (maps with the known keys, each once; strings,
// integers, float64s and bools in the codes msgpack writes for them) is
// decoded by hand in one pass, several times faster than the walk and
// msgpack's reflection, and with fewer allocations; anything else goes
// through the walk and is decoded by msgpack. The one pass charges what
// the walk would charge for the same input (bound.go's rules), so it
// accepts a batch exactly when the walk would; one it refuses goes
// through the walk, which gives the error. Like Unmarshal it is safe on
// untrusted input.
func UnmarshalCommands(b []byte, o DecodeOptions) ([]Command, error) {
	return decodeCommands(nil, b, o)
}

// AppendCommands is UnmarshalCommands appending the batch to dst, for a
// caller that decodes batch after batch into one buffer: the one pass
// decodes into dst's spare capacity (each element overwritten whole), so
// a reused buffer makes no new slice. On error dst is returned with its
// elements unchanged, and what the one pass wrote past them is zeroed.
func AppendCommands(dst []Command, b []byte, o DecodeOptions) ([]Command, error) {
	if dst == nil {
		dst = []Command{} // not nil: dst decides only where the batch goes
	}
	return decodeCommands(dst, b, o)
}

// decodeCommands is UnmarshalCommands (dst nil) and AppendCommands.
func decodeCommands(dst []Command, b []byte, o DecodeOptions) ([]Command, error) {
	p, err := planFor(commandsType)
	if err != nil {
		return dst, err
	}
	d := walkDecoder(b, o)
	if cmds, ok := d.commands(dst); ok {
		if d.off == len(b) {
			return cmds, nil
		}
		clear(cmds[len(dst):]) // bytes after the batch: refused, and not kept
	}
	if err := walkPlan(p, b, o); err != nil {
		return dst, err
	}
	var cmds []Command
	if err := decodeInto(b, &cmds); err != nil {
		return dst, err
	}
	if dst == nil {
		return cmds, nil
	}
	return append(dst, cmds...), nil
}

var commandsType = reflect.TypeFor[[]Command]()

// walkDecoder returns a decoder of b that charges what walkPlan would with
// o: from the same start (fixedCost, a 64-byte scratch buffer) against the
// same limit.
func walkDecoder(b []byte, o DecodeOptions) cmdDecoder {
	d := cmdDecoder{b: b, limit: int64(MaxDecodeRatio)*int64(len(b)) + DecodeSlack, spent: fixedCost, walk: true, bufMax: 64, maxLen: o.MaxLen}
	if o.MaxAlloc > 0 {
		d.limit = o.MaxAlloc
	}
	return d
}

// cmdDecoder reads the canonical encoding of Commands and Instances. Every
// method returns ok = false on anything outside that form (the caller then
// decodes with msgpack); it checks every length against the input, so it
// is safe on any bytes, and it allocates no more than msgpack would for
// the same value. With a positive limit it bounds itself, without a walk:
// every allocation is counted (allocSize) before it is made, or in walk
// mode what the walk would charge for it (never less), and one that would
// take spent past limit fails.
type cmdDecoder struct {
	b            []byte
	off          int
	limit, spent int64
	// share makes str return strings that share b's bytes instead of
	// copies (UnmarshalInstanceListShared), and metadata keep its encoding
	// as a window on b. Shared strings are still counted (charge); shared
	// metadata allocates nothing.
	share bool
	// walk makes the decoder charge, against limit, what UnmarshalWith's
	// walk charges for the same input (bound.go), instead of what it
	// allocates (never more: the walk bounds msgpack, which allocates at
	// least as much); bufMax is the walk's longest scratch read so far.
	// maxLen, when positive, caps the top-level array (DecodeOptions.MaxLen).
	walk   bool
	bufMax int
	maxLen int
}

// charge counts an allocation of n bytes, and reports whether it fits the
// limit (always, without one).
func (d *cmdDecoder) charge(n int64) bool {
	return d.add(allocSize(n))
}

// add counts c bytes against the limit, already rounded to size classes.
func (d *cmdDecoder) add(c int64) bool {
	if d.limit <= 0 {
		return true
	}
	d.spent += c
	return d.spent <= d.limit && c >= 0
}

// walkStr charges, in walk mode, a string of n bytes as the walk does: a
// read through the scratch buffer, then its copy.
func (d *cmdDecoder) walkStr(n int) bool {
	return d.add(readCost(n, &d.bufMax)) && d.add(strCopyCost(n))
}

// slice charges a slice of n elements of size bytes: the walk's rule in
// walk mode, else what it allocates.
func (d *cmdDecoder) slice(n int, size uintptr) bool {
	if d.walk {
		return d.add(sliceCost(n, int64(size)))
	}
	return d.charge(int64(n) * int64(size))
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
	if !ok || d.walk && !d.walkStr(len(b)) {
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
	if !d.walk && !d.charge(int64(len(b))) {
		return "", false
	}
	if d.share {
		return unsafe.String(unsafe.SliceData(b), len(b)), true
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

// fields reads a map of known keys, each at most once: field decodes the
// value of a key (its bytes, which it must not keep) and returns the key's
// index (below 64), or -1 for an unknown key, and whether its value
// decoded. A map that breaks the rules is not in Marshal's form: the
// caller falls back to msgpack.
func (d *cmdDecoder) fields(field func([]byte) (int, bool)) bool {
	n, ok := d.mapLen()
	if !ok {
		return false
	}
	var seen uint64
	for range n {
		k, ok := d.raw()
		if !ok || d.walk && !d.add(readCost(len(k), &d.bufMax)) {
			return false
		}
		f, ok := field(k)
		if f < 0 || !ok || seen&(1<<f) != 0 {
			return false
		}
		seen |= 1 << f
	}
	return true
}

// strTo, boolTo and floatTo decode into *p.
func (d *cmdDecoder) strTo(p *string) (ok bool) {
	*p, ok = d.str()
	return ok
}

func (d *cmdDecoder) boolTo(p *bool) (ok bool) {
	*p, ok = d.bool()
	return ok
}

func (d *cmdDecoder) floatTo(p *float64) (ok bool) {
	*p, ok = d.float()
	return ok
}

// commands reads a batch: into a new slice when dst is nil (empty, not
// nil, for an empty batch, as msgpack makes it), else appended to dst.
func (d *cmdDecoder) commands(dst []Command) ([]Command, bool) {
	n, ok := d.arrayLen()
	if !ok || d.maxLen > 0 && n > d.maxLen || !d.slice(n, unsafe.Sizeof(Command{})) {
		return nil, false
	}
	var cmds []Command
	if dst == nil {
		cmds = make([]Command, n)
	} else {
		dst = slices.Grow(dst, n)
		cmds = dst[len(dst) : len(dst)+n]
		clear(cmds)
	}
	for i := range cmds {
		if !d.command(&cmds[i]) {
			clear(cmds[:i+1]) // dst's spare capacity keeps nothing of a refused batch
			return nil, false
		}
	}
	if dst == nil {
		return cmds, true
	}
	return dst[:len(dst)+n], true
}

func (d *cmdDecoder) command(c *Command) bool {
	return d.fields(func(k []byte) (int, bool) {
		switch string(k) {
		case "op":
			op, ok := d.int()
			c.Op = Op(op)
			return 0, ok && op >= 0 && op <= math.MaxUint8
		case "svc":
			return 1, d.service(&c.Service)
		case "up":
			return 2, d.boolTo(&c.Upsert)
		case "skey":
			return 3, d.serviceKey(&c.SvcKey)
		case "inst":
			return 4, d.instance(&c.Instance)
		case "key":
			return 5, d.instanceKey(&c.Key)
		case "patch":
			return 6, d.patch(&c.Patch)
		case "healthy":
			return 7, d.boolTo(&c.Healthy)
		}
		return -1, false
	})
}

func (d *cmdDecoder) serviceKey(k *ServiceKey) bool {
	return d.fields(func(s []byte) (int, bool) {
		switch string(s) {
		case "ns":
			return 0, d.strTo(&k.Namespace)
		case "group":
			return 1, d.strTo(&k.Group)
		case "name":
			return 2, d.strTo(&k.Name)
		}
		return -1, false
	})
}

func (d *cmdDecoder) port(p *int) bool {
	n, ok := d.int()
	*p = int(n)
	return ok
}

func (d *cmdDecoder) instanceKey(k *InstanceKey) bool {
	return d.fields(func(s []byte) (int, bool) {
		switch string(s) {
		case "svc":
			return 0, d.serviceKey(&k.Service)
		case "cluster":
			return 1, d.strTo(&k.Cluster)
		case "ip":
			return 2, d.strTo(&k.IP)
		case "port":
			return 3, d.port(&k.Port)
		}
		return -1, false
	})
}

func (d *cmdDecoder) instance(in *Instance) bool {
	return d.fields(func(s []byte) (int, bool) {
		switch string(s) {
		case "id":
			return 0, d.strTo(&in.ID)
		case "svc":
			return 1, d.serviceKey(&in.Service)
		case "cluster":
			return 2, d.strTo(&in.Cluster)
		case "ip":
			return 3, d.strTo(&in.IP)
		case "port":
			return 4, d.port(&in.Port)
		case "weight":
			return 5, d.floatTo(&in.Weight)
		case "healthy":
			return 6, d.boolTo(&in.Healthy)
		case "enabled":
			return 7, d.boolTo(&in.Enabled)
		case "ephemeral":
			return 8, d.boolTo(&in.Ephemeral)
		case "md":
			return 9, d.metadata(&in.Metadata)
		}
		return -1, false
	})
}

func (d *cmdDecoder) patch(p *InstancePatch) bool {
	return d.fields(func(s []byte) (int, bool) {
		switch string(s) {
		case "key":
			return 0, d.instanceKey(&p.Key)
		case "weight":
			if !d.charge(8) {
				return 1, false
			}
			w, ok := d.float()
			p.Weight = &w
			return 1, ok
		case "enabled":
			if !d.charge(1) {
				return 2, false
			}
			e, ok := d.bool()
			p.Enabled = &e
			return 2, ok
		case "md":
			return 3, d.metadata(&p.Metadata)
		}
		return -1, false
	})
}

// metadata reads what Metadata.EncodeMsgpack writes, as DecodeMsgpack does.
// Input in that very form (keys strictly ascending, every header in its
// shortest form) is Metadata's encoding already: it is kept as it is, a
// window on the input when the decoder shares (the common case; what the
// registry writes is in that form). Other input is read pair by pair,
// sorted and encoded again.
func (d *cmdDecoder) metadata(m *Metadata) bool {
	start := d.off
	n, ok := d.mapLen()
	if !ok || d.walk && !d.add(metadataPairsCost(n)) {
		return false
	}
	if n == 0 {
		*m = Metadata{}
		return !d.walk || d.charge(int64(d.off-start))
	}
	canonical := d.off-start == mapHeaderLen(n)
	var prev []byte
	for i := range 2 * n {
		at := d.off
		b, ok := d.raw()
		if !ok || d.walk && !d.walkStr(len(b)) {
			return false
		}
		if canonical && (d.off-at != strHeaderLen(len(b))+len(b) || i%2 == 0 && i > 0 && string(b) <= string(prev)) {
			canonical = false
		}
		if i%2 == 0 {
			prev = b
		}
	}
	if d.walk && !d.charge(int64(d.off-start)) { // the walk's charge for the encoding
		return false
	}
	if canonical {
		enc := d.b[start:d.off]
		if d.share {
			*m = Metadata{p: unsafe.String(unsafe.SliceData(enc), len(enc))}
			return true
		}
		if !d.walk && !d.charge(int64(len(enc))) {
			return false
		}
		*m = Metadata{p: string(enc)}
		return true
	}
	// The pairs, what sorting them may box (sortPairs), and the encoding,
	// which is at most the input's length.
	if !d.walk && !d.charge(int64(2*n)*int64(unsafe.Sizeof(""))+32+int64(d.off-start)) {
		return false
	}
	end := d.off
	d.off = start
	d.mapLen()
	kv := make([]string, 2*n)
	for i := range kv {
		b, _ := d.raw()
		kv[i] = unsafe.String(unsafe.SliceData(b), len(b)) // copied by metadataOf
	}
	d.off = end
	*m = metadataOf(sortPairs(kv))
	return true
}

func (d *cmdDecoder) service(s *Service) bool {
	return d.fields(func(k []byte) (int, bool) {
		switch string(k) {
		case "key":
			return 0, d.serviceKey(&s.Key)
		case "ephemeral":
			return 1, d.boolTo(&s.Ephemeral)
		case "protect":
			return 2, d.floatTo(&s.ProtectThreshold)
		case "md":
			return 3, d.metadata(&s.Metadata)
		case "clusters":
			n, ok := d.arrayLen()
			if !ok || !d.slice(n, unsafe.Sizeof(Cluster{})) {
				return 4, false
			}
			s.Clusters = make([]Cluster, n) // empty, not nil, as msgpack makes it
			for i := range s.Clusters {
				if !d.cluster(&s.Clusters[i]) {
					return 4, false
				}
			}
			return 4, true
		}
		return -1, false
	})
}

func (d *cmdDecoder) cluster(c *Cluster) bool {
	return d.fields(func(k []byte) (int, bool) {
		switch string(k) {
		case "name":
			return 0, d.strTo(&c.Name)
		case "check":
			return 1, d.healthCheck(&c.HealthCheck)
		case "md":
			return 2, d.metadata(&c.Metadata)
		}
		return -1, false
	})
}

func (d *cmdDecoder) healthCheck(h *HealthCheck) bool {
	return d.fields(func(k []byte) (int, bool) {
		switch string(k) {
		case "type":
			t, ok := d.str()
			h.Type = CheckType(t)
			return 0, ok
		case "port":
			return 1, d.port(&h.Port)
		case "path":
			return 2, d.strTo(&h.Path)
		case "headers":
			return 3, d.metadata(&h.Headers)
		case "codes":
			n, ok := d.arrayLen()
			if !ok || !d.slice(n, unsafe.Sizeof(0)) {
				return 4, false
			}
			h.ExpectedCodes = make([]int, n) // empty, not nil, as msgpack makes it
			for i := range h.ExpectedCodes {
				if !d.port(&h.ExpectedCodes[i]) {
					return 4, false
				}
			}
			return 4, true
		case "user":
			return 5, d.strTo(&h.User)
		case "password":
			return 6, d.strTo(&h.Password)
		case "cmd":
			return 7, d.strTo(&h.Command)
		}
		return -1, false
	})
}
