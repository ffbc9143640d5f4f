package main

import (
	"math"
	"strconv"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// markFlags are the event-mark flags of pool create and pool update
// (limiter/marks.go). The marks are strings so that "off" can turn one off.
type markFlags struct {
	overload, nearFull, low string
	period                  time.Duration
}

// markFlagFields maps each mark flag to the Pool field it sets.
var markFlagFields = []struct{ flag, field string }{
	{"overload-mark", "overload_mark"},
	{"near-full-mark", "near_full_mark"},
	{"low-utilisation-mark", "low_utilisation_mark"},
	{"low-utilisation-period", "low_utilisation_period"},
}

func (m *markFlags) register(f *pflag.FlagSet) {
	f.StringVar(&m.overload, "overload-mark", "", "pool_overload event when this many acquires wait (default, or 0: half of --max-waiters; off: no event)")
	f.StringVar(&m.nearFull, "near-full-mark", strconv.FormatFloat(limiter.DefaultNearFullMark, 'g', -1, 64), "pool_near_full event when held/limit reaches this fraction (0: the default; off: no event)")
	f.StringVar(&m.low, "low-utilisation-mark", strconv.FormatFloat(limiter.DefaultLowUtilisationMark, 'g', -1, 64), "pool_low_utilisation event when held/limit stays below this fraction for a period (0: the default; off: no event)")
	f.DurationVar(&m.period, "low-utilisation-period", limiter.DefaultLowUtilisationPeriod, "period of the low-utilisation mark (0: the default)")
}

// set copies the value of the mark flag named flag into pool, and reports
// false for a flag that is not a mark's.
func (m *markFlags) set(pool *tollgatev1.Pool, flag string) (bool, error) {
	var err error
	switch flag {
	case "overload-mark":
		if m.overload == "off" {
			pool.OverloadMark = limiter.MarkOff
		} else if pool.OverloadMark, err = strconv.ParseInt(m.overload, 10, 64); err != nil {
			return true, usageErrorf("--overload-mark %q is not a count of waiting acquires; give a whole number, 0 for the default, or off", m.overload)
		}
	case "near-full-mark":
		pool.NearFullMark, err = fractionFlag("near-full-mark", m.nearFull)
	case "low-utilisation-mark":
		pool.LowUtilisationMark, err = fractionFlag("low-utilisation-mark", m.low)
	case "low-utilisation-period":
		pool.LowUtilisationPeriod = durationpb.New(m.period)
	default:
		return false, nil
	}
	return true, err
}

// fractionFlag parses a fraction mark, or "off".
func fractionFlag(name, v string) (float64, error) {
	if v == "off" {
		return limiter.MarkOff, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, usageErrorf("--%s %q is not a fraction; give a number such as 0.8, 0 for the default, or off", name, v)
	}
	return f, nil
}

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
