package client

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// Acquire acquires a lease from pool, waiting in the pool's queue until it
// is granted, its WithWaitTimeout passes (an error matching apierr.ErrWaitTimeout) or
// ctx ends (ctx.Err(); the wait is cancelled on the server and nothing is
// held). The lease is renewed in the background until it is released or
// lost; the caller must call Release when done and must stop relying on the
// lease when its Done channel is closed.
//
// While the client is not connected, Acquire waits for a connection as
// long as ctx allows. When the Session stream breaks during the wait, the
// acquire is sent again on the next stream. In the rare case that the
// server granted the first attempt but the grant was lost with the stream,
// that lease stays held, by no one, until its TTL passes.
//
// Errors: apierr.ErrPoolNotFound, apierr.ErrInvalidArgument (bad weight, TTL or wait
// timeout), apierr.ErrQueueFull, apierr.ErrWaitTimeout, apierr.ErrLimitBelowWeight,
// apierr.ErrPoolDeleted, apierr.ErrTooManyRequests (as *Error), ctx.Err(), ErrClosed, and
// ErrUnavailable under a policy that does not wait for an unreachable
// server (see UnavailablePolicy).
func (c *Client) Acquire(ctx context.Context, pool string, opts ...AcquireOption) (*Lease, error) {
	return c.acquire(ctx, pool, false, opts)
}

// TryAcquire acquires a lease from pool only if it can be granted at once;
// otherwise it fails with an error matching apierr.ErrNoCapacity. It does not
// wait in the pool's queue (the WithWaitTimeout option is ignored), but it does
// wait for a connection while ctx allows. The lease is as Acquire's.
func (c *Client) TryAcquire(ctx context.Context, pool string, opts ...AcquireOption) (*Lease, error) {
	return c.acquire(ctx, pool, true, opts)
}

func (c *Client) acquire(ctx context.Context, pool string, try bool, opts []AcquireOption) (*Lease, error) {
	var o acquireOptions
	for _, opt := range opts {
		opt(&o)
	}
	start := time.Now()
	tc := traceContext(ctx)
	a, err := c.roundTrip(ctx, op{
		pool:              pool,
		cancellable:       !try,
		acquire:           true,
		failIfUnreachable: c.settings.unavailable.failsWhenUnreachable(),
		build: func(n int) (*tollgatev1.SessionRequest, error) {
			m := &acquireMsg{}
			m.body = tollgatev1.AcquireRequest{
				Pool:         pool,
				Weight:       o.weight,
				Ttl:          o.ttl,
				Priority:     o.priority,
				NoWait:       try,
				Description:  o.description,
				TraceContext: tc,
			}
			req := &m.body
			switch {
			case try:
			case o.waitTimeout > 0:
				left := o.waitTimeout - time.Since(start)
				if left <= 0 {
					return nil, &Error{Code: codes.DeadlineExceeded, Reason: apierr.ErrWaitTimeout.Reason,
						Message: fmt.Sprintf("the wait timeout of %v passed while connecting to the server (attempt %d)", o.waitTimeout, n+1)}
				}
				req.WaitTimeout = durationpb.New(left)
			case o.waitTimeout < 0:
				req.WaitTimeout = durationpb.New(o.waitTimeout) // the server refuses it
			}
			m.kind.Acquire = req
			m.req.Kind = &m.kind
			return &m.req, nil
		},
	})
	c.acquireDone(pool, try, start, err)
	if err != nil {
		return nil, err
	}
	if a.lease == nil {
		return nil, &Error{Code: codes.Internal, Message: "the server answered an acquire without a lease"}
	}
	return a.lease, nil
}

// acquireMsg is an acquire request, its oneof wrapper and its body side by
// side: one allocation.
type acquireMsg struct {
	req  tollgatev1.SessionRequest
	kind tollgatev1.SessionRequest_Acquire
	body tollgatev1.AcquireRequest
}
