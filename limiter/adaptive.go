package limiter

import (
	"math"
	"time"
)

// This file is adaptive control: the effective limits of a pool, which
// every grant is checked against, and how reported outcomes move them
// (AIMD; see AdaptiveConfig and docs/adaptive.md).

// adaptive is a pool's adaptive state, guarded by the pool's mutex. With
// adaptive control off, limit and rate are the configured values and
// nothing else is used.
type adaptive struct {
	// limit is the effective concurrency limit (0: the pool has none) and
	// rate the effective rate (0: none). admitLocked checks limit; the
	// bucket refills at rate minus the rate granted as shares.
	limit int64
	rate  float64
	// conf is the configured concurrency limit (0: none), and enabled
	// whether adaptive control is on (configure).
	conf    int64
	enabled bool

	win        outcomeWindow
	lastCut    time.Time // zero: never
	lastChange time.Time // last cut or raise; zero: never
	lastRaise  time.Time // zero: never
	raisedLast bool      // the last change was a raise
	learned    time.Time // when ceiling and rateCeiling were set
	// ceiling and rateCeiling are the effective values at which a raise
	// last failed (a cut came before the next change): raises to them or
	// above wait ProbeInterval, not Interval, and are judged against half
	// the threshold. 0: none known.
	ceiling     int64
	rateCeiling float64
	reason      ThrottleReason
	baseline    time.Duration // long-term mean latency; 0: unknown

	timer   Timer     // raises while lowered; nil until first needed
	timerAt time.Time // zero when not armed

	// restored is the effective concurrency limit recorded before a
	// restart, applied when the recovery window ends.
	restored int64
}

// Latency baseline smoothing, per closed bucket: it follows a lower
// latency fast, a higher one within tolerance slowly, and one above
// tolerance (overload) very slowly, so overload does not become normal
// unless it lasts (then it does: a protected system that got slower for
// good must not be cut to the floor forever).
const (
	baselineDown     = 5   // 1/5 of the gap per bucket
	baselineUp       = 50  // 1/50
	baselineOverload = 500 // 1/500
)

// initAdaptiveLocked sets the effective limits to the configured ones.
func (p *pool) initAdaptiveLocked() {
	p.ad.limit, p.ad.rate = p.cfg.ConcurrencyLimit, p.cfg.Rate
	p.ad.win.reset(p.cfg.Adaptive.Window / AdaptiveWindowBuckets)
}

// limitsChangedLocked brings the effective limits in line with a new
// configuration (UpdatePool), old being the previous one, before the
// bucket is adjusted (applyRateLocked). Without adaptive control, or when
// it was just turned on, the effective values are the configured ones. A
// value that was not lowered follows its configured value; a lowered one
// stays where it is, within its new floor and configured value, and
// climbs as usual. The window starts over when the adaptive settings
// change. Shares are rebalanced for the new rate.
func (p *pool) limitsChangedLocked(old PoolConfig, now time.Time) {
	a, c := &p.ad, p.cfg.Adaptive
	if !c.Enabled || !old.Adaptive.Enabled || old.Adaptive != c {
		if !c.Enabled || !old.Adaptive.Enabled {
			a.reason = ThrottleNone
			a.lastCut, a.lastChange, a.lastRaise, a.raisedLast = time.Time{}, time.Time{}, time.Time{}, false
			a.ceiling, a.rateCeiling = 0, 0
			a.baseline = 0
		}
		a.win.reset(c.Window / AdaptiveWindowBuckets)
	}
	limit, rate := p.cfg.ConcurrencyLimit, p.cfg.Rate
	if c.adaptsConcurrency() && old.Adaptive.Enabled && limit > 0 && a.limit < old.ConcurrencyLimit {
		limit = min(max(a.limit, c.MinConcurrency), limit)
	}
	if c.adaptsRate() && old.Adaptive.Enabled && rate > 0 && a.rate < old.Rate {
		rate = min(max(a.rate, c.MinRate), rate)
	}
	a.limit = limit
	if rate != a.rate {
		a.rate = rate
		p.rebalanceSharesLocked(now)
	}
	if !p.loweredLocked() {
		a.reason = ThrottleNone
	}
	p.armAdaptiveTimerLocked(now)
}

// loweredLocked reports whether an effective limit is below its configured
// value.
func (p *pool) loweredLocked() bool {
	return p.ad.limit < p.cfg.ConcurrencyLimit || p.ad.rate < p.cfg.Rate
}

// recordOutcomesLocked counts reported outcomes and, with adaptive control
// on, adds them to the window and evaluates it.
func (p *pool) recordOutcomesLocked(b outcomeBucket, now time.Time) {
	p.stats.SuccessesReported += b.successes
	p.stats.ErrorsReported += b.errors
	p.stats.TimeoutsReported += b.timeouts
	if !p.cfg.Adaptive.Enabled {
		return
	}
	p.ad.win.rotate(now, p.closeBucketLocked)
	p.ad.win.record(b)
	p.evaluateAdaptiveLocked(now)
}

// closeBucketLocked feeds a bucket that leaves the window into the
// latency baseline.
func (p *pool) closeBucketLocked(b outcomeBucket) {
	if b.latN == 0 {
		return
	}
	a, m := &p.ad, b.latMean()
	tol := p.cfg.Adaptive.LatencyTolerance
	switch {
	case a.baseline == 0:
		a.baseline = m
	case m < a.baseline:
		a.baseline += (m - a.baseline) / baselineDown
	case tol == 0 || float64(m) <= tol*float64(a.baseline):
		a.baseline += (m - a.baseline) / baselineUp
	default:
		a.baseline += (m - a.baseline) / baselineOverload
	}
	a.baseline = max(a.baseline, 1)
}

// windowVerdict is what the window says now.
type windowVerdict struct {
	tot     outcomeBucket
	cut     bool           // enough evidence of trouble to cut
	reason  ThrottleReason // why, when cut
	healthy bool           // evidence (or absence of trouble) enough to raise
	base    time.Duration  // the latency baseline judged against
}

// judgeLocked reads the window (rotate it first).
func (p *pool) judgeLocked() windowVerdict {
	c, a := &p.cfg.Adaptive, &p.ad
	v := windowVerdict{tot: a.win.totals(), base: a.baseline}
	n, bad := v.tot.total(), v.tot.errors+v.tot.timeouts
	latHigh := c.LatencyTolerance > 0 && a.baseline > 0 && v.tot.latN > 0 &&
		float64(v.tot.latMean()) > c.LatencyTolerance*float64(a.baseline)
	threshold := c.ErrorThreshold
	if p.probingLocked() { // at the level a raise last failed: stricter
		threshold /= 2
	}
	switch {
	case n >= c.MinSamples && v.tot.badRatio() > threshold:
		v.cut, v.reason = true, ThrottleErrors
	case latHigh && v.tot.latN >= c.MinSamples:
		v.cut, v.reason = true, ThrottleLatency
	default:
		v.healthy = !latHigh && (bad == 0 || n >= c.MinSamples)
	}
	return v
}

// evaluateAdaptiveLocked cuts or raises the effective limits if the window
// (rotated to now) says so.
func (p *pool) evaluateAdaptiveLocked(now time.Time) {
	c, a := &p.cfg.Adaptive, &p.ad
	v := p.judgeLocked()
	switch {
	case v.cut && (a.lastCut.IsZero() || now.Sub(a.lastCut) >= c.Cooldown):
		p.cutLocked(v, now)
	case v.healthy && p.loweredLocked() && now.Sub(a.lastChange) >= p.raiseIntervalLocked() && now.Sub(a.lastCut) >= c.Cooldown:
		p.raiseLocked(v, now)
	}
	p.armAdaptiveTimerLocked(now)
}

// cutLocked multiplies the effective limits by Backoff, not below the
// floors, and starts the window over.
func (p *pool) cutLocked(v windowVerdict, now time.Time) {
	c, a := &p.cfg.Adaptive, &p.ad
	limit, rate := a.limit, a.rate
	if c.adaptsConcurrency() && p.cfg.ConcurrencyLimit > 0 {
		nl := int64(math.Floor(float64(limit) * c.Backoff))
		limit = max(min(nl, limit-1), c.MinConcurrency)
	}
	if c.adaptsRate() && p.cfg.Rate > 0 {
		rate = max(rate*c.Backoff, c.MinRate)
	}
	// A cut within ProbeInterval of a raise, with no change between,
	// learns the level that failed. Any other cut, unless it comes within
	// ProbeInterval of that (outcomes of the failed probe reported late),
	// means the backend changed: what was learned is stale.
	switch {
	case a.raisedLast && now.Sub(a.lastRaise) <= c.ProbeInterval:
		a.ceiling, a.rateCeiling, a.learned = a.limit, a.rate, now
	case now.Sub(a.learned) > c.ProbeInterval:
		a.ceiling, a.rateCeiling = 0, 0
	}
	a.lastCut, a.lastChange, a.raisedLast = now, now, false
	p.restartWindowLocked()
	if limit == a.limit && rate == a.rate {
		return // at the floors already
	}
	a.reason = v.reason
	p.changeEffectiveLocked(PoolThrottled, v, limit, rate, now)
}

// raisedLocked returns the effective limits a raise would set: Increase ×
// the configured values added to the lowered ones, not above the
// configured ones.
func (p *pool) raisedLocked() (int64, float64) {
	c, a := &p.cfg.Adaptive, &p.ad
	limit, rate := a.limit, a.rate
	if limit < p.cfg.ConcurrencyLimit {
		step := max(1, int64(math.Ceil(c.Increase*float64(p.cfg.ConcurrencyLimit))))
		limit = min(limit+step, p.cfg.ConcurrencyLimit)
	}
	if rate < p.cfg.Rate {
		rate = min(rate+c.Increase*p.cfg.Rate, p.cfg.Rate)
	}
	return limit, rate
}

// raiseIntervalLocked returns the least time from the last change to the
// next raise: ProbeInterval when that raise would reach the level at
// which the last one failed (the learned capacity), Interval otherwise.
func (p *pool) raiseIntervalLocked() time.Duration {
	a := &p.ad
	limit, rate := p.raisedLocked()
	if (a.ceiling > 0 && limit >= a.ceiling) || (a.rateCeiling > 0 && rate >= a.rateCeiling) {
		return p.cfg.Adaptive.ProbeInterval
	}
	return p.cfg.Adaptive.Interval
}

// probingLocked reports whether an effective value is at or above the
// level at which a raise last failed: its window is judged against half
// the error threshold, as a fast-failing backend shows an overshoot of one
// permit as a few percent of errors, under the threshold.
func (p *pool) probingLocked() bool {
	a := &p.ad
	return (a.ceiling > 0 && a.limit >= a.ceiling) || (a.rateCeiling > 0 && a.rate >= a.rateCeiling)
}

// raiseLocked raises the effective limits (raisedLocked) and starts the
// window over, so the next decision judges the new limits. A raise from
// at or above a ceiling, which held for ProbeInterval, forgets it.
func (p *pool) raiseLocked(v windowVerdict, now time.Time) {
	a := &p.ad
	limit, rate := p.raisedLocked()
	if a.ceiling > 0 && a.limit >= a.ceiling {
		a.ceiling = 0
	}
	if a.rateCeiling > 0 && a.rate >= a.rateCeiling {
		a.rateCeiling = 0
	}
	a.lastChange, a.lastRaise, a.raisedLast = now, now, true
	p.restartWindowLocked()
	if limit == p.cfg.ConcurrencyLimit && rate == p.cfg.Rate {
		a.reason = ThrottleNone
	}
	p.changeEffectiveLocked(PoolRelieved, v, limit, rate, now)
}

// restartWindowLocked empties the window, feeding its buckets into the
// latency baseline first.
func (p *pool) restartWindowLocked() {
	w := &p.ad.win
	for i := 1; i <= AdaptiveWindowBuckets; i++ {
		p.closeBucketLocked(w.buckets[(w.head+i)%AdaptiveWindowBuckets])
	}
	w.reset(w.width)
}

// changeEffectiveLocked makes limit and rate the effective values and
// reports the change as an event of type typ.
func (p *pool) changeEffectiveLocked(typ PoolEventType, v windowVerdict, limit int64, rate float64, now time.Time) {
	a := &p.ad
	ev := PoolEvent{
		Pool: p.name, Type: typ, Time: now, Reason: v.reason,
		ConcurrencyLimit: limit, PrevConcurrencyLimit: a.limit, ConfiguredConcurrencyLimit: p.cfg.ConcurrencyLimit,
		Rate: rate, PrevRate: a.rate, ConfiguredRate: p.cfg.Rate,
		Samples: v.tot.total(), ErrorRatio: v.tot.badRatio(), Latency: v.tot.latMean(), Baseline: v.base,
	}
	if typ != PoolThrottled {
		ev.Reason = ThrottleNone
	}
	lowered := limit < a.limit
	raised := limit > a.limit || rate > a.rate
	a.limit = limit
	if rate != a.rate {
		a.rate = rate
		p.rebalanceSharesLocked(now) // shrunk shares are pushed to their holders
		p.applyRateLocked(now)       // exact tokens: at once
	}
	if lowered {
		p.effectiveLimitLoweredLocked(now)
	}
	if raised {
		p.dispatchLocked(now)
	}
	p.out.events = append(p.out.events, ev)
	p.marksLocked() // the capacity moved
	p.persistEffectiveLocked()
}

// effectiveLimitLoweredLocked is called when the effective concurrency
// limit was lowered, possibly under the weight held. With RevocationWait,
// held leases continue and nothing is granted until the held weight is
// under the new limit (admitLocked); with RevocationRevoke, leases are
// revoked until it is within it (enforceLimitLocked).
func (p *pool) effectiveLimitLoweredLocked(now time.Time) { p.enforceLimitLocked(now, "") }

// armAdaptiveTimerLocked keeps a timer armed while an effective limit is
// lowered, for the next raise: limits come back even when nothing is
// reported. It stops the timer otherwise.
func (p *pool) armAdaptiveTimerLocked(now time.Time) {
	a := &p.ad
	if !p.cfg.Adaptive.Enabled || !p.loweredLocked() || p.deleted {
		if a.timer != nil && !a.timerAt.IsZero() {
			a.timer.Stop()
		}
		a.timerAt = time.Time{}
		return
	}
	at := a.lastChange.Add(p.raiseIntervalLocked())
	if c := a.lastCut.Add(p.cfg.Adaptive.Cooldown); c.After(at) {
		at = c // no raise within the cooldown of a cut either
	}
	if !at.After(now) {
		at = now.Add(p.cfg.Adaptive.Interval)
	}
	if at.Equal(a.timerAt) {
		return
	}
	a.timerAt = at
	if a.timer == nil {
		a.timer = p.e.clock.AfterFunc(at.Sub(now), p.onAdaptiveTimer)
	} else {
		a.timer.Reset(at.Sub(now))
	}
}

// onAdaptiveTimer evaluates the window of a lowered pool.
func (p *pool) onAdaptiveTimer() {
	p.mu.Lock()
	p.ad.timerAt = time.Time{}
	if p.deleted || !p.cfg.Adaptive.Enabled || !p.e.acting() {
		p.unlock()
		return
	}
	now := p.e.clock.Now()
	p.ad.win.rotate(now, p.closeBucketLocked)
	p.evaluateAdaptiveLocked(now)
	p.unlock()
}

// admits lets weight be granted if the held weight stays within the
// effective concurrency limit, in a pool with a concurrency limit.
func (a *adaptive) admits(held, weight int64, _ time.Time) bool {
	return a.conf == 0 || held+weight <= a.limit
}

// configure keeps what the gate needs of the pool's configuration cfg.
func (a *adaptive) configure(cfg *PoolConfig) {
	a.conf, a.enabled = cfg.ConcurrencyLimit, cfg.Adaptive.Enabled
}

// describe gives the held weight against the effective limit.
func (a *adaptive) describe(held int64, _ time.Time) string {
	if a.conf == 0 {
		return ""
	}
	s := "held " + itoa(held) + " of limit " + itoa(a.limit)
	if a.limit < a.conf {
		s += " (lowered from " + itoa(a.conf) + " by adaptive control)"
	}
	return s
}

// stop stops the timer for good (pool deleted, engine closed).
func (a *adaptive) stop() {
	if a.timer != nil {
		a.timer.Stop()
	}
	a.timerAt = time.Time{}
}

// status fills in the effective limits and the adaptive window.
func (a *adaptive) status(s *PoolStatus, now time.Time) {
	s.EffectiveConcurrencyLimit = a.limit
	s.EffectiveRate = a.rate
	if !a.enabled {
		return
	}
	s.ThrottleReason = a.reason
	s.LastAdaptiveChange = a.lastChange
	s.LatencyBaseline = a.baseline
	w := a.win // a copy: reading the status does not move the window
	w.rotate(now, func(outcomeBucket) {})
	t := w.totals()
	s.WindowSamples, s.WindowErrorRatio, s.WindowLatency = t.total(), t.badRatio(), t.latMean()
}
