package server

import (
	"context"
	"strings"

	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/internal/audit"
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
	ev, ok := audit.AdminChange(req, resp)
	if !ok {
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
