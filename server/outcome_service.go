package server

import (
	"context"
	"errors"

	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// This file serves outcome reports: the outcome a release carries, and the
// Report call (unary and on the Session stream), which feed adaptive
// limits.

// recordReleaseOutcome counts the outcome of a release (none when out is
// nil) that ended with err: when the release succeeded, or failed because
// the lease had expired (the work was done; its outcome is news), but not
// for an unknown lease, so that a retried release counts once.
func (s *Server) recordReleaseOutcome(pool string, out *releaseOutcome, err error) {
	if out == nil || (err != nil && !errors.Is(err, limiter.ErrLeaseExpired)) {
		return
	}
	if rerr := s.engine.RecordOutcome(pool, out.result, out.latency); rerr != nil {
		s.log.Debug("could not count a release's outcome", "pool", pool, "err", rerr)
	}
}

// Report counts batches of outcomes.
func (l *limiterService) Report(ctx context.Context, req *tollgatev1.ReportRequest) (*tollgatev1.ReportResponse, error) {
	if err := l.srv.report(ctx, req); err != nil {
		return nil, toStatus(l.srv.log, "Report", err, errCtx{})
	}
	return &tollgatev1.ReportResponse{}, nil
}

// report validates req, checks that the caller may use every pool it
// names (a report can lower a pool's limits, so it needs the same right as
// an acquire), and counts it.
func (s *Server) report(ctx context.Context, req *tollgatev1.ReportRequest) error {
	rs, err := reportsFromProto(req)
	if err != nil {
		return err
	}
	if s.auth.policy != nil {
		id := s.auth.identify(ctx)
		for _, r := range rs {
			if err := s.auth.checkPool(id, r.Pool); err != nil {
				return err
			}
		}
	}
	return s.engine.Report(rs)
}
