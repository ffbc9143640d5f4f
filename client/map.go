package client

import (
	"context"
	"fmt"
)

// Map calls fn on every item of items, each call under a lease of pool as
// a task of a Group (see NewGroup; opts configure it: error policy,
// WithMaxInFlight, WithProgress, WithAcquireOptions), and returns the results
// in input order: results[i] is fn's result for items[i].
//
// The returned slice always has len(items) elements; results[i] is the
// zero R when fn did not return a nil error for items[i] (it failed, or
// never ran because the group stopped). The error is the Group's (see
// Group.Wait), each task error prefixed with "item <i>: ". Under the
// default FailFast the first error cancels the rest, so only use the
// results when the error is nil; under ContinueOnError the results of the
// items that succeeded are all there.
//
// Map returns when every call is over. With no items it returns an empty
// slice at once, without contacting the server.
func Map[T, R any](ctx context.Context, c *Client, pool string, items []T, fn func(ctx context.Context, item T) (R, error), opts ...GroupOption) ([]R, error) {
	results := make([]R, len(items))
	if len(items) == 0 {
		return results, nil
	}
	g, err := c.NewGroup(ctx, pool, opts...)
	if err != nil {
		return results, err
	}
	for i, item := range items {
		g.Go(func(ctx context.Context) error {
			r, err := fn(ctx, item)
			if err != nil {
				return fmt.Errorf("item %d: %w", i, err)
			}
			results[i] = r
			return nil
		})
	}
	return results, g.Wait()
}
