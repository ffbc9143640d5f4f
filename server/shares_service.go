package server

import (
	"context"

	"github.com/tollgate/tollgate/internal/apiconv"
	"github.com/tollgate/tollgate/internal/refuse"
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
	sh, err := l.srv.acquireShare(req, nil, "")
	if err != nil {
		return nil, refuse.ToStatus(l.srv.log, "AcquireShare", err, refuse.About{Pool: req.GetPool()})
	}
	return &tollgatev1.AcquireShareResponse{Share: apiconv.ShareToProto(l.srv.ids, sh)}, nil
}

// RefreshShare extends a share and returns its current grant. A unary
// refresh does not change which session, if any, is pushed changes.
func (l *limiterService) RefreshShare(ctx context.Context, req *tollgatev1.RefreshShareRequest) (*tollgatev1.RefreshShareResponse, error) {
	sh, err := l.srv.refreshShare(req, nil)
	if err != nil {
		return nil, refuse.ToStatus(l.srv.log, "RefreshShare", err, refuse.About{Pool: req.GetPool()})
	}
	return &tollgatev1.RefreshShareResponse{Share: apiconv.ShareToProto(l.srv.ids, sh)}, nil
}

// ReleaseShare gives a share back.
func (l *limiterService) ReleaseShare(ctx context.Context, req *tollgatev1.ReleaseShareRequest) (*tollgatev1.ReleaseShareResponse, error) {
	if err := l.srv.releaseShare(req); err != nil {
		return nil, refuse.ToStatus(l.srv.log, "ReleaseShare", err, refuse.About{Pool: req.GetPool()})
	}
	return &tollgatev1.ReleaseShareResponse{}, nil
}

// acquireShare validates req and grants the share, owned by owner (nil
// for unary calls; pushes go to it), for client defaultClientID when req
// names none.
func (s *Server) acquireShare(req *tollgatev1.AcquireShareRequest, owner any, defaultClientID string) (limiter.Share, error) {
	sr, err := apiconv.ShareRequestFromProto(req)
	if err != nil {
		return limiter.Share{}, err
	}
	if sr.ClientID == "" {
		sr.ClientID = defaultClientID
	}
	sr.Owner = owner
	return s.Engine().AcquireShare(sr)
}

// refreshShare validates req and refreshes the share, making owner (if not
// nil) the one pushed its changes.
func (s *Server) refreshShare(req *tollgatev1.RefreshShareRequest, owner any) (limiter.Share, error) {
	sr, err := apiconv.ShareRefreshFromProto(s.ids, req)
	if err != nil {
		return limiter.Share{}, err
	}
	sr.Owner = owner
	return s.Engine().RefreshShare(sr)
}

// releaseShare validates req and gives the share back.
func (s *Server) releaseShare(req *tollgatev1.ReleaseShareRequest) error {
	if err := apiconv.CheckPoolName("pool", req.GetPool()); err != nil {
		return err
	}
	id, err := s.ids.ParseShare(req.GetPool(), req.GetShareId())
	if err != nil {
		return err
	}
	return s.Engine().ReleaseShare(req.GetPool(), id)
}

// onShareUpdate is the engine's OnShareUpdate callback: it pushes the
// change to the session that owns the share, if it is still live, and
// logs shares that ended by themselves. It never blocks.
func (s *Server) onShareUpdate(u limiter.ShareUpdate) {
	if u.Kind != limiter.ShareChanged {
		s.log.Debug("rate share ended", "pool", u.Share.Pool, "share_id", u.Share.ID, "client_id", u.Share.ClientID, "why", u.Kind.String())
	}
	if sess, ok := u.Owner.(*session); ok {
		sess.queueEvent(&tollgatev1.SessionResponse{Kind: &tollgatev1.SessionResponse_ShareEvent{ShareEvent: apiconv.ShareEventToProto(s.ids, u)}})
	}
}
