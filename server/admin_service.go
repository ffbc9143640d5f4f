package server

import (
	"context"
	"time"

	"github.com/tollgate/tollgate/internal/apiconv"
	"github.com/tollgate/tollgate/internal/pagetoken"
	"github.com/tollgate/tollgate/internal/poolconv"
	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/internal/term"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// Paging of ListPools.
const (
	// DefaultPageSize is the page size of a ListPools call that gives none.
	DefaultPageSize = 100
	// MaxPageSize is the largest page ListPools returns; larger requests
	// are served with this size.
	MaxPageSize = 1000
)

// adminService implements tollgatev1.AdminServiceServer over the engine.
type adminService struct {
	tollgatev1.UnimplementedAdminServiceServer
	srv *Server
}

// CreatePool declares a pool; output-only fields of the request are ignored.
func (a *adminService) CreatePool(ctx context.Context, req *tollgatev1.CreatePoolRequest) (*tollgatev1.CreatePoolResponse, error) {
	cfg, err := createConfig(req.GetPool())
	if err == nil {
		var info limiter.PoolInfo
		if info, err = a.srv.termOf(ctx).Engine().CreatePool(cfg); err == nil {
			return &tollgatev1.CreatePoolResponse{Pool: poolconv.InfoToProto(info)}, nil
		}
	}
	return nil, refuse.ToStatus(a.srv.log, "CreatePool", err, refuse.About{Pool: req.GetPool().GetName()})
}

// createConfig converts the pool of a CreatePool request.
func createConfig(p *tollgatev1.Pool) (limiter.PoolConfig, error) {
	if p == nil {
		return limiter.PoolConfig{}, refuse.InvalidArg("pool is required: give at least its name and a concurrency_limit or rate")
	}
	if err := apiconv.CheckPoolName("pool.name", p.GetName()); err != nil {
		return limiter.PoolConfig{}, err
	}
	return poolconv.FromProto(p)
}

// GetPool returns a pool's configuration and live status.
func (a *adminService) GetPool(ctx context.Context, req *tollgatev1.GetPoolRequest) (*tollgatev1.GetPoolResponse, error) {
	err := apiconv.CheckPoolName("name", req.GetName())
	if err == nil {
		var info limiter.PoolInfo
		if info, err = a.srv.termOf(ctx).Engine().GetPool(req.GetName()); err == nil {
			return &tollgatev1.GetPoolResponse{Pool: poolconv.InfoToProto(info), Status: apiconv.StatusToProto(info.Status)}, nil
		}
	}
	return nil, refuse.ToStatus(a.srv.log, "GetPool", err, refuse.About{Pool: req.GetName()})
}

// pageSize returns the page size a List call asked for: 0 means
// DefaultPageSize, and above MaxPageSize means MaxPageSize. Errors:
// INVALID_ARGUMENT for a negative one.
func pageSize(n int32) (int, error) {
	switch {
	case n < 0:
		return 0, refuse.InvalidArg("page_size is %d; give 1 to %d, or 0 for %d", n, MaxPageSize, DefaultPageSize)
	case n == 0:
		return DefaultPageSize, nil
	}
	return min(int(n), MaxPageSize), nil
}

// ListPools returns a page of pools in name order. The page token is the
// base64url encoding of the last name of the previous page. A server of a
// cluster lists the pools of the shards it leads.
func (a *adminService) ListPools(ctx context.Context, req *tollgatev1.ListPoolsRequest) (*tollgatev1.ListPoolsResponse, error) {
	size, err := pageSize(req.GetPageSize())
	if err != nil {
		return nil, refuse.ToStatus(a.srv.log, "ListPools", err, refuse.About{})
	}
	after, err := pagetoken.Pool(req.GetPageToken())
	if err != nil {
		return nil, refuse.ToStatus(a.srv.log, "ListPools", err, refuse.About{})
	}
	infos, more := term.Page(a.srv.localTerms(ctx), size, func(p limiter.PoolInfo) string { return p.Config.Name },
		func(eng *limiter.Engine) ([]limiter.PoolInfo, bool) { return eng.ListPools(after, size) })
	resp := &tollgatev1.ListPoolsResponse{
		Pools:    make([]*tollgatev1.Pool, 0, len(infos)),
		Statuses: make([]*tollgatev1.PoolStatus, 0, len(infos)),
	}
	for _, info := range infos {
		resp.Pools = append(resp.Pools, poolconv.InfoToProto(info))
		resp.Statuses = append(resp.Statuses, apiconv.StatusToProto(info.Status))
	}
	if more && len(infos) > 0 {
		resp.NextPageToken = pagetoken.Encode(infos[len(infos)-1].Config.Name)
	}
	return resp, nil
}

// UpdatePool changes the fields named in update_mask; a named field left
// unset in pool is reset to its default. Leases its revocation policy
// revokes name the caller (actorOf).
func (a *adminService) UpdatePool(ctx context.Context, req *tollgatev1.UpdatePoolRequest) (*tollgatev1.UpdatePoolResponse, error) {
	name := req.GetPool().GetName()
	info, err := a.updatePool(ctx, req, a.srv.actorOf(ctx))
	if err != nil {
		return nil, refuse.ToStatus(a.srv.log, "UpdatePool", err, refuse.About{Pool: name})
	}
	return &tollgatev1.UpdatePoolResponse{Pool: poolconv.InfoToProto(info)}, nil
}

func (a *adminService) updatePool(ctx context.Context, req *tollgatev1.UpdatePoolRequest, actor string) (limiter.PoolInfo, error) {
	p := req.GetPool()
	if p == nil {
		return limiter.PoolInfo{}, refuse.InvalidArg("pool is required: give its name and the new values of the fields named in update_mask")
	}
	if err := apiconv.CheckPoolName("pool.name", p.GetName()); err != nil {
		return limiter.PoolInfo{}, err
	}
	mask, err := poolconv.ParseMask(req.GetUpdateMask().GetPaths())
	if err != nil {
		return limiter.PoolInfo{}, err
	}
	// Convert the named fields before touching the pool, so that a bad
	// value changes nothing; then the merge below cannot fail.
	if _, err := poolconv.FromProto(mask.Merge(&tollgatev1.Pool{}, p)); err != nil {
		return limiter.PoolInfo{}, err
	}
	var mergeErr error
	info, err := a.srv.termOf(ctx).Engine().UpdatePool(p.GetName(), func(c *limiter.PoolConfig) {
		cfg, err := poolconv.FromProto(mask.Merge(poolconv.ToProto(*c, time.Time{}, time.Time{}), p))
		if err != nil {
			mergeErr = err // unreachable: the fields of both sides convert
			return
		}
		*c = cfg
	}, limiter.ByActor(actor))
	if err == nil {
		err = mergeErr
	}
	return info, err
}

// DeletePool removes a pool; with force, its leases end and its waiters fail.
func (a *adminService) DeletePool(ctx context.Context, req *tollgatev1.DeletePoolRequest) (*tollgatev1.DeletePoolResponse, error) {
	err := apiconv.CheckPoolName("name", req.GetName())
	if err == nil {
		if err = a.srv.termOf(ctx).Engine().DeletePool(req.GetName(), req.GetForce()); err == nil {
			return &tollgatev1.DeletePoolResponse{}, nil
		}
	}
	return nil, refuse.ToStatus(a.srv.log, "DeletePool", err, refuse.About{Pool: req.GetName()})
}
