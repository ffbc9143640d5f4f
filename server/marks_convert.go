package server

import (
	"strconv"
	"strings"

	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/limiter"
)

// markEventTypes maps the engine's mark events to the server's.
var markEventTypes = map[limiter.PoolEventType]string{
	limiter.PoolOverload:       events.PoolOverload,
	limiter.PoolDrained:        events.PoolDrained,
	limiter.PoolNearFull:       events.PoolNearFull,
	limiter.PoolLowUtilisation: events.PoolLowUtilisation,
}

// markEventDetail describes a mark event for people, for example
// "48 waiting, at or above the overload mark 40; held 10 of 10", with
// "; 12 repeats suppressed" when crossings of its kind came within the
// mark event interval since the previous one.
func markEventDetail(ev limiter.PoolEvent) string {
	d := markCrossingDetail(ev)
	if ev.Suppressed > 0 {
		d += "; " + itoa(ev.Suppressed) + " repeats suppressed"
	}
	return d
}

// markCrossingDetail describes the crossing of a mark event.
func markCrossingDetail(ev limiter.PoolEvent) string {
	held := "held " + itoa(ev.Held)
	if ev.ConcurrencyLimit > 0 {
		held += " of " + itoa(ev.ConcurrencyLimit)
		if ev.ConfiguredConcurrencyLimit != ev.ConcurrencyLimit {
			held += " (configured " + itoa(ev.ConfiguredConcurrencyLimit) + ")"
		}
	}
	switch ev.Type {
	case limiter.PoolOverload:
		return itoa(ev.Waiting) + " waiting, at or above the overload mark " + itoa(int64(ev.Mark)) + "; " + held
	case limiter.PoolDrained:
		return "nothing held and nothing waiting"
	case limiter.PoolNearFull:
		return "utilisation " + pct(ev.Utilisation) + ", at or above the near-full mark " + pct(ev.Mark) + "; " + held + ", " + itoa(ev.Waiting) + " waiting"
	case limiter.PoolLowUtilisation:
		return "utilisation at most " + pct(ev.Utilisation) + " for " + ev.Period.String() + ", below the low-utilisation mark " + pct(ev.Mark) + "; " + held
	}
	return strings.TrimSpace(ev.Type.String())
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// pct formats a fraction as a percentage with at most one decimal.
func pct(f float64) string { return fmtRate(f*100) + "%" }
