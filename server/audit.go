package server

import (
	"context"
	"strconv"
	"strings"

	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/internal/poolconv"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// auditUnary records and logs every pool change that AdminService made
// (pool created, updated, suspended, resumed, deleted) with who made it and
// the new values.
// Refused changes are not events; the caller got the error.
func (s *Server) auditUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err != nil || !strings.HasPrefix(info.FullMethod, adminServicePrefix) {
		return resp, err
	}
	var ev Event
	switch r := req.(type) {
	case *tollgatev1.CreatePoolRequest:
		p := resp.(*tollgatev1.CreatePoolResponse).GetPool()
		ev = Event{Type: EventPoolCreated, Pool: p.GetName(), Detail: poolFields(p, nil)}
	case *tollgatev1.UpdatePoolRequest:
		p := resp.(*tollgatev1.UpdatePoolResponse).GetPool()
		ev = Event{Type: EventPoolUpdated, Pool: p.GetName(), Detail: poolFields(p, r.GetUpdateMask().GetPaths())}
	case *tollgatev1.DeletePoolRequest:
		ev = Event{Type: EventPoolDeleted, Pool: r.GetName()}
		if r.GetForce() {
			ev.Detail = "force"
		}
	case *tollgatev1.SuspendPoolRequest:
		ev = Event{Type: EventPoolUpdated, Pool: r.GetName(), Detail: "suspended"}
		if r.GetRevokeHeld() {
			ev.Detail = "suspended, revoking held leases"
		}
	case *tollgatev1.ResumePoolRequest:
		ev = Event{Type: EventPoolUpdated, Pool: r.GetName(), Detail: "resumed"}
	case *tollgatev1.AddResourcesRequest, *tollgatev1.RemoveResourcesRequest:
		ev = resourcesEvent(req, resp) // admin_resources.go
	default:
		return resp, err
	}
	ev.Actor = s.actorOf(ctx)
	s.recordEvent(ev)
	return resp, err
}

// actorOf names the caller of ctx in events and in the messages of the
// revocations it makes: its authenticated name, or its address when it
// presented no credentials.
func (s *Server) actorOf(ctx context.Context) string {
	id := s.auth().identify(ctx)
	if p := id.principal(); p != "" {
		return p
	}
	return id.addr
}

// poolFields renders a pool's limits as "field=value ...": the fields named
// in paths, or (paths nil) every field that is set and not at its default.
func poolFields(p *tollgatev1.Pool, paths []string) string {
	vals := map[string]string{
		"description":       strconv.Quote(truncate(p.GetDescription(), 64)),
		"concurrency_limit": strconv.FormatInt(p.GetConcurrencyLimit(), 10),
		"rate":              strconv.FormatFloat(p.GetRate(), 'g', -1, 64),
		"burst":             strconv.FormatInt(p.GetBurst(), 10),
		"default_lease_ttl": p.GetDefaultLeaseTtl().AsDuration().String(),
		"max_lease_ttl":     p.GetMaxLeaseTtl().AsDuration().String(),
		"max_waiters":       strconv.FormatInt(p.GetMaxWaiters(), 10),
		"revocation_policy": poolconv.EnumText(p.GetRevocationPolicy()),
		"selection_policy":  poolconv.EnumText(p.GetSelectionPolicy()),
	}
	markFields(p, vals) // marks_convert.go
	if paths == nil {
		defaults := map[string]string{
			"description":       `""`,
			"concurrency_limit": "0",
			"rate":              "0",
			"burst":             "0",
			"default_lease_ttl": limiter.DefaultLeaseTTL.String(),
			"max_lease_ttl":     limiter.DefaultMaxLeaseTTL.String(),
			"max_waiters":       strconv.Itoa(limiter.DefaultMaxWaiters),
			"revocation_policy": "wait",
			"selection_policy":  "reuse",
			// The marks' defaults are 0 (unset): markFields.
			"overload_mark": "default", "near_full_mark": "default", "low_utilisation_mark": "default", "low_utilisation_period": "default",
		}
		if k := p.GetResourceKind(); k == tollgatev1.ResourceKind_RESOURCE_KIND_ACTIVE || k == tollgatev1.ResourceKind_RESOURCE_KIND_PASSIVE {
			paths = append(paths, "resource_kind")
			vals["resource_kind"] = poolconv.EnumText(k)
		}
		for _, f := range updatablePaths {
			if vals[f] != defaults[f] {
				paths = append(paths, f)
			}
		}
	}
	parts := make([]string, 0, len(paths))
	for _, f := range paths {
		if v, ok := vals[f]; ok {
			parts = append(parts, f+"="+v)
		}
	}
	return strings.Join(parts, " ")
}
