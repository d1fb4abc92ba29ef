package transport

import "sync"

// handlerTable maps message kinds to handlers; both transports use one.
// Its methods are safe for concurrent use; its zero value is empty.
type handlerTable struct {
	mu sync.RWMutex
	m  map[Kind]Handler
}

// set installs h for kind, or removes the handler when h is nil.
func (ht *handlerTable) set(kind Kind, h Handler) {
	ht.mu.Lock()
	defer ht.mu.Unlock()
	if h == nil {
		delete(ht.m, kind)
		return
	}
	if ht.m == nil {
		ht.m = make(map[Kind]Handler)
	}
	ht.m[kind] = h
}

// get returns the handler of kind, or nil.
func (ht *handlerTable) get(kind Kind) Handler {
	ht.mu.RLock()
	defer ht.mu.RUnlock()
	return ht.m[kind]
}
