package client

import "context"

// This file turns an existing function into a throttled one with the same
// signature, so that its callers need not change: each call of the
// returned function runs the original under a lease of the pool, as Do.
//
// Go's generics cannot abstract over an arbitrary parameter list, so there
// is one helper per shape: Wrap for func(ctx) error, Wrap1 and Wrap2 for one
// and two arguments, and WrapR for one argument and a result. For another
// shape, write the few lines yourself, as these do:
//
//	func(ctx context.Context, a A, b B, c C) (R, error) {
//		var r R
//		err := cl.Do(ctx, pool, func(ctx context.Context) (err error) {
//			r, err = fn(ctx, a, b, c)
//			return err
//		}, opts...)
//		return r, err
//	}

// Wrap returns a function that calls fn under a lease of pool (acquired
// with opts), as c.Do(ctx, pool, fn, opts...) does: fn's context ends if
// the lease is lost, and the lease is always released. The returned
// function returns Do's error: the acquire's (no lease, fn did not run),
// fn's, or one matching ErrLeaseLost if fn succeeded but the lease was lost
// before its release.
func Wrap(c *Client, pool string, fn func(ctx context.Context) error, opts ...AcquireOption) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		return c.Do(ctx, pool, fn, opts...)
	}
}

// Wrap1 is Wrap for a function of one argument.
func Wrap1[A any](c *Client, pool string, fn func(ctx context.Context, a A) error, opts ...AcquireOption) func(ctx context.Context, a A) error {
	return func(ctx context.Context, a A) error {
		return c.Do(ctx, pool, func(ctx context.Context) error { return fn(ctx, a) }, opts...)
	}
}

// Wrap2 is Wrap for a function of two arguments.
func Wrap2[A, B any](c *Client, pool string, fn func(ctx context.Context, a A, b B) error, opts ...AcquireOption) func(ctx context.Context, a A, b B) error {
	return func(ctx context.Context, a A, b B) error {
		return c.Do(ctx, pool, func(ctx context.Context) error { return fn(ctx, a, b) }, opts...)
	}
}

// WrapR is Wrap for a function of one argument that returns a result. The
// returned function returns fn's result whenever fn ran, together with Do's
// error (so a result may come with an ErrLeaseLost error: fn finished, but
// its work may have overlapped another holder's), and the zero R when fn
// did not run.
func WrapR[A, R any](c *Client, pool string, fn func(ctx context.Context, a A) (R, error), opts ...AcquireOption) func(ctx context.Context, a A) (R, error) {
	return func(ctx context.Context, a A) (R, error) {
		var r R
		err := c.Do(ctx, pool, func(ctx context.Context) error {
			var err error
			r, err = fn(ctx, a)
			return err
		}, opts...)
		return r, err
	}
}
