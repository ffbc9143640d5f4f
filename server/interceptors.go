package server

import "google.golang.org/grpc"

// serverOptions are the options GRPCServer builds every *grpc.Server with,
// before the caller's: the interceptor chains and the largest message the
// server receives (Limits.MaxRecvMsgSize).
//
// Interceptors run outermost first: metrics (so that refusals are counted
// too), panic recovery, for unary calls the per-client rate (before
// authentication, so that it slows down callers with bad credentials too),
// authentication and authorization (auth.go), the other limits (guard.go),
// and the audit of pool changes (audit.go).
func (s *Server) serverOptions() []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(s.metricsUnary, s.recoverUnary, s.rateUnary, s.authUnary, s.poolsUnary, s.auditUnary),
		grpc.ChainStreamInterceptor(s.metricsStream, s.recoverStream, s.authStream, s.limitStream),
	}
	if s.limits.MaxRecvMsgSize > 0 {
		opts = append(opts, grpc.MaxRecvMsgSize(s.limits.MaxRecvMsgSize))
	}
	return opts
}
