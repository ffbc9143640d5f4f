package server

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/internal/apiconv"
	"github.com/tollgate/tollgate/internal/poolconv"
	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/internal/tracing"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// limiterService implements tollgatev1.LimiterServiceServer over the engine.
type limiterService struct {
	tollgatev1.UnimplementedLimiterServiceServer
	srv *Server
}

// Acquire grants a lease, waiting until granted, the wait timeout passes or
// the call's context ends. A lease granted after the caller has gone away is
// released at once, so a caller that gives up never holds a permit.
func (l *limiterService) Acquire(ctx context.Context, req *tollgatev1.AcquireRequest) (*tollgatev1.AcquireResponse, error) {
	lease, err := l.srv.acquire(ctx, req, nil, "")
	if err != nil {
		return nil, refuse.ToStatus(l.srv.log, "Acquire", err, refuse.About{Pool: req.GetPool()})
	}
	return &tollgatev1.AcquireResponse{Lease: apiconv.LeaseToProto(l.srv.ids, lease)}, nil
}

// Release ends a lease.
func (l *limiterService) Release(ctx context.Context, req *tollgatev1.ReleaseRequest) (*tollgatev1.ReleaseResponse, error) {
	if err := l.srv.release(req); err != nil {
		return nil, refuse.ToStatus(l.srv.log, "Release", err, refuse.About{Pool: req.GetPool(), LeaseID: req.GetLeaseId()})
	}
	return &tollgatev1.ReleaseResponse{}, nil
}

// Renew extends a lease. A unary renew does not change which session, if
// any, is told about the lease's end.
func (l *limiterService) Renew(ctx context.Context, req *tollgatev1.RenewRequest) (*tollgatev1.RenewResponse, error) {
	lease, err := l.srv.renew(ctx, req, nil)
	if err != nil {
		return nil, refuse.ToStatus(l.srv.log, "Renew", err, refuse.About{Pool: req.GetPool(), LeaseID: req.GetLeaseId()})
	}
	return &tollgatev1.RenewResponse{Lease: apiconv.LeaseToProto(l.srv.ids, lease)}, nil
}

// Take takes rate tokens, waiting up to max_wait, capped by the call's
// deadline.
func (l *limiterService) Take(ctx context.Context, req *tollgatev1.TakeRequest) (*tollgatev1.TakeResponse, error) {
	res, err := l.srv.take(ctx, req)
	if err != nil {
		return nil, refuse.ToStatus(l.srv.log, "Take", err, refuse.About{Pool: req.GetPool()})
	}
	return &tollgatev1.TakeResponse{Tokens: res.Tokens, Waited: durationpb.New(res.Waited)}, nil
}

// GetQueuePosition reports where a client's acquires wait in a pool's
// queue.
func (l *limiterService) GetQueuePosition(ctx context.Context, req *tollgatev1.GetQueuePositionRequest) (*tollgatev1.GetQueuePositionResponse, error) {
	err := apiconv.CheckPoolName("pool", req.GetPool())
	if err == nil {
		var queued []limiter.QueuedAcquire
		var waiting int64
		if queued, waiting, err = l.srv.Engine().QueuePositions(req.GetPool(), req.GetClientId()); err == nil {
			resp := &tollgatev1.GetQueuePositionResponse{Waiting: waiting}
			for _, q := range queued {
				resp.Acquires = append(resp.Acquires, &tollgatev1.QueuedAcquire{Position: q.Position, Weight: q.Weight, Priority: q.Priority, Waited: durationpb.New(q.Waited)})
			}
			return resp, nil
		}
	}
	return nil, refuse.ToStatus(l.srv.log, "GetQueuePosition", err, refuse.About{Pool: req.GetPool()})
}

// Session is implemented in session.go.

// acquire validates req, calls the engine with owner (nil for unary calls)
// and defaultClientID (used when req names no client), and releases a lease
// granted when ctx is already done, so that it reports a cancelled or
// timed-out call rather than a lease no one will use.
func (s *Server) acquire(ctx context.Context, req *tollgatev1.AcquireRequest, owner any, defaultClientID string) (limiter.Lease, error) {
	ar, err := apiconv.AcquireFromProto(req)
	if err != nil {
		return limiter.Lease{}, err
	}
	if ar.ClientID == "" {
		ar.ClientID = defaultClientID
	}
	ar.Owner = owner
	lease, err := s.acquireTraced(ctx, ar, req.GetTraceContext())
	if err != nil {
		return limiter.Lease{}, err
	}
	if cerr := ctx.Err(); cerr != nil && owner == nil {
		s.releaseQuietly(lease, "caller went away")
		return limiter.Lease{}, cerr
	}
	return lease, nil
}

// releaseQuietly releases a lease that was granted but could not be handed
// to its caller, logging (at debug) why.
func (s *Server) releaseQuietly(lease limiter.Lease, why string) {
	err := s.releaseLease(lease.Pool, lease.FencingToken, nil)
	s.log.Debug("released an undelivered lease", "pool", lease.Pool, "lease_id", lease.FencingToken, "why", why, "err", err)
}

// release validates req and ends the lease, counting the outcome it
// carries, if any (outcome_service.go).
func (s *Server) release(req *tollgatev1.ReleaseRequest) error {
	if err := apiconv.CheckPoolName("pool", req.GetPool()); err != nil {
		return err
	}
	tok, err := s.parseHolderLeaseID(req.GetPool(), req.GetLeaseId())
	if err != nil {
		return err
	}
	out, err := apiconv.OutcomeFromProto(req.GetOutcome())
	if err != nil {
		return err
	}
	return s.releaseLease(req.GetPool(), tok, out)
}

// renew validates req and extends the lease, making owner (if not nil) the
// one told about the lease's end.
//
// A lease the renew re-adopted after a restart (or any lease the quotas
// do not know) starts counting against its client's lease limit here.
func (s *Server) renew(ctx context.Context, req *tollgatev1.RenewRequest, owner any) (limiter.Lease, error) {
	if err := apiconv.CheckPoolName("pool", req.GetPool()); err != nil {
		return limiter.Lease{}, err
	}
	tok, err := s.parseHolderLeaseID(req.GetPool(), req.GetLeaseId())
	if err != nil {
		return limiter.Lease{}, err
	}
	ttl, err := poolconv.Duration("ttl", req.GetTtl())
	if err != nil {
		return limiter.Lease{}, err
	}
	ra, err := readoptFromProto(req) // after a restart: persist.go
	if err != nil {
		return limiter.Lease{}, err
	}
	if ra.Expiry, err = s.ids.ParseReceipt(req.GetPool(), tok, req.GetExpiryReceipt()); err != nil {
		return limiter.Lease{}, err
	}
	if sess, ok := owner.(*session); ok && ra.ClientID == "" {
		ra.ClientID = sess.clientID // renew runs on the session's reader goroutine, which owns clientID
	}
	lease, err := s.Engine().RenewOrReadopt(req.GetPool(), tok, ttl, owner, ra)
	if err == nil {
		s.quotas.Track(lease.Pool, lease.FencingToken, func() string { return s.auth().Identify(ctx).ClientKey(lease.ClientID) })
	}
	return lease, err
}

// take validates req and takes tokens. The wait is max_wait if set, capped
// by the time left until ctx's deadline; with neither, the tokens must be
// available at once.
func (s *Server) take(ctx context.Context, req *tollgatev1.TakeRequest) (limiter.TakeResult, error) {
	if req == nil {
		req = &tollgatev1.TakeRequest{}
	}
	if err := apiconv.CheckPoolName("pool", req.GetPool()); err != nil {
		return limiter.TakeResult{}, err
	}
	tokens, err := apiconv.CountArg("tokens", req.Tokens)
	if err != nil {
		return limiter.TakeResult{}, err
	}
	maxWait, err := poolconv.Duration("max_wait", req.GetMaxWait())
	if err != nil {
		return limiter.TakeResult{}, err
	}
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		if left < 0 {
			left = 0
		}
		if req.GetMaxWait() == nil || left < maxWait {
			maxWait = left
		}
	}
	if err := tracing.CheckContext(req.GetTraceContext()); err != nil {
		return limiter.TakeResult{}, err
	}
	return s.takeTraced(ctx, req.GetPool(), tokens, maxWait, req.GetTraceContext())
}
