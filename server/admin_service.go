package server

import (
	"context"
	"encoding/base64"
	"strings"

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

// updatablePaths are the update_mask paths UpdatePool accepts, in the order
// they are listed to people.
// (Pool.adaptive's fields also have paths of their own: adaptive_update.go.)
var updatablePaths = append([]string{"description", "concurrency_limit", "rate", "burst", "default_lease_ttl", "max_lease_ttl", "max_waiters", "adaptive", "safe_rate", "revocation_policy", "selection_policy"},
	markPaths...) // marks_convert.go

// adminService implements tollgatev1.AdminServiceServer over the engine.
type adminService struct {
	tollgatev1.UnimplementedAdminServiceServer
	srv *Server
}

// CreatePool declares a pool; output-only fields of the request are ignored.
func (a *adminService) CreatePool(ctx context.Context, req *tollgatev1.CreatePoolRequest) (*tollgatev1.CreatePoolResponse, error) {
	cfg, err := poolConfigFromProto(req.GetPool())
	if err == nil {
		var info limiter.PoolInfo
		if info, err = a.srv.engine.CreatePool(cfg); err == nil {
			return &tollgatev1.CreatePoolResponse{Pool: poolToProto(info)}, nil
		}
	}
	return nil, toStatus(a.srv.log, "CreatePool", err, errCtx{pool: req.GetPool().GetName()})
}

// GetPool returns a pool's configuration and live status.
func (a *adminService) GetPool(ctx context.Context, req *tollgatev1.GetPoolRequest) (*tollgatev1.GetPoolResponse, error) {
	err := checkPoolName("name", req.GetName())
	if err == nil {
		var info limiter.PoolInfo
		if info, err = a.srv.engine.GetPool(req.GetName()); err == nil {
			return &tollgatev1.GetPoolResponse{Pool: poolToProto(info), Status: statusToProto(info.Status)}, nil
		}
	}
	return nil, toStatus(a.srv.log, "GetPool", err, errCtx{pool: req.GetName()})
}

// pageSize returns the page size a List call asked for: 0 means
// DefaultPageSize, and above MaxPageSize means MaxPageSize. Errors:
// INVALID_ARGUMENT for a negative one.
func pageSize(n int32) (int, error) {
	switch {
	case n < 0:
		return 0, invalidArg("page_size is %d; give 1 to %d, or 0 for %d", n, MaxPageSize, DefaultPageSize)
	case n == 0:
		return DefaultPageSize, nil
	}
	return min(int(n), MaxPageSize), nil
}

// ListPools returns a page of pools in name order. The page token is the
// base64url encoding of the last name of the previous page.
func (a *adminService) ListPools(ctx context.Context, req *tollgatev1.ListPoolsRequest) (*tollgatev1.ListPoolsResponse, error) {
	size, err := pageSize(req.GetPageSize())
	if err != nil {
		return nil, toStatus(a.srv.log, "ListPools", err, errCtx{})
	}
	after, err := decodePageToken(req.GetPageToken())
	if err != nil {
		return nil, toStatus(a.srv.log, "ListPools", err, errCtx{})
	}
	infos, more := a.srv.engine.ListPools(after, size)
	resp := &tollgatev1.ListPoolsResponse{
		Pools:    make([]*tollgatev1.Pool, 0, len(infos)),
		Statuses: make([]*tollgatev1.PoolStatus, 0, len(infos)),
	}
	for _, info := range infos {
		resp.Pools = append(resp.Pools, poolToProto(info))
		resp.Statuses = append(resp.Statuses, statusToProto(info.Status))
	}
	if more && len(infos) > 0 {
		resp.NextPageToken = encodePageToken(infos[len(infos)-1].Config.Name)
	}
	return resp, nil
}

// encodePageToken makes the opaque token for the page after name.
func encodePageToken(name string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(name))
}

// decodePageToken reads a token made by encodePageToken; "" is the first page.
func decodePageToken(tok string) (string, error) {
	if tok == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || limiter.ValidatePoolName(string(b)) != nil {
		return "", invalidArg("page_token %q is not one this server issued; pass next_page_token from the previous ListPools response unchanged, or leave it empty for the first page", truncate(tok, 64))
	}
	return string(b), nil
}

// UpdatePool changes the fields named in update_mask; a named field left
// unset in pool is reset to its default. Leases its revocation policy
// revokes name the caller (actorOf).
func (a *adminService) UpdatePool(ctx context.Context, req *tollgatev1.UpdatePoolRequest) (*tollgatev1.UpdatePoolResponse, error) {
	name := req.GetPool().GetName()
	info, err := a.updatePool(req, a.srv.actorOf(ctx))
	if err != nil {
		return nil, toStatus(a.srv.log, "UpdatePool", err, errCtx{pool: name})
	}
	return &tollgatev1.UpdatePoolResponse{Pool: poolToProto(info)}, nil
}

func (a *adminService) updatePool(req *tollgatev1.UpdatePoolRequest, actor string) (limiter.PoolInfo, error) {
	p := req.GetPool()
	if p == nil {
		return limiter.PoolInfo{}, invalidArg("pool is required: give its name and the new values of the fields named in update_mask")
	}
	if err := checkPoolName("pool.name", p.GetName()); err != nil {
		return limiter.PoolInfo{}, err
	}
	paths := req.GetUpdateMask().GetPaths()
	if len(paths) == 0 {
		return limiter.PoolInfo{}, invalidArg("update_mask is required: name the fields to change, any of %s", strings.Join(updatablePaths, ", "))
	}
	// Check the paths and convert the named fields before touching the
	// pool, so that a bad request changes nothing.
	src, err := updateSource(p, paths)
	if err != nil {
		return limiter.PoolInfo{}, err
	}
	return a.srv.engine.UpdatePool(p.GetName(), func(c *limiter.PoolConfig) {
		for _, path := range paths {
			switch path {
			case "description":
				c.Description = src.Description
			case "concurrency_limit":
				c.ConcurrencyLimit = src.ConcurrencyLimit
			case "rate":
				c.Rate = src.Rate
			case "burst":
				c.Burst = src.Burst
			case "default_lease_ttl":
				c.DefaultLeaseTTL = src.DefaultLeaseTTL
			case "max_lease_ttl":
				c.MaxLeaseTTL = src.MaxLeaseTTL
			case "max_waiters":
				c.MaxWaiters = src.MaxWaiters
			case "adaptive":
				c.Adaptive = src.Adaptive
			case "safe_rate":
				c.SafeRate = src.SafeRate
			case "revocation_policy":
				c.RevocationPolicy = src.RevocationPolicy
			case "selection_policy":
				c.Selection = src.Selection
			default: // a mark (marks_convert.go) or adaptive.<field> (adaptive_update.go)
				if !applyMarkPath(c, src, path) {
					applyAdaptivePath(&c.Adaptive, src.Adaptive, path)
				}
			}
		}
	}, limiter.ByActor(actor))
}

// updateSource checks the mask's paths and converts the named fields of p.
func updateSource(p *tollgatev1.Pool, paths []string) (limiter.PoolConfig, error) {
	var src limiter.PoolConfig
	for _, path := range paths {
		known := false
		for _, v := range updatablePaths {
			if path == v {
				known = true
				break
			}
		}
		if !known && !isAdaptivePath(path) {
			if path == "name" || path == "create_time" || path == "update_time" || path == "resource_kind" {
				return src, invalidArg("update_mask path %q cannot be changed; the paths that can are %s", path, strings.Join(updatablePaths, ", "))
			}
			return src, invalidArg("update_mask path %q is not a pool field that can be changed; use any of %s, or adaptive.<field> (such as adaptive.backoff)", truncate(path, 64), strings.Join(updatablePaths, ", "))
		}
	}
	var err error
	src.Description = p.GetDescription()
	src.ConcurrencyLimit = p.GetConcurrencyLimit()
	src.Rate = p.GetRate()
	src.Burst = p.GetBurst()
	src.MaxWaiters = p.GetMaxWaiters()
	src.SafeRate = p.GetSafeRate()
	if src.RevocationPolicy, err = revocationPolicyFromProto(p.GetRevocationPolicy()); err != nil {
		return src, err
	}
	if src.Selection, err = selectionFromProto(p.GetSelectionPolicy()); err != nil {
		return src, err
	}
	if src.Adaptive, err = adaptiveFromProto("pool.adaptive", p.GetAdaptive()); err != nil { // adaptive_convert.go
		return src, err
	}
	if err := marksFromProto(p, &src); err != nil { // marks_convert.go
		return src, err
	}
	for _, path := range paths {
		switch path {
		case "default_lease_ttl":
			src.DefaultLeaseTTL, err = durationArg("pool.default_lease_ttl", p.GetDefaultLeaseTtl())
		case "max_lease_ttl":
			src.MaxLeaseTTL, err = durationArg("pool.max_lease_ttl", p.GetMaxLeaseTtl())
		}
		if err != nil {
			return src, err
		}
	}
	return src, nil
}

// DeletePool removes a pool; with force, its leases end and its waiters fail.
func (a *adminService) DeletePool(ctx context.Context, req *tollgatev1.DeletePoolRequest) (*tollgatev1.DeletePoolResponse, error) {
	err := checkPoolName("name", req.GetName())
	if err == nil {
		if err = a.srv.engine.DeletePool(req.GetName(), req.GetForce()); err == nil {
			return &tollgatev1.DeletePoolResponse{}, nil
		}
	}
	return nil, toStatus(a.srv.log, "DeletePool", err, errCtx{pool: req.GetName()})
}
