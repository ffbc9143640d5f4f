package client

import "context"

// leaseCtxKey is the context key under which Do stores its lease.
type leaseCtxKey struct{}

// LeaseFromContext returns the lease that the work run by Do (and so by
// Group, Map and Wrap) holds, given the context Do passed to it; use it to
// read the lease's FencingToken. It returns nil for any other context, and
// for work that runs under LocalLimitOnly's local limit without a lease.
func LeaseFromContext(ctx context.Context) *Lease {
	l, _ := ctx.Value(leaseCtxKey{}).(*Lease)
	return l
}

// withLease returns ctx carrying l (nil: carrying no lease, hiding an outer
// Do's).
func withLease(ctx context.Context, l *Lease) context.Context {
	return context.WithValue(ctx, leaseCtxKey{}, l)
}
