package main

import (
	"math"
	"strconv"

	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// markRows prints a pool's event marks as they apply: configured, default
// or off.
func markRows(row func(string, any), pool *tollgatev1.Pool) {
	switch v := pool.GetOverloadMark(); v {
	case 0:
		row("overload_mark", strconv.FormatInt(max(1, pool.GetMaxWaiters()/2), 10)+" waiting (default: half of max_waiters)")
	case limiter.MarkOff:
		row("overload_mark", "off")
	default:
		row("overload_mark", strconv.FormatInt(v, 10)+" waiting")
	}
	if k := pool.GetResourceKind(); pool.GetConcurrencyLimit() == 0 &&
		k != tollgatev1.ResourceKind_RESOURCE_KIND_ACTIVE && k != tollgatev1.ResourceKind_RESOURCE_KIND_PASSIVE {
		row("utilisation_marks", "none: they need a concurrency limit or instances")
		return
	}
	fraction := func(v, def float64) string {
		switch v {
		case 0:
			return pctText(def) + " (default)"
		case limiter.MarkOff:
			return "off"
		}
		return pctText(v)
	}
	row("near_full_mark", fraction(pool.GetNearFullMark(), limiter.DefaultNearFullMark))
	low := fraction(pool.GetLowUtilisationMark(), limiter.DefaultLowUtilisationMark)
	if pool.GetLowUtilisationMark() != limiter.MarkOff {
		period := limiter.DefaultLowUtilisationPeriod.String() + " (default)"
		if d := pool.GetLowUtilisationPeriod(); d != nil && d.AsDuration() > 0 {
			period = d.AsDuration().String()
		}
		low += " for " + period
	}
	row("low_utilisation_mark", low)
}

// pctText formats a fraction as a percentage with at most one decimal.
func pctText(f float64) string { return strconv.FormatFloat(math.Round(f*1000)/10, 'f', -1, 64) + "%" }
