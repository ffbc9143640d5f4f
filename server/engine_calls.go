package server

import (
	"context"
	"time"

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
// it.
func (s *Server) acquireCounted(ctx context.Context, ar limiter.AcquireRequest) (limiter.Lease, error) {
	key := s.auth().identify(ctx).clientKey(ar.ClientID)
	if err := s.quotas.beginAcquire(key); err != nil {
		return limiter.Lease{}, err
	}
	if err := s.quotas.beginWait(); err != nil {
		s.quotas.endAcquire(key, nil)
		return limiter.Lease{}, err
	}
	start := s.engine.Clock().Now()
	lease, err := s.engine.Acquire(ctx, ar)
	s.quotas.endWait()
	if err != nil {
		s.quotas.endAcquire(key, nil)
		return limiter.Lease{}, err
	}
	s.quotas.endAcquire(key, &lease)
	s.metrics.waits.observe(lease.Pool, lease.AcquireTime.Sub(start))
	return lease, nil
}

// takeCounted calls the engine's Take, counted against Limits.MaxWaiters
// while it is in progress.
func (s *Server) takeCounted(ctx context.Context, pool string, tokens int64, maxWait time.Duration) (limiter.TakeResult, error) {
	if err := s.quotas.beginWait(); err != nil {
		return limiter.TakeResult{}, err
	}
	defer s.quotas.endWait()
	return s.engine.Take(ctx, pool, tokens, maxWait)
}

// releaseLease releases a lease on the engine, counting out (if not nil)
// as the engine's WithOutcome does, stops counting the lease against its
// client, and records how long it was held.
func (s *Server) releaseLease(pool string, token uint64, out *limiter.ReleaseOutcome) error {
	var opts []limiter.ReleaseOption
	if out != nil {
		opts = append(opts, limiter.WithOutcome(out.Outcome, out.Latency))
	}
	lease, err := s.engine.Release(pool, token, opts...)
	if err == nil {
		s.quotas.leaseEnded(pool, token)
		if !lease.AcquireTime.IsZero() { // zero: a pre-restart lease never re-adopted
			s.metrics.holds.observe(pool, s.engine.Clock().Now().Sub(lease.AcquireTime))
		}
	}
	return err
}
