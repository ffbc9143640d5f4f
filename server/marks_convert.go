package server

import (
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// markPaths are the update_mask paths of a pool's event marks
// (limiter/marks.go).
var markPaths = []string{"overload_mark", "near_full_mark", "low_utilisation_mark", "low_utilisation_period"}

// marksFromProto copies p's event marks into cfg. Range checks are the
// engine's; a malformed or negative period is INVALID_ARGUMENT here.
func marksFromProto(p *tollgatev1.Pool, cfg *limiter.PoolConfig) error {
	period, err := durationArg("pool.low_utilisation_period", p.GetLowUtilisationPeriod())
	if err != nil {
		return err
	}
	cfg.OverloadMark = p.GetOverloadMark()
	cfg.NearFullMark = p.GetNearFullMark()
	cfg.LowUtilisationMark = p.GetLowUtilisationMark()
	cfg.LowUtilisationPeriod = period
	return nil
}

// marksToProto sets out's event marks from c: 0 for a default, -1 for off,
// as configured; the period is unset when it is the default.
func marksToProto(c limiter.PoolConfig, out *tollgatev1.Pool) {
	out.OverloadMark = c.OverloadMark
	out.NearFullMark = c.NearFullMark
	out.LowUtilisationMark = c.LowUtilisationMark
	if c.LowUtilisationPeriod > 0 {
		out.LowUtilisationPeriod = durationpb.New(c.LowUtilisationPeriod)
	}
}

// applyMarkPath copies the mark that path names from src into dst and
// reports whether path is a mark's.
func applyMarkPath(dst *limiter.PoolConfig, src limiter.PoolConfig, path string) bool {
	switch path {
	case "overload_mark":
		dst.OverloadMark = src.OverloadMark
	case "near_full_mark":
		dst.NearFullMark = src.NearFullMark
	case "low_utilisation_mark":
		dst.LowUtilisationMark = src.LowUtilisationMark
	case "low_utilisation_period":
		dst.LowUtilisationPeriod = src.LowUtilisationPeriod
	default:
		return false
	}
	return true
}

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
