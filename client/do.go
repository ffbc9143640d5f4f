package client

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Do acquires a lease from pool (as Acquire, with opts), runs fn with a
// context that is cancelled when the lease is lost or ctx ends, and then
// always releases the lease: also when fn panics (the panic continues
// after the release) or calls runtime.Goexit.
//
// Do returns Acquire's error if no lease was granted, and otherwise fn's
// error. If fn returned nil but the lease was lost before it was released,
// Do returns an error matching ErrLeaseLost, saying that fn's work may have
// overlapped another holder's. A release that cannot be confirmed (the
// server is unreachable) is logged, not returned: the lease was held while
// fn ran, and the server frees it when its TTL passes.
//
// The release is made even when ctx has ended, bounded by 5s. It reports
// the outcome of fn to the server, for the pool's adaptive limits: the
// Client's Classifier (Dialer.Classifier; DefaultClassifier: nil is a success,
// context.DeadlineExceeded a timeout, a cancellation nothing, any other
// error an error) applied to fn's error, with fn's duration as latency.
//
// fn's context carries the lease: LeaseFromContext returns it (for its
// FencingToken). When the server cannot be reached and the Client's policy
// is LocalLimitOnly, fn runs under the local limit only, without a lease
// (see UnavailablePolicy). Each run is reported to the Client's Observer.
func (c *Client) Do(ctx context.Context, pool string, fn func(ctx context.Context) error, opts ...AcquireOption) error {
	start := time.Now()
	l, err := c.Acquire(ctx, pool, opts...)
	if err != nil {
		if c.settings.local != nil && errors.Is(err, ErrUnavailable) {
			return c.doLocalOnly(ctx, pool, fn, opts, start, err)
		}
		return err
	}
	granted := time.Now()
	lctx, cancel := l.Context(ctx)
	defer cancel()
	returned := false
	defer func() {
		if !returned { // fn panicked or called runtime.Goexit
			_ = l.releaseDetached(ctx)
		}
	}()
	ferr := fn(withLease(lctx, l))
	returned = true
	took := time.Since(granted)
	outcome := c.classify(ferr) // once: the release reports it, the Observer sees it
	rerr := l.releaseDetachedOutcome(ctx, outcome, took)
	c.workDone(WorkEvent{Pool: pool, Wait: granted.Sub(start), Hold: time.Since(granted), Err: ferr, Outcome: outcome, LeaseLost: errors.Is(rerr, ErrLeaseLost)})
	switch {
	case ferr != nil:
		return ferr
	case errors.Is(rerr, ErrLeaseLost):
		return fmt.Errorf("tollgate: the work ran under lease %s of pool %q, which was lost before it was released, so it may have overlapped another holder: %w", l.id, l.pool, rerr)
	case rerr != nil:
		c.log.Warn("tollgate: could not confirm a release; the server frees the lease when its TTL passes", "pool", l.pool, "lease_id", l.id, "err", rerr)
	}
	return nil
}

// releaseDetached releases the lease even if ctx has ended, waiting at most
// releaseTimeout.
func (l *Lease) releaseDetached(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	return l.Release(ctx)
}
