package server

import (
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/provide"
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

// onProviderEvent records a provider joining or leaving a passive pool,
// and ends the stream of a provider the engine expired.
func (s *Server) onProviderEvent(ev limiter.PoolEvent) {
	typ := events.ProviderJoined
	if ev.Type == limiter.ProviderLeft {
		typ = events.ProviderLeft
	}
	s.recordEvent(events.Event{Time: ev.Time, Type: typ, Pool: ev.Pool, ProviderID: ev.Provider, Detail: ev.Message})
	provide.ProviderLeft(ev)
}
