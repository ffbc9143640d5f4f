package server

import (
	"context"
	"strings"

	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/internal/auth"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// auth returns the server's current authorizer (SetAuth may replace it).
func (s *Server) auth() *auth.Authorizer { return s.authz.Load() }

// SetAuth replaces the server's admin names, admin token and policy with
// c's, for the calls that start from now on (calls in progress finish
// under the old ones). It is how a running server takes a renewed token
// or an edited policy file; c.ClientCerts must say what the listeners
// really do, as at start.
func (s *Server) SetAuth(c *auth.Config) { s.authz.Store(auth.New(c)) }

// Service names, to tell which checks a method needs.
var (
	adminServicePrefix   = "/" + tollgatev1.AdminService_ServiceDesc.ServiceName + "/"
	limiterServicePrefix = "/" + tollgatev1.LimiterService_ServiceDesc.ServiceName + "/"
)

// poolNamer is every LimiterService request that names a pool.
type poolNamer interface{ GetPool() string }

// authUnary refuses unary calls the caller may not make: AdminService
// calls (but GetCluster) without an admin identity, LimiterService calls
// (and GetCluster) of a caller the policy allows no pool, or on a pool it
// does not allow.
func (s *Server) authUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := s.authorize(ctx, info.FullMethod, req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// authStream refuses streams the caller may not open. The pools of the
// requests on a Session stream are checked one by one as they arrive
// (internal/session).
func (s *Server) authStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := s.authorize(ss.Context(), info.FullMethod, nil); err != nil {
		return err
	}
	return handler(srv, ss)
}

// authorize checks one call; req is nil for streams.
func (s *Server) authorize(ctx context.Context, method string, req any) error {
	var err error
	switch {
	case method == tollgatev1.AdminService_GetCluster_FullMethodName:
		// Every client needs the shard map to reach a pool's leader: it
		// is a limiter call, not an admin one (it tells nothing a
		// NOT_LEADER answer does not).
		if s.auth().HasPolicy() {
			id := s.auth().Identify(ctx)
			err = s.auth().CheckLimiter(id)
		}
	case strings.HasPrefix(method, adminServicePrefix):
		id := s.auth().Identify(ctx)
		if err = s.auth().CheckAdmin(id); err != nil {
			s.log.Warn("refused an admin call", "method", method, "peer", id.Addr, "client", id.Principal(), "err", err)
		}
	case strings.HasPrefix(method, limiterServicePrefix) && s.auth().HasPolicy():
		id := s.auth().Identify(ctx)
		if pn, ok := req.(poolNamer); ok {
			err = s.auth().CheckPool(id, pn.GetPool())
		} else {
			err = s.auth().CheckLimiter(id)
		}
		if err != nil {
			s.log.Debug("refused a limiter call", "method", method, "peer", id.Addr, "client", id.Principal(), "err", err)
		}
	}
	return err
}
