package transport

import "context"

// CallHooks let a caller that counts its own goroutines as busy (distro's Replicator.Settle, for
// tests on a fake clock) hand a request over to the network's count of what is in flight
// (MemNetwork.InFlight) and take it back without a moment in which neither counts it. A
// MemTransport calls Sent, on the caller's goroutine, once the network counts the message (being
// handled, or held by a link delay or the manual queue), and Returned, on the caller's
// goroutine, before it stops counting the caller as waiting for the response. Neither is called
// if the request fails before the network takes it. Other transports ignore them.
type CallHooks struct {
	Sent     func()
	Returned func()
}

type callHooksKey struct{}

// WithCallHooks returns ctx carrying h for the Request it is passed to.
func WithCallHooks(ctx context.Context, h CallHooks) context.Context {
	return context.WithValue(ctx, callHooksKey{}, h)
}

func callHooksFrom(ctx context.Context) CallHooks {
	h, _ := ctx.Value(callHooksKey{}).(CallHooks)
	return h
}
