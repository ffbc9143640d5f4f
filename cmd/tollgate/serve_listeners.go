package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/tollgate/tollgate/server"
)

// httpShutdownTimeout bounds the HTTP listener's shutdown, after gRPC's.
const httpShutdownTimeout = 5 * time.Second

// listenHTTP checks that the gRPC listener's address is allowed (see
// checkRemote) and opens the HTTP listener of --http, also checked; it
// returns nil when --http is "".
func (s *serveSecurity) listenHTTP(grpcLis net.Listener) (net.Listener, error) {
	if err := s.checkRemote("--listen", grpcLis.Addr()); err != nil {
		return nil, err
	}
	if s.opts.httpAddr == "" {
		return nil, nil
	}
	l, err := net.Listen("tcp", s.opts.httpAddr)
	if err != nil {
		return nil, fmt.Errorf("cannot listen on %s for HTTP: %w (choose another address with --http, or disable the listener with --http '')", s.opts.httpAddr, err)
	}
	if err := s.checkRemote("--http", l.Addr()); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// serve serves srv's gRPC services on lis and its HTTP handler on httpLis
// (when not nil), with TLS when configured, until ctx is done. The HTTP
// listener keeps answering while gRPC drains, so that /readyz reports 503
// during the shutdown, and stops after it.
func (s *serveSecurity) serve(ctx context.Context, srv *server.Server, lis, httpLis net.Listener, logger *slog.Logger, stderr io.Writer) error {
	var opts []grpc.ServerOption
	if s.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.tls.GRPC)))
	}
	if !s.secured() && (!isLoopback(lis.Addr()) || (httpLis != nil && !isLoopback(httpLis.Addr()))) {
		logger.Warn("serving on a non-loopback address without TLS and authentication (--insecure-allow-remote): anyone who can reach it may do anything")
	}
	if httpLis != nil {
		hs := &http.Server{
			Handler:           srv.HTTPHandler(),
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       2 * time.Minute,
			MaxHeaderBytes:    64 << 10,
			ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelDebug),
		}
		httpLis = srv.LimitHTTP(hs, httpLis)
		scheme := "http"
		if s.tls != nil {
			hs.TLSConfig = s.tls.HTTP
			scheme = "https"
		}
		go func() {
			var err error
			if s.tls != nil {
				err = hs.ServeTLS(httpLis, "", "")
			} else {
				err = hs.Serve(httpLis)
			}
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error("the HTTP listener stopped; gRPC goes on serving", "addr", httpLis.Addr().String(), "err", err)
			}
		}()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
			defer cancel()
			if err := hs.Shutdown(sctx); err != nil {
				hs.Close()
			}
		}()
		fmt.Fprintf(stderr, "tollgate: status page and metrics on %s://%s/\n", scheme, httpLis.Addr())
	}
	return srv.ServeGRPC(ctx, srv.GRPCServer(opts...), lis)
}
