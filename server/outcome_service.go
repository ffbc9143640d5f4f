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
	byShard := make(map[int]*term.Term) // the terms the leader gate took
	if ts, ok := ctx.Value(callTermsKey{}).(callTerms); ok {
		for _, st := range ts {
			byShard[st.shard] = st.t
		}
	}
	if err := l.srv.callsOf(ctx).Report(ctx, req, func(pool string) *term.Term {
		if t, ok := byShard[l.srv.terms.ShardOf(pool)]; ok {
			return t
		}
		return l.srv.termIn(ctx, pool) // a standalone server's
	}); err != nil {
		return nil, refuse.ToStatus(l.srv.log, "Report", err, refuse.About{})
	}
	return &tollgatev1.ReportResponse{}, nil
}
