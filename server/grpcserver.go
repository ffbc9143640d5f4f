package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime/debug"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/tollgate/tollgate/internal/refuse"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// GRPCServer returns a new *grpc.Server, built with opts, on which
// LimiterService, AdminService, grpc.health.v1.Health (reporting SERVING for
// "" and both Tollgate services until shutdown starts) and server
// reflection are registered (and Envoy's rate-limit service with
// Config.EnvoyRLS), and whose handlers turn a panic into an
// INTERNAL status instead of crashing the process. Its interceptors count
// calls for metrics, enforce Config.Auth and Config.Limits and record pool
// changes (see serverOptions). The caller may register more services
// before serving it, with Serve or ServeGRPC.
func (s *Server) GRPCServer(opts ...grpc.ServerOption) *grpc.Server {
	opts = append(s.serverOptions(), opts...)
	gs := grpc.NewServer(opts...)
	s.Register(gs)
	if s.envoyRLS {
		s.registerEnvoyRLS(gs)
	}
	healthpb.RegisterHealthServer(gs, leaderHealth{s.health, s})
	s.setHealth()
	reflection.Register(gs)
	return gs
}

// Serve serves a GRPCServer() on lis until ctx is done, then shuts down as
// ServeGRPC does. It returns nil after a shutdown that ctx asked for, or the
// error that stopped serving otherwise. The Server cannot serve again after
// Serve returns.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	return s.ServeGRPC(ctx, s.GRPCServer(), lis)
}

// watchSweepInterval is how often connections with only watches in
// progress are looked for, to close the ones idle for idleConnTimeout.
const watchSweepInterval = 30 * time.Second

// ServeGRPC serves gs (which must have this Server registered, as
// GRPCServer does) on lis until ctx is done or serving fails; connections
// are bounded by Limits.MaxConns and Limits.MaxConnsPerIP as
// limits.ConnLimiter says. Then it shuts down: health turns NOT_SERVING, Session streams
// end with UNAVAILABLE (their leases are kept), waiting acquires and takes
// fail at once with UNAVAILABLE (SHUTTING_DOWN), gs stops gracefully, waiting at most
// Config.ShutdownTimeout for calls in flight before cutting them off, and
// the engine is closed. It returns nil after a shutdown that ctx asked for,
// or the error that stopped serving otherwise.
func (s *Server) ServeGRPC(ctx context.Context, gs *grpc.Server, lis net.Listener) error {
	serveErr := make(chan error, 1)
	go func() { serveErr <- gs.Serve(s.grpcConns.Listen(lis)) }()
	s.log.Info("serving", "addr", lis.Addr().String())
	sweep := time.NewTicker(watchSweepInterval)
	defer sweep.Stop()
	go func() {
		for {
			select {
			case <-sweep.C:
				s.grpcConns.Sweep()
			case <-ctx.Done():
				return
			}
		}
	}()

	var err error
	select {
	case <-ctx.Done():
	case err = <-serveErr:
		if err != nil {
			err = fmt.Errorf("serving on %s: %w", lis.Addr(), err)
		}
	}
	s.log.Info("shutting down", "timeout", s.shutdownTimeout)
	s.drain()
	stopped := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(stopped)
	}()
	timer := time.NewTimer(s.shutdownTimeout)
	select {
	case <-stopped:
		timer.Stop()
	case <-timer.C:
		s.log.Warn("calls still running at the shutdown timeout; cutting them off", "timeout", s.shutdownTimeout)
		gs.Stop()
		<-stopped
	}
	s.closeEngine()
	if err == nil {
		// gs.Serve returns nil once stopped; an earlier failure is kept.
		select {
		case e := <-serveErr:
			if e != nil && !errors.Is(e, grpc.ErrServerStopped) {
				err = fmt.Errorf("serving on %s: %w", lis.Addr(), e)
			}
		default:
		}
	}
	s.log.Info("stopped")
	return err
}

// setHealth reports both Tollgate services SERVING while the server leads
// at least one shard (always, standalone; with one shard: while it leads)
// and NOT_SERVING while it leads none; "" stays SERVING while the process
// runs.
func (s *Server) setHealth() {
	s.healthMu.Lock()
	defer s.healthMu.Unlock()
	st := healthpb.HealthCheckResponse_SERVING
	if !s.leadsAny() {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	for _, name := range []string{tollgatev1.LimiterService_ServiceDesc.ServiceName, tollgatev1.AdminService_ServiceDesc.ServiceName} {
		s.health.SetServingStatus(name, st)
	}
}

// leadsAny reports whether the server leads at least one shard; a
// standalone server always does.
func (s *Server) leadsAny() bool { return s.leadership == nil || len(s.ledTerms()) > 0 }

// leaderHealth is the health service of a Server: a Check of a Tollgate
// service on a server of a cluster that leads no shard answers
// NOT_SERVING, read at the moment of the Check (health.Server's status is
// set when leadership changes, a moment later). Watch streams what is set.
type leaderHealth struct {
	*health.Server
	s *Server
}

func (h leaderHealth) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	resp, err := h.Server.Check(ctx, req)
	if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING && req.GetService() != "" && !h.s.leadsAny() {
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
	}
	return resp, err
}

// recoverUnary turns a panic in a unary handler into an INTERNAL status.
func (s *Server) recoverUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = s.panicStatus(info.FullMethod, p)
		}
	}()
	return handler(ctx, req)
}

// recoverStream turns a panic in a stream handler into an INTERNAL status.
func (s *Server) recoverStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = s.panicStatus(info.FullMethod, p)
		}
	}()
	return handler(srv, ss)
}

func (s *Server) panicStatus(method string, p any) error {
	s.log.Error("panic in handler", "method", method, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
	return refuse.StatusOf(&apierr.Error{Reason: ReasonInternal,
		Message: fmt.Sprintf("internal server error in %s; it has been logged on the server; retry, and report it if it persists", method)}, refuse.About{}).Err()
}
