package server

import (
	"context"

	rlsv3 "github.com/tollgate/tollgate/proto/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/internal/envoyrls"
	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/limiter"
)

// registerEnvoyRLS registers Envoy's rate-limit service on r. A call is
// checked by the server's auth as a LimiterService call on each pool it
// matches, counts one request of the caller's request rate per
// descriptor, and the engine's errors come back as every other call's do.
func (s *Server) registerEnvoyRLS(r grpc.ServiceRegistrar) {
	rlsv3.RegisterRateLimitServiceServer(r, envoyrls.New(termEngines{s}, envoyrls.Options{
		Authorize: func(ctx context.Context, pool string) error {
			return s.auth().CheckPool(s.auth().Identify(ctx), pool)
		},
		Status: func(pool string, err error) error {
			return refuse.ToStatus(s.log, "ShouldRateLimit", err, refuse.About{Pool: pool})
		},
		Count: func(ctx context.Context, n int) error {
			if !s.quotas.RateLimited() {
				return nil
			}
			if err := s.quotas.AllowRateN(s.auth().Identify(ctx).ClientKey(""), n); err != nil {
				return refuse.StatusOf(err, refuse.About{}).Err()
			}
			return nil
		},
	}))
}

// termEngines gives each call the engine of its term: a server of a
// cluster has a new one for each term it leads.
type termEngines struct{ s *Server }

func (e termEngines) Engine(ctx context.Context) envoyrls.Engine {
	t := e.s.termOf(ctx)
	return termEngine{Engine: t.Engine(), seq: t.Seq()}
}

// termEngine is the engine of the term seq.
type termEngine struct {
	*limiter.Engine
	seq uint64
}

// PoolsGeneration tells the rules of one term's engine from another's.
func (e termEngine) PoolsGeneration() uint64 { return e.seq<<40 + e.Engine.PoolsGeneration() }
