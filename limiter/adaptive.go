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
	// cfg, conf and confRate are the pool's adaptive configuration and
	// configured concurrency limit and rate (0: none), as of its last
	// configuration (init, configure).
	cfg      AdaptiveConfig
	conf     int64
	confRate float64

	// limit is the effective concurrency limit (0: the pool has none) and
	// rate the effective rate (0: none). admits checks limit; the
	// bucket refills at rate minus the rate granted as shares.
	limit int64
	rate  float64

	// restored is the effective concurrency limit recorded before a
	// restart, applied when the recovery window ends.
	restored int64

	clock   Clock
	timers  timerHost // told when the timer goes off
	stopped bool      // for good: the timer is not armed again

	// The rest is adaptive control's own state, nil while all of it is
	// zero: the pool has no adaptive control, or nothing was recorded,
	// changed or armed since it was turned on (control makes it).
	*adaptiveControl
}

// adaptiveControl is the state of a pool's adaptive control.
type adaptiveControl struct {
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

// adaptiveChange is a change of the effective limits that the pool must
// carry out: rebalance the shares and the bucket for a new rate, apply its
// revocation policy to a lowered limit, serve the queue after a raise, and
// report ev.
type adaptiveChange struct {
	ev                           PoolEvent // its Pool is left to the pool
	lowered, raised, rateChanged bool
}

// init sets the effective limits to the configured ones of cfg, the
// pool's first configuration; timers is told when the timer that raises
// lowered limits goes off (it should call fired, then tick).
func (a *adaptive) init(cfg PoolConfig, clock Clock, timers timerHost) {
	a.clock, a.timers = clock, timers
	a.cfg, a.conf, a.confRate = cfg.Adaptive, cfg.ConcurrencyLimit, cfg.Rate
	a.limit, a.rate = cfg.ConcurrencyLimit, cfg.Rate
}

// control is adaptive control's state, made (all zero, the window empty)
// on first use.
func (a *adaptive) control() *adaptiveControl {
	if a.adaptiveControl == nil {
		a.adaptiveControl = &adaptiveControl{}
		a.win.reset(a.cfg.Window / AdaptiveWindowBuckets)
	}
	return a.adaptiveControl
}

// configure brings the effective limits in line with a new configuration
// (UpdatePool) and reports whether the effective rate changed (the pool
// then rebalances the shares and adjusts the bucket). Without adaptive
// control, or when it was just turned on, the effective values are the
// configured ones. A value that was not lowered follows its configured
// value; a lowered one stays where it is, within its new floor and
// configured value, and climbs as usual. The window starts over when the
// adaptive settings change. The caller arms the timer (arm).
func (a *adaptive) configure(cfg PoolConfig) (rateChanged bool) {
	oldC, oldLimit, oldRate := a.cfg, a.conf, a.confRate
	c := cfg.Adaptive
	a.cfg, a.conf, a.confRate = c, cfg.ConcurrencyLimit, cfg.Rate
	switch {
	case !c.Enabled || !oldC.Enabled: // all of it starts over (ThrottleNone, never cut, ...)
		if a.adaptiveControl != nil && a.timer != nil {
			a.timer.Stop()
		}
		a.adaptiveControl = nil
	case oldC != c && a.adaptiveControl != nil:
		a.win.reset(c.Window / AdaptiveWindowBuckets)
	}
	limit, rate := a.conf, a.confRate
	if c.adaptsConcurrency() && oldC.Enabled && limit > 0 && a.limit < oldLimit {
		limit = min(max(a.limit, c.MinConcurrency), limit)
	}
	if c.adaptsRate() && oldC.Enabled && rate > 0 && a.rate < oldRate {
		rate = min(max(a.rate, c.MinRate), rate)
	}
	a.limit = limit
	rateChanged = rate != a.rate
	a.rate = rate
	if !a.lowered() && a.adaptiveControl != nil {
		a.reason = ThrottleNone
	}
	return rateChanged
}

// lowered reports whether an effective limit is below its configured
// value.
func (a *adaptive) lowered() bool {
	return a.limit < a.conf || a.rate < a.confRate
}

// record adds reported outcomes to the window, with adaptive control on,
// and evaluates it: the change it made, if any.
func (a *adaptive) record(b outcomeBucket, now time.Time) *adaptiveChange {
	if !a.cfg.Enabled {
		return nil
	}
	c := a.control()
	c.win.rotate(now, a.closeBucket)
	c.win.record(b)
	return a.evaluate(now)
}

// fired notes that the timer went off (the pool calls it under its lock,
// whether or not it then calls tick).
func (a *adaptive) fired() {
	if a.adaptiveControl != nil {
		a.timerAt = time.Time{}
	}
}

// tick evaluates the window of a lowered pool when the timer goes off:
// the change it made, if any.
func (a *adaptive) tick(now time.Time) *adaptiveChange {
	if !a.cfg.Enabled {
		return nil
	}
	a.control().win.rotate(now, a.closeBucket)
	return a.evaluate(now)
}

// closeBucket feeds a bucket that leaves the window into the latency
// baseline.
func (a *adaptive) closeBucket(b outcomeBucket) {
	if b.latN == 0 {
		return
	}
	m := b.latMean()
	tol := a.cfg.LatencyTolerance
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

// judge reads the window (rotate it first).
func (a *adaptive) judge() windowVerdict {
	c := &a.cfg
	v := windowVerdict{tot: a.win.totals(), base: a.baseline}
	n, bad := v.tot.total(), v.tot.errors+v.tot.timeouts
	latHigh := c.LatencyTolerance > 0 && a.baseline > 0 && v.tot.latN > 0 &&
		float64(v.tot.latMean()) > c.LatencyTolerance*float64(a.baseline)
	threshold := c.ErrorThreshold
	if a.probing() { // at the level a raise last failed: stricter
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

// evaluate cuts or raises the effective limits if the window (rotated to
// now) says so.
func (a *adaptive) evaluate(now time.Time) *adaptiveChange {
	c := &a.cfg
	v := a.judge()
	switch {
	case v.cut && (a.lastCut.IsZero() || now.Sub(a.lastCut) >= c.Cooldown):
		return a.cut(v, now)
	case v.healthy && a.lowered() && now.Sub(a.lastChange) >= a.raiseInterval() && now.Sub(a.lastCut) >= c.Cooldown:
		return a.raise(v, now)
	}
	return nil
}

// cut multiplies the effective limits by Backoff, not below the floors,
// and starts the window over.
func (a *adaptive) cut(v windowVerdict, now time.Time) *adaptiveChange {
	c := &a.cfg
	limit, rate := a.limit, a.rate
	if c.adaptsConcurrency() && a.conf > 0 {
		nl := int64(math.Floor(float64(limit) * c.Backoff))
		limit = max(min(nl, limit-1), c.MinConcurrency)
	}
	if c.adaptsRate() && a.confRate > 0 {
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
	a.restartWindow()
	if limit == a.limit && rate == a.rate {
		return nil // at the floors already
	}
	a.reason = v.reason
	return a.change(PoolThrottled, v, limit, rate, now)
}

// raised returns the effective limits a raise would set: Increase × the
// configured values added to the lowered ones, not above the configured
// ones.
func (a *adaptive) raised() (int64, float64) {
	limit, rate := a.limit, a.rate
	if limit < a.conf {
		step := max(1, int64(math.Ceil(a.cfg.Increase*float64(a.conf))))
		limit = min(limit+step, a.conf)
	}
	if rate < a.confRate {
		rate = min(rate+a.cfg.Increase*a.confRate, a.confRate)
	}
	return limit, rate
}

// raiseInterval returns the least time from the last change to the next
// raise: ProbeInterval when that raise would reach the level at which the
// last one failed (the learned capacity), Interval otherwise.
func (a *adaptive) raiseInterval() time.Duration {
	limit, rate := a.raised()
	if (a.ceiling > 0 && limit >= a.ceiling) || (a.rateCeiling > 0 && rate >= a.rateCeiling) {
		return a.cfg.ProbeInterval
	}
	return a.cfg.Interval
}

// probing reports whether an effective value is at or above the level at
// which a raise last failed: its window is judged against half the error
// threshold, as a fast-failing backend shows an overshoot of one permit
// as a few percent of errors, under the threshold.
func (a *adaptive) probing() bool {
	return (a.ceiling > 0 && a.limit >= a.ceiling) || (a.rateCeiling > 0 && a.rate >= a.rateCeiling)
}

// raise raises the effective limits (raised) and starts the window over,
// so the next decision judges the new limits. A raise from at or above a
// ceiling, which held for ProbeInterval, forgets it.
func (a *adaptive) raise(v windowVerdict, now time.Time) *adaptiveChange {
	limit, rate := a.raised()
	if a.ceiling > 0 && a.limit >= a.ceiling {
		a.ceiling = 0
	}
	if a.rateCeiling > 0 && a.rate >= a.rateCeiling {
		a.rateCeiling = 0
	}
	a.lastChange, a.lastRaise, a.raisedLast = now, now, true
	a.restartWindow()
	if limit == a.conf && rate == a.confRate {
		a.reason = ThrottleNone
	}
	return a.change(PoolRelieved, v, limit, rate, now)
}

// restartWindow empties the window, feeding its buckets into the latency
// baseline first.
func (a *adaptive) restartWindow() {
	w := &a.win
	for i := 1; i <= AdaptiveWindowBuckets; i++ {
		a.closeBucket(w.buckets[(w.head+i)%AdaptiveWindowBuckets])
	}
	w.reset(w.width)
}

// change makes limit and rate the effective values and returns the
// change, with its event of type typ.
func (a *adaptive) change(typ PoolEventType, v windowVerdict, limit int64, rate float64, now time.Time) *adaptiveChange {
	ch := &adaptiveChange{
		ev: PoolEvent{
			Type: typ, Time: now, Reason: v.reason,
			ConcurrencyLimit: limit, PrevConcurrencyLimit: a.limit, ConfiguredConcurrencyLimit: a.conf,
			Rate: rate, PrevRate: a.rate, ConfiguredRate: a.confRate,
			Samples: v.tot.total(), ErrorRatio: v.tot.badRatio(), Latency: v.tot.latMean(), Baseline: v.base,
		},
		lowered:     limit < a.limit,
		raised:      limit > a.limit || rate > a.rate,
		rateChanged: rate != a.rate,
	}
	if typ != PoolThrottled {
		ch.ev.Reason = ThrottleNone
	}
	a.limit, a.rate = limit, rate
	return ch
}

// arm keeps the timer armed while an effective limit is lowered, for the
// next raise: limits come back even when nothing is reported. It stops
// the timer otherwise, and once the part is stopped.
func (a *adaptive) arm(now time.Time) {
	if !a.cfg.Enabled || !a.lowered() || a.stopped {
		if c := a.adaptiveControl; c != nil {
			if c.timer != nil && !c.timerAt.IsZero() {
				c.timer.Stop()
			}
			c.timerAt = time.Time{}
		}
		return
	}
	a.control()
	at := a.lastChange.Add(a.raiseInterval())
	if c := a.lastCut.Add(a.cfg.Cooldown); c.After(at) {
		at = c // no raise within the cooldown of a cut either
	}
	if !at.After(now) {
		at = now.Add(a.cfg.Interval)
	}
	if at.Equal(a.timerAt) {
		return
	}
	a.timerAt = at
	if a.timer == nil {
		a.timer = a.clock.AfterFunc(at.Sub(now), a.timers.adaptiveFired)
	} else {
		a.timer.Reset(at.Sub(now))
	}
}

// admits lets weight be granted if the held weight stays within the
// effective concurrency limit, in a pool with a concurrency limit.
func (a *adaptive) admits(held, weight int64, _ time.Time) bool {
	return a.conf == 0 || held+weight <= a.limit
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
	a.stopped = true
	if a.adaptiveControl == nil {
		return
	}
	if a.timer != nil {
		a.timer.Stop()
	}
	a.timerAt = time.Time{}
}

// status fills in the effective limits and the adaptive window.
func (a *adaptive) status(s *PoolStatus, now time.Time) {
	s.EffectiveConcurrencyLimit = a.limit
	s.EffectiveRate = a.rate
	if !a.cfg.Enabled {
		return
	}
	var t outcomeBucket // none in an empty window
	if a.adaptiveControl != nil {
		s.ThrottleReason = a.reason
		s.LastAdaptiveChange = a.lastChange
		s.LatencyBaseline = a.baseline
		w := a.win // a copy: reading the status does not move the window
		w.rotate(now, func(outcomeBucket) {})
		t = w.totals()
	}
	s.WindowSamples, s.WindowErrorRatio, s.WindowLatency = t.total(), t.badRatio(), t.latMean()
}

// recordOutcomesLocked counts reported outcomes and, with adaptive control
// on, feeds them to the effective limits and carries out their change.
func (p *pool) recordOutcomesLocked(b outcomeBucket, now time.Time) {
	p.stats.SuccessesReported += b.successes
	p.stats.ErrorsReported += b.errors
	p.stats.TimeoutsReported += b.timeouts
	if !p.cfg.Adaptive.Enabled {
		return
	}
	p.adaptedLocked(p.ad.record(b, now), now)
}

// adaptedLocked carries out a change of the effective limits (ch, nil for
// none), records them with the pool's durable state if they differ from
// what is recorded (adaptive.recorded), and re-arms the adaptive timer. A
// lowered rate shrinks the shares above their new targets at once (pushed
// to their holders) and the bucket; a lowered concurrency limit, possibly
// under the weight held, is enforced by the pool's revocation policy:
// with RevocationWait, held leases continue and nothing is granted until
// the held weight is under it (admitLocked); with RevocationRevoke,
// leases are revoked until it is within it (enforceLimitLocked).
func (p *pool) adaptedLocked(ch *adaptiveChange, now time.Time) {
	if ch != nil {
		if ch.rateChanged {
			p.shr.setRate(p.ad.rate, &p.out)
			p.applyRateLocked(now) // exact tokens: at once
		}
		if ch.lowered {
			p.enforceLimitLocked(now, "")
		}
		if ch.raised {
			p.dispatchLocked(now)
		}
		ch.ev.Pool = p.name
		p.out.events = append(p.out.events, ch.ev)
		p.marksLocked() // the capacity moved
		if conc, rate := p.ad.recorded(); p.dur.env.persister != nil && (p.dur.state.EffectiveConcurrency != conc || p.dur.state.EffectiveRate != rate) {
			st := p.dur.state
			st.EffectiveConcurrency, st.EffectiveRate = conc, rate
			_ = p.dur.save(p.dur.saved(nil, st), "record the adaptive limits of pool "+quote(p.name)) // best effort
		}
	}
	p.ad.arm(now)
}
