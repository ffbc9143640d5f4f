package server

import (
	"context"

	"github.com/tollgate/tollgate/internal/apiconv"
	"github.com/tollgate/tollgate/internal/refuse"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// This file serves outcome reports: the outcome a release carries, and the
// Report call (unary and on the Session stream), which feed adaptive
// limits.

// Report counts batches of outcomes.
func (l *limiterService) Report(ctx context.Context, req *tollgatev1.ReportRequest) (*tollgatev1.ReportResponse, error) {
	if err := l.srv.report(ctx, req); err != nil {
		return nil, refuse.ToStatus(l.srv.log, "Report", err, refuse.About{})
	}
	return &tollgatev1.ReportResponse{}, nil
}

// report validates req, checks that the caller may use every pool it
// names (a report can lower a pool's limits, so it needs the same right as
// an acquire), and counts it.
func (s *Server) report(ctx context.Context, req *tollgatev1.ReportRequest) error {
	rs, err := apiconv.ReportsFromProto(req)
	if err != nil {
		return err
	}
	if s.auth().HasPolicy() {
		id := s.auth().Identify(ctx)
		for _, r := range rs {
			if err := s.auth().CheckPool(id, r.Pool); err != nil {
				return err
			}
		}
	}
	return s.Engine().Report(rs)
}
