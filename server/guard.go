package server

import (
	"context"
	"strings"

	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/internal/refuse"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// The interceptors below enforce the per-call parts of limits.Limits: the
// request rate per client, Session streams per client and the number of
// pools; guardSessionRequest checks each request of a Session stream as it
// arrives.

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

// guardSessionRequest checks one request of a Session stream before it is
// handled: the caller's request rate (releases and cancels are exempt) and
// the policy for the pool it names. It returns the refusal to answer the
// request with, or nil.
func (s *Server) guardSessionRequest(ctx context.Context, req *tollgatev1.SessionRequest) error {
	kind, pool := sessionKind(req)
	s.metrics.CountSessionRequest(int(kind))
	givesBack := kind == skRelease || kind == skCancel
	if kind == skCancel || ((givesBack || !s.quotas.RateLimited()) && !s.auth().HasPolicy()) {
		return nil
	}
	id := s.auth().Identify(ctx)
	if !givesBack {
		if err := s.quotas.AllowRate(id.ClientKey("")); err != nil {
			return err
		}
	}
	switch kind {
	case skAcquire, skRelease, skRenew, skTake:
		return s.auth().CheckPool(id, pool)
	}
	return nil
}

// answerRefusal answers request id of the session with a refusal from
// guardSessionRequest.
func (s *session) answerRefusal(id uint64, err error) {
	if r, ok := err.(*refuse.Refusal); ok {
		s.send(&tollgatev1.SessionResponse{RequestId: id, Kind: &tollgatev1.SessionResponse_Error{Error: &tollgatev1.SessionError{
			Code:    int32(r.Code()),
			Message: r.Error(),
			Reason:  string(r.Reason()),
		}}})
		return
	}
	s.answerErr(id, err, refuse.About{})
}

// sessionKinds index the per-kind counters of Session requests.
type sessionKindID int

const (
	skHello sessionKindID = iota
	skAcquire
	skRelease
	skRenew
	skTake
	skCancel
	skOther
	numSessionKinds
)

// sessionKindNames are the values of the "kind" label of
// tollgate_grpc_session_requests_total.
var sessionKindNames = [numSessionKinds]string{"hello", "acquire", "release", "renew", "take", "cancel", "other"}

// sessionKind returns a request's kind and the pool it names, if any.
func sessionKind(req *tollgatev1.SessionRequest) (sessionKindID, string) {
	switch k := req.GetKind().(type) {
	case *tollgatev1.SessionRequest_Hello:
		return skHello, ""
	case *tollgatev1.SessionRequest_Acquire:
		return skAcquire, k.Acquire.GetPool()
	case *tollgatev1.SessionRequest_Release:
		return skRelease, k.Release.GetPool()
	case *tollgatev1.SessionRequest_Renew:
		return skRenew, k.Renew.GetPool()
	case *tollgatev1.SessionRequest_Take:
		return skTake, k.Take.GetPool()
	case *tollgatev1.SessionRequest_Cancel:
		return skCancel, ""
	}
	return skOther, ""
}
