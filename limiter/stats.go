package limiter

import "time"

// PoolStats is one pool's statistics, as Engine.PoolStats returns them.
type PoolStats struct {
	// Config with defaults filled in (marks stay 0 for their defaults).
	Config PoolConfig
	// Status: the live gauges, the counters since the pool was created in
	// this engine, effective limits and Utilisation.
	Status PoolStatus
	// WaitTimes summarizes the waits of the grants over the last
	// WaitWindow.
	WaitTimes WaitTimes
	// RateUtilisation is the fraction of the pool's rate used over the
	// wait-time window: the rate tokens granted in it (by Acquire and
	// Take) over what the bucket refills in it at its rate now (the
	// effective rate less the rate shares, whose tokens their holders
	// spend without the engine). It may pass 1 by the burst, or after
	// the rate was lowered. 0 for a pool without a rate, or whose whole
	// rate is held as shares. The window is the one of WaitTimes (the
	// time since the pool was created or restored, when that is shorter).
	RateUtilisation float64
	// Utilisation is Status.Utilisation (held / effective concurrency
	// limit, or / instances) for a pool with a concurrency limit or
	// instances, and RateUtilisation for a pool with only a rate.
	Utilisation float64
	// Marks are the pool's event marks in effect.
	Marks Marks
}

// PoolStats returns a pool's statistics, read under the pool's lock; its
// cost is one pass over the pool's fixed wait-time buckets (WaitSlots ×
// 145 counters), however many grants they count. Errors: apierr.ErrPoolNotFound
// (or apierr.ErrInvalidArgument for a bad name), apierr.ErrShuttingDown.
func (e *Engine) PoolStats(name string) (PoolStats, error) {
	p, err := e.lockPool(name)
	if err != nil {
		return PoolStats{}, err
	}
	defer p.unlock()
	return p.statsLocked(), nil
}

// ListPoolStats returns the statistics of up to limit pools whose names
// sort after `after`, in name order, and whether more follow. A limit
// below 1 means 1.
func (e *Engine) ListPoolStats(after string, limit int) ([]PoolStats, bool) {
	ps, more := e.poolsAfter(after, limit)
	out := make([]PoolStats, 0, len(ps))
	for _, p := range ps {
		p.mu.Lock()
		if !p.deleted {
			out = append(out, p.statsLocked())
		}
		p.unlock()
	}
	return out, more
}

func (p *pool) statsLocked() PoolStats {
	now := p.e.clock.Now()
	st := PoolStats{Config: p.cfg, Status: p.statusLocked(now), WaitTimes: p.waits.summary(now), Marks: p.mk.Marks}
	if p.cfg.Rate > 0 {
		st.RateUtilisation = p.waits.rateUtilisation(now, p.shr.exactRate(), time.Unix(0, p.born))
	}
	st.Utilisation = st.Status.Utilisation
	if p.cfg.ConcurrencyLimit == 0 && p.res == nil { // a resource pool's capacity is its instances
		st.Utilisation = st.RateUtilisation
	}
	return st
}
