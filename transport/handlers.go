package transport

import (
	"sync"
	"sync/atomic"
)

// handlerEntry is an installed handler and how its kind is delivered.
type handlerEntry struct {
	h       Handler
	ordered bool // see OrderedHandler
}

// handlerTable maps message kinds to handlers; both transports use one.
// Its methods are safe for concurrent use; its zero value is empty.
// Lookups (one per inbound message, on the connection's reader) take no
// lock: writers replace the whole map.
type handlerTable struct {
	mu sync.Mutex // serializes writers
	m  atomic.Pointer[map[Kind]handlerEntry]
}

// set installs h for kind, delivered concurrently or in order, or removes
// the handler when h is nil.
func (ht *handlerTable) set(kind Kind, h Handler, ordered bool) {
	ht.mu.Lock()
	defer ht.mu.Unlock()
	next := make(map[Kind]handlerEntry)
	if old := ht.m.Load(); old != nil {
		for k, e := range *old {
			next[k] = e
		}
	}
	if h == nil {
		delete(next, kind)
	} else {
		next[kind] = handlerEntry{h: h, ordered: ordered}
	}
	ht.m.Store(&next)
}

// lookup returns the entry of kind (a nil h if none).
func (ht *handlerTable) lookup(kind Kind) handlerEntry {
	if m := ht.m.Load(); m != nil {
		return (*m)[kind]
	}
	return handlerEntry{}
}

// get returns the handler of kind, or nil.
func (ht *handlerTable) get(kind Kind) Handler { return ht.lookup(kind).h }

// ordered reports whether kind's handler was installed with HandleOrdered.
func (ht *handlerTable) ordered(kind Kind) bool { return ht.lookup(kind).ordered }
