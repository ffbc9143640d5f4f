package server

import (
	"context"

	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/internal/term"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// This file serves outcome reports: the outcome a release carries, and the
// Report call (unary and on the Session stream), which feed adaptive
// limits.

// Report counts batches of outcomes.
func (l *limiterService) Report(ctx context.Context, req *tollgatev1.ReportRequest) (*tollgatev1.ReportResponse, error) {
	if err := l.srv.callsOf(ctx).Report(ctx, req, func(pool string) *term.Term { return l.srv.termIn(ctx, pool) }); err != nil {
		return nil, refuse.ToStatus(l.srv.log, "Report", err, refuse.About{})
	}
	return &tollgatev1.ReportResponse{}, nil
}
