package server

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/tollgate/tollgate/internal/limits"
	"github.com/tollgate/tollgate/internal/refuse"
)

// The interceptors below enforce the per-call parts of limits.Limits: the
// request rate per client, streams per client, per address and in all,
// and the number of pools; the Session stream checks each of its requests
// as it arrives.

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
		n := 0 // the pools of the shards this server leads: the bound is per server
		for _, st := range s.ledTerms() {
			n += st.t.Engine().NumPools()
		}
		if err := s.quotas.AdmitPool(n); err != nil {
			return nil, refuse.StatusOf(err, refuse.About{}).Err()
		}
	}
	return handler(ctx, req)
}

// limitStream refuses a stream over the caller's request rate (but a
// health Watch), or past Limits.MaxClientSessions, MaxStreamsPerIP or
// MaxStreams, and counts it while it is open: every kind of stream
// counts (Session, health Watch, WatchEvents, reflection), since each
// holds a goroutine and buffers while it lasts.
func (s *Server) limitStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	id := s.auth().Identify(ss.Context())
	key := id.ClientKey("")
	if s.quotas.RateLimited() && !rateExempt(info.FullMethod) {
		if err := s.quotas.AllowRate(key); err != nil {
			return refuse.StatusOf(err, refuse.About{}).Err()
		}
	}
	if err := s.quotas.OpenStream(key, id.Addr); err != nil {
		return refuse.ToStatus(s.log, "stream", err, refuse.About{})
	}
	defer s.quotas.CloseStream(key, id.Addr)
	return handler(srv, ss)
}

// connUnary and connStream tell the connection limiter that a call is in
// progress on the caller's connection: a connection making calls keeps its
// place, one with only watches (health Watch, reflection) in progress
// may give it to a newcomer of its address and is closed when idle.
func (s *Server) connUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if p, ok := peer.FromContext(ctx); ok {
		defer limits.Begin(p.Addr, false)()
	}
	return handler(ctx, req)
}

func (s *Server) connStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if p, ok := peer.FromContext(ss.Context()); ok {
		defer limits.Begin(p.Addr, isWatch(info.FullMethod))()
	}
	return handler(srv, ss)
}

// isWatch reports whether a stream method is a watch: it keeps a
// connection open without using the server for anything.
func isWatch(method string) bool {
	return strings.HasPrefix(method, healthPrefix) || strings.HasPrefix(method, "/grpc.reflection.")
}
