package client

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// doLocalOnly runs fn for Do under LocalLimitOnly's local limit, after
// the acquire failed with unreachable (an error matching ErrUnavailable).
// The run is NOT globally limited, and says so loudly.
func (c *Client) doLocalOnly(ctx context.Context, pool string, fn func(ctx context.Context) error, opts []AcquireOption, start time.Time, unreachable error) error {
	o := acquireOptionsOf(opts)
	weight := o.weightOr1()
	local := c.settings.local
	if weight < 1 || weight > local.size {
		return &Error{Code: codes.InvalidArgument, Reason: apierr.ErrInvalidArgument.Reason,
			Message: fmt.Sprintf("the server is unreachable (%v) and weight %d does not fit the local fallback limit %d", unreachable, weight, local.size)}
	}
	if err := local.sem.Acquire(ctx, weight); err != nil {
		return err
	}
	inUse := local.inUse.Add(weight)
	held := true
	release := func() {
		local.inUse.Add(-weight)
		local.sem.Release(weight)
	}
	defer func() {
		if held { // fn panicked or called runtime.Goexit
			release()
		}
	}()
	c.log.Warn("tollgate: server unreachable; running under the LOCAL limit only, NOT the global one",
		"pool", pool, "weight", weight, "local_limit", local.size, "local_in_use", inUse,
		"description", o.description, "err", unreachable)

	granted := time.Now()
	ev := WorkEvent{Pool: pool, Wait: granted.Sub(start), LocalOnly: true}
	ev.Err = fn(withLease(ctx, nil))
	release()
	held = false
	ev.Hold = time.Since(granted)
	c.workDone(ev)
	return ev.Err
}
