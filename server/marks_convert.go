package server

import (
	"strconv"
	"strings"

	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// markFields adds p's marks to vals, the "field=value" texts of the
// pool_created and pool_updated events: "default", "off", or the value.
func markFields(p *tollgatev1.Pool, vals map[string]string) {
	mark := func(v float64) string {
		switch v {
		case 0:
			return "default"
		case limiter.MarkOff:
			return "off"
		}
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	vals["overload_mark"] = mark(float64(p.GetOverloadMark()))
	vals["near_full_mark"] = mark(p.GetNearFullMark())
	vals["low_utilisation_mark"] = mark(p.GetLowUtilisationMark())
	vals["low_utilisation_period"] = "default"
	if d := p.GetLowUtilisationPeriod().AsDuration(); d > 0 {
		vals["low_utilisation_period"] = d.String()
	}
}

// markEventTypes maps the engine's mark events to the server's.
var markEventTypes = map[limiter.PoolEventType]string{
	limiter.PoolOverload:       EventPoolOverload,
	limiter.PoolDrained:        EventPoolDrained,
	limiter.PoolNearFull:       EventPoolNearFull,
	limiter.PoolLowUtilisation: EventPoolLowUtilisation,
}

// markEventDetail describes a mark event for people, for example
// "48 waiting, at or above the overload mark 40; held 10 of 10".
func markEventDetail(ev limiter.PoolEvent) string {
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
