package audit

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/internal/apiconv"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/limiter"
)

// LeaseEnded returns the event of a lease that its holder did not
// release: it expired, or was revoked.
func LeaseEnded(ev limiter.LeaseEnded) events.Event {
	l := ev.Lease
	typ, at, detail := events.LeaseExpired, l.ExpireTime, ""
	if ev.Reason != limiter.EndExpired {
		typ, at, detail = events.LeaseRevoked, time.Time{}, ev.Reason.String()+"; "
	}
	if ev.Message != "" {
		detail = ev.Reason.String() + ": " + strconv.Quote(ev.Message) + "; "
	}
	return events.Event{
		Time:        at,
		Type:        typ,
		Pool:        l.Pool,
		LeaseID:     apiconv.FormatLeaseID(l.FencingToken),
		ClientID:    l.ClientID,
		Description: l.Description,
		Actor:       ev.Actor,
		Detail:      detail + "weight " + strconv.FormatInt(l.Weight, 10) + ", ttl " + l.TTL.String(),
	}
}

// PoolEvent returns the event of a change adaptive control made to a
// pool's effective limits (events.PoolThrottled, events.PoolRelieved) or
// of a mark crossed (events.PoolOverload, ...). Provider events are the
// caller's.
func PoolEvent(ev limiter.PoolEvent) events.Event {
	if typ, ok := MarkKinds[ev.Type]; ok {
		return events.Event{Time: ev.Time, Type: typ, Pool: ev.Pool, Detail: markEventDetail(ev)}
	}
	typ := events.PoolRelieved
	if ev.Type == limiter.PoolThrottled {
		typ = events.PoolThrottled
	}
	return events.Event{Time: ev.Time, Type: typ, Pool: ev.Pool, Detail: poolEventDetail(ev)}
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

// MarkKinds maps the engine's mark events to the types of their events.
var MarkKinds = map[limiter.PoolEventType]string{
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
