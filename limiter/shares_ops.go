package limiter

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// checkWant validates a share's wanted rate; zero is allowed when zeroOK
// (a refresh that keeps the want).
func checkWant(want float64, zeroOK bool) error {
	if zeroOK && want == 0 {
		return nil
	}
	if math.IsNaN(want) || want <= 0 || want > MaxRate {
		return errorf(apierr.ErrInvalidArgument, "want %v is out of range: ask for a rate above 0 and at most %g tokens per second", want, float64(MaxRate))
	}
	if toShareUnits(want) == 0 {
		return errorf(apierr.ErrInvalidArgument, "want %v is below the smallest share, %g tokens per second", want, 1.0/shareUnits)
	}
	return nil
}

// checkShareWeight validates a share's weight (0: default or keep).
func checkShareWeight(w int64) error {
	if w < 0 || w > MaxShareWeight {
		return errorf(apierr.ErrInvalidArgument, "weight %d is out of range [1, %d] (0 means 1)", w, MaxShareWeight)
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
// Errors: apierr.ErrPoolNotFound; apierr.ErrNoRateLimit (the pool has no rate);
// apierr.ErrInvalidArgument (want, weight, ttl or client id out of range);
// apierr.ErrTooManyShares; apierr.ErrShuttingDown.
func (e *Engine) AcquireShare(req ShareRequest) (Share, error) {
	if err := checkWant(req.Want, false); err != nil {
		return Share{}, err
	}
	if err := checkShareWeight(req.Weight); err != nil {
		return Share{}, err
	}
	switch {
	case req.TTL < 0:
		return Share{}, errorf(apierr.ErrInvalidArgument, "ttl %v is negative", req.TTL)
	case len(req.ClientID) > MaxClientIDLen:
		return Share{}, errorf(apierr.ErrInvalidArgument, "client id is %d bytes; the most is %d", len(req.ClientID), MaxClientIDLen)
	}
	if req.Weight == 0 {
		req.Weight = 1
	}
	p, err := e.lockPool(req.Pool)
	if err != nil {
		return Share{}, err
	}
	if err := p.shr.allowed(); err != nil {
		p.unlock()
		return Share{}, err
	}
	ttl, err := p.cfg.leaseTTL(req.TTL)
	if err != nil {
		p.unlock()
		return Share{}, err
	}
	t := &p.shr
	if len(t.list) >= MaxSharesPerPool {
		p.stats.Rejected++
		p.unlock()
		return Share{}, errorf(apierr.ErrTooManyShares, "pool %q has %d rate shares, the most one pool may have; release shares that are no longer used, or share one per process", p.name, MaxSharesPerPool)
	}
	now := e.clock.Now()
	if err := p.reserveShareLocked(now, now.Add(ttl)); err != nil { // durable share horizon first
		p.unlock()
		return Share{}, err
	}
	s := &share{id: t.newID(), clientID: req.ClientID, want: toShareUnits(req.Want), weight: req.Weight,
		ttl: ttl, grantAt: now, expire: now.Add(ttl), owner: req.Owner, index: -1}
	t.add(s)
	t.setGrant(s, t.grantable(s)) // only what no one holds: others shrink at their refresh
	p.applyRateLocked(now)
	t.arm(s.expire, now)
	out := t.snapshot(s)
	p.unlock()
	return out, nil
}

// allowed refuses shares of a pool without a rate.
func (t *shareTable) allowed() error {
	if t.confRate == 0 {
		return errorf(apierr.ErrNoRateLimit, "pool %q has no rate limit, only a concurrency limit; rate shares divide a pool's rate: give the pool a rate, or use Acquire", t.pool)
	}
	return nil
}

// newID returns a random id no live share has.
func (t *shareTable) newID() uint64 {
	for {
		id := rand.Uint64() >> 11 // at most 2^53: exact in JSON numbers too
		if _, taken := t.byID[id]; id != 0 && !taken {
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
// Errors: apierr.ErrPoolNotFound; apierr.ErrShareNotFound (released, expired or never
// granted: the holder must stop using it); apierr.ErrNoRateLimit;
// apierr.ErrInvalidArgument; apierr.ErrShuttingDown.
func (e *Engine) RefreshShare(r ShareRefresh) (Share, error) {
	if err := checkWant(r.Want, true); err != nil {
		return Share{}, err
	}
	if err := checkShareWeight(r.Weight); err != nil {
		return Share{}, err
	}
	if r.TTL < 0 {
		return Share{}, errorf(apierr.ErrInvalidArgument, "ttl %v is negative", r.TTL)
	}
	p, err := e.lockPool(r.Pool)
	if err != nil {
		return Share{}, err
	}
	if err := p.shr.allowed(); err != nil {
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
			out := p.shr.snapshot(ns)
			p.unlock()
			return out, nil
		}
	}
	if s == nil || !s.expire.After(now) {
		if p.shr.expire(now, &p.out) {
			p.applyRateLocked(now)
		}
		err := p.shr.missingErr(r.ID)
		p.unlock()
		return Share{}, err
	}
	ttl := min(s.ttl, p.cfg.MaxLeaseTTL) // the maximum may have been lowered since
	if r.TTL > 0 {
		if ttl, err = p.cfg.leaseTTL(r.TTL); err != nil {
			p.unlock()
			return Share{}, err
		}
	}
	if err := p.reserveShareLocked(now, now.Add(ttl)); err != nil {
		p.unlock()
		return Share{}, err
	}
	shrunk := p.shr.refresh(s, &r, ttl, now, &p.out)
	p.applyRateLocked(now)
	if shrunk && p.queue.len() > 0 {
		p.dispatchLocked(now) // the bucket may refill faster now
	}
	out := p.shr.snapshot(s)
	p.unlock()
	return out, nil
}

// ReleaseShare ends a live share; its rate goes at once to the shares
// below their fair parts (pushed) and to the pool's bucket. Errors:
// apierr.ErrPoolNotFound; apierr.ErrShareNotFound; apierr.ErrShuttingDown.
func (e *Engine) ReleaseShare(pool string, id uint64) error {
	p, err := e.lockPool(pool)
	if err != nil {
		return err
	}
	s := p.shr.byID[id]
	if s == nil && p.shr.released(id) { // from before a restart
		p.unlock()
		return nil
	}
	if s == nil {
		err := p.shr.missingErr(id)
		p.unlock()
		return err
	}
	now := e.clock.Now()
	p.shr.release(s, &p.out)
	p.applyRateLocked(now)
	if p.queue.len() > 0 {
		p.dispatchLocked(now)
	}
	p.unlock()
	return nil
}

// refresh extends s to ttl from now and takes r's want, weight and owner
// (those set), then sets its grant: its target, within what the others
// leave. It reports whether s shrank; what it gave back went to the
// shares below their targets. The caller adjusts the bucket.
func (t *shareTable) refresh(s *share, r *ShareRefresh, ttl time.Duration, now time.Time, ob *outbox) (shrunk bool) {
	if w := toShareUnits(r.Want); w > 0 && w != s.want {
		s.want, t.dirty = w, true
	}
	if r.Weight > 0 && r.Weight != s.weight {
		s.weight, t.dirty = r.Weight, true
	}
	if r.Owner != nil {
		s.owner = r.Owner
	}
	s.ttl, s.expire = ttl, now.Add(ttl)
	t.expiry.fix(s.index)
	t.arm(s.expire, now)
	t.targets()
	before := s.granted
	t.setGrant(s, t.grantable(s))
	if s.granted < before {
		t.grow(ob) // what s gave back goes to those below their targets
	}
	return s.granted < before
}

// release ends s; its rate goes to the shares below their targets. The
// caller adjusts the bucket.
func (t *shareTable) release(s *share, ob *outbox) {
	t.remove(s)
	t.targets()
	t.grow(ob)
}

// missingErr explains why id is not a live share.
func (t *shareTable) missingErr(id uint64) error {
	if e, ok := t.ended.lookup(id); ok {
		return errorf(apierr.ErrShareNotFound, "share %d of pool %q expired at %s: it was not refreshed within its TTL and its rate went to others; acquire a new share", id, t.pool, e.at.UTC().Format(time.RFC3339Nano))
	}
	return errorf(apierr.ErrShareNotFound, "pool %q holds no share %d: it was released, expired long ago, or was granted before a server restart; acquire a new share", t.pool, id)
}

// expire ends every share whose ExpireTime is at or before now, pushes
// ShareExpired to their holders and gives their rate to the others. It
// reports whether any expired: the caller then adjusts the bucket.
func (t *shareTable) expire(now time.Time, ob *outbox) bool {
	n := 0
	for {
		s, ok := t.expiry.top()
		if !ok || s.expire.After(now) {
			break
		}
		t.remove(s)
		t.ended.add(s.id, EndExpired, s.expire)
		t.push(ob, ShareExpired, s)
		n++
	}
	if n > 0 {
		t.targets()
		t.grow(ob)
	}
	return n > 0
}

// fired notes that the expiry timer went off (the pool calls it under its
// lock).
func (t *shareTable) fired() { t.timerAt = 0 }

// arm makes sure the expiry timer fires no later than at.
func (t *shareTable) arm(at, now time.Time) {
	if t.timerAt != 0 && at.UnixNano() >= t.timerAt {
		return
	}
	t.timerAt = at.UnixNano()
	if t.timer == nil {
		t.timer = t.clock.AfterFunc(at.Sub(now), t.timers.sharesFired)
	} else {
		t.timer.Reset(at.Sub(now))
	}
}

// stop stops the share expiry timer and the shares' recovery window's
// for good (pool deleted, engine closed).
func (t *shareTable) stop() {
	if t.rec != nil && t.rec.timer != nil {
		t.rec.timer.Stop()
	}
	if t.timer != nil {
		t.timer.Stop()
	}
	t.timerAt = 0
}

// status fills in the share holders and the rate they hold.
func (t *shareTable) status(s *PoolStatus, _ time.Time) {
	s.ShareHolders = int64(len(t.list))
	s.SharesGranted = t.sharedRate()
}

// Shares returns a snapshot of a pool's live shares, in grant order.
// Errors: apierr.ErrPoolNotFound.
func (e *Engine) Shares(pool string) ([]Share, error) {
	p, err := e.lockPool(pool)
	if err != nil {
		return nil, err
	}
	defer p.unlock()
	out := make([]Share, 0, len(p.shr.list))
	for _, s := range p.shr.list {
		out = append(out, p.shr.snapshot(s))
	}
	return out, nil
}

// noRefillErr explains a Take of tokens refused because shares hold the
// whole rate: the pool's bucket does not refill.
func (t *shareTable) noRefillErr(tokens int64) error {
	return errorf(apierr.ErrRateLimited, "pool %q grants its whole rate (%g per second) to %d rate shares now, so there are no tokens for takes of %d; retry after shares are given back, or lower the shares' wants", t.pool, t.rate, len(t.list), tokens)
}
