package server

import (
	"context"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/internal/cluster"
	"github.com/tollgate/tollgate/internal/term"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// ShardOwners is what a Leadership of several shards tells besides: who
// leads each (cluster.Campaign does). A Leadership without it has one
// shard, led by its view's leader.
type ShardOwners interface {
	// Owner is the leadership of shard as this server last read it.
	Owner(shard int) cluster.Owner
	// Map is the shard map as this server last read it, in shard order.
	Map() []cluster.Owner
}

// owner is who leads shard, as this server last read it.
func (s *Server) owner(shard int) cluster.Owner {
	if so, ok := s.leadership.(ShardOwners); ok {
		return so.Owner(shard)
	}
	o := cluster.Owner{Shard: shard}
	if s.leadership != nil && shard == 0 {
		v := s.leadership.Cluster()
		o.Owner, o.Epoch = v.Leader, v.Epoch
	}
	return o
}

// notLeader is the answer of a server that does not lead shard:
// UNAVAILABLE (NOT_LEADER) naming the shard's leader, its epoch and the
// shard, and when to retry.
func (s *Server) notLeader(shard int) error {
	o := s.owner(shard)
	o.Shard = shard
	return cluster.NotLeader(s.advertise, o)
}

// notLeaderOf is notLeader for the shard of pool.
func (s *Server) notLeaderOf(pool string) error { return s.notLeader(s.terms.ShardOf(pool)) }

// gated reports whether a method is answered by the leader only: every
// Tollgate and Envoy call but GetCluster; not health or reflection.
func gated(method string) bool {
	if method == tollgatev1.AdminService_GetCluster_FullMethodName {
		return false
	}
	return strings.HasPrefix(method, "/tollgate.v1.") || strings.HasPrefix(method, "/envoy.service.ratelimit.")
}

// shardTerm is the term a call took of one shard.
type shardTerm struct {
	shard int
	t     *term.Term
}

// callTerms are the terms a call took when it started: of its pool's
// shard (one), of its pools' shards (a report), or, for a call that names
// no pool, of every shard this server led then (localTerms).
type callTerms []shardTerm

type callTermsKey struct{}

// poolOf is the pool a request names, if any: "" for a call about no pool
// or every pool (ListPools; GetStats, ListClients and WatchEvents without
// one) and for one that fails to name the pool it must (its handler
// refuses it).
func poolOf(req any) string {
	switch r := req.(type) {
	case interface{ GetPool() string }:
		return r.GetPool()
	case interface{ GetName() string }: // GetPool, DeletePool, Suspend, Resume, Drain
		return r.GetName()
	case interface{ GetPool() *tollgatev1.Pool }: // CreatePool, UpdatePool
		return r.GetPool().GetName()
	}
	return ""
}

// capture takes the terms of a call (callTerms) once, before it runs, and
// returns ctx carrying them, or NOT_LEADER when this server does not lead
// a shard the call needs: its pool's; each of a report's pools'; every
// shard for an Envoy call (the pools its descriptors match are known only
// once every shard's rules are); and, for a call that names no pool, at
// least one.
func (s *Server) capture(ctx context.Context, method string, req any) (context.Context, callTerms, error) {
	var ts callTerms
	switch r := req.(type) {
	case *tollgatev1.ReportRequest:
		seen := make(map[int]bool)
		for _, rep := range r.GetReports() {
			if i := s.terms.ShardOf(rep.GetPool()); !seen[i] {
				seen[i] = true
				ts = append(ts, shardTerm{i, s.terms.Shard(i).Get()})
			}
		}
	default:
		switch pool := poolOf(req); {
		case strings.HasPrefix(method, "/envoy.service.ratelimit.") && s.fan != nil:
			// A server of a cluster answers from the shards it leads; the
			// descriptors none of their pools match are asked of the
			// others (fanEnvoy).
			if ts = s.ledTerms(); len(ts) == 0 {
				return ctx, nil, s.notLeader(0)
			}
		case strings.HasPrefix(method, "/envoy.service.ratelimit."):
			for i := range s.terms.Len() {
				ts = append(ts, shardTerm{i, s.terms.Shard(i).Get()})
			}
		case pool != "":
			i := s.terms.ShardOf(pool)
			ts = callTerms{{i, s.terms.Shard(i).Get()}}
		default:
			ts = s.ledTerms()
			if len(ts) == 0 {
				return ctx, nil, s.notLeader(0)
			}
		}
	}
	if err := s.stoppedLeading(ts); err != nil {
		return ctx, nil, err
	}
	return context.WithValue(ctx, callTermsKey{}, ts), ts, nil
}

// ledTerms are the terms of the shards this server leads now, in shard
// order: the one place that lists them, for the calls that name no pool.
func (s *Server) ledTerms() callTerms {
	var ts callTerms
	for i := range s.terms.Len() {
		if t := s.terms.Shard(i).Get(); t.Leading() {
			ts = append(ts, shardTerm{i, t})
		}
	}
	return ts
}

// stoppedLeading is NOT_LEADER for the first of ts that does not lead
// now, and nil while all do.
func (s *Server) stoppedLeading(ts callTerms) error {
	for _, st := range ts {
		if !st.t.Leading() {
			return s.notLeader(st.shard)
		}
	}
	return nil
}

// leaderUnary takes the terms of a call of a server of a cluster
// (capture): it answers NOT_LEADER, before the call, when this server
// does not lead the call's pool's shard; and after it, when that term
// stopped leading meanwhile and the call failed without an unknown
// outcome: the error is then its frozen or closing engine's, and nothing
// was applied (the engine applies a change only once its fenced write
// succeeded, and grants only while its term is live). NOT_LEADER always
// means nothing was applied, so a client may send the call again (to the
// shard's leader it names). A call that succeeded keeps its answer (it
// was applied: its write committed, or its lease granted, before the
// deadline), and one whose write's outcome is unknown keeps
// OUTCOME_UNKNOWN.
func (s *Server) leaderUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if s.leadership == nil || !gated(info.FullMethod) {
		return handler(ctx, req)
	}
	ctx, ts, err := s.capture(ctx, info.FullMethod, req)
	if err != nil {
		return nil, err
	}
	resp, err := handler(ctx, req)
	if err != nil && !outcomeUnknown(err) {
		if nl := s.stoppedLeading(ts); nl != nil {
			return nil, nl
		}
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

// leaderStream refuses a stream of a server of a cluster that leads no
// shard. A Session stream takes the term of each request's pool's shard
// as the request comes (internal/session), a Provide stream its pool's
// shard's at its first message (internal/provide); a stream that names no
// pool (WatchEvents) takes the terms of the shards this server leads as
// it starts (localTerms), and ends with NOT_LEADER once it leads none.
func (s *Server) leaderStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if s.leadership == nil || !gated(info.FullMethod) {
		return handler(srv, ss)
	}
	ts := s.ledTerms()
	if len(ts) == 0 {
		return s.notLeader(0)
	}
	ctx := context.WithValue(ss.Context(), callTermsKey{}, ts)
	err := handler(srv, termStream{ServerStream: ss, ctx: ctx})
	if err != nil && len(s.ledTerms()) == 0 {
		return s.notLeader(0)
	}
	return err
}

// termStream is a stream whose context carries its terms.
type termStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s termStream) Context() context.Context { return s.ctx }

// termOf is the term of the call of ctx: the one the leader gate took of
// its pool's shard when it started (for a server of a cluster; the first
// of a report's), else the one shard 0 serves now (a standalone server's
// only shard). A call uses its term's engine and leadership throughout.
func (s *Server) termOf(ctx context.Context) *term.Term {
	if ts, ok := ctx.Value(callTermsKey{}).(callTerms); ok && len(ts) > 0 {
		return ts[0].t
	}
	return s.terms.Shard(0).Get()
}

// termIn is the term of the call of ctx for pool: the one the gate took of
// pool's shard, else the one pool's shard serves now.
func (s *Server) termIn(ctx context.Context, pool string) *term.Term {
	i := s.terms.ShardOf(pool)
	if ts, ok := ctx.Value(callTermsKey{}).(callTerms); ok {
		for _, st := range ts {
			if st.shard == i {
				return st.t
			}
		}
	}
	return s.terms.Shard(i).Get()
}

// localTerms are the terms of the call of ctx that names no pool: those
// of the shards this server led when it started (the gate took them), or,
// for a standalone server, its one term.
func (s *Server) localTerms(ctx context.Context) []*term.Term {
	ts, ok := ctx.Value(callTermsKey{}).(callTerms)
	if !ok {
		ts = s.ledTerms()
		if s.leadership == nil || len(ts) == 0 {
			ts = callTerms{{0, s.terms.Shard(0).Get()}}
		}
	}
	out := make([]*term.Term, len(ts))
	for i, st := range ts {
		out[i] = st.t
	}
	return out
}
