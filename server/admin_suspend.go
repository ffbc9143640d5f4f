package server

import (
	"context"
	"time"

	"github.com/tollgate/tollgate/internal/apiconv"
	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// This file is suspend, resume and drain of AdminService.

// drainMargin is the most DrainPool answers before the call's deadline.
const drainMargin = time.Second

// SuspendPool stops the pool's grants of leases; with revoke_held, its
// held leases are revoked (pushed to their sessions via OnLeaseEnded),
// naming the caller (actorOf).
func (a *adminService) SuspendPool(ctx context.Context, req *tollgatev1.SuspendPoolRequest) (*tollgatev1.SuspendPoolResponse, error) {
	err := apiconv.CheckPoolName("name", req.GetName())
	if err == nil {
		var info limiter.PoolInfo
		if info, err = a.srv.termOf(ctx).Engine().SuspendPool(req.GetName(), req.GetRevokeHeld(), limiter.ByActor(a.srv.actorOf(ctx))); err == nil {
			return &tollgatev1.SuspendPoolResponse{Status: apiconv.StatusToProto(info.Status)}, nil
		}
	}
	return nil, refuse.ToStatus(a.srv.log, "SuspendPool", err, refuse.About{Pool: req.GetName()})
}

// ResumePool lets a suspended pool grant again.
func (a *adminService) ResumePool(ctx context.Context, req *tollgatev1.ResumePoolRequest) (*tollgatev1.ResumePoolResponse, error) {
	err := apiconv.CheckPoolName("name", req.GetName())
	if err == nil {
		var info limiter.PoolInfo
		if info, err = a.srv.termOf(ctx).Engine().ResumePool(req.GetName()); err == nil {
			return &tollgatev1.ResumePoolResponse{Status: apiconv.StatusToProto(info.Status)}, nil
		}
	}
	return nil, refuse.ToStatus(a.srv.log, "ResumePool", err, refuse.About{Pool: req.GetName()})
}

// DrainPool waits, within the call's deadline, until the pool holds no
// leases. It gives up a little before the deadline (a fifth of the time
// left, at most drainMargin), so that the caller gets the server's answer,
// which says what is still held, rather than its own bare timeout.
func (a *adminService) DrainPool(ctx context.Context, req *tollgatev1.DrainPoolRequest) (*tollgatev1.DrainPoolResponse, error) {
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-min(time.Until(dl)/5, drainMargin)))
		defer cancel()
	}
	err := apiconv.CheckPoolName("name", req.GetName())
	if err == nil {
		var info limiter.PoolInfo
		if info, err = a.srv.termOf(ctx).Engine().DrainPool(ctx, req.GetName()); err == nil {
			return &tollgatev1.DrainPoolResponse{Status: apiconv.StatusToProto(info.Status)}, nil
		}
	}
	return nil, refuse.ToStatus(a.srv.log, "DrainPool", err, refuse.About{Pool: req.GetName()})
}
