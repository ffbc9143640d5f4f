package server

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/internal/fanout"
	"github.com/tollgate/tollgate/internal/refuse"
	commonv3 "github.com/tollgate/tollgate/proto/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/tollgate/tollgate/proto/envoy/service/ratelimit/v3"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// Envoy's rate-limit API through any server of a cluster. A descriptor
// belongs to the pool whose rule it matches, and a server knows the rules
// of the pools it leads only. So a server answers each descriptor from
// its own pools first; the descriptors none of them matches go, in one
// call each, to every other server (one hop, marked local: never
// forwarded again), and each takes the answer of the first pool by name
// that matched it there, or OK without a limit when none did. Every
// server applies its own descriptors: the overall code is OVER_LIMIT if
// any is, and the OK ones' tokens stay taken, as on one server.

// fanEnvoy answers a ShouldRateLimit call of a server of a cluster.
func (s *Server) fanEnvoy(ctx context.Context, req *rlsv3.RateLimitRequest, handler grpc.UnaryHandler) (any, error) {
	resp, err := s.localEnvoy(ctx, req, handler)
	if err != nil {
		return nil, err
	}
	var rest []int // the descriptors no pool of this server matched
	for i, st := range resp.GetStatuses() {
		if st.GetCurrentLimit() == nil && !req.GetDescriptors()[i].GetIsNegativeHits() {
			rest = append(rest, i)
		}
	}
	peers := s.fan.Peers()
	if len(rest) == 0 || len(peers) == 0 {
		return resp, nil
	}
	id := s.auth().Identify(ctx)
	if s.auth().HasPolicy() && !id.AdminToken() {
		// The other servers would check this server's certificate, not
		// the caller's: forwarding could give the caller their rights.
		return nil, refuse.StatusOf(&apierr.Error{Code: apierr.CodePermissionDenied, Reason: apierr.ReasonPermissionDenied,
			Message: fmt.Sprintf("%d descriptors match none of this server's pools, and with a --policy a server does not forward a client certificate's call to the others (they would check the server's certificate in its place); send the admin token, or see docs/envoy.md", len(rest))}, refuse.About{}).Err()
	}
	// Not counted with the listings (fanout.Begin): the gateway's hot
	// path is bounded by the caller's request rate, which counts each
	// descriptor here and again where it is forwarded, and by its calls
	// in progress per connection; each forwarded call is one per server.
	sub := proto.CloneOf(req)
	sub.Descriptors = make([]*commonv3.RateLimitDescriptor, len(rest))
	for j, i := range rest {
		sub.Descriptors[j] = req.GetDescriptors()[i]
	}
	parts := fanout.Ask(ctx, s.fan, peers, func(ctx context.Context, _ string, cc *grpc.ClientConn) (*rlsv3.RateLimitResponse, error) {
		return rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, sub)
	})
	if missing := fanout.Missing(parts); len(missing) > 0 {
		// The caller's Envoy applies its failure mode (failure_mode_deny).
		// The descriptors this server matched were applied.
		return nil, status.Errorf(codes.Unavailable, "%d descriptors match none of this server's pools, and %s did not answer for theirs: %v", len(rest), strings.Join(missing, ", "), firstErr(parts))
	}
	var bodies []string
	if len(resp.GetRawBody()) > 0 {
		bodies = append(bodies, strings.TrimSuffix(string(resp.GetRawBody()), "\n"))
	}
	for _, p := range parts {
		if p.Err != nil || len(p.Resp.GetStatuses()) != len(rest) {
			continue
		}
		for j, i := range rest {
			st := p.Resp.GetStatuses()[j]
			if st.GetCurrentLimit() == nil {
				continue
			}
			if cur := resp.Statuses[i].GetCurrentLimit(); cur == nil || st.GetCurrentLimit().GetName() < cur.GetName() {
				resp.Statuses[i] = st
			}
		}
		if len(p.Resp.GetRawBody()) > 0 {
			bodies = append(bodies, strings.TrimSuffix(string(p.Resp.GetRawBody()), "\n"))
		}
	}
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	for _, st := range resp.GetStatuses() {
		if st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	if len(bodies) > 0 {
		resp.RawBody = []byte(strings.Join(bodies, "; ") + "\n")
	}
	return resp, nil
}

// localEnvoy answers req from this server's pools: a server that leads
// no shard (NOT_LEADER) matches no descriptor.
func (s *Server) localEnvoy(ctx context.Context, req *rlsv3.RateLimitRequest, handler grpc.UnaryHandler) (*rlsv3.RateLimitResponse, error) {
	out, err := handler(ctx, req)
	if fanout.NotLeader(err) {
		resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
		for range req.GetDescriptors() {
			resp.Statuses = append(resp.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK})
		}
		return resp, nil
	}
	if err != nil {
		return nil, err
	}
	return out.(*rlsv3.RateLimitResponse), nil
}

// firstErr is the first error of parts.
func firstErr[T any](parts []fanout.Part[T]) error {
	for _, p := range parts {
		if p.Err != nil && !fanout.NotLeader(p.Err) {
			return p.Err
		}
	}
	return nil
}
