package server

import (
	"sync"
	"sync/atomic"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/limits"
	"github.com/tollgate/tollgate/internal/metrics"
	"github.com/tollgate/tollgate/internal/session"
	"github.com/tollgate/tollgate/internal/term"
	"github.com/tollgate/tollgate/internal/wirecodec"
	"github.com/tollgate/tollgate/limiter"
)

// ops is the server's operational state: who may call what (auth), what
// clients may hold and how fast they may call (limits, quotas), what
// operators see (metrics, events). It is embedded in Server.
type ops struct {
	authz  atomic.Pointer[auth.Authorizer] // swapped by SetAuth
	limits limits.Limits                   // with defaults filled in
	quotas *limits.Quotas
	// grpcConns and httpConns bound the listeners' connections.
	grpcConns, httpConns *limits.ConnLimiter
	// createPoolMu serializes CreatePool calls while Limits.MaxPools is
	// checked.
	createPoolMu sync.Mutex
	metrics      *metrics.Metrics
	events       events.Ring
	codec        wirecodec.Codec // refuses undecodable requests
}

// initOps sets up s.ops from cfg; New calls it once the engine exists.
func (s *Server) initOps(cfg Config) {
	s.authz.Store(auth.New(cfg.Auth))
	s.limits = cfg.Limits.WithDefaults()
	s.quotas = limits.New(s.limits)
	s.grpcConns = s.quotas.NewConnLimiter(s.limits.MaxConns, s.limits.MaxConnsPerIP, limits.KindConns, limits.KindConnsPerIP, idleConnTimeout)
	s.httpConns = s.quotas.NewConnLimiter(s.limits.MaxHTTPConns, s.limits.MaxHTTPConnsPerIP, limits.KindHTTPConns, limits.KindHTTPConnsPerIP, 0)
	s.metrics = metrics.New(metricsSource{s}, session.KindNames[:], s.limits.MetricsPools)
	s.codec = wirecodec.New()
}

// metricsSource is what the metrics collector reads of the server: the
// pools of the shards it leads (all of a standalone server's) and the
// server's counters.
type metricsSource struct{ s *Server }

func (m metricsSource) terms() []*term.Term {
	var ts []*term.Term
	for _, st := range m.s.ledTerms() {
		ts = append(ts, st.t)
	}
	return ts
}

func (m metricsSource) ListPools(after string, limit int) ([]limiter.PoolInfo, bool) {
	ts := m.terms()
	if len(ts) == 0 {
		return nil, false
	}
	return term.Page(ts, limit, func(p limiter.PoolInfo) string { return p.Config.Name },
		func(eng *limiter.Engine) ([]limiter.PoolInfo, bool) { return eng.ListPools(after, limit) })
}

func (m metricsSource) NumPools() int {
	n := 0
	for _, t := range m.terms() {
		n += t.Engine().NumPools()
	}
	return n
}

func (m metricsSource) GetPool(name string) (limiter.PoolInfo, error) {
	return m.s.terms.Of(name).Get().Engine().GetPool(name)
}

func (m metricsSource) MarkKinds() map[limiter.PoolEventType]string { return audit.MarkKinds }
func (m metricsSource) Quotas() *limits.Quotas                      { return m.s.quotas }
func (m metricsSource) Sessions() int64                             { return m.s.liveSessions.Load() }
func (m metricsSource) Serving() bool                               { return m.s.Serving() }
