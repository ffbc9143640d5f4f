package server

import (
	"sync"
	"sync/atomic"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/limits"
)

// ops is the server's operational state: who may call what (auth), what
// clients may hold (limits, quotas, rates), what operators see (metrics,
// events). It is embedded in Server.
type ops struct {
	authz  atomic.Pointer[auth.Authorizer] // swapped by SetAuth
	limits limits.Limits                   // with defaults filled in
	quotas *limits.Quotas
	rates  *limits.Rates // nil: no rate limit
	// createPoolMu serializes CreatePool calls while Limits.MaxPools is
	// checked.
	createPoolMu sync.Mutex
	metrics      *metrics
	events       events.Ring
	codec        wireCodec // refuses undecodable requests
}

// initOps sets up s.ops from cfg; New calls it once the engine exists.
func (s *Server) initOps(cfg Config) {
	s.authz.Store(auth.New(cfg.Auth))
	s.limits = cfg.Limits.WithDefaults()
	s.quotas = limits.New(s.limits)
	s.rates = limits.NewRates(s.limits.ClientRate, s.limits.ClientBurst)
	s.metrics = newMetrics(s)
	s.codec = newWireCodec()
}
