package server

import (
	"context"
	"strings"

	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/internal/refuse"
)

// The interceptors below enforce the per-call parts of limits.Limits: the
// request rate per client, Session streams per client and the number of
// pools; the Session stream checks each of its requests as it arrives.

// Methods with limits of their own.
var (
	createPoolMethod = adminServicePrefix + "CreatePool"
	releaseMethod    = limiterServicePrefix + "Release"
	sessionMethod    = limiterServicePrefix + "Session"
	healthPrefix     = "/grpc.health.v1.Health/"
)

// rateExempt reports whether a unary method is not rate-limited: a release
// only gives capacity back, and health checks must always answer.
func rateExempt(method string) bool {
	return method == releaseMethod || strings.HasPrefix(method, healthPrefix)
}

// rateUnary refuses unary calls over the caller's request rate. It runs
// before authentication, so that callers without valid credentials are
// slowed down too (by address).
func (s *Server) rateUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if s.quotas.RateLimited() && !rateExempt(info.FullMethod) {
		if err := s.quotas.AllowRate(s.auth().Identify(ctx).ClientKey("")); err != nil {
			return nil, refuse.StatusOf(err, refuse.About{}).Err()
		}
	}
	return handler(ctx, req)
}

// poolsUnary refuses CreatePool past Limits.MaxPools. It runs after
// authentication: only admins learn how many pools there are.
func (s *Server) poolsUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if info.FullMethod == createPoolMethod && s.limits.MaxPools > 0 {
		// Creations are serialized so that concurrent ones cannot pass
		// the limit together; they are rare.
		s.createPoolMu.Lock()
		defer s.createPoolMu.Unlock()
		if err := s.quotas.AdmitPool(s.Engine().NumPools()); err != nil {
			return nil, refuse.StatusOf(err, refuse.About{}).Err()
		}
	}
	return handler(ctx, req)
}

// limitStream refuses a Session stream over the caller's request rate or
// past Limits.MaxClientSessions, and counts it while it is open. Other
// streams (reflection) only count against the rate, and health watches
// not even that.
func (s *Server) limitStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if info.FullMethod != sessionMethod && (!s.quotas.RateLimited() || rateExempt(info.FullMethod)) {
		return handler(srv, ss)
	}
	key := s.auth().Identify(ss.Context()).ClientKey("")
	if !rateExempt(info.FullMethod) {
		if err := s.quotas.AllowRate(key); err != nil {
			return refuse.StatusOf(err, refuse.About{}).Err()
		}
	}
	if info.FullMethod != sessionMethod {
		return handler(srv, ss)
	}
	if err := s.quotas.OpenSession(key); err != nil {
		return refuse.ToStatus(s.log, "Session", err, refuse.About{})
	}
	defer s.quotas.CloseSession(key)
	return handler(srv, ss)
}
