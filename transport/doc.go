// Package transport carries messages between Muster nodes.
//
// Transport is the interface (see transport.go); TCP is the production
// implementation and MemNetwork an in-memory one with fault injection for
// tests. Both are implemented in this package.
package transport
