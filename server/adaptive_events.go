package server

import (
	"math"
	"strconv"
	"strings"

	"github.com/tollgate/tollgate/internal/events"
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
	if typ, ok := markEventTypes[ev.Type]; ok {
		s.recordEvent(events.Event{Time: ev.Time, Type: typ, Pool: ev.Pool, Detail: markEventDetail(ev)})
		return
	}
	typ := events.PoolRelieved
	if ev.Type == limiter.PoolThrottled {
		typ = events.PoolThrottled
	}
	s.recordEvent(events.Event{Time: ev.Time, Type: typ, Pool: ev.Pool, Detail: poolEventDetail(ev)})
}

// poolEventDetail describes a pool event for people, for example
// "concurrency 10 → 9 (configured 10); errors: 35% of 120 outcomes were
// errors or timeouts".
func poolEventDetail(ev limiter.PoolEvent) string {
	var parts []string
	if ev.ConfiguredConcurrencyLimit > 0 && ev.ConcurrencyLimit != ev.PrevConcurrencyLimit {
		parts = append(parts, "concurrency "+strconv.FormatInt(ev.PrevConcurrencyLimit, 10)+" → "+strconv.FormatInt(ev.ConcurrencyLimit, 10)+
			" (configured "+strconv.FormatInt(ev.ConfiguredConcurrencyLimit, 10)+")")
	}
	if ev.ConfiguredRate > 0 && ev.Rate != ev.PrevRate {
		parts = append(parts, "rate "+fmtRate(ev.PrevRate)+" → "+fmtRate(ev.Rate)+"/s (configured "+fmtRate(ev.ConfiguredRate)+"/s)")
	}
	d := strings.Join(parts, ", ")
	window := strconv.FormatFloat(100*ev.ErrorRatio, 'f', 1, 64) + "% of " + strconv.FormatInt(ev.Samples, 10) + " outcomes were errors or timeouts"
	if ev.Latency > 0 {
		window += ", mean latency " + ev.Latency.String()
		if ev.Baseline > 0 {
			window += " (baseline " + ev.Baseline.String() + ")"
		}
	}
	switch ev.Type {
	case limiter.PoolThrottled:
		return d + "; " + ev.Reason.String() + ": " + window
	default:
		return d + "; healthy: " + window
	}
}

// fmtRate formats a rate with at most 3 decimals.
func fmtRate(r float64) string { return strconv.FormatFloat(math.Round(r*1000)/1000, 'f', -1, 64) }
