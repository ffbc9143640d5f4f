package limiter

import (
	"sort"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// CreatePool creates a pool from cfg with defaults filled in and returns it.
// With a Persister, the pool is written before it becomes visible.
// Errors: apierr.ErrInvalidArgument (the message names the field), apierr.ErrPoolExists,
// apierr.ErrStorageFailed (nothing was created).
func (e *Engine) CreatePool(cfg PoolConfig) (PoolInfo, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return PoolInfo{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed.Load() {
		return PoolInfo{}, errorf(apierr.ErrShuttingDown, "the server is shutting down")
	}
	if e.pools.get(cfg.Name) != nil { // e.mu serializes every pool creation
		return PoolInfo{}, errorf(apierr.ErrPoolExists, "pool %q already exists; update it, or pick another name", cfg.Name)
	}
	now := e.clock.Now()
	p := newPool(e, cfg, now, e.tokenFloor.Load())
	if err := p.dur.write(nil, nil, "create pool "+quote(p.name)); err != nil { // durable before visible
		p.stopTimersLocked() // the pool is never seen: its event marks armed a timer
		return PoolInfo{}, err
	}
	// Read before the pool is visible: an acquire may lock it at once.
	info := p.infoLocked(now)
	e.pools.add(p)
	return info, nil
}

// GetPool returns a pool's configuration and status. Errors: apierr.ErrPoolNotFound.
func (e *Engine) GetPool(name string) (PoolInfo, error) {
	p, err := e.lockPool(name)
	if err != nil {
		return PoolInfo{}, err
	}
	defer p.unlock()
	return p.infoLocked(e.clock.Now()), nil
}

// poolsAfter returns up to limit pools whose names sort after `after`, in
// name order, and whether more follow. A limit below 1 means 1.
func (e *Engine) poolsAfter(after string, limit int) ([]*pool, bool) {
	return e.pools.after(after, max(limit, 1))
}

// ListPools returns up to limit pools whose names sort after `after`, in
// name order, and whether more follow. A limit below 1 means 1.
func (e *Engine) ListPools(after string, limit int) ([]PoolInfo, bool) {
	ps, more := e.poolsAfter(after, limit)

	now := e.clock.Now()
	infos := make([]PoolInfo, 0, len(ps))
	for _, p := range ps {
		p.mu.Lock()
		if !p.deleted {
			infos = append(infos, p.infoLocked(now))
		}
		p.unlock()
	}
	return infos, more
}

// UpdatePool applies update to a copy of the pool's configuration, fills in
// defaults, validates the result and makes it live at once:
//   - a higher concurrency limit or rate admits waiters at once;
//   - a lower concurrency limit blocks new grants until the held weight is
//     under it (held leases continue; with RevocationRevoke, leases are
//     revoked until the held weight is within it, reported to OnLeaseEnded
//     with EndRevoked), and fails the waiters whose weight is above it
//     with apierr.ErrLimitBelowWeight (likewise for a lower burst);
//   - TTL changes apply to grants and renewals from now on;
//   - with adaptive control, an effective limit that was lowered stays
//     lowered (within its new floor and configured value), and a change of
//     the rate rebalances the rate shares (shrunk ones are pushed to
//     OnShareUpdate; with no rate left, they are revoked).
//
// update runs under the pool's lock and must not call the engine. The name
// cannot change. With a Persister, the new configuration is written before
// it becomes live. ByActor names who made the change in the revocations a
// lowered concurrency limit makes. Errors: apierr.ErrPoolNotFound,
// apierr.ErrInvalidArgument, apierr.ErrStorageFailed (nothing was changed).
func (e *Engine) UpdatePool(name string, update func(*PoolConfig), opts ...CallOption) (PoolInfo, error) {
	actor := callOptionsOf(opts).actor
	p, err := e.lookup(name)
	if err != nil {
		return PoolInfo{}, err
	}
	p.mu.Lock()
	defer p.unlock()
	if p.deleted {
		return PoolInfo{}, poolNotFound(name)
	}
	cfg := p.cfg
	update(&cfg)
	if cfg.Name != p.name {
		return PoolInfo{}, errorf(apierr.ErrInvalidArgument, "pool %q cannot be renamed to %q; create a new pool instead", p.name, cfg.Name)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return PoolInfo{}, err
	}
	if cfg.ResourceKind != p.cfg.ResourceKind {
		return PoolInfo{}, errorf(apierr.ErrInvalidArgument, "pool %q is %s and cannot become %s; create a new pool instead", p.name, p.cfg.ResourceKind, cfg.ResourceKind)
	}
	now := e.clock.Now()
	// The DurableState does not change: TTLBound follows the TTLs granted,
	// not MaxLeaseTTL, so lowering the maximum leaves it covering older
	// leases.
	if err := p.dur.write(&cfg, func(sp *SavedPool) { sp.UpdateTime = now }, "update pool "+quote(p.name)); err != nil { // durable before visible
		return PoolInfo{}, err
	}
	p.cfg = cfg
	p.updateTime = now.UnixNano()
	e.pools.changed()
	p.configureLocked(now)           // effective limits, shares and marks follow
	p.enforceLimitLocked(now, actor) // RevocationRevoke
	p.applyRateLocked(now)
	p.failWaitersLocked(func(w *waiter) error {
		if err := p.checkWeightLocked(w.g.weight); err != nil {
			return errorf(apierr.ErrLimitBelowWeight, "pool %q was changed while this acquire waited and can no longer grant weight %d: %v", p.name, w.g.weight, err)
		}
		return nil
	})
	p.dispatchLocked(now)
	p.marksLocked() // a new limit or mark may be crossed
	return p.infoLocked(now), nil
}

// DeletePool removes a pool. Without force it refuses while leases are
// held (apierr.ErrPoolBusy). With force, the held leases end (reported to
// OnLeaseEnded with EndPoolDeleted). Either way, waiting acquires fail with
// apierr.ErrPoolDeleted, and its rate shares are revoked (reported to
// OnShareUpdate). With a Persister, the deletion is written first.
// Errors: apierr.ErrPoolNotFound, apierr.ErrPoolBusy, apierr.ErrStorageFailed (nothing was
// deleted).
func (e *Engine) DeletePool(name string, force bool) error {
	p, err := e.lockPool(name)
	if err != nil {
		return err
	}
	if len(p.leases) > 0 && !force {
		n, held := len(p.leases), p.held
		p.unlock()
		return errorf(apierr.ErrPoolBusy, "pool %q has %d live leases holding %d permits; release them, wait for them to expire, or delete with force to end them", name, n, held)
	}
	if err := p.dur.delete(max(p.lastToken, e.tokenFloor.Load())); err != nil { // durable before visible
		p.unlock()
		return err
	}
	e.RaiseTokenFloor(p.lastToken) // before the name is free for a new pool
	e.pools.remove(p)
	p.deleted = true
	p.failWaitersLocked(func(*waiter) error {
		return errorf(apierr.ErrPoolDeleted, "pool %q was deleted while this acquire waited", name)
	})
	var ended []LeaseEnded
	for _, l := range p.leases {
		ended = append(ended, LeaseEnded{Lease: l.Lease, Reason: EndPoolDeleted, Owner: l.owner})
	}
	sort.Slice(ended, func(i, j int) bool { return ended[i].Lease.FencingToken < ended[j].Lease.FencingToken })
	clear(p.leases)
	p.expiry = nil
	p.held = 0
	p.susp.notifyDrained() // DrainPool callers return
	p.shr.endAll(ShareRevoked, &p.out)
	if p.res != nil {
		p.out.events = append(p.out.events, p.res.providersGone(p.name, e.clock.Now())...)
	}
	p.stopTimersLocked()
	p.endedLocked(ended)
	p.unlock()
	return nil
}

// RaiseTokenFloor makes every pool created from now on start its fencing
// tokens above floor (if floor is above the current floor). DeletePool
// raises it to the deleted pool's last token; after a restart, the server
// restores it from its store before it serves. It never lowers the floor.
func (e *Engine) RaiseTokenFloor(floor uint64) {
	for {
		cur := e.tokenFloor.Load()
		if floor <= cur || e.tokenFloor.CompareAndSwap(cur, floor) {
			return
		}
	}
}
