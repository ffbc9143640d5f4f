// Package server exposes a limiter.Engine over gRPC: the tollgate.v1
// LimiterService (unary calls and the multiplexed Session stream) and
// AdminService, plus a ready-made *grpc.Server with health checking and
// reflection, and a Serve loop with graceful shutdown.
//
// The handlers are thin: they validate what only the wire can get wrong
// (unset versus zero, malformed durations and lease ids, field masks, page
// tokens), call the engine, and map its errors onto gRPC statuses with a
// google.rpc.ErrorInfo detail (domain "tollgate.dev").
package server

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/cluster"
	"github.com/tollgate/tollgate/internal/fanout"
	"github.com/tollgate/tollgate/internal/holder"
	"github.com/tollgate/tollgate/internal/leaseid"
	"github.com/tollgate/tollgate/internal/limits"
	"github.com/tollgate/tollgate/internal/provide"
	"github.com/tollgate/tollgate/internal/session"
	"github.com/tollgate/tollgate/internal/term"
	"github.com/tollgate/tollgate/internal/tracing"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// DefaultShutdownTimeout is how long Serve waits for calls in flight to
// finish after its context is done, when Config.ShutdownTimeout is 0.
const DefaultShutdownTimeout = 10 * time.Second

// Config configures a Server. The zero value is usable.
type Config struct {
	// Clock is the engine's time source; nil means the system clock.
	Clock limiter.Clock
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
	// ShutdownTimeout bounds the graceful part of Serve's shutdown: calls
	// still running after it are cut off. 0 means DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// Auth says who may call what; nil lets every caller do everything
	// (for a server on loopback only). See auth.Config.
	Auth *auth.Config
	// Limits bounds what clients can make the server hold; the zero value
	// means the defaults. See limits.Limits.
	Limits limits.Limits
	// TracerProvider, when set, receives a span for every RPC and for every
	// acquire and take, also those on Session streams; nil records none.
	TracerProvider trace.TracerProvider
	// Propagator reads callers' trace context from gRPC metadata and from
	// requests' trace_context; nil means W3C Trace Context and Baggage.
	Propagator propagation.TextMapPropagator
	// MarkEventInterval is the least time between two recorded mark
	// events (pool_overload, pool_drained, pool_near_full,
	// pool_low_utilisation) of one kind from one pool; those in between
	// are counted, not recorded. 0 means limiter.DefaultMarkEventInterval;
	// a negative value records every crossing.
	MarkEventInterval time.Duration
	// EnvoyRLS serves Envoy's global rate-limit API
	// (envoy.service.ratelimit.v3.RateLimitService) beside Tollgate's own
	// services, from the pools' Envoy rules: see docs/envoy.md.
	EnvoyRLS bool
	// Leadership, for a server of a cluster, says whether it leads; nil
	// means standalone (always leads).
	Leadership Leadership
	// Advertise is the address clients reach this server at, reported by
	// GetCluster.
	Advertise string
	// PeerDialOptions dial the other servers of a cluster, for the
	// listings asked of this server that gather every server's part and
	// the Envoy calls it forwards: their transport credentials first. Nil
	// means plaintext; a server that serves TLS must give its peer TLS.
	PeerDialOptions []grpc.DialOption

	// persister is set by Open: the engine's Persister.
	persister limiter.Persister
	// leaseIDKey is set by Open and OpenCluster: the key that signs lease
	// ids, kept where they stay valid across restarts and leaders.
	leaseIDKey []byte
}

// Server is the gRPC face of one limiter.Engine. Create it with New,
// register it on a grpc.Server with Register (or build one with
// GRPCServer), and run it with Serve. It is safe for concurrent use.
type Server struct {
	// terms are the terms served now, one per shard: one shard with one
	// term for the Server's life when standalone; in a cluster, a new
	// term for each leadership of each shard. Every call takes its pool's
	// shard's term once (termOf) and uses its engine.
	terms           *term.Table
	clock           limiter.Clock // Config.Clock
	markInterval    time.Duration // Config.MarkEventInterval
	log             *slog.Logger
	shutdownTimeout time.Duration
	health          *health.Server
	healthMu        sync.Mutex // serializes setHealth: the last set is the latest reading

	limiterSvc *limiterService
	adminSvc   *adminService

	// draining is closed when shutdown starts; sessions end on it.
	draining  chan struct{}
	drainOnce sync.Once
	// ids signs and checks the lease ids holders get.
	ids *leaseid.IDs
	// calls are the holders' calls, unary and on Session streams.
	calls *holder.Calls
	// liveSessions counts Session streams whose handler is running.
	liveSessions atomic.Int64
	// sessions serves those streams and keeps them, for ListClients;
	// tests lower its bounds.
	sessions session.Streams
	// providers serves the Provide streams.
	providers provide.Streams

	tracing  *tracing.Tracing // nil when Config.TracerProvider is nil
	envoyRLS bool             // Config.EnvoyRLS

	leadership Leadership        // Config.Leadership; nil when standalone
	campaign   *cluster.Campaign // set by OpenCluster
	fan        *fanout.Fanout    // asks the other servers; set by OpenCluster
	advertise  string            // Config.Advertise

	ops         // auth, limits, metrics, events
	persistence // the data directory, for a Server made by Open
}

// New returns a Server around a new engine built with cfg's clock. The
// engine reports leases that end by themselves to the Session stream that
// last acquired or renewed them.
func New(cfg Config) *Server {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		log:             log,
		shutdownTimeout: cfg.ShutdownTimeout,
		health:          health.NewServer(),
		draining:        make(chan struct{}),
		tracing:         tracing.New(cfg.TracerProvider, cfg.Propagator),
		ids:             leaseid.New(cfg.leaseIDKey), // nil: a key of its own
		envoyRLS:        cfg.EnvoyRLS,
		leadership:      cfg.Leadership,
		advertise:       cfg.Advertise,
		clock:           cfg.Clock,
		markInterval:    cfg.MarkEventInterval,
		terms:           term.NewTable(1),
	}
	if s.shutdownTimeout <= 0 {
		s.shutdownTimeout = DefaultShutdownTimeout
	}
	var tenure func() bool // nil: standalone, leads for good
	if cfg.Leadership != nil {
		tenure = cfg.Leadership.Leading
	}
	t, _ := term.New(0, tenure, func(func() bool) (*limiter.Engine, error) { return s.newEngine(cfg.persister, nil), nil })
	t.Begin()
	s.terms.Serve(0, t)
	s.initOps(cfg)
	s.calls = &holder.Calls{Auth: s.auth, Quotas: s.quotas, Limits: s.limits, Metrics: s.metrics,
		IDs: s.ids, Tracing: s.tracing, Log: s.log}
	s.sessions.Host, s.sessions.Calls, s.sessions.MaxUnread = streamHost{s}, s.calls, MaxSessionUnread
	s.sessions.MaxEvents.Store(MaxSessionEvents)
	s.providers = provide.Streams{Host: streamHost{s}, Auth: s.auth, Quotas: s.quotas, Log: s.log}
	s.limiterSvc = &limiterService{srv: s}
	s.adminSvc = &adminService{srv: s}
	return s
}

// HorizonSlack is how far ahead of the leases in use a server writes a
// pool's lease horizon (limiter.Options.HorizonSlack): a pool with a
// grant at least every half of it never writes its horizon on the grant
// path, however many pools share the disk. The cost is only that after a
// crash a pool whose last write was within it (plus
// limiter.ClockStepTolerance) waits out its recovery window, at most its
// TTL bound.
const HorizonSlack = 5 * time.Minute

// newEngine returns an engine for the server, writing through p (nil:
// in memory) and acting while live says so (nil: always). The engine
// reports leases that end by themselves to the Session stream that last
// acquired or renewed them.
func (s *Server) newEngine(p limiter.Persister, live func() bool) *limiter.Engine {
	return limiter.New(limiter.Options{Clock: s.clock, OnLeaseEnded: s.onLeaseEnded, Persister: p, PreReserve: true, HorizonSlack: HorizonSlack, Live: live,
		OnPoolEvent: s.onPoolEvent, OnShareUpdate: s.onShareUpdate, OnLeaseResized: session.LeaseResized, MarkEventInterval: s.markInterval})
}

// Engine returns the engine the server serves now (of shard 0: a
// standalone server has one shard). Callers may use it directly (for
// example to declare pools at start-up); it is closed by Serve's shutdown
// or by Close. A server of a cluster serves a new engine for each term of
// each shard it leads (see OpenCluster).
func (s *Server) Engine() *limiter.Engine { return s.terms.Shard(0).Get().Engine() }

// Register registers LimiterService and AdminService on r. It does not
// register health or reflection; GRPCServer does.
func (s *Server) Register(r grpc.ServiceRegistrar) {
	tollgatev1.RegisterLimiterServiceServer(r, s.limiterSvc)
	tollgatev1.RegisterAdminServiceServer(r, s.adminSvc)
}

// Close starts shutdown without a grpc.Server: it ends every Session stream
// (with UNAVAILABLE), marks health NOT_SERVING and closes the engine, which
// fails waiting calls with UNAVAILABLE (SHUTTING_DOWN). Leases are not
// released. Close is idempotent; Serve calls it when it stops.
func (s *Server) Close() {
	s.drain()
	s.closeEngine()
}

// drain tells health checkers and sessions that the server is going away.
func (s *Server) drain() {
	s.drainOnce.Do(func() {
		s.health.Shutdown()
		close(s.draining)
		if s.campaign != nil {
			s.campaign.Stop() // hands off: another server leads at once
		}
		if s.fan != nil {
			s.fan.Close()
		}
		for _, t := range s.terms.Served() {
			t.Engine().StopWaits() // waiting acquires and takes answer SHUTTING_DOWN at once
		}
	})
}

// onLeaseEnded is the engine's OnLeaseEnded callback: it records and logs
// the end of the lease as an event and forwards it to the session that
// owns it, if that session is still live. It never blocks.
func (s *Server) onLeaseEnded(ev limiter.LeaseEnded) {
	s.leaseEnded(ev)
	session.LeaseEnded(ev)
}
