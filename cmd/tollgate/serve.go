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

	"github.com/tollgate/tollgate/internal/poolsfile"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/server"
)

// serveOptions are the flags of tollgate serve.
type serveOptions struct {
	listen            string
	configPath        string
	dataDir           string
	shutdownTimeout   time.Duration
	markEventInterval time.Duration
	logFormat         string
	logLevel          string
	otel              bool
	envoyRLS          bool
	sec               securityOptions // TLS, auth, HTTP, limits
	etcd              etcdOptions     // several servers
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

Pools can be declared from a YAML file (--config), read on the first start:

  pools:
    - name: orders-db
      description: primary database
      concurrency: 20      # most permits held at once
      rate: 100            # tokens per second
      burst: 200
      default_ttl: 15s
      max_ttl: 5m
      max_waiters: 1024

Every field but name is optional; a free pool (the default kind) needs a
concurrency, a rate, or both, while an active or passive pool's instances
are its capacity. More pools can be created at run time with
"tollgate pool create".

Pools are kept on disk in --data-dir (created if missing): every pool
change is written there before it is acknowledged, and the pools are loaded
from there at start. Precedence: the --config file seeds the data directory
only on its first start; after that the data directory wins, and a --config
file that differs from it is only logged as a warning.

Leases are not written to disk. After a restart, each pool that may still
have leases from before it is in a recovery window (until its longest lease
TTL has passed): holders that renew their leases get them back, and new
acquires are granted at once from the capacity no old lease can hold (the
limit less the held-weight bound written before the restart, plus what
holders have re-adopted); the rest wait until the window ends. See
docs/recovery.md.

On SIGINT or SIGTERM the server stops taking new calls, ends Session
streams (clients reconnect and renew) and waits up to --shutdown-timeout
for calls in flight.
` + etcdHelp + securityHelp,
		Example: `  tollgate serve
  tollgate serve --config pools.yaml --data-dir /var/lib/tollgate --log-format json
  tollgate serve --listen 0.0.0.0:7070 --http 0.0.0.0:7071 \
      --tls-cert server.pem --tls-key server-key.pem \
      --client-ca ca.pem --admin-names ops.example.com --policy policy.yaml
  tollgate serve --listen 0.0.0.0:7070 --advertise host-a:7070 \
      --etcd http://etcd-1:2379,http://etcd-2:2379,http://etcd-3:2379`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.SilenceUsage = true
			return runServe(cmd.Context(), o, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", "127.0.0.1:7070", "address to serve gRPC on (host:port)")
	f.StringVar(&o.configPath, "config", "", "YAML file of pools to declare on the data directory's first start (see above)")
	f.StringVar(&o.dataDir, "data-dir", "tollgate-data", "directory where the server keeps its pools (created if missing; one server at a time)")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", server.DefaultShutdownTimeout, "on SIGINT/SIGTERM, longest wait for calls in flight before cutting them off")
	f.DurationVar(&o.markEventInterval, "mark-event-interval", limiter.DefaultMarkEventInterval, "least time between two recorded mark events (pool_near_full, ...) of one kind from one pool; those in between are counted in tollgate_pool_events_suppressed_total (0: record every one)")
	f.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.BoolVar(&o.otel, "otel", false, "export OpenTelemetry traces over OTLP/gRPC (set by default when OTEL_EXPORTER_OTLP_ENDPOINT is; the OTEL_EXPORTER_OTLP_* variables configure the exporter)")
	f.BoolVar(&o.envoyRLS, "envoy-rls", false, "also serve Envoy's global rate-limit API (envoy.service.ratelimit.v3.RateLimitService) on --listen, from the pools' envoy rules (docs/envoy.md)")
	o.etcd.register(f)
	o.sec.register(f)
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
	markInterval := o.markEventInterval
	switch {
	case markInterval < 0:
		return fmt.Errorf("--mark-event-interval must be 0 (record every mark event) or positive, not %v", markInterval)
	case markInterval == 0:
		markInterval = -1 // the server's "every one"
	}
	if o.dataDir == "" && !o.etcd.enabled() {
		return fmt.Errorf("--data-dir must name a directory: the server always keeps its pools on disk")
	}
	if err := o.etcd.check(); err != nil {
		return err
	}
	sec, err := o.sec.load()
	if err != nil {
		return err
	}
	var pools []limiter.PoolConfig
	if o.configPath != "" {
		if pools, err = poolsfile.Load(o.configPath); err != nil {
			return err
		}
	}
	lis, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w (is another server running there? choose another address with --listen)", o.listen, err)
	}
	httpLis, err := sec.listenHTTP(lis)
	if err != nil {
		lis.Close()
		return err
	}
	cfg := server.Config{Logger: logger, Advertise: lis.Addr().String(), ShutdownTimeout: o.shutdownTimeout, MarkEventInterval: markInterval, EnvoyRLS: o.envoyRLS}
	if o.otel || otlpConfigured() {
		tp, err := newTracerProvider(ctx)
		if err != nil {
			lis.Close()
			if httpLis != nil {
				httpLis.Close()
			}
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tp.Shutdown(sctx); err != nil {
				logger.Warn("flushing traces at shutdown", "err", err)
			}
		}()
		cfg.TracerProvider = tp
		logger.Info("exporting OpenTelemetry traces over OTLP")
	}
	var srv *server.Server
	if o.etcd.enabled() {
		var closeEtcd func()
		srv, closeEtcd, err = o.etcd.open(sec.config(cfg), pools)
		if err == nil {
			defer closeEtcd()
		}
	} else if srv, err = server.Open(sec.config(cfg), o.dataDir, pools); err != nil {
		err = fmt.Errorf("--data-dir %s: %w", o.dataDir, err)
	}
	if err != nil {
		lis.Close()
		if httpLis != nil {
			httpLis.Close()
		}
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup, stopHUP := reloadSignals()
	defer stopHUP()
	go sec.reloadOn(ctx, hup, srv, logger)
	fmt.Fprintf(stderr, "tollgate: serving on %s\n", lis.Addr())
	return sec.serve(ctx, srv, lis, httpLis, logger, stderr)
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
