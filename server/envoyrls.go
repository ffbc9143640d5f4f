package server

import (
	"context"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/internal/envoyrls"
)

// registerEnvoyRLS registers Envoy's rate-limit service on r. A call is
// checked by the server's auth as a LimiterService call on each pool it
// matches, and the engine's errors come back as every other call's do.
func (s *Server) registerEnvoyRLS(r grpc.ServiceRegistrar) {
	rlsv3.RegisterRateLimitServiceServer(r, envoyrls.New(s.engine, envoyrls.Options{
		Authorize: func(ctx context.Context, pool string) error {
			return s.auth().CheckPool(s.auth().Identify(ctx), pool)
		},
		Status: func(pool string, err error) error {
			return toStatus(s.log, "ShouldRateLimit", err, errCtx{pool: pool})
		},
	}))
}
