package limiter

import (
	"math"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// AdaptiveTarget says which of a pool's limits adaptive control moves.
type AdaptiveTarget uint8

// Adaptive targets.
const (
	// AdaptAll moves every limit the pool has: its concurrency limit and
	// its rate. It is the default (the zero value).
	AdaptAll AdaptiveTarget = iota
	// AdaptConcurrency moves only the concurrency limit.
	AdaptConcurrency
	// AdaptRate moves only the rate.
	AdaptRate
)

// String returns "all", "concurrency" or "rate".
func (t AdaptiveTarget) String() string {
	switch t {
	case AdaptAll:
		return "all"
	case AdaptConcurrency:
		return "concurrency"
	case AdaptRate:
		return "rate"
	}
	return "unknown"
}

// Defaults and bounds of AdaptiveConfig; docs/adaptive.md says why.
const (
	DefaultAdaptiveWindow         = 10 * time.Second
	DefaultAdaptiveErrorThreshold = 0.1
	DefaultAdaptiveMinSamples     = 20
	DefaultAdaptiveBackoff        = 0.8
	DefaultAdaptiveIncrease       = 0.05
	DefaultAdaptiveInterval       = 2 * time.Second
	DefaultAdaptiveCooldown       = 2 * time.Second
	// DefaultAdaptiveProbeFactor: ProbeInterval defaults to this many
	// Intervals.
	DefaultAdaptiveProbeFactor = 5
	// DefaultAdaptiveMinRateFraction is the default rate floor, as a
	// fraction of the configured rate.
	DefaultAdaptiveMinRateFraction = 0.01

	// MinAdaptiveWindow and MaxAdaptiveWindow bound Window (its buckets
	// are a tenth of it, AdaptiveWindowBuckets).
	MinAdaptiveWindow = 100 * time.Millisecond
	MaxAdaptiveWindow = time.Hour
	// MaxAdaptiveInterval bounds Interval and Cooldown.
	MaxAdaptiveInterval = time.Hour
	// MaxAdaptiveMinSamples bounds MinSamples.
	MaxAdaptiveMinSamples = 1_000_000
	// MaxLatencyTolerance bounds LatencyTolerance.
	MaxLatencyTolerance = 100
)

// AdaptiveConfig configures a pool's adaptive limits: the engine lowers the
// pool's effective concurrency limit and/or rate when clients report errors
// and timeouts (or rising latency) from the protected system, and raises
// them back toward the configured values while the reports are healthy
// (AIMD). The effective values are what every grant is checked against;
// the configured ones are what the operator declared (PoolConfig). Zero
// values mean the defaults (WithDefaults fills them in); a disabled
// AdaptiveConfig is all zero after WithDefaults.
//
// Every evaluation looks at a sliding window of reported outcomes, by the
// engine's clock:
//   - if at least MinSamples outcomes were reported and the fraction of
//     errors and timeouts exceeds ErrorThreshold (or, with
//     LatencyTolerance, the mean latency exceeds LatencyTolerance × the
//     long-term baseline), and the last cut was at least Cooldown ago, the
//     effective values are multiplied by Backoff (not below the floors) and
//     the window starts over, so that the next decision looks only at work
//     done under the new limits;
//   - otherwise, if the window is healthy (no errors or timeouts, or at
//     least MinSamples outcomes under the threshold, and latency within
//     tolerance), the last change was at least Interval ago and the last
//     cut at least Cooldown ago, each lowered value goes up by Increase ×
//     its configured value, not above it, and the window starts over.
//
// An idle pool (nothing reported) counts as healthy, so its limits come
// back to the configured values by themselves.
type AdaptiveConfig struct {
	// Enabled turns adaptive control on. When off, the effective limits
	// are the configured ones and the other fields are cleared.
	Enabled bool
	// Target says which limits move; AdaptAll (default) moves every limit
	// the pool has.
	Target AdaptiveTarget
	// Window is the length of the sliding window of outcomes (default
	// DefaultAdaptiveWindow), kept in AdaptiveWindowBuckets buckets.
	Window time.Duration
	// ErrorThreshold is the fraction of errors and timeouts among the
	// window's outcomes above which the limits are cut, in (0, 1)
	// (default DefaultAdaptiveErrorThreshold).
	ErrorThreshold float64
	// MinSamples is how many outcomes the window must hold before it can
	// cause a cut (default DefaultAdaptiveMinSamples).
	MinSamples int64
	// Backoff is the factor a cut multiplies the effective values by, in
	// (0, 1) (default DefaultAdaptiveBackoff). A cut of a concurrency
	// limit lowers it by at least 1.
	Backoff float64
	// Increase is the step of a raise as a fraction of the configured
	// value, in (0, 1] (default DefaultAdaptiveIncrease); a concurrency
	// step is at least 1.
	Increase float64
	// Interval is the least time between a change and the next raise
	// (default DefaultAdaptiveInterval).
	Interval time.Duration
	// ProbeInterval is the least time between a change and a raise that
	// would take an effective value to or above the level at which a
	// raise last failed (the learned capacity: a cut came before the next
	// change), at most MaxAdaptiveInterval (default
	// DefaultAdaptiveProbeFactor × Interval; raised to Interval if below). A raise past that level, after it held for
	// ProbeInterval, forgets it. Set it to Interval to probe at one pace.
	ProbeInterval time.Duration
	// Cooldown is the least time between two cuts (default
	// DefaultAdaptiveCooldown): work started before a cut finishes after
	// it, and its failures must not cut again at once. Set it above the
	// protected work's usual latency.
	Cooldown time.Duration
	// MinConcurrency is the floor of the effective concurrency limit, at
	// least 1 and at most the configured limit (default 1).
	MinConcurrency int64
	// MinRate is the floor of the effective rate, above 0 and at most the
	// configured rate (default DefaultAdaptiveMinRateFraction × rate). It
	// is above 0 so that some work always goes through to show when the
	// protected system is healthy again.
	MinRate float64
	// LatencyTolerance, when set (above 1, at most MaxLatencyTolerance),
	// also cuts when the window's mean reported latency exceeds
	// LatencyTolerance × the long-term baseline latency, so that overload
	// is caught before errors appear. 0 turns latency control off.
	LatencyTolerance float64
}

// AdaptiveWindowBuckets is the number of buckets of an adaptive window;
// each covers Window / AdaptiveWindowBuckets.
const AdaptiveWindowBuckets = 10

// withDefaults fills in the zero fields of an enabled configuration for a
// pool with the given limits, and clears a disabled one.
func (a AdaptiveConfig) withDefaults(limit int64, rate float64) AdaptiveConfig {
	if !a.Enabled {
		return AdaptiveConfig{}
	}
	if a.Window == 0 {
		a.Window = DefaultAdaptiveWindow
	}
	if a.ErrorThreshold == 0 {
		a.ErrorThreshold = DefaultAdaptiveErrorThreshold
	}
	if a.MinSamples == 0 {
		a.MinSamples = DefaultAdaptiveMinSamples
	}
	if a.Backoff == 0 {
		a.Backoff = DefaultAdaptiveBackoff
	}
	if a.Increase == 0 {
		a.Increase = DefaultAdaptiveIncrease
	}
	if a.Interval == 0 {
		a.Interval = DefaultAdaptiveInterval
	}
	if a.Cooldown == 0 {
		a.Cooldown = DefaultAdaptiveCooldown
	}
	if a.ProbeInterval == 0 {
		a.ProbeInterval = min(DefaultAdaptiveProbeFactor*a.Interval, MaxAdaptiveInterval)
	}
	if a.ProbeInterval > 0 {
		a.ProbeInterval = max(a.ProbeInterval, a.Interval) // a kept value after the interval grew
	}
	if a.MinConcurrency == 0 && limit > 0 {
		a.MinConcurrency = 1
	}
	if a.MinRate == 0 && rate > 0 {
		a.MinRate = rate * DefaultAdaptiveMinRateFraction
	}
	return a
}

// validate reports the first problem with an enabled configuration (after
// withDefaults) of pool name with the given configured limits.
func (a AdaptiveConfig) validate(name string, limit int64, rate float64) error {
	if !a.Enabled {
		return nil
	}
	bad := func(format string, args ...any) error {
		return errorf(apierr.ErrInvalidArgument, "pool %q: adaptive."+format, append([]any{name}, args...)...)
	}
	switch {
	case a.Target > AdaptRate:
		return bad("target %d is not one of all, concurrency, rate", a.Target)
	case a.Target == AdaptConcurrency && limit == 0:
		return bad("target is concurrency but the pool has no concurrency limit; set concurrency_limit or another target")
	case a.Target == AdaptRate && rate == 0:
		return bad("target is rate but the pool has no rate; set rate or another target")
	case a.Window < MinAdaptiveWindow || a.Window > MaxAdaptiveWindow:
		return bad("window %v is out of range [%v, %v]", a.Window, MinAdaptiveWindow, MaxAdaptiveWindow)
	case !(a.ErrorThreshold > 0 && a.ErrorThreshold < 1):
		return bad("error_threshold %v is out of range: give a fraction above 0 and below 1, such as 0.1", a.ErrorThreshold)
	case a.MinSamples < 1 || a.MinSamples > MaxAdaptiveMinSamples:
		return bad("min_samples %d is out of range [1, %d]", a.MinSamples, MaxAdaptiveMinSamples)
	case !(a.Backoff > 0 && a.Backoff < 1):
		return bad("backoff %v is out of range: give a factor above 0 and below 1, such as 0.8", a.Backoff)
	case !(a.Increase > 0 && a.Increase <= 1):
		return bad("increase %v is out of range: give a fraction of the configured limit above 0 and at most 1, such as 0.05", a.Increase)
	case a.Interval < time.Millisecond || a.Interval > MaxAdaptiveInterval:
		return bad("interval %v is out of range [1ms, %v]", a.Interval, MaxAdaptiveInterval)
	case a.ProbeInterval < 0 || a.ProbeInterval > MaxAdaptiveInterval:
		return bad("probe_interval %v is out of range [interval %v, %v] (0 means 5 × interval)", a.ProbeInterval, a.Interval, MaxAdaptiveInterval)
	case a.Cooldown < time.Millisecond || a.Cooldown > MaxAdaptiveInterval:
		return bad("cooldown %v is out of range [1ms, %v]", a.Cooldown, MaxAdaptiveInterval)
	case limit > 0 && (a.MinConcurrency < 1 || a.MinConcurrency > limit):
		return bad("min_concurrency %d is out of range [1, concurrency_limit %d]", a.MinConcurrency, limit)
	case limit == 0 && a.MinConcurrency != 0:
		return bad("min_concurrency %d is set but the pool has no concurrency limit", a.MinConcurrency)
	case rate > 0 && (math.IsNaN(a.MinRate) || a.MinRate <= 0 || a.MinRate > rate):
		return bad("min_rate %v is out of range: give a rate above 0 and at most the pool's rate %v", a.MinRate, rate)
	case rate == 0 && a.MinRate != 0:
		return bad("min_rate %v is set but the pool has no rate", a.MinRate)
	case math.IsNaN(a.LatencyTolerance) || a.LatencyTolerance < 0 || (a.LatencyTolerance > 0 && a.LatencyTolerance <= 1) || a.LatencyTolerance > MaxLatencyTolerance:
		return bad("latency_tolerance %v is out of range: give 0 (off) or a factor above 1 and at most %d, such as 2", a.LatencyTolerance, MaxLatencyTolerance)
	}
	return nil
}

// adaptsConcurrency and adaptsRate say whether an enabled configuration
// moves the limit of a pool that has it.
func (a AdaptiveConfig) adaptsConcurrency() bool {
	return a.Enabled && (a.Target == AdaptAll || a.Target == AdaptConcurrency)
}

func (a AdaptiveConfig) adaptsRate() bool {
	return a.Enabled && (a.Target == AdaptAll || a.Target == AdaptRate)
}
