package limiter

import "time"

// GrantWrites reports whether an acquire of weight permits from the named
// pool with ttl (0: the pool's default), granted now, would first have to
// write the pool's reservations and wait for that write (a pool's first
// grant, or one past its written lease horizon, token ceiling or
// held-weight bound). It is a hint for a caller that serves many requests
// in one goroutine, so that it can make such a grant apart: the pool may
// change before the acquire is made. It is false without a Persister, and
// for a pool that does not exist or a ttl out of range (the acquire then
// fails at once).
func (e *Engine) GrantWrites(pool string, weight int64, ttl time.Duration) bool {
	if e.persister == nil {
		return false
	}
	p, err := e.lockPool(pool)
	if err != nil {
		return false
	}
	defer p.unlock()
	if ttl, err = p.cfg.leaseTTL(ttl); err != nil {
		return false
	}
	now := e.clock.Now()
	return !p.dur.reserved(p.lastToken, p.rec.weightHeld(p.held), now, now.Add(ttl), weight)
}
