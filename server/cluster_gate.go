package server

import (
	"context"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/internal/cluster"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// notLeader is the answer of a server that does not lead: UNAVAILABLE
// (NOT_LEADER) with the leader's address and epoch and when to retry.
func (s *Server) notLeader() error {
	return cluster.NotLeader(s.advertise, s.campaign.Owner(0))
}

// gated reports whether a method is answered by the leader only: every
// Tollgate and Envoy call but GetCluster; not health or reflection.
func gated(method string) bool {
	if method == tollgatev1.AdminService_GetCluster_FullMethodName {
		return false
	}
	return strings.HasPrefix(method, "/tollgate.v1.") || strings.HasPrefix(method, "/envoy.service.ratelimit.")
}

// leaderUnary takes the term served now for the call of a server of a
// cluster (termOf), and answers NOT_LEADER when that term does not lead,
// before the call; and after it, when the term stopped leading meanwhile
// and the call failed without an unknown outcome: the error is then its
// frozen or closing engine's, and nothing was applied (the engine
// applies a change only once its fenced write succeeded, and grants
// only while its term is live). NOT_LEADER always means nothing was
// applied, so a client may send the call again. A call that succeeded
// keeps its answer (it was applied: its write committed, or its lease
// granted, before the deadline), and one whose write's outcome is
// unknown keeps OUTCOME_UNKNOWN.
func (s *Server) leaderUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if s.leadership == nil || !gated(info.FullMethod) {
		return handler(ctx, req)
	}
	ctx, t := s.terms.Capture(ctx)
	if !t.Leading() {
		return nil, s.notLeader()
	}
	resp, err := handler(ctx, req)
	if err != nil && !t.Leading() && !outcomeUnknown(err) {
		return nil, s.notLeader()
	}
	return resp, err
}

// outcomeUnknown reports whether err says a change may or may not have
// been applied (OUTCOME_UNKNOWN).
func outcomeUnknown(err error) bool {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == string(apierr.ReasonOutcomeUnknown) {
			return true
		}
	}
	return false
}

// leaderStream takes the term served now for the stream of a server of a
// cluster (termOf), and refuses the stream when that term does not lead;
// a stream it serves ends with NOT_LEADER when its term ends.
func (s *Server) leaderStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if s.leadership == nil || !gated(info.FullMethod) {
		return handler(srv, ss)
	}
	ctx, t := s.terms.Capture(ss.Context())
	if !t.Leading() {
		return s.notLeader()
	}
	err := handler(srv, termStream{ServerStream: ss, ctx: ctx})
	if err != nil && !t.Leading() {
		return s.notLeader()
	}
	return err
}

// termStream is a stream whose context carries its term.
type termStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s termStream) Context() context.Context { return s.ctx }
