package audit

import (
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/poolconv"
	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// AdminChange returns the event of a pool change that an AdminService
// call made (pool created, updated, suspended, resumed, deleted; instances
// added or removed) with the new values, given the call's request and
// its successful response; false for calls that change no pool. The
// caller adds who made the change.
func AdminChange(req, resp any) (events.Event, bool) {
	var ev events.Event
	switch r := req.(type) {
	case *tollgatev1.CreatePoolRequest:
		p := resp.(*tollgatev1.CreatePoolResponse).GetPool()
		ev = events.Event{Type: events.PoolCreated, Pool: p.GetName(), Detail: poolFields(p, nil)}
	case *tollgatev1.UpdatePoolRequest:
		p := resp.(*tollgatev1.UpdatePoolResponse).GetPool()
		ev = events.Event{Type: events.PoolUpdated, Pool: p.GetName(), Detail: poolFields(p, r.GetUpdateMask().GetPaths())}
	case *tollgatev1.DeletePoolRequest:
		ev = events.Event{Type: events.PoolDeleted, Pool: r.GetName()}
		if r.GetForce() {
			ev.Detail = "force"
		}
	case *tollgatev1.SuspendPoolRequest:
		ev = events.Event{Type: events.PoolUpdated, Pool: r.GetName(), Detail: "suspended"}
		if r.GetRevokeHeld() {
			ev.Detail = "suspended, revoking held leases"
		}
	case *tollgatev1.ResumePoolRequest:
		ev = events.Event{Type: events.PoolUpdated, Pool: r.GetName(), Detail: "resumed"}
	case *tollgatev1.AddResourcesRequest, *tollgatev1.RemoveResourcesRequest:
		ev = resourcesEvent(req, resp)
	default:
		return events.Event{}, false
	}
	return ev, true
}

// poolFields renders a pool's limits as "field=value ...": the fields of
// one value named in paths, or (paths nil) every such field that is not at
// its default, in their declared order.
func poolFields(p *tollgatev1.Pool, paths []string) string {
	m := p.ProtoReflect()
	if paths == nil {
		def := defaultPool.ProtoReflect()
		fields := m.Descriptor().Fields()
		for i := 0; i < fields.Len(); i++ {
			fd := fields.Get(i)
			if !poolconv.OutputOnly(fd) && fd.Name() != "name" {
				if eventText(m, fd) != eventText(def, fd) {
					paths = append(paths, string(fd.Name()))
				}
			}
		}
	}
	parts := make([]string, 0, len(paths))
	for _, path := range paths {
		if fd := m.Descriptor().Fields().ByName(protoreflect.Name(path)); fd != nil && poolconv.Scalar(fd) {
			parts = append(parts, path+"="+eventText(m, fd))
		}
	}
	return strings.Join(parts, " ")
}

// defaultPool is a pool with every field at its default.
var defaultPool = poolconv.ToProto(limiter.PoolConfig{}.WithDefaults(), time.Time{}, time.Time{})

// eventText is the value of the field fd of m in an event: as people
// write it (poolconv.FormatText), a string quoted, and "default" for a
// duration or mark left at its default.
func eventText(m protoreflect.Message, fd protoreflect.FieldDescriptor) string {
	v := m.Get(fd)
	switch {
	case !m.Has(fd) && (fd.Message() != nil || poolconv.IsMark(fd)):
		return "default"
	case fd.Kind() == protoreflect.StringKind:
		return strconv.Quote(refuse.Truncate(v.String(), 64))
	}
	return poolconv.FormatText(fd, v)
}

// resourcesEvent is the audit event of a successful AddResources or
// RemoveResources (the caller adds who made it).
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
			d += " (" + refuse.Truncate(r.GetReason(), 128) + ")"
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
