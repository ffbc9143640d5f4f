package server

import (
	"context"
	"net"
	"net/http"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tollgate/tollgate/internal/httpapi"
)

// HTTPHandler returns the handler of the server's HTTP listener:
//
//	GET /             the status page (pools, utilisation, recent events)
//	GET /api/pools    pools with their configured limits and live status, as JSON
//	GET /api/pools/{name}/leases  a pool's live leases (who holds what), as JSON
//	GET /api/pools/{name}/waiters the acquires waiting in a pool's queue, in grant order, as JSON
//	GET /api/events   recent events, newest first, as JSON
//	GET /metrics      Prometheus metrics
//	GET /healthz      200 while the process runs
//	GET /readyz       200 while the server serves; 503 once shutdown starts
//
// On a server of a cluster that does not lead it, the pool paths
// answer 503 with a JSON body naming the leader (reason NOT_LEADER), and
// the status page says so.
//
// When the server's auth.Config requires credentials (admin names, an admin
// token, or verified client certificates), every path but /healthz and
// /readyz requires a verified client certificate (any name its client CA
// signed) or the admin token as "Authorization: Bearer <token>", and is
// refused with 401 otherwise.
func (s *Server) HTTPHandler() http.Handler {
	return httpapi.Handler(s.httpOptions())
}

// httpOptions are what the HTTP handler reads of the server.
func (s *Server) httpOptions() httpapi.Options {
	return httpapi.Options{
		Terms:        s.terms,
		Metrics:      s.metrics.Registry(),
		Auth:         func() httpapi.Authorizer { return s.auth() },
		Serving:      s.Serving,
		RecentEvents: s.RecentEvents,
		Leader:       s.leader,
		Self:         s.advertise,
		Peers:        s.httpPeers(),
	}
}

// LimitHTTP returns lis bounded by Limits.MaxHTTPConns and
// MaxHTTPConnsPerIP (see limits.ConnLimiter: a keep-alive connection
// between requests may give its place to a newcomer of its address), and
// sets hs.ConnState to tell the limiter which connections are in a
// request. hs must serve the returned listener.
func (s *Server) LimitHTTP(hs *http.Server, lis net.Listener) net.Listener {
	hs.ConnState = s.httpConns.HTTPConnState
	return s.httpConns.Listen(lis)
}

// Serving reports whether the server serves: true until shutdown starts,
// false from then on (gRPC health reports NOT_SERVING from the same
// moment).
func (s *Server) Serving() bool {
	resp, err := s.health.Check(context.Background(), &healthpb.HealthCheckRequest{})
	return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
}

// leader is who leads shard, as this server sees it (for a standalone
// server, no one: it always leads); during a planned move, the server the
// shard moves to.
func (s *Server) leader(shard int) (string, int64) {
	if s.leadership == nil {
		return "", 0
	}
	o := s.owner(shard)
	if o.MovingTo != "" {
		return o.MovingTo, 0
	}
	return o.Owner, o.Epoch
}
