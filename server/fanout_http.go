package server

import (
	"cmp"
	"context"
	"net"
	"net/http"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/tollgate/tollgate/internal/fanout"
	"github.com/tollgate/tollgate/internal/httpapi"
	"github.com/tollgate/tollgate/internal/pagetoken"
	"github.com/tollgate/tollgate/internal/poolconv"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// httpPeers is the status page's Options.Peers: nil for a standalone
// server.
func (s *Server) httpPeers() func(*http.Request, string, int) httpapi.PeerPools {
	if s.fan == nil {
		return nil
	}
	return s.peerPools
}

// peerPools is the other servers' part of the status page's GET
// /api/pools (httpapi.Options.Peers): each server's ListPools and
// GetStats pages after after, asked with the request's Authorization
// header. The pages are at most MaxPageSize long whatever limit asks:
// the merge then ends the page at the shortest server's last pool.
func (s *Server) peerPools(r *http.Request, after string, limit int) httpapi.PeerPools {
	var out httpapi.PeerPools
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	release, err := s.fan.Begin("http:" + host)
	peers := s.fan.Peers()
	if err != nil {
		out.Unreachable = peers
		return out
	}
	defer release()
	ctx := r.Context()
	if a := r.Header.Get("Authorization"); a != "" {
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", a))
	}
	tok := ""
	if after != "" {
		tok = pagetoken.Encode(after)
	}
	size := int32(min(limit, MaxPageSize))
	type page struct {
		list  *tollgatev1.ListPoolsResponse
		stats *tollgatev1.GetStatsResponse
	}
	parts := fanout.Ask(ctx, s.fan, peers, func(ctx context.Context, _ string, cc *grpc.ClientConn) (page, error) {
		adm := tollgatev1.NewAdminServiceClient(cc)
		var p page
		var statsErr error
		var wg sync.WaitGroup
		wg.Go(func() {
			p.stats, statsErr = adm.GetStats(ctx, &tollgatev1.GetStatsRequest{PageSize: size, PageToken: tok})
		})
		var err error
		p.list, err = adm.ListPools(ctx, &tollgatev1.ListPoolsRequest{PageSize: size, PageToken: tok})
		wg.Wait()
		if err == nil {
			err = statsErr
		}
		return p, err
	})
	out.Unreachable = fanout.Missing(parts)
	for _, p := range parts {
		if p.Err != nil {
			continue
		}
		waits := map[string]*tollgatev1.WaitTimes{}
		for _, st := range p.Resp.stats.GetStats() {
			waits[st.GetPool()] = st.GetWaitTimes()
		}
		l := fanout.List[httpapi.Pool]{More: p.Resp.list.GetNextPageToken() != ""}
		for i, pool := range p.Resp.list.GetPools() {
			st := p.Resp.list.GetStatuses()[min(i, len(p.Resp.list.GetStatuses())-1)]
			l.Items = append(l.Items, peerPool(pool, st, waits[pool.GetName()], p.Server))
		}
		out.Lists = append(out.Lists, l)
		out.Total += int(p.Resp.list.GetTotalSize())
	}
	return out
}

// peerPool is a pool another server listed, as the status page shows it.
func peerPool(p *tollgatev1.Pool, st *tollgatev1.PoolStatus, wt *tollgatev1.WaitTimes, server string) httpapi.Pool {
	cfg, _ := poolconv.FromProto(p) // the other server's own pool: valid
	info := limiter.PoolInfo{Config: cfg, CreateTime: p.GetCreateTime().AsTime(), UpdateTime: p.GetUpdateTime().AsTime(),
		Status: limiter.PoolStatus{
			Held: st.GetHeld(), Leases: st.GetLeases(), Waiting: st.GetWaiting(), WaitingWeight: st.GetWaitingWeight(),
			Granted: st.GetGranted(), Released: st.GetReleased(), Expired: st.GetExpired(), Rejected: st.GetRejected(),
			WaitTimeouts: st.GetWaitTimeouts(), Canceled: st.GetCanceled(),
			TokensGranted: st.GetTokensGranted(), TokensAvailable: st.GetTokensAvailable(),
			Revoked: st.GetRevoked(), Suspended: st.GetSuspended(),
			Resources: st.GetResources(), ResourcesFree: st.GetResourcesFree(), Providers: st.GetProviders(),
			AdaptiveStatus: limiter.AdaptiveStatus{
				EffectiveConcurrencyLimit: st.GetEffectiveConcurrencyLimit(), EffectiveRate: st.GetEffectiveRate(),
				ThrottleReason: throttleFromProto[st.GetThrottleReason()],
				ShareHolders:   st.GetShareHolders(), SharesGranted: st.GetSharesGranted(),
			},
		}}
	if st.GetRecoveringUntil() != nil {
		info.Status.RecoveringUntil = st.GetRecoveringUntil().AsTime()
	}
	out := httpapi.PoolOf(&info, wt.GetCount(), wt.GetP50().AsDuration(), wt.GetP99().AsDuration())
	out.Owner = cmp.Or(st.GetOwner(), server)
	return out
}

// throttleFromProto reads a pool status's throttle reason.
var throttleFromProto = map[tollgatev1.ThrottleReason]limiter.ThrottleReason{
	tollgatev1.ThrottleReason_THROTTLE_REASON_ERRORS:  limiter.ThrottleErrors,
	tollgatev1.ThrottleReason_THROTTLE_REASON_LATENCY: limiter.ThrottleLatency,
}
