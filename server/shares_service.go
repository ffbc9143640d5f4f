package server

import (
	"context"

	"github.com/tollgate/tollgate/internal/apiconv"
	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/internal/session"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// The unary calls of rate shares, and the push of the changes the engine
// makes to a share to the Session stream that owns it. The Session
// stream's own share requests are answered with its other requests.

// AcquireShare grants a share of a pool's rate. A share acquired by a
// unary call is not pushed changes: its holder learns them when it
// refreshes.
func (l *limiterService) AcquireShare(ctx context.Context, req *tollgatev1.AcquireShareRequest) (*tollgatev1.AcquireShareResponse, error) {
	sh, err := l.srv.callsOf(ctx).AcquireShare(req, nil, "")
	if err != nil {
		return nil, refuse.ToStatus(l.srv.log, "AcquireShare", err, refuse.About{Pool: req.GetPool()})
	}
	return &tollgatev1.AcquireShareResponse{Share: apiconv.ShareToProto(l.srv.ids, sh)}, nil
}

// RefreshShare extends a share and returns its current grant. A unary
// refresh does not change which session, if any, is pushed changes.
func (l *limiterService) RefreshShare(ctx context.Context, req *tollgatev1.RefreshShareRequest) (*tollgatev1.RefreshShareResponse, error) {
	sh, err := l.srv.callsOf(ctx).RefreshShare(req, nil)
	if err != nil {
		return nil, refuse.ToStatus(l.srv.log, "RefreshShare", err, refuse.About{Pool: req.GetPool()})
	}
	return &tollgatev1.RefreshShareResponse{Share: apiconv.ShareToProto(l.srv.ids, sh)}, nil
}

// ReleaseShare gives a share back.
func (l *limiterService) ReleaseShare(ctx context.Context, req *tollgatev1.ReleaseShareRequest) (*tollgatev1.ReleaseShareResponse, error) {
	if err := l.srv.callsOf(ctx).ReleaseShare(req); err != nil {
		return nil, refuse.ToStatus(l.srv.log, "ReleaseShare", err, refuse.About{Pool: req.GetPool()})
	}
	return &tollgatev1.ReleaseShareResponse{}, nil
}

// onShareUpdate is the engine's OnShareUpdate callback: it pushes the
// change to the session that owns the share, if it is still live, and
// logs shares that ended by themselves. It never blocks.
func (s *Server) onShareUpdate(u limiter.ShareUpdate) {
	if u.Kind != limiter.ShareChanged {
		s.log.Debug("rate share ended", "pool", u.Share.Pool, "share_id", u.Share.ID, "client_id", u.Share.ClientID, "why", u.Kind.String())
	}
	session.ShareUpdated(u)
}
