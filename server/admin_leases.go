package server

import (
	"context"

	"github.com/tollgate/tollgate/internal/apiconv"
	"github.com/tollgate/tollgate/internal/leaseid"
	"github.com/tollgate/tollgate/internal/pagetoken"
	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// This file is the lease half of AdminService: revoking, getting and
// listing a pool's live leases.

// RevokeLease ends a live lease at once; the engine reports it through
// OnLeaseEnded, which pushes LeaseEvent REVOKED to its holder's session
// and records a lease_revoked event, both naming the caller (actorOf).
func (a *adminService) RevokeLease(ctx context.Context, req *tollgatev1.RevokeLeaseRequest) (*tollgatev1.RevokeLeaseResponse, error) {
	tok, err := adminLeaseArgs(req.GetPool(), req.GetLeaseId())
	if err == nil && len(req.GetReason()) > limiter.MaxRevokeReasonLen {
		err = refuse.InvalidArg("reason is %d bytes; the most is %d", len(req.GetReason()), limiter.MaxRevokeReasonLen)
	}
	if err == nil {
		if err = a.srv.termOf(ctx).Engine().RevokeLease(req.GetPool(), tok, req.GetReason(), limiter.ByActor(a.srv.actorOf(ctx))); err == nil {
			return &tollgatev1.RevokeLeaseResponse{}, nil
		}
	}
	return nil, refuse.ToStatus(a.srv.log, "RevokeLease", err, refuse.About{Pool: req.GetPool(), LeaseID: req.GetLeaseId()})
}

// GetLease returns a live lease.
func (a *adminService) GetLease(ctx context.Context, req *tollgatev1.GetLeaseRequest) (*tollgatev1.GetLeaseResponse, error) {
	tok, err := adminLeaseArgs(req.GetPool(), req.GetLeaseId())
	if err == nil {
		var l limiter.Lease
		if l, err = a.srv.termOf(ctx).Engine().GetLease(req.GetPool(), tok); err == nil {
			return &tollgatev1.GetLeaseResponse{Lease: apiconv.LeaseToProto(a.srv.ids, l)}, nil
		}
	}
	return nil, refuse.ToStatus(a.srv.log, "GetLease", err, refuse.About{Pool: req.GetPool(), LeaseID: req.GetLeaseId()})
}

// ListLeases returns a page of a pool's live leases in fencing token
// order. The page token is the base64url encoding of the decimal fencing
// token the previous page ended at. A page filtered by client_id passes
// over at most limiter.MaxListScan leases of other clients, so it may be
// short, or empty, with a next page token.
func (a *adminService) ListLeases(ctx context.Context, req *tollgatev1.ListLeasesRequest) (*tollgatev1.ListLeasesResponse, error) {
	resp, err := a.listLeases(ctx, req)
	if err != nil {
		return nil, refuse.ToStatus(a.srv.log, "ListLeases", err, refuse.About{Pool: req.GetPool()})
	}
	return resp, nil
}

func (a *adminService) listLeases(ctx context.Context, req *tollgatev1.ListLeasesRequest) (*tollgatev1.ListLeasesResponse, error) {
	if err := apiconv.CheckPoolName("pool", req.GetPool()); err != nil {
		return nil, err
	}
	if n := len(req.GetClientId()); n > limiter.MaxClientIDLen {
		return nil, refuse.InvalidArg("client_id is %d bytes; the most is %d", n, limiter.MaxClientIDLen)
	}
	size, err := pageSize(req.GetPageSize())
	if err != nil {
		return nil, err
	}
	after, err := pagetoken.Number(req.GetPageToken(), "ListLeases")
	if err != nil {
		return nil, err
	}
	leases, next, err := a.srv.termOf(ctx).Engine().ListLeases(req.GetPool(), req.GetClientId(), after, size)
	if err != nil {
		return nil, err
	}
	resp := &tollgatev1.ListLeasesResponse{Leases: make([]*tollgatev1.Lease, 0, len(leases))}
	for _, l := range leases {
		resp.Leases = append(resp.Leases, apiconv.LeaseToProto(a.srv.ids, l))
	}
	if next != 0 {
		resp.NextPageToken = pagetoken.Encode(apiconv.FormatLeaseID(next))
	}
	return resp, nil
}

// adminLeaseArgs checks the pool and lease id of a lease request and
// returns the lease's fencing token.
func adminLeaseArgs(pool, leaseID string) (uint64, error) {
	if err := apiconv.CheckPoolName("pool", pool); err != nil {
		return 0, err
	}
	return leaseid.ParseAdmin(leaseID)
}
