package server

import (
	"context"
	"sort"

	"github.com/tollgate/tollgate/internal/apiconv"
	"github.com/tollgate/tollgate/internal/pagetoken"
	"github.com/tollgate/tollgate/internal/poolconv"
	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// This file is the resource half of AdminService: declaring, removing and
// listing the instances of active pools, and listing any resource pool's
// instances and providers.

// AddResources declares instances of an active pool.
func (a *adminService) AddResources(ctx context.Context, req *tollgatev1.AddResourcesRequest) (*tollgatev1.AddResourcesResponse, error) {
	err := apiconv.CheckPoolName("pool", req.GetPool())
	if err == nil {
		var info limiter.PoolInfo
		if info, err = a.srv.termOf(ctx).Engine().AddResources(req.GetPool(), apiconv.ResourcesFromProto(req.GetResources())); err == nil {
			return &tollgatev1.AddResourcesResponse{Pool: poolconv.InfoToProto(info), Status: apiconv.StatusToProto(info.Status)}, nil
		}
	}
	return nil, refuse.ToStatus(a.srv.log, "AddResources", err, refuse.About{Pool: req.GetPool()})
}

// RemoveResources takes instances out of an active pool, revoking the
// leases that hold them unless asked to wait.
func (a *adminService) RemoveResources(ctx context.Context, req *tollgatev1.RemoveResourcesRequest) (*tollgatev1.RemoveResourcesResponse, error) {
	err := apiconv.CheckPoolName("pool", req.GetPool())
	if err == nil {
		var r limiter.RemoveResult
		if r, err = a.srv.termOf(ctx).Engine().RemoveResources(req.GetPool(), req.GetIds(), req.GetWait(), req.GetReason(), limiter.ByActor(a.srv.actorOf(ctx))); err == nil {
			return &tollgatev1.RemoveResourcesResponse{Removed: int64(r.Removed), Removing: int64(r.Removing), Revoked: int64(r.Revoked)}, nil
		}
	}
	return nil, refuse.ToStatus(a.srv.log, "RemoveResources", err, refuse.About{Pool: req.GetPool()})
}

// ListResources lists a page of a resource pool's instances, in id order,
// and (on the first page) its providers.
func (a *adminService) ListResources(ctx context.Context, req *tollgatev1.ListResourcesRequest) (*tollgatev1.ListResourcesResponse, error) {
	resp, err := a.listResources(ctx, req)
	if err != nil {
		return nil, refuse.ToStatus(a.srv.log, "ListResources", err, refuse.About{Pool: req.GetPool()})
	}
	return resp, nil
}

func (a *adminService) listResources(ctx context.Context, req *tollgatev1.ListResourcesRequest) (*tollgatev1.ListResourcesResponse, error) {
	if err := apiconv.CheckPoolName("pool", req.GetPool()); err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize())
	if err != nil {
		return nil, err
	}
	after, first, err := pagetoken.Resource(req.GetPageToken())
	if err != nil {
		return nil, err
	}
	states, providers, err := a.srv.termOf(ctx).Engine().ListResources(req.GetPool())
	if err != nil {
		return nil, err
	}
	from := 0
	if !first {
		from = sort.Search(len(states), func(i int) bool { return states[i].ID > after })
	}
	page := states[from:min(len(states), from+size)]
	resp := &tollgatev1.ListResourcesResponse{Resources: make([]*tollgatev1.ResourceState, len(page))}
	for i, s := range page {
		resp.Resources[i] = apiconv.ResourceStateToProto(a.srv.ids, req.GetPool(), s)
	}
	if first {
		for _, p := range providers {
			resp.Providers = append(resp.Providers, apiconv.ProviderToProto(p))
		}
	}
	if from+size < len(states) && len(page) > 0 {
		resp.NextPageToken = pagetoken.EncodeResource(page[len(page)-1].ID)
	}
	return resp, nil
}
