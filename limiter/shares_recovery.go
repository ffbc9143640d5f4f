package limiter

import "time"

// This file is the recovery of rate shares after a restart. Shares, like
// leases, are soft state: a restarted engine does not know the shares its
// predecessor granted, but their holders may still be spending them until
// they expire. So the engine writes ahead, durably, a share horizon after
// which no share granted or refreshed before can be live
// (DurableState.ShareHorizon), and a pool restored before that horizon
// treats its whole effective rate as possibly spent by those shares: the
// *phantom* rate. Until the horizon:
//   - the bucket (Take, Acquire with a rate) refills at the effective
//     rate minus the shares granted and the phantom: nothing, at first;
//   - new shares are granted from what the phantom leaves: nothing, at
//     first (they grow when it ends);
//   - a holder refreshing a share the engine does not know, saying the
//     rate it was granted (ShareRefresh.Granted), gets the share back
//     (same id) with at most that rate, which leaves the phantom for it.
// At the horizon the phantom ends and its rate goes to the shares below
// their fair parts and to the bucket. So granted shares and exact tokens
// together never exceed the rate across a restart (invariant 3).

// maxShareReadoptions bounds the share ids one recovery remembers as
// re-adopted or released, as maxRecoveryEnded does for leases.
const maxShareReadoptions = MaxSharesPerPool * 4

// shareRecovery is a pool's share recovery window, guarded by the pool's
// mutex; the zero value means none.
type shareRecovery struct {
	// phantom is the rate, in share units, that shares from before the
	// restart may still be spending; 0 outside the window.
	phantom int64
	until   time.Time
	timer   Timer
	taken   map[uint64]struct{} // ids re-adopted or released since the restart
}

// spending is the rate, in share units, that shares from before the
// restart may still be spending: 0 outside the window (nil).
func (r *shareRecovery) spending() int64 {
	if r == nil {
		return 0
	}
	return r.phantom
}

// restore starts the share recovery window of a pool restored at now
// from st: it lasts until the earlier of the share horizon and now + the
// share TTL bound. It reports whether it started one: the caller then
// adjusts the bucket.
func (t *shareTable) restore(st DurableState, now time.Time) bool {
	bound := st.ShareTTLBound
	if bound <= 0 {
		bound = MaxLeaseTTLLimit // not recorded: assume the longest
	}
	until := windowEnd(st.ShareHorizon, bound, now) // a wall-clock step never shortens it
	if t.confRate == 0 || !until.After(now) {
		return false
	}
	t.rec = &shareRecovery{phantom: toShareUnits(t.rate), until: until, taken: make(map[uint64]struct{})}
	t.rec.timer = t.clock.AfterFunc(until.Sub(now), t.timers.shareRecoveryFired)
	return true
}

// recovered ends the window, if there is one, and reports whether there
// was: the phantom rate goes to the shares below their fair parts, and
// the caller adjusts the bucket.
func (t *shareTable) recovered(ob *outbox) bool {
	if t.rec == nil {
		return false
	}
	t.rec = nil
	t.dirty = true
	t.targets()
	t.grow(ob)
	return true
}

// recovering reports whether id may name a share from before the restart
// that is neither re-adopted nor released since.
func (t *shareTable) recovering(id uint64) bool {
	if t.rec == nil {
		return false
	}
	_, taken := t.rec.taken[id]
	return !taken && len(t.rec.taken) < maxShareReadoptions
}

// readoptShareLocked re-adopts the share r names, which the engine does
// not know, during the window: it becomes a live share again with its id,
// its rate (at most r.Granted) taken out of the phantom. It returns nil
// when r cannot be re-adopted (no window, no Granted, an id taken).
func (p *pool) readoptShareLocked(r *ShareRefresh, now time.Time) (*share, error) {
	if r.Granted <= 0 || !p.shr.recovering(r.ID) || len(p.shr.list) >= MaxSharesPerPool {
		return nil, nil
	}
	if err := checkWant(r.Granted, false); err != nil {
		return nil, err
	}
	ttl, err := p.cfg.leaseTTL(r.TTL)
	if err != nil {
		return nil, err
	}
	if err := p.reserveShareLocked(now, now.Add(ttl)); err != nil {
		return nil, err
	}
	s := p.shr.readopt(r, ttl, now)
	p.applyRateLocked(now)
	p.shr.arm(s.expire, now)
	return s, nil
}

// readopt makes the share r names live again (readoptShareLocked has
// checked that it may), with ttl from now and at most r.Granted, taken
// out of the phantom.
func (t *shareTable) readopt(r *ShareRefresh, ttl time.Duration, now time.Time) *share {
	granted := toShareUnits(r.Granted)
	back := min(granted, t.rec.phantom)
	t.rec.phantom -= back
	t.rec.taken[r.ID] = struct{}{}
	want := granted
	if r.Want > 0 {
		want = toShareUnits(r.Want)
	}
	weight := r.Weight
	if weight == 0 {
		weight = 1
	}
	s := &share{id: r.ID, want: want, weight: weight, ttl: ttl, grantAt: now, expire: now.Add(ttl), owner: r.Owner, index: -1}
	t.add(s)
	t.setGrant(s, min(back, t.grantable(s)))
	return s
}

// released records the release of a share from before the restart that
// was not re-adopted, so that it is not re-adopted later; it reports
// whether id may have been one.
func (t *shareTable) released(id uint64) bool {
	if !t.recovering(id) {
		return false
	}
	t.rec.taken[id] = struct{}{}
	return true
}

// reserveShareLocked makes sure a share granted or refreshed at now to
// expire at expiry is within the durable share horizon and TTL bound,
// moving the horizon to expiry + the engine's horizon slack and raising
// the bound first if it is not. Errors: apierr.ErrStorageFailed (the caller must
// not grant).
func (p *pool) reserveShareLocked(now, expiry time.Time) error {
	st := p.dur.state
	ttl := expiry.Sub(now)
	if (!expiry.After(st.ShareHorizon) && ttl <= st.ShareTTLBound) || p.dur.env.persister == nil {
		return nil
	}
	if expiry.After(st.ShareHorizon) {
		st.ShareHorizon = expiry.Add(p.e.horizonSlack)
	}
	st.ShareTTLBound = max(st.ShareTTLBound, ttl)
	return p.dur.save(p.dur.saved(nil, st), "reserve rate share expiries of pool "+quote(p.name))
}
