package server

import (
	"context"
	"encoding/base64"
	"sort"
	"strconv"
	"strings"

	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/poolconv"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// This file is the resource half of AdminService: declaring, removing and
// listing the instances of active pools, and listing any resource pool's
// instances and providers.

// AddResources declares instances of an active pool.
func (a *adminService) AddResources(ctx context.Context, req *tollgatev1.AddResourcesRequest) (*tollgatev1.AddResourcesResponse, error) {
	err := checkPoolName("pool", req.GetPool())
	if err == nil {
		var info limiter.PoolInfo
		if info, err = a.srv.Engine().AddResources(req.GetPool(), resourcesFromProto(req.GetResources())); err == nil {
			return &tollgatev1.AddResourcesResponse{Pool: poolconv.InfoToProto(info), Status: statusToProto(info.Status)}, nil
		}
	}
	return nil, toStatus(a.srv.log, "AddResources", err, errCtx{pool: req.GetPool()})
}

// RemoveResources takes instances out of an active pool, revoking the
// leases that hold them unless asked to wait.
func (a *adminService) RemoveResources(ctx context.Context, req *tollgatev1.RemoveResourcesRequest) (*tollgatev1.RemoveResourcesResponse, error) {
	err := checkPoolName("pool", req.GetPool())
	if err == nil {
		var r limiter.RemoveResult
		if r, err = a.srv.Engine().RemoveResources(req.GetPool(), req.GetIds(), req.GetWait(), req.GetReason(), limiter.ByActor(a.srv.actorOf(ctx))); err == nil {
			return &tollgatev1.RemoveResourcesResponse{Removed: int64(r.Removed), Removing: int64(r.Removing), Revoked: int64(r.Revoked)}, nil
		}
	}
	return nil, toStatus(a.srv.log, "RemoveResources", err, errCtx{pool: req.GetPool()})
}

// ListResources lists a page of a resource pool's instances, in id order,
// and (on the first page) its providers.
func (a *adminService) ListResources(ctx context.Context, req *tollgatev1.ListResourcesRequest) (*tollgatev1.ListResourcesResponse, error) {
	resp, err := a.listResources(req)
	if err != nil {
		return nil, toStatus(a.srv.log, "ListResources", err, errCtx{pool: req.GetPool()})
	}
	return resp, nil
}

func (a *adminService) listResources(req *tollgatev1.ListResourcesRequest) (*tollgatev1.ListResourcesResponse, error) {
	if err := checkPoolName("pool", req.GetPool()); err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize())
	if err != nil {
		return nil, err
	}
	after, first, err := decodeResourcePageToken(req.GetPageToken())
	if err != nil {
		return nil, err
	}
	states, providers, err := a.srv.Engine().ListResources(req.GetPool())
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
		resp.Resources[i] = a.srv.resourceStateToProto(req.GetPool(), s)
	}
	if first {
		for _, p := range providers {
			resp.Providers = append(resp.Providers, providerToProto(p))
		}
	}
	if from+size < len(states) && len(page) > 0 {
		resp.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte("r" + page[len(page)-1].ID))
	}
	return resp, nil
}

// decodeResourcePageToken reads a ListResources page token: the base64url
// encoding of "r" and the last id of the previous page. "" is the first
// page.
func decodeResourcePageToken(tok string) (after string, first bool, err error) {
	if tok == "" {
		return "", true, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(b) < 2 || b[0] != 'r' {
		return "", false, invalidArg("page_token %q is not one this server issued; pass next_page_token from the previous ListResources response unchanged, or leave it empty for the first page", truncate(tok, 64))
	}
	return string(b[1:]), false, nil
}

// resourcesEvent is the audit event of a successful AddResources or
// RemoveResources (audit.go adds who made it).
func resourcesEvent(req, resp any) events.Event {
	switch r := req.(type) {
	case *tollgatev1.AddResourcesRequest:
		ids := make([]string, len(r.GetResources()))
		for i, res := range r.GetResources() {
			ids[i] = res.GetId()
		}
		return events.Event{Type: events.ResourcesAdded, Pool: r.GetPool(), ResourceIDs: ids, Detail: idList(ids)}
	case *tollgatev1.RemoveResourcesRequest:
		out := resp.(*tollgatev1.RemoveResourcesResponse)
		d := idList(r.GetIds()) + ": " + strconv.FormatInt(out.GetRemoved(), 10) + " removed, " +
			strconv.FormatInt(out.GetRemoving(), 10) + " leaving when released, " + strconv.FormatInt(out.GetRevoked(), 10) + " leases revoked"
		if r.GetReason() != "" {
			d += " (" + truncate(r.GetReason(), 128) + ")"
		}
		return events.Event{Type: events.ResourcesRemoved, Pool: r.GetPool(), ResourceIDs: r.GetIds(), Detail: d}
	}
	return events.Event{}
}

// idList shows up to 8 ids for people.
func idList(ids []string) string {
	if len(ids) > 8 {
		return strings.Join(ids[:8], ", ") + ", ... (" + strconv.Itoa(len(ids)) + " in all)"
	}
	return strings.Join(ids, ", ")
}
