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

// persistEffectiveLocked records the effective limits if they differ
// from what is recorded: the lowered values, or 0 for a limit at its
// configured value.
func (p *pool) persistEffectiveLocked() {
	if p.dur.env.persister == nil {
		return
	}
	conc, rate := int64(0), 0.0
	if p.ad.limit < p.cfg.ConcurrencyLimit {
		conc = p.ad.limit
	}
	if p.ad.rate < p.cfg.Rate {
		rate = p.ad.rate
	}
	st := p.dur.state
	if st.EffectiveConcurrency == conc && st.EffectiveRate == rate {
		return
	}
	st.EffectiveConcurrency, st.EffectiveRate = conc, rate
	_ = p.dur.save(p.dur.saved(nil, st), "record the adaptive limits of pool "+quote(p.name)) // best effort
}

// restoreEffectiveLocked starts a restored pool with adaptive control on
// at the effective limits recorded, within their floors and configured
// values, and arms the timer that raises them back while healthy. A
// lowered concurrency limit takes effect when the recovery window ends
// (applyRestoredLimitLocked): until then nothing new is granted anyway,
// and leases from before the restart, which may hold more than the
// lowered limit (under RevocationWait), are re-adopted within the
// configured one, as they were granted.
func (p *pool) restoreEffectiveLocked(st DurableState, now time.Time) {
	c := p.cfg.Adaptive
	if !c.Enabled {
		return
	}
	if c.adaptsConcurrency() && st.EffectiveConcurrency > 0 && st.EffectiveConcurrency < p.cfg.ConcurrencyLimit {
		p.ad.restored = max(st.EffectiveConcurrency, c.MinConcurrency)
		if !p.rec.active() {
			p.applyRestoredLimitLocked(now)
		}
	}
	if c.adaptsRate() && st.EffectiveRate > 0 && st.EffectiveRate < p.cfg.Rate {
		p.ad.rate = max(st.EffectiveRate, c.MinRate)
		p.applyRateLocked(now)
	}
	if p.loweredLocked() {
		p.ad.lastChange = now
		p.armAdaptiveTimerLocked(now)
	}
}

// applyRestoredLimitLocked lowers the effective concurrency limit to the
// one recorded before the restart, if any (and it is still lower), and
// applies the pool's revocation policy to what is held.
func (p *pool) applyRestoredLimitLocked(now time.Time) {
	r := p.ad.restored
	p.ad.restored = 0
	if c := p.cfg.Adaptive; r <= 0 || r >= p.ad.limit || !c.Enabled || !c.adaptsConcurrency() {
		return // nothing recorded, or the pool changed since the restart
	}
	p.ad.limit = r
	p.ad.lastChange = now
	p.enforceLimitLocked(now, "") // RevocationRevoke
	p.armAdaptiveTimerLocked(now)
}
