package limiter

import (
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// recovery is a pool's recovery window after a restart (see the package
// documentation and docs/recovery.md). It is guarded by the pool's mutex; the zero value
// means "not recovering". Only until, which the hot path reads, is kept in
// every pool; the rest exists during a window only.
type recovery struct {
	// guards: the pool has held capacity that surviving holders may still
	// occupy (a concurrency limit, or instances), so the window holds back
	// new grants (configure).
	guards  bool
	*window // nil when the pool is not recovering
}

// window is the state of a recovery window.
type window struct {
	// until is when the window ends: no lease granted before the restart
	// can be live after it.
	until time.Time
	// restart is when the pool was restored.
	restart time.Time
	// ceiling is the highest fencing token that may have been issued
	// before the restart: only a token up to it that the live set says may
	// be live (and the engine does not know) can be re-adopted.
	ceiling uint64
	// unknown bounds the weight that leases from before the restart not
	// re-adopted yet may hold (DurableState.HeldBound less what was
	// re-adopted), unless unbounded (the bound was not kept).
	unknown   int64
	unbounded bool
	timer     Timer
}

// unknownHeld is the weight leases from before a restart, not re-adopted
// yet, may hold: 0 outside a recovery window.
func (r *recovery) unknownHeld() int64 {
	if r.window == nil || r.unbounded {
		return 0
	}
	return r.unknown
}

// unboundedHeld reports a recovery window with no bound on that weight.
func (r *recovery) unboundedHeld() bool { return r.window != nil && r.unbounded }

// weightHeld is what the pool's leases may hold, with held held by the
// live ones: held, and what leases from before the restart not re-adopted
// yet may hold.
func (r *recovery) weightHeld(held int64) weightHeld {
	return weightHeld{held: held + r.unknownHeld(), bounded: !r.unboundedHeld()}
}

// active reports whether the pool is in its recovery window.
func (r *recovery) active() bool { return r.window != nil }

// configure says whether the pool has held capacity to protect: a
// concurrency limit, or instances.
func (r *recovery) configure(guards bool) { r.guards = guards }

// blocks reports whether the recovery window holds back new grants: it
// does in a pool with a concurrency limit, whose capacity surviving
// holders may still occupy, and in an active or passive pool, whose
// instances they may still hold. A pool with only a rate has no held
// capacity to protect and grants at once (its bucket starts empty instead).
func (r *recovery) blocks() bool { return r.active() && r.guards }

// begin opens a window that ends at until, after a restart at now. The
// highest token issued before it was ceiling, and leases from before it
// hold at most held (negative: unknown); with unbounded, that weight is
// not bounded anyway (no concurrency limit, or instances).
func (r *recovery) begin(now, until time.Time, ceiling uint64, held int64, unbounded bool) {
	r.window = &window{until: until, restart: now, ceiling: ceiling, unknown: held, unbounded: unbounded || held < 0}
}

// end closes the window: every lease from before the restart that was
// not re-adopted is over.
func (r *recovery) end() { r.window = nil }

// readopted counts weight, re-adopted, as held: no longer unknown.
func (r *recovery) readopted(weight int64) { r.unknown = max(0, r.unknown-weight) }

// mayName reports whether token may name a lease granted before the
// restart, during the window (the caller knows the engine does not have
// it).
func (r *recovery) mayName(token uint64) bool {
	return r.active() && token != 0 && token <= r.ceiling
}

// refusal is the error of a no-wait acquire in pool refused because of
// the window, at now, with held of the effective concurrency limit held.
func (r *recovery) refusal(pool string, held, limit int64, now time.Time) error {
	left := r.until.Sub(now)
	grants := "it grants only to holders renewing leases from before the restart"
	if !r.unbounded {
		grants = "leases from before the restart may hold up to " + itoa(r.unknown) + " of its limit " + itoa(limit) + " (held now " + itoa(held) + "), so it grants only what fits beside them"
	}
	return &apierr.Error{Code: apierr.CodeUnavailable, Reason: apierr.ReasonRecovering, RetryAfter: left,
		Message: "pool " + quote(pool) + " is recovering from a server restart until " + r.until.UTC().Format(time.RFC3339Nano) +
			" (" + left.Round(time.Millisecond).String() + " from now): until then " + grants + "; retry after that, or acquire with a wait to join the queue"}
}

// RestorePool re-creates a pool from what a Persister recorded, after a
// restart, without writing anything. The pool continues its fencing tokens
// above saved.State.TokenCeiling. If a lease granted before the restart
// may still be live, that is, until the earlier of LeaseHorizon and now +
// TTLBound, the pool is in its recovery window:
//   - a Renew through RenewOrReadopt of a lease the engine does not know,
//     with a fencing token up to the old ceiling, re-adopts it with the
//     same token if it fits under the concurrency limit;
//   - a Release of such a lease succeeds (it was held safely until then);
//   - new grants wait, in a pool with a concurrency limit, until the
//     window ends (a no-wait acquire fails with apierr.ErrRecovering); then the
//     queue is served as usual.
//
// A restored pool with a rate starts with an empty bucket, so that a
// restart never grants more than rate × window + burst. Errors:
// apierr.ErrInvalidArgument, apierr.ErrPoolExists, apierr.ErrShuttingDown.
func (e *Engine) RestorePool(saved SavedPool) (PoolInfo, error) {
	cfg := saved.Config.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return PoolInfo{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed.Load() {
		return PoolInfo{}, errorf(apierr.ErrShuttingDown, "the server is shutting down")
	}
	if e.pools.get(cfg.Name) != nil {
		return PoolInfo{}, errorf(apierr.ErrPoolExists, "pool %q already exists; it cannot be restored over", cfg.Name)
	}
	now := e.clock.Now()
	p := newPool(e, cfg, now, 0) // its tokens come from saved.State below
	p.mu.Lock()
	defer p.mu.Unlock() // under e.mu: nothing to deliver from a new pool
	if !saved.CreateTime.IsZero() {
		p.createTime = saved.CreateTime
	}
	if !saved.UpdateTime.IsZero() {
		p.updateTime = saved.UpdateTime.UnixNano()
	}
	st := saved.State
	if st.TTLBound <= 0 && !st.LeaseHorizon.IsZero() {
		st.TTLBound = cfg.MaxLeaseTTL // not recorded: assume the longest
	}
	p.dur.reset(st)
	p.susp.on = saved.Suspended
	if p.res != nil && len(saved.Resources) > 0 { // an active pool's instances
		rs, err := checkSavedResources(saved.Resources)
		if err != nil {
			return PoolInfo{}, err
		}
		p.res.addAll(rs, now)
	}
	p.lastToken = st.TokenCeiling
	if p.bucket != nil {
		p.bucket.AllowN(now, int(cfg.Burst)) // start empty: the old bucket may have been spent
	}
	until := windowEnd(st.LeaseHorizon, st.TTLBound, now)
	p.dur.live.restore(saved.LiveChunks, st, st.TokenCeiling, until.After(now))
	if until.After(now) {
		for _, e := range st.LegacyEnded { // a record from before the live set was kept
			if e.Expiry.After(now) && e.Token > st.LiveMark && e.Token <= st.TokenCeiling {
				p.dur.live.end(e.Token)
			}
		}
		p.rec.begin(now, until, st.TokenCeiling, st.HeldBound, cfg.ConcurrencyLimit == 0 || p.res != nil)
		p.rec.timer = e.clock.AfterFunc(until.Sub(now), p.onRecoveryEnd)
	}
	p.restoreEffectiveLocked(st, now)
	if p.shr.restore(st, now) {
		p.applyRateLocked(now)
	}
	e.pools.add(p)
	return p.infoLocked(now), nil
}

// ClockStepTolerance is how far the wall clock may step forward, at any
// moment before a restart, without shortening a recovery window. Horizons
// are written as wall time but kept in memory on the monotonic clock, so a
// forward step of J makes a saved horizon look J earlier than the leases it
// covers really end; a window therefore ends at the saved horizon plus this
// tolerance, and never later than restart + the TTL bound, which bounds
// every lease from before the restart by the time that really passes. A
// backward step makes a horizon look later: it can only lengthen a window,
// within that same bound.
const ClockStepTolerance = 10 * time.Minute

// windowEnd is when a recovery window after a restart at now ends, given a
// saved horizon (the zero time: nothing to recover) and the bound on the
// TTLs granted before it: no window when it is already over.
func windowEnd(horizon time.Time, ttlBound time.Duration, now time.Time) time.Time {
	if horizon.IsZero() {
		return time.Time{}
	}
	until := now.Add(ttlBound)
	if h := horizon.Add(ClockStepTolerance); h.Before(until) {
		until = h
	}
	return until
}

// onRecoveryEnd ends the pool's recovery window: every lease from before
// the restart that was not re-adopted is over, so the queue is served.
func (p *pool) onRecoveryEnd() {
	p.mu.Lock()
	defer p.unlock()
	if p.deleted || !p.rec.active() || !p.e.acting() {
		return
	}
	p.rec.end()
	p.dur.live.resolveAll(p.leases) // the leases not re-adopted are over
	p.dur.liveChanged()
	now := p.e.clock.Now()
	p.applyRestoredLimitLocked(now)
	if p.res != nil { // leases on instances whose providers did not offer them again
		for _, l := range p.res.awaitedHolders() {
			p.out.ended = append(p.out.ended, p.revokeLocked(l, "its instance was not offered again by its provider within the recovery window after the server restarted", "", now))
		}
	}
	p.dispatchLocked(now)
	p.dur.lowerHeldBound(p.rec.weightHeld(p.held), now, 0) // the old leases not re-adopted are over
}

// admits holds back grants while the window does (blocks) and the
// weight leases from before the restart may hold is not bounded. When it
// is, the pool counts it as held (unknownHeld): the effective concurrency
// limit's gate holds back what would not fit beside it.
func (r *recovery) admits(_, _ int64, _ time.Time) bool {
	return !r.blocks() || !r.unbounded
}

// describe says until when the window holds back grants.
func (r *recovery) describe(int64, time.Time) string {
	if !r.blocks() {
		return ""
	}
	s := "recovering from a restart until " + r.until.UTC().Format(time.RFC3339Nano)
	if !r.unbounded {
		s += "; leases from before it may hold up to " + itoa(r.unknown)
	}
	return s
}

// stop stops the window's timer for good (pool deleted, engine closed).
func (r *recovery) stop() {
	if r.window != nil && r.timer != nil {
		r.timer.Stop()
	}
}

// status fills in when the window ends.
func (r *recovery) status(s *PoolStatus, _ time.Time) {
	if r.window != nil {
		s.RecoveringUntil = r.until
	}
}

// Readopt describes a lease the holder believes it holds, as sent with a
// renew, so that an engine restarted since the grant can take the lease
// back. Weight 0 means unknown: such a lease cannot be re-adopted.
type Readopt struct {
	Weight      int64
	Priority    int32
	ClientID    string
	Description string
	// Resources are the ids of the instances the lease is bound to, in an
	// active or passive pool: Weight of them, each in the pool and free,
	// or the lease is not re-adopted.
	Resources []string
	// Receipt is what the lease's expiry receipt vouches for: the expiry
	// and weight it was last granted, renewed or resized with, signed by
	// the server with its instances. A lease is re-adopted only for a
	// receipt whose expiry is ahead, whose weight is Weight, and which the
	// server signed for Resources.
	Receipt Receipt
}

// Receipt is what a lease's expiry receipt vouches for, once the server
// has checked its signature against the instances the renew names.
type Receipt struct {
	// Expiry and Weight the lease was granted (or last renewed or resized)
	// with; the zero time when the receipt vouches for nothing.
	Expiry time.Time
	Weight int64
	// Problem, when the renew carried a receipt that vouches for nothing,
	// says why (a sentence without a capital or a full stop).
	Problem string
}

// RenewOrReadopt is Renew, except that during the pool's recovery window
// (see RestorePool) a lease the engine does not know, whose token may have
// been issued before the restart and was not re-adopted or released since,
// is re-adopted: it becomes a live lease again with the same fencing token,
// ra's weight, priority, client id and description, and an expiry of ttl
// (0: the pool's DefaultLeaseTTL) from now, provided that the pool's held
// weight plus ra.Weight is within its concurrency limit.
//
// Errors: those of Renew, and apierr.ErrLeaseNotReadopted when the lease would not
// fit under the limit or ra.Weight is below 1; apierr.ErrInvalidArgument for a
// weight above the limit, or a client id or description too long;
// apierr.ErrStorageFailed.
func (e *Engine) RenewOrReadopt(pool string, token uint64, ttl time.Duration, owner any, ra Readopt) (Lease, error) {
	return e.renew(pool, token, ttl, owner, &ra)
}

// readoptLocked re-adopts token during the recovery window. It returns a
// nil lease and no error when token cannot name a lease from before the
// restart (no window, or a token issued after the restart), so that the
// caller reports it as any unknown lease.
func (p *pool) readoptLocked(token uint64, ttl time.Duration, ra *Readopt, owner any, now time.Time) (*lease, error) {
	if !p.rec.mayName(token) {
		return nil, nil
	}
	since := " (the server restarted at " + p.rec.restart.UTC().Format(time.RFC3339Nano) + " and does not know it)"
	if ra.Weight < 1 {
		return nil, errorf(apierr.ErrLeaseNotReadopted, "lease %d of pool %q cannot be re-adopted%s: the renew did not say its weight; stop the work it protects and acquire a new lease (clients that send weight with renew re-attach by themselves)", token, p.name, since)
	}
	live, resized := p.dur.live.live(token)
	var endedSince error
	if _, ok := p.ended.lookup(token); ok && !live { // it ended since the restart: say how
		endedSince = p.ended.missingErr(p.name, token, p.lastToken)
	}
	if err := readoptRefusal(p.name, token, ra, now, live, resized, endedSince); err != nil {
		return nil, err
	}
	switch {
	case len(ra.ClientID) > MaxClientIDLen:
		return nil, errorf(apierr.ErrInvalidArgument, "client id is %d bytes; the most is %d", len(ra.ClientID), MaxClientIDLen)
	case len(ra.Description) > MaxDescriptionLen:
		return nil, errorf(apierr.ErrInvalidArgument, "description is %d bytes; the most is %d", len(ra.Description), MaxDescriptionLen)
	case p.cfg.ConcurrencyLimit > 0 && p.held+ra.Weight > p.ad.limit: // the effective limit
		return nil, errorf(apierr.ErrLeaseNotReadopted, "lease %d of pool %q cannot be re-adopted%s: its weight %d does not fit (held %d of limit %d); stop the work it protects and acquire a new lease", token, p.name, since, ra.Weight, p.held, p.ad.limit)
	}
	var ins []*instance
	if p.res != nil {
		var err error
		if ins, err = p.res.readoptInstances(p.name, p.cfg.ResourceKind == ResourcePassive, token, ra, since, now); err != nil {
			return nil, err
		}
	}
	ttl, err := p.cfg.leaseTTL(ttl)
	if err != nil {
		return nil, err
	}
	if err := p.reserveLocked(now, now.Add(ttl), max(0, ra.Weight-p.rec.unknownHeld())); err != nil { // it was counted as unknown
		return nil, err
	}
	l := &lease{
		Lease: Lease{
			Pool:         p.name,
			FencingToken: token,
			Weight:       ra.Weight,
			Priority:     ra.Priority,
			ClientID:     ra.ClientID,
			Description:  ra.Description,
			TTL:          ttl,
			AcquireTime:  now,
			ExpireTime:   now.Add(ttl),
		},
		owner: owner,
	}
	if ins != nil {
		p.res.bindTo(l, ins)
	}
	if resized > ra.Weight {
		p.dur.resized(token, ra.Weight) // no receipt showing more is re-adopted after another restart
	}
	p.rec.readopted(ra.Weight) // now counted in held
	p.leases[token] = l
	p.byToken.add(l)
	p.expiry.push(l)
	p.held += ra.Weight
	p.stats.Readopted++
	p.marksLocked()
	armAlarm(&p.expiryAlarm, p.e.clock, l.ExpireTime, now, (*poolTimers).expiryFired, (*poolTimers)(p))
	return l, nil
}

// readoptRefusal refuses the re-adoption of lease token of pool, at now,
// that ended before the restart (the live set does not have it: live is
// false; released, revoked, or of an earlier pool of the same name; or
// released since, then endedSince says how), or past the expiry its
// receipt shows (or without a receipt that vouches for it), or for another
// weight than its receipt signs, or than it was last resized to (resized;
// 0: never). It returns nil for a lease that may be re-adopted.
func readoptRefusal(pool string, token uint64, ra *Readopt, now time.Time, live bool, resized int64, endedSince error) error {
	rc := ra.Receipt
	switch {
	case rc.Problem != "":
		return errorf(apierr.ErrLeaseNotReadopted, "lease %d of pool %q cannot be re-adopted after the server's restart: %s; stop the work it protects and acquire a new lease", token, pool, rc.Problem)
	case rc.Expiry.IsZero():
		return errorf(apierr.ErrLeaseNotReadopted, "lease %d of pool %q cannot be re-adopted after the server's restart: the renew did not carry the lease's expiry receipt, so the server cannot tell it from a lease that ended before the restart; stop the work it protects and acquire a new lease (clients that send expiry_receipt with renew re-attach by themselves)", token, pool)
	case rc.Weight != ra.Weight:
		return errorf(apierr.ErrLeaseNotReadopted, "lease %d of pool %q cannot be re-adopted after the server's restart: the renew says weight %d, but its expiry receipt was signed for weight %d; a lease is re-adopted only with exactly the weight and instances it was granted or last resized to, as its latest receipt shows; stop the work it protects and acquire a new lease", token, pool, ra.Weight, rc.Weight)
	case !rc.Expiry.After(now):
		return errorf(apierr.ErrLeaseExpired, "lease %d of pool %q expired at %s, before the server's restart; stop the work it protects and acquire a new lease", token, pool, rc.Expiry.UTC().Format(time.RFC3339Nano))
	}
	if !live {
		if endedSince != nil {
			return endedSince
		}
		return errorf(apierr.ErrLeaseNotReadopted, "lease %d of pool %q cannot be re-adopted after the server's restart: it ended before the restart (it was released or revoked, or belongs to an earlier pool of that name), or was released since; stop the work it protects and acquire a new lease", token, pool)
	}
	if resized > 0 && ra.Weight > resized {
		return errorf(apierr.ErrLeaseNotReadopted, "lease %d of pool %q cannot be re-adopted after the server's restart with weight %d: it was resized to weight %d before the restart, and its expiry receipt is from before that; a lease is re-adopted only with exactly the weight it was granted or last resized to; stop the work it protects and acquire a new lease", token, pool, ra.Weight, resized)
	}
	return nil
}
