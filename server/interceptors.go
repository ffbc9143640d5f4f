package server

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// connectionTimeout bounds a new connection's handshake (TLS and the
// HTTP/2 preface); idleConnTimeout closes a connection that has had no
// call in progress that long (grpc clients reconnect when they next
// call); flowWindow is the fixed HTTP/2 receive window of every stream and
// connection.
const (
	connectionTimeout = 10 * time.Second
	idleConnTimeout   = 5 * time.Minute
	flowWindow        = 1 << 20
)

// serverOptions are the options GRPCServer builds every *grpc.Server with,
// before the caller's: the interceptor chains, the keepalive policy, the
// flow-control windows and the largest message the server receives
// (Limits.MaxRecvMsgSize).
//
// Interceptors run outermost first: metrics (so that refusals are counted
// too), panic recovery, for unary calls the per-client rate (before
// authentication, so that it slows down callers with bad credentials too),
// authentication and authorization (authUnary, asking internal/auth), the
// cluster-wide listings (fanoutUnary: asking every server of a cluster),
// the leader gate of a server of a cluster (leaderUnary), the other limits (poolsUnary, limitStream), and the audit of pool changes
// (auditUnary).
func (s *Server) serverOptions() []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.ForceServerCodecV2(s.codec),
		grpc.ChainUnaryInterceptor(s.metrics.Unary, s.connUnary, s.codec.Unary, s.recoverUnary, s.rateUnary, s.authUnary, s.fanoutUnary, s.leaderUnary, s.poolsUnary, s.auditUnary),
		grpc.ChainStreamInterceptor(s.metrics.Stream, s.connStream, s.codec.Stream, s.recoverStream, s.authStream, s.fanoutStream, s.leaderStream, s.limitStream),
		// Clients may ping to find dead connections (grpc-go's default
		// policy sends GOAWAY to any client pinging more often than every
		// 5 minutes, far longer than a lease TTL): the Go client pings
		// after 10s without traffic, the least grpc-go allows; half of
		// that here leaves room for jitter, and a client pinging faster
		// still is sent GOAWAY after two such pings. The server pings
		// idle connections itself, so that a vanished client's Session
		// stream ends and its waiting acquires are cancelled.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, MaxConnectionIdle: idleConnTimeout}),
		grpc.ConnectionTimeout(connectionTimeout),
		// Fixed flow-control windows turn grpc-go's bandwidth-delay
		// estimate off: its PING frames go out with the data received and
		// come back, which costs every round trip of a small message
		// frames, system calls and wake-ups. 1 MiB per stream and per
		// connection is far more than the control plane's messages need,
		// and less than the 16 MiB the estimate may grow the window to.
		grpc.InitialWindowSize(flowWindow), grpc.InitialConnWindowSize(flowWindow),
	}
	if s.limits.MaxConnStreams > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(uint32(s.limits.MaxConnStreams)))
	}
	if s.limits.MaxHeaderListSize > 0 {
		opts = append(opts, grpc.MaxHeaderListSize(uint32(s.limits.MaxHeaderListSize)))
	}
	opts = append(opts, s.tracing.ServerOptions()...)
	if s.limits.MaxRecvMsgSize > 0 {
		opts = append(opts, grpc.MaxRecvMsgSize(s.limits.MaxRecvMsgSize))
	}
	return opts
}
