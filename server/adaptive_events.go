package server

import (
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/limiter"
)

// onPoolEvent is the engine's OnPoolEvent callback: every change adaptive
// control makes to a pool's effective limits is recorded and logged as an
// event (events.PoolThrottled, events.PoolRelieved), and so is every mark
// crossed (events.PoolOverload, ...). It never blocks.
func (s *Server) onPoolEvent(ev limiter.PoolEvent) {
	if ev.Type == limiter.ProviderJoined || ev.Type == limiter.ProviderLeft {
		s.onProviderEvent(ev)
		return
	}
	s.recordEvent(audit.PoolEvent(ev))
}
