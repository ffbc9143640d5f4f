package server

import (
	"context"
	"time"

	"github.com/tollgate/tollgate/internal/tracing"
	"github.com/tollgate/tollgate/limiter"
)

// acquireTraced is acquireCounted in a span under the caller's trace
// context tc (if any).
func (s *Server) acquireTraced(ctx context.Context, ar limiter.AcquireRequest, tc map[string]string) (limiter.Lease, error) {
	if s.tracing == nil {
		return s.acquireCounted(ctx, ar)
	}
	ctx, span := s.tracing.Start(ctx, "tollgate.Acquire", tc, tracing.AttrPool.String(ar.Pool), tracing.AttrWeight.Int64(ar.Weight))
	start := s.Engine().Clock().Now()
	lease, err := s.acquireCounted(ctx, ar)
	tracing.End(span, err, tracing.AttrWaitMS.Float64(float64(s.Engine().Clock().Now().Sub(start))/1e6), tracing.AttrToken.Int64(int64(lease.FencingToken)))
	return lease, err
}

// takeTraced is takeCounted in a span under the caller's trace context tc
// (if any).
func (s *Server) takeTraced(ctx context.Context, pool string, tokens int64, maxWait time.Duration, tc map[string]string) (limiter.TakeResult, error) {
	if s.tracing == nil {
		return s.takeCounted(ctx, pool, tokens, maxWait)
	}
	ctx, span := s.tracing.Start(ctx, "tollgate.Take", tc, tracing.AttrPool.String(pool), tracing.AttrTokens.Int64(tokens))
	res, err := s.takeCounted(ctx, pool, tokens, maxWait)
	tracing.End(span, err, tracing.AttrWaitMS.Float64(float64(res.Waited)/1e6))
	return res, err
}
