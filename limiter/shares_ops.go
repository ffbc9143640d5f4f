package limiter

import (
	"math"
	"math/rand/v2"
	"time"
)

// checkWant validates a share's wanted rate; zero is allowed when zeroOK
// (a refresh that keeps the want).
func checkWant(want float64, zeroOK bool) error {
	if zeroOK && want == 0 {
		return nil
	}
	if math.IsNaN(want) || want <= 0 || want > MaxRate {
		return errorf(ErrInvalidArgument, "want %v is out of range: ask for a rate above 0 and at most %g tokens per second", want, float64(MaxRate))
	}
	if toShareUnits(want) == 0 {
		return errorf(ErrInvalidArgument, "want %v is below the smallest share, %g tokens per second", want, 1.0/shareUnits)
	}
	return nil
}

// checkShareWeight validates a share's weight (0: default or keep).
func checkShareWeight(w int64) error {
	if w < 0 || w > MaxShareWeight {
		return errorf(ErrInvalidArgument, "weight %d is out of range [1, %d] (0 means 1)", w, MaxShareWeight)
	}
	return nil
}

// AcquireShare grants a share of req.Pool's effective rate: at most
// req.Want, at most the share's fair part (weighted max-min division of
// the effective rate among all the pool's shares, by their wants), and at
// most what no other share holds now. It never waits: a share granted
// less than its fair part (even 0) grows as others give rate back, and its
// holder learns of it through Options.OnShareUpdate or at its next
// refresh. The holder must refresh the share every RefreshInterval; a
// share that is not refreshed by its ExpireTime expires.
//
// Errors: ErrPoolNotFound; ErrNoRateLimit (the pool has no rate);
// ErrInvalidArgument (want, weight, ttl or client id out of range);
// ErrTooManyShares; ErrShuttingDown.
func (e *Engine) AcquireShare(req ShareRequest) (Share, error) {
	if err := checkWant(req.Want, false); err != nil {
		return Share{}, err
	}
	if err := checkShareWeight(req.Weight); err != nil {
		return Share{}, err
	}
	switch {
	case req.TTL < 0:
		return Share{}, errorf(ErrInvalidArgument, "ttl %v is negative", req.TTL)
	case len(req.ClientID) > MaxClientIDLen:
		return Share{}, errorf(ErrInvalidArgument, "client id is %d bytes; the most is %d", len(req.ClientID), MaxClientIDLen)
	}
	if req.Weight == 0 {
		req.Weight = 1
	}
	p, err := e.lockPool(req.Pool)
	if err != nil {
		return Share{}, err
	}
	if err := p.sharesAllowedLocked(); err != nil {
		p.unlock()
		return Share{}, err
	}
	ttl, err := p.resolveTTLLocked(req.TTL)
	if err != nil {
		p.unlock()
		return Share{}, err
	}
	t := &p.shr
	if len(t.list) >= MaxSharesPerPool {
		p.stats.Rejected++
		p.unlock()
		return Share{}, errorf(ErrTooManyShares, "pool %q has %d rate shares, the most one pool may have; release shares that are no longer used, or share one per process", p.name, MaxSharesPerPool)
	}
	now := e.clock.Now()
	if err := p.reserveShareLocked(now, now.Add(ttl)); err != nil { // durable share horizon first
		p.unlock()
		return Share{}, err
	}
	if t.byID == nil {
		t.byID = make(map[uint64]*share)
	}
	s := &share{id: p.newShareIDLocked(), clientID: req.ClientID, want: toShareUnits(req.Want), weight: req.Weight,
		ttl: ttl, grantAt: now, expire: now.Add(ttl), owner: req.Owner, index: -1}
	t.byID[s.id] = s
	t.list = append(t.list, s)
	t.expiry.push(s)
	t.dirty = true
	p.targetsLocked()
	p.setGrantLocked(s, p.grantableLocked(s)) // only what no one holds: others shrink at their refresh
	p.applyRateLocked(now)
	p.armShareTimerLocked(s.expire, now)
	out := p.shareSnapshotLocked(s)
	p.unlock()
	return out, nil
}

// sharesAllowedLocked refuses shares of a pool without a rate.
func (p *pool) sharesAllowedLocked() error {
	if p.cfg.Rate == 0 {
		return errorf(ErrNoRateLimit, "pool %q has no rate limit, only a concurrency limit; rate shares divide a pool's rate: give the pool a rate, or use Acquire", p.name)
	}
	return nil
}

// newShareIDLocked returns a random id no live share of p has.
func (p *pool) newShareIDLocked() uint64 {
	for {
		id := rand.Uint64() >> 11 // at most 2^53: exact in JSON numbers too
		if _, taken := p.shr.byID[id]; id != 0 && !taken {
			return id
		}
	}
}

// RefreshShare extends a live share to its TTL from now (r.TTL replaces
// it when set), replaces its want and weight when set, and returns its
// new grant: its fair part, within what the other shares leave. A share
// above its fair part shrinks, and what it gives back goes at once to
// shares below theirs (pushed through Options.OnShareUpdate). A share
// whose ExpireTime has passed cannot be refreshed.
//
// Errors: ErrPoolNotFound; ErrShareNotFound (released, expired or never
// granted: the holder must stop using it); ErrNoRateLimit;
// ErrInvalidArgument; ErrShuttingDown.
func (e *Engine) RefreshShare(r ShareRefresh) (Share, error) {
	if err := checkWant(r.Want, true); err != nil {
		return Share{}, err
	}
	if err := checkShareWeight(r.Weight); err != nil {
		return Share{}, err
	}
	if r.TTL < 0 {
		return Share{}, errorf(ErrInvalidArgument, "ttl %v is negative", r.TTL)
	}
	p, err := e.lockPool(r.Pool)
	if err != nil {
		return Share{}, err
	}
	if err := p.sharesAllowedLocked(); err != nil {
		p.unlock()
		return Share{}, err
	}
	now := e.clock.Now()
	s := p.shr.byID[r.ID]
	if s == nil {
		ns, err := p.readoptShareLocked(&r, now) // a share from before a restart
		if err != nil {
			p.unlock()
			return Share{}, err
		}
		if ns != nil {
			out := p.shareSnapshotLocked(ns)
			p.unlock()
			return out, nil
		}
	}
	if s == nil || !s.expire.After(now) {
		p.expireSharesLocked(now)
		err := p.missingShareErrLocked(r.ID)
		p.unlock()
		return Share{}, err
	}
	ttl := min(s.ttl, p.cfg.MaxLeaseTTL) // the maximum may have been lowered since
	if r.TTL > 0 {
		if ttl, err = p.resolveTTLLocked(r.TTL); err != nil {
			p.unlock()
			return Share{}, err
		}
	}
	if err := p.reserveShareLocked(now, now.Add(ttl)); err != nil {
		p.unlock()
		return Share{}, err
	}
	if w := toShareUnits(r.Want); w > 0 && w != s.want {
		s.want, p.shr.dirty = w, true
	}
	if r.Weight > 0 && r.Weight != s.weight {
		s.weight, p.shr.dirty = r.Weight, true
	}
	if r.Owner != nil {
		s.owner = r.Owner
	}
	s.ttl, s.expire = ttl, now.Add(ttl)
	p.shr.expiry.fix(s.index)
	p.armShareTimerLocked(s.expire, now)
	p.targetsLocked()
	before := s.granted
	p.setGrantLocked(s, p.grantableLocked(s))
	if s.granted < before {
		p.growSharesLocked() // what s gave back goes to those below their targets
	}
	p.applyRateLocked(now)
	if s.granted < before && len(p.waiters) > 0 {
		p.dispatchLocked(now) // the bucket may refill faster now
	}
	out := p.shareSnapshotLocked(s)
	p.unlock()
	return out, nil
}

// ReleaseShare ends a live share; its rate goes at once to the shares
// below their fair parts (pushed) and to the pool's bucket. Errors:
// ErrPoolNotFound; ErrShareNotFound; ErrShuttingDown.
func (e *Engine) ReleaseShare(pool string, id uint64) error {
	p, err := e.lockPool(pool)
	if err != nil {
		return err
	}
	s := p.shr.byID[id]
	if s == nil && p.releasedShareLocked(id) { // from before a restart
		p.unlock()
		return nil
	}
	if s == nil {
		err := p.missingShareErrLocked(id)
		p.unlock()
		return err
	}
	now := e.clock.Now()
	p.removeShareLocked(s)
	p.targetsLocked()
	p.growSharesLocked()
	p.applyRateLocked(now)
	if len(p.waiters) > 0 {
		p.dispatchLocked(now)
	}
	p.unlock()
	return nil
}

// missingShareErrLocked explains why id is not a live share of the pool.
func (p *pool) missingShareErrLocked(id uint64) error {
	if t, ok := p.shr.ended.lookup(id); ok {
		return errorf(ErrShareNotFound, "share %d of pool %q expired at %s: it was not refreshed within its TTL and its rate went to others; acquire a new share", id, p.name, t.at.UTC().Format(time.RFC3339Nano))
	}
	return errorf(ErrShareNotFound, "pool %q holds no share %d: it was released, expired long ago, or was granted before a server restart; acquire a new share", p.name, id)
}

// expireSharesLocked ends every share whose ExpireTime is at or before
// now, pushes ShareExpired to their holders and gives their rate to the
// others. It does not dispatch.
func (p *pool) expireSharesLocked(now time.Time) {
	n := 0
	for {
		s, ok := p.shr.expiry.top()
		if !ok || s.expire.After(now) {
			break
		}
		p.removeShareLocked(s)
		p.shr.ended.add(s.id, EndExpired, s.expire)
		p.pushShareLocked(ShareExpired, s)
		n++
	}
	if n > 0 {
		p.targetsLocked()
		p.growSharesLocked()
		p.applyRateLocked(now)
	}
}

// armShareTimerLocked makes sure the share expiry timer fires no later
// than at.
func (p *pool) armShareTimerLocked(at, now time.Time) {
	t := &p.shr
	if !t.timerAt.IsZero() && !at.Before(t.timerAt) {
		return
	}
	t.timerAt = at
	if t.timer == nil {
		t.timer = p.e.clock.AfterFunc(at.Sub(now), p.onShareTimer)
	} else {
		t.timer.Reset(at.Sub(now))
	}
}

// onShareTimer expires the shares that are due and re-arms for the next.
func (p *pool) onShareTimer() {
	p.mu.Lock()
	p.shr.timerAt = time.Time{}
	if p.deleted || !p.e.acting() {
		p.unlock()
		return
	}
	now := p.e.clock.Now()
	p.expireSharesLocked(now)
	if next, ok := p.shr.expiry.top(); ok {
		p.armShareTimerLocked(next.expire, now)
	}
	if len(p.waiters) > 0 {
		p.dispatchLocked(now)
	}
	p.unlock()
}

// stop stops the share expiry timer and the shares' recovery window's
// for good (pool deleted, engine closed).
func (t *shareTable) stop() {
	if t.rec.timer != nil {
		t.rec.timer.Stop()
	}
	if t.timer != nil {
		t.timer.Stop()
	}
	t.timerAt = time.Time{}
}

// status fills in the share holders and the rate they hold.
func (t *shareTable) status(s *PoolStatus, _ time.Time) {
	s.ShareHolders = int64(len(t.list))
	s.SharesGranted = fromShareUnits(t.granted)
}

// Shares returns a snapshot of a pool's live shares, in grant order.
// Errors: ErrPoolNotFound.
func (e *Engine) Shares(pool string) ([]Share, error) {
	p, err := e.lockPool(pool)
	if err != nil {
		return nil, err
	}
	defer p.unlock()
	out := make([]Share, 0, len(p.shr.list))
	for _, s := range p.shr.list {
		out = append(out, p.shareSnapshotLocked(s))
	}
	return out, nil
}

// noRefillLocked reports whether the pool's bucket does not refill because
// rate shares hold the whole effective rate.
func (p *pool) noRefillLocked() bool { return p.bucket != nil && p.bucket.Limit() <= 0 }

// noRefillErrLocked explains a Take refused because shares hold the whole
// rate.
func (p *pool) noRefillErrLocked(tokens int64) error {
	return errorf(ErrRateLimited, "pool %q grants its whole rate (%g per second) to %d rate shares now, so there are no tokens for takes of %d; retry after shares are given back, or lower the shares' wants", p.name, p.ad.rate, len(p.shr.list), tokens)
}
