package server

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/tollgate/tollgate/internal/limits"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// BenchmarkUnaryInterceptors measures what the interceptor chain adds to
// a unary Acquire call (without the network and the handler), with a rate
// limit (too high to refuse anything) and without.
func BenchmarkUnaryInterceptors(b *testing.B) {
	for _, c := range []struct {
		name   string
		limits limits.Limits
	}{{"rate-limit", limits.Limits{ClientRate: 1e12}}, {"no-rate-limit", limits.Limits{ClientRate: -1}}} {
		b.Run(c.name, func(b *testing.B) {
			s := New(Config{Limits: c.limits})
			defer s.Close()
			chain := []grpc.UnaryServerInterceptor{s.metrics.Unary, s.recoverUnary, s.rateUnary, s.authUnary, s.poolsUnary, s.auditUnary}
			info := &grpc.UnaryServerInfo{FullMethod: limiterServicePrefix + "Acquire"}
			var call func(i int, ctx context.Context, req any) (any, error)
			call = func(i int, ctx context.Context, req any) (any, error) {
				if i == len(chain) {
					return nil, nil
				}
				return chain[i](ctx, req, info, func(ctx context.Context, req any) (any, error) { return call(i+1, ctx, req) })
			}
			ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}})
			req := &tollgatev1.AcquireRequest{Pool: "db"}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := call(0, ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
