package server

import (
	"context"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/internal/apiconv"
	"github.com/tollgate/tollgate/internal/pagetoken"
	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/internal/term"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// GetStats returns one pool's statistics (pool set), or a page of every
// pool's in name order, paged like ListPools (the same page_size rules and
// page tokens; a server of a cluster lists the pools of the shards it
// leads).
func (a *adminService) GetStats(ctx context.Context, req *tollgatev1.GetStatsRequest) (*tollgatev1.GetStatsResponse, error) {
	if name := req.GetPool(); name != "" {
		if err := limiter.ValidatePoolName(name); err != nil {
			return nil, refuse.ToStatus(a.srv.log, "GetStats", err, refuse.About{Pool: name})
		}
		st, err := a.srv.termOf(ctx).Engine().PoolStats(name)
		if err != nil {
			return nil, refuse.ToStatus(a.srv.log, "GetStats", err, refuse.About{Pool: name})
		}
		return &tollgatev1.GetStatsResponse{Stats: []*tollgatev1.PoolStats{poolStatsToProto(st)}}, nil
	}
	size, err := pageSize(req.GetPageSize())
	if err != nil {
		return nil, refuse.ToStatus(a.srv.log, "GetStats", err, refuse.About{})
	}
	after, err := pagetoken.Pool(req.GetPageToken())
	if err != nil {
		return nil, refuse.ToStatus(a.srv.log, "GetStats", err, refuse.About{})
	}
	stats, more := term.Page(a.srv.localTerms(ctx), size, func(st limiter.PoolStats) string { return st.Config.Name },
		func(eng *limiter.Engine) ([]limiter.PoolStats, bool) { return eng.ListPoolStats(after, size) })
	resp := &tollgatev1.GetStatsResponse{Stats: make([]*tollgatev1.PoolStats, 0, len(stats))}
	for _, st := range stats {
		resp.Stats = append(resp.Stats, poolStatsToProto(st))
	}
	if more && len(stats) > 0 {
		resp.NextPageToken = pagetoken.Encode(stats[len(stats)-1].Config.Name)
	}
	return resp, nil
}

// poolStatsToProto converts a pool's statistics to the wire.
func poolStatsToProto(st limiter.PoolStats) *tollgatev1.PoolStats {
	wt := st.WaitTimes
	return &tollgatev1.PoolStats{
		Pool:             st.Config.Name,
		Status:           apiconv.StatusToProto(st.Status),
		ConcurrencyLimit: st.Config.ConcurrencyLimit,
		Rate:             st.Config.Rate,
		Utilisation:      st.Utilisation,
		RateUtilisation:  st.RateUtilisation,
		WaitTimes: &tollgatev1.WaitTimes{
			Window: durationpb.New(wt.Window),
			Count:  wt.Count,
			P50:    durationpb.New(wt.P50),
			P90:    durationpb.New(wt.P90),
			P99:    durationpb.New(wt.P99),
			Max:    durationpb.New(wt.Max),
		},
	}
}
