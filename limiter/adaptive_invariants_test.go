package limiter

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// checkAdaptiveLocked verifies the invariants of the effective limits and
// of rate shares (called by checkLocked, under the pool's lock):
//   - without adaptive control the effective limits are the configured
//     ones; with it, each adapted limit is within [floor, configured] and
//     each other one is the configured value;
//   - the shares' granted rates add up to the table's sum, which is within
//     the effective rate (exactly, in share units); each is within its
//     want; the table's list, map and heap agree; no live share is past
//     its expiry once the clock's due timers have run;
//   - the bucket refills at the effective rate less the shares;
//   - the parts' copies of the pool's configuration and effective rate
//     are the pool's.
func (p *pool) checkAdaptiveLocked(now time.Time) error {
	c, a := p.cfg.Adaptive, p.ad
	switch {
	case !c.Enabled && (a.limit != p.cfg.ConcurrencyLimit || a.rate != p.cfg.Rate):
		return fmt.Errorf("adaptive off but effective limit %d rate %v differ from configured %d, %v", a.limit, a.rate, p.cfg.ConcurrencyLimit, p.cfg.Rate)
	case c.adaptsConcurrency() && p.cfg.ConcurrencyLimit > 0 && (a.limit < c.MinConcurrency || a.limit > p.cfg.ConcurrencyLimit):
		return fmt.Errorf("effective limit %d outside [%d, %d]", a.limit, c.MinConcurrency, p.cfg.ConcurrencyLimit)
	case !c.adaptsConcurrency() && a.limit != p.cfg.ConcurrencyLimit:
		return fmt.Errorf("concurrency not adapted but effective limit %d != configured %d", a.limit, p.cfg.ConcurrencyLimit)
	case c.adaptsRate() && p.cfg.Rate > 0 && (a.rate < c.MinRate || a.rate > p.cfg.Rate):
		return fmt.Errorf("effective rate %v outside [%v, %v]", a.rate, c.MinRate, p.cfg.Rate)
	case !c.adaptsRate() && a.rate != p.cfg.Rate:
		return fmt.Errorf("rate not adapted but effective rate %v != configured %v", a.rate, p.cfg.Rate)
	}
	t := &p.shr
	// The parts' copies of the configuration and of the effective rate
	// follow the pool's.
	switch {
	case a.cfg != c || a.conf != p.cfg.ConcurrencyLimit || a.confRate != p.cfg.Rate:
		return fmt.Errorf("adaptive part configured with %+v, %d, %v; the pool with %+v, %d, %v", a.cfg, a.conf, a.confRate, c, p.cfg.ConcurrencyLimit, p.cfg.Rate)
	case t.rate != a.rate || t.confRate != p.cfg.Rate || t.burst != p.cfg.Burst || t.safeRate != p.cfg.SafeRate || t.pool != p.name:
		return fmt.Errorf("share table has rate %v (configured %v, burst %d, safe %v); the pool %v (%v, %d, %v)", t.rate, t.confRate, t.burst, t.safeRate, a.rate, p.cfg.Rate, p.cfg.Burst, p.cfg.SafeRate)
	case p.mk.conf != p.cfg.ConcurrencyLimit || p.mk.Marks != p.cfg.EffectiveMarks():
		return fmt.Errorf("marks %+v for limit %d; the pool's are %+v for %d", p.mk.Marks, p.mk.conf, p.cfg.EffectiveMarks(), p.cfg.ConcurrencyLimit)
	}
	if len(t.list) != len(t.byID) || len(t.list) != len(t.expiry) {
		return fmt.Errorf("shares: list %d, map %d, heap %d", len(t.list), len(t.byID), len(t.expiry))
	}
	if len(t.list) > MaxSharesPerPool {
		return fmt.Errorf("%d shares, above the bound %d", len(t.list), MaxSharesPerPool)
	}
	var sum int64
	for _, s := range t.list {
		sum += s.granted
		switch {
		case t.byID[s.id] != s:
			return fmt.Errorf("share %d not in the map", s.id)
		case s.index < 0 || s.index >= len(t.expiry) || t.expiry[s.index] != s:
			return fmt.Errorf("share %d not at its heap index", s.id)
		case s.granted < 0 || s.granted > s.want:
			return fmt.Errorf("share %d granted %d outside [0, want %d]", s.id, s.granted, s.want)
		case !s.expire.After(now):
			return fmt.Errorf("share %d live past its expiry %v (now %v)", s.id, s.expire, now)
		}
	}
	if sum != t.granted {
		return fmt.Errorf("shares granted %d but the table says %d", sum, t.granted)
	}
	// After a restart, the phantom rate is what
	// shares from before it may still spend: it is granted to no one.
	phantom := t.rec.spending()
	if capacity := max(0, toShareUnits(a.rate)-phantom); sum > capacity {
		return fmt.Errorf("shares granted %v/s exceed the effective rate %v/s less the phantom %v/s", fromShareUnits(sum), a.rate, fromShareUnits(phantom))
	}
	if t.rec != nil && t.rec.until.IsZero() {
		return fmt.Errorf("phantom rate %v/s outside a share recovery window", fromShareUnits(phantom))
	}
	if p.bucket != nil {
		want := math.Max(0, a.rate-fromShareUnits(sum)-fromShareUnits(phantom))
		if got := float64(p.bucket.Limit()); math.Abs(got-want) > 1.0/shareUnits {
			return fmt.Errorf("bucket refills at %v/s; want effective rate %v less shares %v", got, a.rate, fromShareUnits(sum))
		}
	}
	return nil
}

// randomOutcome is a random outcome, bad more often than not, so that
// adaptive pools are cut as well as raised.
func randomOutcome(rng *rand.Rand) Outcome {
	return Outcome(1 + rng.IntN(3))
}

// randomReports reports random outcomes for pool: one at a time, or a
// batch.
func randomReports(te *testEngine, rng *rand.Rand, pool string) {
	if rng.IntN(2) == 0 {
		_ = te.RecordOutcome(pool, randomOutcome(rng), time.Duration(rng.IntN(300))*time.Millisecond)
		return
	}
	r := OutcomeReport{Pool: pool, Successes: rng.Int64N(10), Errors: rng.Int64N(10), Timeouts: rng.Int64N(5)}
	if n := r.Successes + r.Errors + r.Timeouts; n > 0 && rng.IntN(2) == 0 {
		r.LatencyCount = 1 + rng.Int64N(n)
		r.LatencyMax = time.Duration(1+rng.IntN(500)) * time.Millisecond
		r.LatencySum = r.LatencyMax * time.Duration(r.LatencyCount)
	}
	_ = te.Report([]OutcomeReport{r})
}

// randomShareOp acquires, refreshes or releases a rate share of cfg's pool
// and returns the shares the test holds.
func randomShareOp(te *testEngine, rng *rand.Rand, cfg PoolConfig, held []Share) []Share {
	switch op := rng.IntN(3); {
	case op == 0 || len(held) == 0:
		if sh, err := te.AcquireShare(ShareRequest{Pool: cfg.Name, Want: float64(1 + rng.IntN(50)), Weight: rng.Int64N(4),
			TTL: time.Duration(1+rng.IntN(10)) * time.Second}); err == nil {
			held = append(held, sh)
		}
	case op == 1:
		sh := held[rng.IntN(len(held))]
		var want float64
		if rng.IntN(2) == 0 {
			want = float64(1 + rng.IntN(50))
		}
		_, _ = te.RefreshShare(ShareRefresh{Pool: sh.Pool, ID: sh.ID, Want: want}) // may have expired
	default:
		i := rng.IntN(len(held))
		_ = te.ReleaseShare(held[i].Pool, held[i].ID)
		held = append(held[:i], held[i+1:]...)
	}
	return held
}
