package model

import (
	"bytes"
	"strconv"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
)

// InstanceList is a list of instances as a replicated publisher record
// carries it (the registry's record payload). It is msgpack-encoded; the
// tag is part of the wire format.
type InstanceList struct {
	Instances []Instance `msgpack:"i"`
}

// UnmarshalInstanceList decodes b, an InstanceList from an untrusted
// source holding at most maxInsts instances, with Unmarshal's guarantees:
// decoding allocates at most MaxDecodeRatio × len(b) + DecodeSlack bytes, a
// nil instance is refused, and malformed input decodes nothing. A list
// declared longer than maxInsts is refused from its declared length, before
// any instance is decoded: n is that length (n > maxInsts tells this
// refusal from the others), and err matches ErrTooLarge.
//
// The form Marshal writes is decoded in one pass, by hand, which counts
// each allocation against the bound before it makes it, so it needs no
// separate walk of the input; anything else goes through Unmarshal, whose
// bound is then what the pass left.
func UnmarshalInstanceList(b []byte, maxInsts int) (l InstanceList, n int, err error) {
	return unmarshalInstanceList(b, maxInsts, false)
}

// UnmarshalInstanceListShared is UnmarshalInstanceList, except that the
// strings of the instances the one pass decodes share b's bytes instead of
// being copies (the bound still counts them): the caller must never modify
// b afterwards, and b's allocation lives as long as any of those strings,
// so b should be an allocation of its own (not a window on a larger
// buffer). It is for a payload that is kept anyway, such as a replicated
// record's, whose decoded instances then cost no second copy of their
// strings. What goes through Unmarshal is copied, as before.
func UnmarshalInstanceListShared(b []byte, maxInsts int) (l InstanceList, n int, err error) {
	return unmarshalInstanceList(b, maxInsts, true)
}

func unmarshalInstanceList(b []byte, maxInsts int, share bool) (l InstanceList, n int, err error) {
	limit := int64(MaxDecodeRatio)*int64(len(b)) + DecodeSlack
	d := cmdDecoder{b: b, limit: limit, share: share}
	if insts, ok := d.instanceList(maxInsts); ok && d.off == len(b) {
		return InstanceList{Instances: insts}, len(insts), nil
	}
	if err := Check(b); err != nil { // every declared length fits the input
		return InstanceList{}, 0, err
	}
	n, spent, err := instanceListLen(b)
	if err != nil {
		return InstanceList{}, 0, err
	}
	if n > maxInsts {
		return InstanceList{}, n, &DecodeError{Type: "model.InstanceList", Path: ".i", Rule: "more than " + strconv.Itoa(maxInsts) + " instances", Err: ErrTooLarge}
	}
	err = UnmarshalWith(b, &l, DecodeOptions{MaxAlloc: max(limit-d.spent-spent, 1)})
	return l, n, err
}

// instanceList reads an InstanceList of at most maxInsts instances as
// Marshal writes it.
func (d *cmdDecoder) instanceList(maxInsts int) ([]Instance, bool) {
	if n, ok := d.mapLen(); !ok || n != 1 {
		return nil, false
	}
	if k, ok := d.raw(); !ok || string(k) != "i" {
		return nil, false
	}
	n, ok := d.arrayLen()
	if !ok || n > maxInsts || !d.charge(int64(n)*int64(unsafe.Sizeof(Instance{}))) {
		return nil, false
	}
	insts := make([]Instance, n) // empty, not nil, as msgpack makes it
	for i := range insts {
		if !d.instance(&insts[i]) {
			return nil, false
		}
	}
	return insts, true
}

// instanceListLen returns the declared length of a checked InstanceList's
// instances (0 for a nil list), reading only headers and keys, and what
// reading them allocated (the keys' strings and the decoder), which counts
// against the decode's bound. A map may repeat the key "i": msgpack keeps
// the last, so the length is the last one's.
func instanceListLen(b []byte) (n int, spent int64, err error) {
	const decoderCost = 1 << 10 // the decoder and its reader
	spent = decoderCost
	dec := msgpack.NewDecoder(bytes.NewReader(b))
	count, err := dec.DecodeMapLen()
	if err != nil {
		return 0, spent, err
	}
	for range max(count, 0) {
		k, err := dec.DecodeString()
		if err != nil {
			return 0, spent, err
		}
		spent += int64(len(k)) + 16 // the string and its header
		if k != "i" {
			if err := dec.Skip(); err != nil {
				return 0, spent, err
			}
			continue
		}
		l, err := dec.DecodeArrayLen()
		if err != nil {
			return 0, spent, err
		}
		n = max(l, 0)
		for range n {
			if err := dec.Skip(); err != nil {
				return 0, spent, err
			}
		}
	}
	return n, spent, nil
}

// AppendMsgpack appends the msgpack encoding of l to b and returns the
// extended slice: byte for byte what Marshal(l) writes, without
// reflection.
func (l *InstanceList) AppendMsgpack(b []byte) []byte {
	b = appendStr(append(b, 0x81), "i")
	if l.Instances == nil {
		return append(b, 0xc0)
	}
	b = appendArrayLen(b, len(l.Instances))
	for i := range l.Instances {
		b = l.Instances[i].AppendMsgpack(b)
	}
	return b
}
