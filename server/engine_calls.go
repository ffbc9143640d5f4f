package server

import (
	"context"
	"errors"
	"time"

	"github.com/tollgate/tollgate/internal/limits"
	"github.com/tollgate/tollgate/limiter"
)

// This file wraps the engine calls that create or end what Limits counts,
// so that the unary handlers and the Session stream count them the same
// way.

// acquireCounted calls the engine's Acquire for ar, counted against
// Limits.MaxClientLeases (for the caller's client key) and
// Limits.MaxWaiters while it is in progress, and records its wait in the
// pool's wait-time histogram when it is granted. A granted lease counts
// against its client until releaseLease or the engine's OnLeaseEnded ends
// it. An unauthenticated caller chooses its client_id, so while it waits
// its acquire counts against its connection as well, like a take.
func (s *Server) acquireCounted(ctx context.Context, ar limiter.AcquireRequest) (limiter.Lease, error) {
	lease, wait, err := s.startAcquireCounted(ctx, ar)
	if wait.w != nil {
		return wait.Await(ctx)
	}
	return lease, err
}

// startAcquireCounted is acquireCounted without the wait: it returns the
// outcome of an acquire that needs no wait, or else the wait (whose w is
// not nil), whose outcome Await or Notify must then learn, once. ctx only
// names the caller.
func (s *Server) startAcquireCounted(ctx context.Context, ar limiter.AcquireRequest) (limiter.Lease, countedWait, error) {
	id := s.auth().Identify(ctx)
	key, connKey := id.ClientKey(ar.ClientID), id.ClientKey("")
	if err := s.quotas.BeginAcquire(key); err != nil {
		return limiter.Lease{}, countedWait{}, err
	}
	if connKey != key {
		if err := s.quotas.BeginAcquire(connKey); err != nil {
			s.quotas.EndAcquire(key, nil)
			return limiter.Lease{}, countedWait{}, err
		}
	}
	if err := s.quotas.BeginWait(); err != nil {
		s.quotas.EndAcquire(key, nil)
		if connKey != key {
			s.quotas.EndAcquire(connKey, nil)
		}
		return limiter.Lease{}, countedWait{}, err
	}
	c := countedAcquire{s: s, key: key, connKey: connKey, start: s.Engine().Clock().Now()}
	lease, w, err := s.Engine().StartAcquire(ar)
	if w == nil {
		lease, err = c.finish(lease, err)
		return lease, countedWait{}, err
	}
	return limiter.Lease{}, countedWait{c: c, w: w}, nil
}

// countedWait is an acquire of startAcquireCounted that waits, kept by
// value in whatever keeps the wait (one record per waiter).
type countedWait struct {
	c countedAcquire
	w *limiter.AcquireWait
}

// Await waits for the outcome as AcquireWait.Await does.
func (cw *countedWait) Await(ctx context.Context) (limiter.Lease, error) {
	return cw.c.finish(cw.w.Await(ctx))
}

// Cancel gives up a notified wait as AcquireWait.Cancel does.
func (cw *countedWait) Cancel(cause error) { cw.w.Cancel(cause) }

// countedAcquire is an acquire that startAcquireCounted counted.
type countedAcquire struct {
	s            *Server
	key, connKey string
	start        time.Time
}

// finish ends the counts of the acquire's progress, given its outcome.
func (c countedAcquire) finish(lease limiter.Lease, err error) (limiter.Lease, error) {
	s := c.s
	s.quotas.EndWait()
	if c.connKey != c.key {
		s.quotas.EndAcquire(c.connKey, nil)
	}
	if err != nil {
		s.quotas.EndAcquire(c.key, nil)
		return limiter.Lease{}, err
	}
	s.quotas.EndAcquire(c.key, &lease)
	s.metrics.Waits.Observe(lease.Pool, lease.AcquireTime.Sub(c.start))
	return lease, nil
}

// takeCounted calls the engine's Take, counted against
// Limits.MaxClientLeases (for the caller's client key, as an acquire is)
// and Limits.MaxWaiters while it is in progress. A maxWait past
// Limits.MaxTakeWait is cut to it, and a take refused only because of
// that cut says so.
func (s *Server) takeCounted(ctx context.Context, pool string, tokens int64, maxWait time.Duration) (limiter.TakeResult, error) {
	key := s.auth().Identify(ctx).ClientKey("")
	if err := s.quotas.BeginAcquire(key); err != nil {
		return limiter.TakeResult{}, err
	}
	defer s.quotas.EndAcquire(key, nil)
	if err := s.quotas.BeginWait(); err != nil {
		return limiter.TakeResult{}, err
	}
	defer s.quotas.EndWait()
	asked, capped := maxWait, false
	if c := s.limits.MaxTakeWait; c > 0 && maxWait > c {
		maxWait, capped = c, true
	}
	res, err := s.Engine().Take(ctx, pool, tokens, maxWait)
	if le := (*limiter.Error)(nil); capped && errors.As(err, &le) && le.Reason == limiter.ReasonRateLimited && le.RetryAfter <= asked {
		ce := s.quotas.Exhausted(limits.KindTakeWait, le.Reason,
			"pool %q would have %d tokens in %v, longer than the server lets a take wait (%v, its --max-take-wait); retry after that, or ask the operator to raise --max-take-wait",
			pool, tokens, le.RetryAfter, s.limits.MaxTakeWait)
		ce.RetryAfter = le.RetryAfter
		return res, ce
	}
	return res, err
}

// releaseLease releases a lease on the engine, counting out (if not nil)
// as the engine's WithOutcome does, stops counting the lease against its
// client, and records how long it was held.
func (s *Server) releaseLease(pool string, token uint64, out *limiter.ReleaseOutcome) error {
	var opts []limiter.ReleaseOption
	if out != nil {
		opts = append(opts, limiter.WithOutcome(out.Outcome, out.Latency))
	}
	lease, err := s.Engine().Release(pool, token, opts...)
	if err == nil {
		s.quotas.LeaseEnded(pool, token)
		if !lease.AcquireTime.IsZero() { // zero: a pre-restart lease never re-adopted
			s.metrics.Holds.Observe(pool, s.Engine().Clock().Now().Sub(lease.AcquireTime))
		}
	}
	return err
}
