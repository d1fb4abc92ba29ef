package model

import (
	"encoding"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// A plan describes how msgpack v5 decodes into one Go type, as far as the
// allocation bound needs to know: which msgpack values it accepts and what
// decoding them allocates. Plans are built once per type and cached; they
// are never written after they are built.
type plan struct {
	kind   planKind
	size   int64 // reflect size of the type
	n      int   // length of an array type
	elem   *plan // slice, array, pointer and map element
	key    *plan // map key
	temps  int64 // map: bytes of the per-entry temporaries msgpack allocates (0 on its fast paths)
	slot   int64 // map: bytes of one key and value
	fields map[string]*field
	list   []*field // fields in declaration order, for the array form
	name   string   // the Go type, for errors
}

type planKind uint8

const (
	pBool planKind = iota
	pInt
	pFloat
	pString
	pBytes     // []byte (and any slice of a uint8 kind)
	pByteArray // [N]byte
	pStrings   // []string: msgpack's fast path
	pSlice
	pArray
	pMap
	pStruct
	pPtr
	pAny      // interface{}
	pMetadata // Metadata's own decoder
	pSelf     // a BoundedDecoder: bounds its own allocations
)

// nilable reports whether a Go value of the kind has a nil to decode a
// msgpack nil into. A nil anywhere else is rejected: Marshal never writes
// one there, and a nil is the cheapest way to make msgpack allocate an
// element.
func (k planKind) nilable() bool {
	switch k {
	case pBytes, pStrings, pSlice, pMap, pPtr, pAny, pMetadata, pSelf:
		return true
	}
	return false
}

// field is one field of a struct plan.
type field struct {
	name string // the msgpack name
	p    *plan
	max  int // the field's maxlen tag; 0 for none
	// shadowed is set when a later field or alias took the name, as in
	// msgpack's map of fields.
	shadowed bool
}

// plans caches *plan (or the error that the type cannot be planned) per
// reflect.Type. Entries are immutable, so sharing them is safe.
var plans sync.Map

type planErr struct{ err error }

var (
	metadataType = reflect.TypeFor[Metadata]()
	boundedType  = reflect.TypeFor[BoundedDecoder]()
	stringType   = reflect.TypeFor[string]()
	anyType      = reflect.TypeFor[any]()
	decoderIfcs  = [...]reflect.Type{
		reflect.TypeFor[msgpack.CustomDecoder](),
		reflect.TypeFor[msgpack.Unmarshaler](),
		reflect.TypeFor[encoding.BinaryUnmarshaler](),
		reflect.TypeFor[encoding.TextUnmarshaler](),
	}
)

func planFor(t reflect.Type) (*plan, error) {
	if v, ok := plans.Load(t); ok {
		if pe, ok := v.(planErr); ok {
			return nil, pe.err
		}
		return v.(*plan), nil
	}
	b := planner{seen: make(map[reflect.Type]*plan)}
	p, err := b.build(t)
	if err != nil {
		plans.Store(t, planErr{err})
		return nil, err
	}
	plans.Store(t, p)
	return p, nil
}

type planner struct {
	seen map[reflect.Type]*plan // plans under construction, for recursive types
}

func unsupported(t reflect.Type, why string) error {
	return fmt.Errorf("model: Unmarshal cannot bound decoding into %s: %s: %w", t, why, errors.ErrUnsupported)
}

// customDecoded reports whether msgpack decodes t with code of its own
// rather than by reflection.
func customDecoded(t reflect.Type) bool {
	for _, ifc := range decoderIfcs {
		if t.Implements(ifc) || t.Kind() != reflect.Pointer && reflect.PointerTo(t).Implements(ifc) {
			return true
		}
	}
	return false
}

func (b *planner) build(t reflect.Type) (*plan, error) {
	if p, ok := b.seen[t]; ok {
		return p, nil
	}
	p := &plan{size: int64(t.Size()), name: t.String()}
	b.seen[t] = p
	if t.Kind() == reflect.Pointer {
		p.kind = pPtr
		var err error
		p.elem, err = b.build(t.Elem())
		return p, err
	}
	if t == metadataType {
		p.kind = pMetadata
		return p, nil
	}
	if t.Implements(boundedType) || reflect.PointerTo(t).Implements(boundedType) {
		p.kind = pSelf
		return p, nil
	}
	if customDecoded(t) {
		return nil, unsupported(t, "it has a decoder of its own, whose allocations are unknown")
	}
	var err error
	switch t.Kind() {
	case reflect.Bool:
		p.kind = pBool
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		p.kind = pInt
	case reflect.Float32, reflect.Float64:
		p.kind = pFloat
	case reflect.String:
		p.kind = pString
	case reflect.Slice:
		switch {
		case t.Elem().Kind() == reflect.Uint8:
			p.kind = pBytes
		case t.Elem() == stringType:
			p.kind = pStrings
			p.elem, err = b.build(stringType)
		default:
			p.kind = pSlice
			p.elem, err = b.build(t.Elem())
		}
	case reflect.Array:
		p.n = t.Len()
		if t.Elem().Kind() == reflect.Uint8 {
			p.kind = pByteArray
		} else {
			p.kind = pArray
			p.elem, err = b.build(t.Elem())
		}
	case reflect.Map:
		p.kind = pMap
		p.slot = int64(t.Key().Size()+t.Elem().Size()) + 8 // + alignment
		if t.Key() != stringType || t.Elem() != stringType && t.Elem() != anyType {
			p.temps = allocSize(int64(t.Key().Size())) + allocSize(int64(t.Elem().Size()))
		}
		if p.key, err = b.build(t.Key()); err == nil {
			p.elem, err = b.build(t.Elem())
		}
	case reflect.Struct:
		p.kind = pStruct
		err = b.fields(p, t)
	case reflect.Interface:
		if t.NumMethod() != 0 {
			return nil, unsupported(t, "msgpack panics when a decoded value does not implement the interface")
		}
		p.kind = pAny
	default:
		return nil, unsupported(t, "msgpack cannot decode a "+t.Kind().String())
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

// fields fills in the fields of a struct plan the way msgpack v5 lists them
// (types.go getFields): exported fields, named by their msgpack tag or their
// Go name, "-" skipped.
func (b *planner) fields(p *plan, t reflect.Type) error {
	p.fields = make(map[string]*field, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("msgpack")
		name, opts, _ := strings.Cut(tag, ",")
		name = strings.TrimSpace(name)
		if name == "-" {
			continue
		}
		if f.PkgPath != "" && !f.Anonymous {
			continue
		}
		if f.Anonymous {
			return unsupported(t, "embedded field "+f.Name+" (msgpack inlines embedded structs by rules not mirrored here)")
		}
		if strings.ContainsAny(name, ":'") {
			return unsupported(t, "field "+f.Name+" has a msgpack tag this package does not parse")
		}
		if name == "" {
			name = f.Name
		}
		fp, err := b.build(f.Type)
		if err != nil {
			return err
		}
		fl := &field{name: name, p: fp}
		if s, ok := f.Tag.Lookup("maxlen"); ok {
			n, err := strconv.Atoi(s)
			if err != nil || n <= 0 {
				return unsupported(t, "field "+f.Name+": maxlen must be a positive integer")
			}
			fl.max = n
		}
		p.fields[name] = fl
		p.list = append(p.list, fl)
		for opt := range strings.SplitSeq(opts, ",") {
			opt = strings.TrimSpace(opt)
			if opt == "intern" {
				return unsupported(t, "field "+f.Name+" is interned")
			}
			if alias, ok := strings.CutPrefix(opt, "alias:"); ok {
				p.fields[alias] = fl
			}
		}
	}
	for _, f := range p.list {
		f.shadowed = p.fields[f.name] != f
	}
	return nil
}
