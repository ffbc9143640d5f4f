package server

import (
	"context"
	"strings"

	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/internal/cluster"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// notLeader is the answer of a server that does not lead: UNAVAILABLE
// (NOT_LEADER) with the leader's address and epoch and when to retry.
func (s *Server) notLeader() error {
	return cluster.NotLeader(cluster.View(s.leadership.Cluster()))
}

// termDone is closed when the term the server serves ends: never for a
// standalone server.
func (s *Server) termDone() <-chan struct{} {
	if s.campaign == nil {
		return nil
	}
	return s.campaign.TermDone()
}

// gated reports whether a method is answered by the leader only: every
// Tollgate and Envoy call but GetCluster; not health or reflection.
func gated(method string) bool {
	if method == tollgatev1.AdminService_GetCluster_FullMethodName {
		return false
	}
	return strings.HasPrefix(method, "/tollgate.v1.") || strings.HasPrefix(method, "/envoy.service.ratelimit.")
}

// leaderUnary answers NOT_LEADER for a server of a cluster that does not
// lead, before the call, and after it when leadership ended meanwhile:
// an error is then the closing engine's, not the caller's, and a lease
// granted (say, to a waiting acquire, by an engine timer) must not reach
// a holder once the deadline has passed.
func (s *Server) leaderUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if s.leadership == nil || !gated(info.FullMethod) {
		return handler(ctx, req)
	}
	if !s.leadership.Leading() {
		return nil, s.notLeader()
	}
	resp, err := handler(ctx, req)
	if !s.leadership.Leading() {
		return nil, s.notLeader()
	}
	return resp, err
}

// notLeading is NOT_LEADER for a server of a cluster that does not lead
// now, and nil for one that does (or a standalone one).
func (s *Server) notLeading() error {
	if s.leadership == nil || s.leadership.Leading() {
		return nil
	}
	return s.notLeader()
}

// leaderStream refuses streams on a server that does not lead; those it
// serves end with NOT_LEADER when its term ends.
func (s *Server) leaderStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if s.leadership == nil || !gated(info.FullMethod) {
		return handler(srv, ss)
	}
	if !s.leadership.Leading() {
		return s.notLeader()
	}
	err := handler(srv, ss)
	if err != nil && !s.leadership.Leading() {
		return s.notLeader()
	}
	return err
}
