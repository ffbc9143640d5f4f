package server

import (
	"context"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tollgate/tollgate/internal/events"
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
	id := s.auth().Identify(ctx)
	if p := id.Principal(); p != "" {
		return p
	}
	return id.Addr
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
		return strconv.Quote(truncate(v.String(), 64))
	}
	return poolconv.FormatText(fd, v)
}
