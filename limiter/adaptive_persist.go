package limiter

import "time"

// This file keeps adaptive control's effective limits across a restart.
// When adaptive control has lowered a pool's limits because the protected
// system reported errors, a restart must not hand it the full configured
// limits again at once: the engine records the lowered values with the
// pool's durable state after each change, and a restored pool starts from
// them and climbs back as usual while healthy. The record is best effort:
// a failed write leaves the previous one, and the change is made anyway
// (adaptive state is soft; at worst a restart starts nearer the
// configured limits).

// recorded returns the effective limits to record: the lowered values,
// or 0 for a limit at its configured value.
func (a *adaptive) recorded() (conc int64, rate float64) {
	if a.limit < a.conf {
		conc = a.limit
	}
	if a.rate < a.confRate {
		rate = a.rate
	}
	return conc, rate
}

// restore starts a restored pool with adaptive control on at the
// effective limits recorded (conc and rate; 0: not lowered), within their
// floors and configured values, and reports whether the effective rate
// changed. A lowered concurrency limit is kept aside (restored) until the
// pool applies it (applyRestored), when the recovery window ends: until
// then nothing new is granted anyway, and leases from before the restart,
// which may hold more than the lowered limit (under RevocationWait), are
// re-adopted within the configured one, as they were granted. The caller
// arms the timer that raises the limits back while healthy.
func (a *adaptive) restore(conc int64, rate float64, now time.Time) (rateChanged bool) {
	c := a.cfg
	if !c.Enabled {
		return false
	}
	if c.adaptsConcurrency() && conc > 0 && conc < a.conf {
		a.restored = max(conc, c.MinConcurrency)
	}
	if c.adaptsRate() && rate > 0 && rate < a.confRate {
		a.rate = max(rate, c.MinRate)
		rateChanged = true
	}
	if a.lowered() {
		a.control().lastChange = now
	}
	return rateChanged
}

// applyRestored lowers the effective concurrency limit to the one
// recorded before the restart, if any (and it is still lower), and
// reports whether it did.
func (a *adaptive) applyRestored(now time.Time) bool {
	r := a.restored
	a.restored = 0
	if c := a.cfg; r <= 0 || r >= a.limit || !c.Enabled || !c.adaptsConcurrency() {
		return false // nothing recorded, or the pool changed since the restart
	}
	a.limit = r
	a.control().lastChange = now
	return true
}

// restoreEffectiveLocked starts a restored pool at the effective limits
// recorded in st (adaptive.restore); a lowered concurrency limit takes
// effect at once unless the pool is recovering (applyRestoredLimitLocked).
func (p *pool) restoreEffectiveLocked(st DurableState, now time.Time) {
	if p.ad.restore(st.EffectiveConcurrency, st.EffectiveRate, now) {
		p.shr.setRate(p.ad.rate, &p.out) // no shares yet: it only learns the rate
		p.applyRateLocked(now)
	}
	if !p.rec.active() {
		p.applyRestoredLimitLocked(now)
	}
	p.ad.arm(now)
}

// applyRestoredLimitLocked applies the effective concurrency limit
// recorded before the restart (adaptive.applyRestored) and the pool's
// revocation policy to what is held.
func (p *pool) applyRestoredLimitLocked(now time.Time) {
	if p.ad.applyRestored(now) {
		p.enforceLimitLocked(now, "") // RevocationRevoke
		p.ad.arm(now)
	}
}
