package client

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// MaxTakeWait is how long Take lets the server wait for tokens when ctx has
// no deadline.
const MaxTakeWait = time.Hour

// Take takes n rate tokens from pool's token bucket, waiting until they are
// available, like rate.Limiter.WaitN. Every token is the server's decision:
// it reserves the tokens and answers when they are due. The wait is bounded
// by ctx's deadline, or by MaxTakeWait without one; if the tokens would not
// come within it, the server refuses at once with an error matching
// apierr.ErrRateLimited (whose RetryAfter says when they would) and reserves
// nothing.
//
// If ctx ends while the server waits, the take is cancelled (its tokens
// return to the bucket as far as later reservations allow) and Take returns
// ctx.Err(). When the Session stream breaks during the call, Take is sent
// again on the next stream, with the time left; a take the server granted
// just before the break then costs its tokens twice (never more tokens than
// the rate allows, only fewer).
//
// Errors: apierr.ErrPoolNotFound, apierr.ErrNoRateLimit, apierr.ErrInvalidArgument (n < 1 or
// above the pool's burst), apierr.ErrRateLimited (as *Error), ctx.Err(),
// ErrClosed, and ErrUnavailable under a policy that does not wait for an
// unreachable server (see UnavailablePolicy).
func (c *Client) Take(ctx context.Context, pool string, n int64) error {
	deadline, hasDeadline := ctx.Deadline()
	tc := traceContext(ctx)
	_, err := c.roundTrip(ctx, op{
		pool:              pool,
		cancellable:       true,
		failIfUnreachable: c.settings.unavailable.failsWhenUnreachable(),
		build: func(int) (*tollgatev1.SessionRequest, error) {
			wait := MaxTakeWait
			if hasDeadline {
				wait = max(time.Until(deadline), 0)
			}
			req := &tollgatev1.TakeRequest{Pool: pool, Tokens: &n, MaxWait: durationpb.New(wait), TraceContext: tc}
			return &tollgatev1.SessionRequest{Kind: &tollgatev1.SessionRequest_Take{Take: req}}, nil
		},
	})
	return err
}

// Wait takes one rate token from pool, waiting for it: it is
// Take(ctx, pool, 1).
func (c *Client) Wait(ctx context.Context, pool string) error {
	return c.Take(ctx, pool, 1)
}
