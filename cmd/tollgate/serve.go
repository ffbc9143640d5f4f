package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/server"
)

// serveOptions are the flags of tollgate serve.
type serveOptions struct {
	listen          string
	configPath      string
	shutdownTimeout time.Duration
	logFormat       string
	logLevel        string
}

// newServeCmd returns the "serve" command: it runs a Tollgate server on
// --listen, declaring the pools of --config first, until SIGINT or SIGTERM,
// then shuts down gracefully within --shutdown-timeout.
func newServeCmd() *cobra.Command {
	o := serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a Tollgate server",
		Long: `Run a Tollgate server: the gRPC LimiterService (leases and rate tokens) and
AdminService (pools), with grpc.health.v1 health checks and server reflection.

Pools can be declared at start from a YAML file (--config):

  pools:
    - name: orders-db
      description: primary database
      concurrency: 20      # most permits held at once
      rate: 100            # tokens per second
      burst: 200
      default_ttl: 15s
      max_ttl: 5m
      max_waiters: 1024

Every field but name is optional; each pool needs a concurrency, a rate, or
both. More pools can be created at run time with "tollgate pool create".

Leases are held in memory: a restart forgets them. On SIGINT or SIGTERM the
server stops taking new calls, ends Session streams (clients reconnect and
renew) and waits up to --shutdown-timeout for calls in flight.`,
		Example: `  tollgate serve
  tollgate serve --listen 0.0.0.0:7070 --config pools.yaml --log-format json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.SilenceUsage = true
			return runServe(cmd.Context(), o, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", "127.0.0.1:7070", "address to serve gRPC on (host:port)")
	f.StringVar(&o.configPath, "config", "", "YAML file of pools to declare at start (see above)")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", server.DefaultShutdownTimeout, "on SIGINT/SIGTERM, longest wait for calls in flight before cutting them off")
	f.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return cmd
}

// runServe runs the server until ctx is done or a signal arrives.
func runServe(ctx context.Context, o serveOptions, stderr io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	logger, err := newLogger(stderr, o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	if o.shutdownTimeout <= 0 {
		return fmt.Errorf("--shutdown-timeout must be positive, not %v", o.shutdownTimeout)
	}
	var pools []limiter.PoolConfig
	if o.configPath != "" {
		if pools, err = server.LoadPoolsFile(o.configPath); err != nil {
			return err
		}
	}
	lis, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w (is another server running there? choose another address with --listen)", o.listen, err)
	}
	srv := server.New(server.Config{Logger: logger, ShutdownTimeout: o.shutdownTimeout})
	for _, p := range pools {
		if _, err := srv.Engine().CreatePool(p); err != nil {
			lis.Close()
			srv.Close()
			return fmt.Errorf("%s: declaring pool %q: %w", o.configPath, p.Name, err)
		}
	}
	if len(pools) > 0 {
		logger.Info("declared pools", "count", len(pools), "file", o.configPath)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(stderr, "tollgate: serving on %s\n", lis.Addr())
	return srv.Serve(ctx, lis)
}

// newLogger builds the server's logger from the --log-* flags.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q is not a level; use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q is not a format; use text or json", format)
}
